#include "LearningRatePlot.h"

#include <algorithm>

#include "config/LearningRate.h"

namespace tb::ui {

LearningRatePlot::LearningRatePlot(QWidget* parent) : MetricPlot(tr("learning rate"), parent)
{
    m_curve = addCurve(tr("learning rate"), palette().color(QPalette::Highlight));
    legend->setVisible(false);
    setZeroBased(true);
    setMinimumHeight(140);
    useIntegerTicks(xAxis);
}

void LearningRatePlot::showSchedule(const OptimConfig& optim, int steps)
{
    m_curve->clear();
    steps = std::max(steps, 1);
    // Every step of a short run; about 2,000 evenly spaced ones of a long
    // run, with the warmup's last step, where the curve turns.
    const int stride = std::max(1, steps / 2000);
    for (int step = 1; step <= steps; step += stride) {
        m_curve->append(step, learningRateAt(optim, step, steps));
        if (optim.warmupSteps > step && optim.warmupSteps < step + stride)
            m_curve->append(optim.warmupSteps, learningRateAt(optim, optim.warmupSteps, steps));
    }
    if ((steps - 1) % stride != 0) m_curve->append(steps, learningRateAt(optim, steps, steps));

    const QString peak = QString::number(optim.lr, 'g', 4);
    const QString last = QString::number(learningRateAt(optim, steps, steps), 'g', 4);
    m_neverEnds = optim.warmupSteps >= steps;
    QString warmup = optim.warmupSteps > 0 ? tr("warmup %1 steps to %2, then ").arg(optim.warmupSteps).arg(peak)
                                           : tr("%1 from the first step, then ").arg(peak);
    if (m_neverEnds) {
        m_summary = tr("Warmup never ends: its %1 steps are the whole run, so the rate reaches %2 only at the last "
                       "step. Use a warmup of a few percent of the steps.")
                        .arg(optim.warmupSteps)
                        .arg(peak);
    } else if (optim.schedule == "constant") {
        m_summary = warmup + tr("constant to step %1").arg(steps);
    } else {
        m_summary = warmup + tr("%1 decay to %2 at step %3").arg(QString::fromStdString(optim.schedule), last).arg(steps);
    }
    resetView();
    fitToData();
}

} // namespace tb::ui
