#pragma once
// Training steps assembled from a follow's metric records, which arrive in
// (step, key) order. A step is handed over at its last key (tokens_per_s) or
// when a later step begins. A value for a step already handed over is dropped
// rather than plotted as a second point of that step: a store written before
// a step's values were committed together can split one step across two
// reads. Validation keys (val_*) are not part of a training step.

#include <optional>
#include <string>
#include <vector>

#include "train/Trainer.h"

namespace tb::ui {

class StepAssembler {
public:
    // The steps this record completes (none, one, or two when a step's only
    // value is its last key).
    std::vector<StepMetrics> add(int step, const std::string& key, double value)
    {
        std::vector<StepMetrics> done;
        if (step <= m_handedOver) return done;
        if (m_step.step != 0 && step != m_step.step) done.push_back(take());
        m_step.step = step;
        if (key == "loss") m_step.loss = value;
        else if (key == "lr") m_step.lr = value;
        else if (key == "grad_norm") m_step.gradNorm = value;
        else if (key == "tokens_per_s") m_step.tokensPerSecond = value;
        else if (key == "step_ms") m_step.stepMs = value;
        else if (key == "mem_current_bytes") m_step.memCurrentBytes = static_cast<std::int64_t>(value);
        else if (key == "mem_peak_bytes") m_step.memPeakBytes = static_cast<std::int64_t>(value);
        else if (key == "loss_scale") m_step.lossScale = value;
        else if (key.rfind("sys_", 0) == 0) m_step.system.emplace_back(key, value); // the run's system samples
        // tokens_per_s is the last per-step key in the stream's (step, key) order.
        if (key == "tokens_per_s") done.push_back(take());
        return done;
    }
    // The step being assembled, if any (the stream ended or paused).
    std::optional<StepMetrics> finish()
    {
        if (m_step.step == 0) return std::nullopt;
        return take();
    }

private:
    StepMetrics take()
    {
        StepMetrics s = m_step;
        m_handedOver = s.step;
        m_step = {};
        return s;
    }
    StepMetrics m_step;
    int m_handedOver = 0;
};

} // namespace tb::ui
