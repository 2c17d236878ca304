#pragma once
// A QCustomPlot with the behaviour every live plot here shares: mouse
// zoom/pan, double-click to re-fit, right-click export to PNG/PDF, colours
// from the system palette (dark themes too), and throttled replots.

#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "QCustomPlotInclude.h"

namespace tb::ui {

// One curve whose on-screen size is bounded however long the run: points are
// merged into buckets of 2^k consecutive points (at most kMaxBuckets), each
// drawn as its minimum and maximum in step order, so spikes stay visible.
// Appending a point and the bounds used to fit the axes cost O(1) amortised,
// so the per-frame cost does not grow with the run.
class BucketedCurve {
public:
    static constexpr int kMaxBuckets = 4096;
    explicit BucketedCurve(QCPGraph* graph) : m_graph(graph) {}
    void append(double key, double value);
    void clear();
    QCPGraph* graph() const { return m_graph; }
    std::int64_t pointCount() const { return m_points; }
    bool empty() const { return m_points == 0; }
    // Bounds of everything appended (not only what is drawn).
    double minKey() const { return m_minKey; }
    double maxKey() const { return m_maxKey; }
    double minValue() const { return m_minValue; }
    double maxValue() const { return m_maxValue; }
    double minPositiveValue() const { return m_minPositive; } // +inf when none

private:
    struct Bucket {
        double firstKey, lastKey, minKey, minValue, maxKey, maxValue;
        int count;
    };
    void draw(const Bucket& b);
    void redrawLast();
    void mergePairs();
    QCPGraph* m_graph;
    std::vector<Bucket> m_buckets;
    int m_perBucket = 1;
    std::int64_t m_points = 0;
    double m_minKey = 0, m_maxKey = 0, m_minValue = 0, m_maxValue = 0;
    double m_minPositive = std::numeric_limits<double>::infinity();
};

// Axes, grid and legend in the colours of the widget's palette (dark themes too).
void applyPlotPalette(QCustomPlot* plot);

// Ticks on whole numbers only (steps, batch sizes, sequence lengths): never
// "2.5 steps", however far the axis is zoomed in.
class IntegerTicker final : public QCPAxisTicker {
protected:
    double getTickStep(const QCPRange& range) override;
    int getSubTickCount(double tickStep) override;
};
void useIntegerTicks(QCPAxis* axis);

class MetricPlot : public QCustomPlot {
    Q_OBJECT

public:
    explicit MetricPlot(const QString& yLabel, QWidget* parent = nullptr);
    // Fits all axes to the data and replots.
    void fitToData();
    // Replot soon, once, however often it is asked (queued replot).
    void requestReplot() { replot(QCustomPlot::rpQueuedReplot); }
    // Follow the data while the user has not zoomed or panned.
    void followData();
    void resetView() { m_userMovedView = false; }
    // Follows the data again and shows empty axes (steps 0-1): a new run's
    // plot does not keep the previous run's ranges until its first step.
    void resetAxes();
    // The legend in a row of its own above the plot, its entries side by
    // side: inside the axis rect it covered the curves of a short plot.
    void placeLegendAbove();
    // The y axis starts at zero (quantities such as memory).
    void setZeroBased(bool zeroBased) { m_zeroBased = zeroBased; }
    // A logarithmic y axis (losses), then re-fit.
    void setLogScale(bool log);
    // Both plots fit their x axes to the steps of either: they start and end together.
    void shareKeyRangeWith(MetricPlot* other);
    // The steps the curves span; false when there is no data.
    bool keyBounds(double& lower, double& upper) const;

protected:
    void changeEvent(QEvent* event) override;
    BucketedCurve* addCurve(const QString& name, const QColor& color);
    // Removes every curve (and its graph).
    void clearCurves();

private:
    void applyPalette();
    void showContextMenu(const QPoint& pos);
    void exportTo(const QString& format);
    std::vector<std::unique_ptr<BucketedCurve>> m_curves;
    bool m_userMovedView = false;
    bool m_zeroBased = false;
    std::vector<MetricPlot*> m_keyPartners;
};

// Several runs' series on one plot (the History panel's overlays): each a
// bucketed curve, so a long series costs no more to draw than a short one.
class OverlayPlot final : public MetricPlot {
    Q_OBJECT

public:
    struct Series {
        QString name;
        QColor color;
        std::vector<double> x, y;
        bool points = false; // discs, no line (validation losses)
    };
    // Clicking a legend entry hides or shows its curve.
    explicit OverlayPlot(const QString& yLabel, QWidget* parent = nullptr);
    void setSeries(const std::vector<Series>& series, const QString& xLabel);
    int seriesCount() const { return graphCount(); }
};

} // namespace tb::ui
