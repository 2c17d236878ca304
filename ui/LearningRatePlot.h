#pragma once
// The experiment form's learning-rate preview: the rate of every step of the
// run as the trainer will step it (config/LearningRate.h), redrawn as the
// optimizer fields are edited, with one line saying what the curve does.

#include "MetricPlot.h"

class QLabel;

namespace tb {
struct OptimConfig;
}

namespace tb::ui {

class LearningRatePlot final : public MetricPlot {
    Q_OBJECT

public:
    explicit LearningRatePlot(QWidget* parent = nullptr);
    // Draws the schedule of a run of `steps` steps.
    void showSchedule(const OptimConfig& optim, int steps);
    // What the curve does, in words ("warmup 50 steps to 0.001, then ...");
    // a warmup that never ends says so.
    QString summary() const { return m_summary; }
    bool warmupNeverEnds() const { return m_neverEnds; }

private:
    BucketedCurve* m_curve;
    QString m_summary;
    bool m_neverEnds = false;
};

} // namespace tb::ui
