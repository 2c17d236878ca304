// The parts of one training step (Trainer::run is the loop): forward and
// backward over the micro-batches, the optimizer step with fp16 loss scaling
// and clipping, the metrics a step reports, and what a failure is explained by.
#include "train/TrainerImpl.h"

#include <algorithm>
#include <limits>

#include "memory/MemoryProbe.h"
#include "train/ScriptedModel.h"
#include "train/Threads.h"

namespace tb {

StepPhases::StepPhases(const TrainerOptions& options, std::string device, int step)
    : m_options(options), m_device(std::move(device)), m_step(step)
{
}

void StepPhases::begin(int i)
{
    if (m_options.onPhaseBegin) m_options.onPhaseBegin(m_step, i);
    if (!measured()) return;
    MemoryProbe::resetPeak(m_device);
    const auto now = MemoryProbe::snapshot(m_device).currentBytes;
    if (m_phase[i].phase.empty()) m_phase[i].startBytes = now;
}

void StepPhases::end(int i, const char* name)
{
    if (!measured()) return;
    const auto mem = MemoryProbe::snapshot(m_device);
    m_phase[i].step = m_step;
    m_phase[i].phase = name;
    m_phase[i].peakBytes = std::max(m_phase[i].peakBytes, mem.peakBytes);
    m_phase[i].endBytes = mem.currentBytes;
}

std::int64_t StepPhases::largestPeak() const
{
    std::int64_t peak = 0;
    for (const auto& p : m_phase) peak = std::max(peak, p.peakBytes);
    return peak;
}

void Trainer::Impl::announce(const TrainerEmit& emit, std::int64_t parameters, std::int64_t trainableParameters) const
{
    const auto& t = config.train;
    emit("info", "start",
         (startStep > 0 ? "resumed at step " + std::to_string(startStep) + " on " : "training on ") + device
             + ", precision " + precision + ", " + std::to_string(parameters) + " parameters ("
             + std::to_string(trainableParameters) + " trainable), " + data->describe()
             + (world > 1 ? "; data parallel: " + std::to_string(world) + " processes (" + options.dist.launcher
                                + "), global batch " + std::to_string(world) + " x " + std::to_string(t.batchSize)
                          : std::string())
             // Said only where Trainbench chose other kernels than OpenBLAS did.
             + (torchDevice.is_cpu() && !selectBlasKernels().replaced.empty() ? "; " + selectBlasKernels().describe()
                                                                              : std::string()));
    if (validation.empty() && rank == 0) emit("warning", "validation", "the validation split is empty; no validation loss will be reported");
    if (!flagged.empty()) {
        std::string list;
        for (std::size_t i = 0; i < flagged.size() && i < 4; ++i) {
            list += (i ? "; " : "") + flagged[i].path + " (" + flagged[i].kind + ", " + flagged[i].device + ")";
        }
        if (flagged.size() > 4) list += "; and " + std::to_string(flagged.size() - 4) + " more";
        emit("warning", "device_audit",
             std::to_string(flagged.size()) + " tensor(s) will not follow the model to a device: " + list
                 + ". Register them as parameters or buffers (trainbench-cli audit lists each with its cause)");
    }
}

torch::Tensor Trainer::Impl::forwardBackward(StepPhases& phases, double& commWait)
{
    const auto& t = config.train;
    phases.begin(0);
    std::vector<Batch> micro;
    micro.reserve(t.gradAccum);
    for (int i = 0; i < t.gradAccum; ++i) micro.push_back(data->trainBatch(t.batchSize * world, dataGen));
    // The loss is normalised by the global batch's tokens, so summing
    // the ranks' gradients gives the global batch's gradient exactly.
    const double normalizer = maskedTokenCount(micro);
    if (world > 1) {
        for (auto& b : micro) b = b.rows(static_cast<std::int64_t>(rank) * t.batchSize, t.batchSize);
    }
    torch::Tensor lossSum;
    for (std::size_t i = 0; i < micro.size(); ++i) {
        const auto& cpuBatch = micro[i];
        lastInputs = cpuBatch.inputs;
        const auto batch = cpuBatch.to(torchDevice);
        torch::Tensor loss;
        {
            compat::AutocastScope scope(torchDevice.type(), autocast(), autocastDtype());
            loss = maskedLossSum(model->forward(batch.inputs), batch, normalizer);
        }
        phases.end(0, "forward");
        phases.begin(1);
#ifdef TB_HAVE_C10D
        if (reducer && i + 1 == micro.size()) reducer->arm(); // the others: no_sync
#endif
        (useScaler() ? scaler.scale(loss) : loss).backward();
        lossSum = lossSum.defined() ? lossSum + loss.detach() : loss.detach();
        phases.end(1, "backward");
        phases.begin(0);
    }
    commWait = 0;
#ifdef TB_HAVE_C10D
    if (reducer) commWait = reducer->finish();
#endif
    return lossSum;
}

bool Trainer::Impl::optimizerStep(int step, torch::Tensor& gradNorm, const TrainerEmit& emit)
{
    if (step == options.injectNonFiniteGradientAtStep && !trainable.empty()
        && (options.injectRank < 0 || options.injectRank == rank)) {
        trainable.front().grad().fill_(std::numeric_limits<float>::infinity());
    }
    if (useScaler()) {
        bool finite = scaler.unscale(trainable);
        // An overflow on any rank skips the step on every rank.
        if (world > 1) finite = allFinite(finite);
        scaler.update(finite);
        if (!finite) {
            emit("warning", "loss_scale",
                 "step " + std::to_string(step) + ": fp16 gradients overflowed; step skipped, loss scale now "
                     + detail::fixed(scaler.currentScale(), 0));
            return false;
        }
    }
    const double clip = config.optim.gradClip > 0 ? config.optim.gradClip : std::numeric_limits<double>::infinity();
    gradNorm = clipGradNorm(trainable, clip);
    optimizer->step();
    return true;
}

StepMetrics Trainer::Impl::stepMetrics(const StepFigures& f, const torch::Tensor& gradNorm, const StepPhases& phases,
                                       const std::vector<std::int64_t>& rankPeaks) const
{
    StepMetrics s;
    s.step = f.step;
    s.totalSteps = f.totalSteps;
    s.loss = f.loss;
    s.lr = f.lr;
    s.gradNorm = gradNorm.defined() ? gradNorm.item<double>() : 0.0;
    s.stepMs = f.stepMs;
    s.commWaitMs = f.commWaitSeconds * 1000.0;
    s.tokensPerSecond = f.tokensPerStep / std::max(s.stepMs / 1000.0, 1e-9);
    if (phases.measured()) {
        s.memCurrentBytes = MemoryProbe::snapshot(device).currentBytes;
        for (const auto& p : phases.phases()) {
            if (p.peakBytes > s.memPeakBytes) {
                s.memPeakBytes = p.peakBytes;
                s.memPeakPhase = p.phase == "forward" ? "forward" : p.phase == "backward" ? "backward" : "optimizer";
            }
        }
    }
    if (!rankPeaks.empty()) {
        s.rankPeakBytes = rankPeaks;
        s.memPeakRank = static_cast<int>(std::max_element(rankPeaks.begin(), rankPeaks.end()) - rankPeaks.begin());
        s.memPeakBytes = rankPeaks[static_cast<std::size_t>(s.memPeakRank)];
    }
    s.lossScale = useScaler() ? scaler.currentScale() : 0.0;
    s.skipped = f.skipped;
    return s;
}

void Trainer::Impl::explainFailure(TrainResult& result)
{
#ifdef TB_HAVE_C10D
    // A collective that failed: which rank is gone, and its last message.
    if (group && DistGroup::looksLikeCollectiveFailure(result.message)) result.message = group->explain(result.message);
#endif
    if (isDeviceMismatchText(result.message) && lastInputs.defined()) {
        try {
            result.deviceMeeting = locateDeviceMeeting(*model, lastInputs.to(torchDevice));
        } catch (const std::exception&) {
            // The locator is a help; the failure stands without it.
        }
    }
}

} // namespace tb
