#include "LossPlot.h"

namespace tb::ui {

LossPlot::LossPlot(QWidget* parent) : MetricPlot(tr("loss"), parent)
{
    // The smoothed curve is the one people read: keep it high-contrast on dark themes too.
    const bool dark = palette().color(QPalette::Base).lightness() < 128;
    m_raw = addCurve(tr("training loss"), dark ? QColor(70, 110, 170) : QColor(120, 160, 220));
    m_ema = addCurve(tr("smoothed"), dark ? QColor(110, 175, 255) : QColor(25, 90, 200));
    m_val = addCurve(tr("validation"), QColor(220, 90, 30));
    m_val->setLineStyle(QCPGraph::lsNone);
    m_val->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, 7));
}

void LossPlot::clear()
{
    for (QCPGraph* g : {m_raw, m_ema, m_val}) g->data()->clear();
    m_haveEma = false;
    resetView();
    requestReplot();
}

void LossPlot::appendTraining(const QVector<double>& steps, const QVector<double>& losses)
{
    QVector<double> ema(losses.size());
    for (int i = 0; i < losses.size(); ++i) {
        m_lastEma = m_haveEma ? m_smoothing * m_lastEma + (1.0 - m_smoothing) * losses[i] : losses[i];
        m_haveEma = true;
        ema[i] = m_lastEma;
    }
    m_raw->addData(steps, losses, true);
    m_ema->addData(steps, ema, true);
}

void LossPlot::appendValidation(const QVector<double>& steps, const QVector<double>& losses)
{
    m_val->addData(steps, losses, true);
}

void LossPlot::setSmoothing(double factor)
{
    m_smoothing = std::clamp(factor, 0.0, 0.999);
    QVector<double> keys, values;
    keys.reserve(m_raw->dataCount());
    values.reserve(m_raw->dataCount());
    m_haveEma = false;
    for (auto it = m_raw->data()->constBegin(); it != m_raw->data()->constEnd(); ++it) {
        m_lastEma = m_haveEma ? m_smoothing * m_lastEma + (1.0 - m_smoothing) * it->value : it->value;
        m_haveEma = true;
        keys.push_back(it->key);
        values.push_back(m_lastEma);
    }
    m_ema->setData(keys, values, true);
    requestReplot();
}

void LossPlot::setLogScale(bool log)
{
    yAxis->setScaleType(log ? QCPAxis::stLogarithmic : QCPAxis::stLinear);
    if (log) yAxis->setTicker(QSharedPointer<QCPAxisTickerLog>::create());
    else yAxis->setTicker(QSharedPointer<QCPAxisTicker>::create());
    fitToData();
}

MemoryPlot::MemoryPlot(QWidget* parent) : MetricPlot(tr("tensor memory (MiB)"), parent)
{
    m_current = addCurve(tr("current"), QColor(40, 150, 80));
    m_peak = addCurve(tr("peak in step"), QColor(170, 60, 160));
    setZeroBased(true);
}

void MemoryPlot::clear()
{
    m_current->data()->clear();
    m_peak->data()->clear();
    resetView();
    requestReplot();
}

void MemoryPlot::append(const QVector<double>& steps, const QVector<double>& currentMiB,
                        const QVector<double>& peakMiB)
{
    m_current->addData(steps, currentMiB, true);
    m_peak->addData(steps, peakMiB, true);
}

} // namespace tb::ui
