#pragma once

#include "MetricPlot.h"

namespace tb::ui {

// Training loss (raw and EMA-smoothed) and validation loss points.
class LossPlot final : public MetricPlot {
    Q_OBJECT

public:
    explicit LossPlot(QWidget* parent = nullptr);
    void clear();
    void appendTraining(const QVector<double>& steps, const QVector<double>& losses);
    void appendValidation(const QVector<double>& steps, const QVector<double>& losses);
    // 0 = no smoothing, towards 1 = smoother. Recomputes the whole EMA curve.
    void setSmoothing(double factor);
    double smoothing() const { return m_smoothing; }
    void setLogScale(bool log);
    int trainingPointCount() const { return m_raw->dataCount(); }

private:
    QCPGraph* m_raw;
    QCPGraph* m_ema;
    QCPGraph* m_val;
    double m_smoothing = 0.9;
    double m_lastEma = 0;
    bool m_haveEma = false;
};

// Tensor memory per step: current and peak bytes (shown in MiB).
class MemoryPlot final : public MetricPlot {
    Q_OBJECT

public:
    explicit MemoryPlot(QWidget* parent = nullptr);
    void clear();
    void append(const QVector<double>& steps, const QVector<double>& currentMiB, const QVector<double>& peakMiB);

private:
    QCPGraph* m_current;
    QCPGraph* m_peak;
};

} // namespace tb::ui
