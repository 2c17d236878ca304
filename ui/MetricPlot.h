#pragma once
// A QCustomPlot with the behaviour every live plot here shares: mouse
// zoom/pan, double-click to re-fit, right-click export to PNG/PDF, colours
// from the system palette (dark themes too), and throttled replots.

#include "QCustomPlotInclude.h"

namespace tb::ui {

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
    // The y axis starts at zero (quantities such as memory).
    void setZeroBased(bool zeroBased) { m_zeroBased = zeroBased; }

protected:
    void changeEvent(QEvent* event) override;
    QCPGraph* addCurve(const QString& name, const QColor& color);

private:
    void applyPalette();
    void showContextMenu(const QPoint& pos);
    void exportTo(const QString& format);
    bool m_userMovedView = false;
    bool m_zeroBased = false;
};

} // namespace tb::ui
