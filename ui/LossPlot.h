#pragma once

#include <cstdint>
#include <deque>

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
    // The run's planned steps. The EMA's window, 1 / (1 - factor) steps, is
    // held to a fiftieth of the run, so a short run's smoothed curve does not
    // lag its loss (factor 0.9 on a 60-step run lagged it by about a nat).
    void setRunLength(int steps);
    double effectiveSmoothing() const;
    // The smoothed curve's last value, for tests.
    double lastSmoothed() const { return m_lastEma; }
    double firstStep() const { return m_raw->empty() ? 0.0 : m_raw->minKey(); }
    // Points appended, and points drawn (bounded by the buckets).
    std::int64_t trainingPointCount() const { return m_raw->pointCount(); }
    int drawnPointCount() const;

private:
    BucketedCurve* m_raw;
    BucketedCurve* m_ema;
    BucketedCurve* m_val;
    // Every training loss, for recomputing the smoothed curve (floats: 8 bytes
    // a step). Deques: growing never copies the whole history in one frame.
    std::deque<float> m_steps, m_losses;
    void recomputeSmoothed();
    double m_smoothing = 0.9;
    int m_runLength = 0; // 0: unknown
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
    // Stored history whose two series were thinned apart (their steps differ).
    void appendThinned(const QVector<double>& currentSteps, const QVector<double>& currentMiB,
                       const QVector<double>& peakSteps, const QVector<double>& peakMiB);
    // The memory planner's estimate of the peak, drawn beside the measured
    // curve from the next point on (0: none).
    void setEstimate(double mib);
    const BucketedCurve* estimateCurve() const { return m_estimate; }

private:
    BucketedCurve* m_current;
    BucketedCurve* m_peak;
    BucketedCurve* m_estimate;
    double m_estimateMiB = 0;
};

// The run's other scalars per step, one shown at a time: the learning rate,
// the gradient norm, tokens per second and the step's time, and the system's
// samples (every few seconds: CPU use, host memory; on a GPU its
// utilisation, memory in use and power).
class ScalarPlot final : public MetricPlot {
    Q_OBJECT

public:
    enum Metric { LearningRate, GradNorm, TokensPerSecond, StepMs, CpuPercent, HostMemory, GpuUtil, GpuMemory, GpuPower, kMetrics };
    explicit ScalarPlot(QWidget* parent = nullptr);
    void clear();
    void append(Metric metric, const QVector<double>& steps, const QVector<double>& values);
    void setShown(Metric metric);
    Metric shown() const { return m_shown; }
    const BucketedCurve* curve(Metric metric) const { return m_curves[metric]; }
    // Its name on the axis, its key in the store, and the scale from the
    // stored value to the plotted one (bytes to MiB).
    static QString label(Metric metric);
    static const char* key(Metric metric);
    static double scale(Metric metric);
    // A system sample's metric by its stored key; false for another key.
    static bool fromKey(const std::string& key, Metric& metric);

private:
    BucketedCurve* m_curves[kMetrics];
    Metric m_shown = LearningRate;
};

} // namespace tb::ui
