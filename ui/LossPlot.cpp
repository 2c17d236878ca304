#include "LossPlot.h"
#include "MetricNames.h"

#include "run/SystemSampler.h"

namespace tb::ui {

LossPlot::LossPlot(QWidget* parent) : MetricPlot(tr("loss"), parent)
{
    // The smoothed curve is the one people read: keep it high-contrast on dark themes too.
    const bool dark = palette().color(QPalette::Base).lightness() < 128;
    m_raw = addCurve(tr("training loss"), dark ? QColor(70, 110, 170) : QColor(120, 160, 220));
    m_ema = addCurve(tr("smoothed"), dark ? QColor(110, 175, 255) : QColor(25, 90, 200));
    m_val = addCurve(tr("validation"), QColor(220, 90, 30));
    m_val->graph()->setLineStyle(QCPGraph::lsNone);
    m_val->graph()->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, 7));
    useIntegerTicks(xAxis);
    placeLegendAbove();
}

void LossPlot::clear()
{
    for (BucketedCurve* c : {m_raw, m_ema, m_val}) c->clear();
    m_steps.clear();
    m_losses.clear();
    m_haveEma = false;
    m_runLength = 0;
    resetAxes();
}

void LossPlot::appendTraining(const QVector<double>& steps, const QVector<double>& losses)
{
    for (int i = 0; i < losses.size(); ++i) {
        const double factor = effectiveSmoothing();
        m_lastEma = m_haveEma ? factor * m_lastEma + (1.0 - factor) * losses[i] : losses[i];
        m_haveEma = true;
        m_raw->append(steps[i], losses[i]);
        m_ema->append(steps[i], m_lastEma);
        m_steps.push_back(static_cast<float>(steps[i]));
        m_losses.push_back(static_cast<float>(losses[i]));
    }
}

int LossPlot::drawnPointCount() const
{
    return m_raw->graph()->dataCount() + m_ema->graph()->dataCount() + m_val->graph()->dataCount();
}

void LossPlot::appendValidation(const QVector<double>& steps, const QVector<double>& losses)
{
    for (int i = 0; i < losses.size(); ++i) m_val->append(steps[i], losses[i]);
}

void LossPlot::setSmoothing(double factor)
{
    m_smoothing = std::clamp(factor, 0.0, 0.999);
    recomputeSmoothed();
}

void LossPlot::setRunLength(int steps)
{
    if (steps == m_runLength) return;
    m_runLength = steps;
    recomputeSmoothed();
}

double LossPlot::effectiveSmoothing() const
{
    if (m_runLength <= 0) return m_smoothing;
    return std::clamp(1.0 - 50.0 / m_runLength, 0.0, m_smoothing);
}

void LossPlot::recomputeSmoothed()
{
    const double factor = effectiveSmoothing();
    m_ema->clear();
    m_haveEma = false;
    for (std::size_t i = 0; i < m_losses.size(); ++i) {
        m_lastEma = m_haveEma ? factor * m_lastEma + (1.0 - factor) * m_losses[i] : m_losses[i];
        m_haveEma = true;
        m_ema->append(m_steps[i], m_lastEma);
    }
    requestReplot();
}

// The unit alone beside the axis: at its least height (160 px, a 1280x720
// window) the axis is 79 px, and "tensor memory (MiB)" was cut off; the
// legend above says what is plotted.
MemoryPlot::MemoryPlot(QWidget* parent) : MetricPlot(tr("MiB"), parent)
{
    m_current = addCurve(tr("tensor memory"), QColor(40, 150, 80));
    m_peak = addCurve(tr("peak in step"), QColor(170, 60, 160));
    m_estimate = addCurve(tr("estimated peak (planner)"), QColor(200, 120, 20));
    m_estimate->graph()->setPen(QPen(QColor(200, 120, 20), 1, Qt::DashLine));
    setZeroBased(true);
    useIntegerTicks(xAxis);
    placeLegendAbove();
}

void MemoryPlot::setEstimate(double mib) { m_estimateMiB = mib; }

void MemoryPlot::clear()
{
    m_current->clear();
    m_peak->clear();
    m_estimate->clear();
    m_estimateMiB = 0;
    resetAxes();
}

void MemoryPlot::append(const QVector<double>& steps, const QVector<double>& currentMiB,
                        const QVector<double>& peakMiB)
{
    appendThinned(steps, currentMiB, steps, peakMiB);
}

void MemoryPlot::appendThinned(const QVector<double>& currentSteps, const QVector<double>& currentMiB,
                               const QVector<double>& peakSteps, const QVector<double>& peakMiB)
{
    for (int i = 0; i < currentSteps.size(); ++i) m_current->append(currentSteps[i], currentMiB[i]);
    for (int i = 0; i < peakSteps.size(); ++i) {
        m_peak->append(peakSteps[i], peakMiB[i]);
        if (m_estimateMiB > 0) m_estimate->append(peakSteps[i], m_estimateMiB);
    }
}

ScalarPlot::ScalarPlot(QWidget* parent) : MetricPlot(label(LearningRate), parent)
{
    const QColor colours[kMetrics] = {QColor(120, 60, 170), QColor(200, 120, 20), QColor(30, 130, 90), QColor(90, 90, 90),
                                      QColor(40, 90, 200), QColor(160, 40, 90), QColor(30, 150, 160), QColor(190, 80, 40),
                                      QColor(120, 120, 30)};
    for (int m = 0; m < kMetrics; ++m) m_curves[m] = addCurve(label(static_cast<Metric>(m)), colours[m]);
    legend->setVisible(false); // one curve at a time, named on the axis
    setShown(LearningRate);
}

QString ScalarPlot::label(Metric metric) { return metricLabel(QString::fromLatin1(key(metric))); }

const char* ScalarPlot::key(Metric metric)
{
    switch (metric) {
    case LearningRate: return "lr";
    case GradNorm: return "grad_norm";
    case TokensPerSecond: return "tokens_per_s";
    case StepMs: return "step_ms";
    case CpuPercent: return SystemSampler::kCpuPercent;
    case HostMemory: return SystemSampler::kHostRssBytes;
    case GpuUtil: return SystemSampler::kGpuUtilPercent;
    case GpuMemory: return SystemSampler::kGpuMemBytes;
    case GpuPower: return SystemSampler::kGpuPowerWatts;
    case kMetrics: break;
    }
    return "";
}

double ScalarPlot::scale(Metric metric) { return metric == HostMemory || metric == GpuMemory ? 1.0 / 1048576.0 : 1.0; }

bool ScalarPlot::fromKey(const std::string& key, Metric& metric)
{
    for (int m = CpuPercent; m < kMetrics; ++m) {
        if (key == ScalarPlot::key(static_cast<Metric>(m))) {
            metric = static_cast<Metric>(m);
            return true;
        }
    }
    return false;
}

void ScalarPlot::clear()
{
    for (auto* c : m_curves) c->clear();
    resetView();
    fitToData();
}

void ScalarPlot::append(Metric metric, const QVector<double>& steps, const QVector<double>& values)
{
    for (int i = 0; i < steps.size() && i < values.size(); ++i) m_curves[metric]->append(steps[i], values[i]);
}

void ScalarPlot::setShown(Metric metric)
{
    m_shown = metric;
    for (int m = 0; m < kMetrics; ++m) m_curves[m]->graph()->setVisible(m == metric);
    yAxis->setLabel(label(metric));
    fitToData();
}

} // namespace tb::ui
