#include "MetricPlot.h"

#include <algorithm>
#include <cmath>

#include <QFileDialog>
#include <QMenu>
#include <QMessageBox>

#include "FileDialogs.h"
#include "PlainText.h"

namespace tb::ui {

void BucketedCurve::clear()
{
    m_graph->data()->clear();
    m_buckets.clear();
    m_perBucket = 1;
    m_points = 0;
    m_minPositive = std::numeric_limits<double>::infinity();
}

void BucketedCurve::draw(const Bucket& b)
{
    // One point, or the minimum and the maximum in the order they came.
    if (b.count == 1 || b.minKey == b.maxKey) {
        m_graph->addData(b.minKey, b.minValue);
    } else if (b.minKey < b.maxKey) {
        m_graph->addData(b.minKey, b.minValue);
        m_graph->addData(b.maxKey, b.maxValue);
    } else {
        m_graph->addData(b.maxKey, b.maxValue);
        m_graph->addData(b.minKey, b.minValue);
    }
}

void BucketedCurve::redrawLast()
{
    // Only the last bucket changed: drop its points and draw it again.
    if (m_buckets.size() >= 2) m_graph->data()->removeAfter(m_buckets[m_buckets.size() - 2].lastKey);
    else m_graph->data()->clear();
    draw(m_buckets.back());
}

void BucketedCurve::mergePairs()
{
    std::vector<Bucket> merged;
    merged.reserve(m_buckets.size() / 2 + 1);
    for (std::size_t i = 0; i < m_buckets.size(); i += 2) {
        Bucket b = m_buckets[i];
        if (i + 1 < m_buckets.size()) {
            const Bucket& n = m_buckets[i + 1];
            b.lastKey = n.lastKey;
            b.count += n.count;
            if (n.minValue < b.minValue) b.minValue = n.minValue, b.minKey = n.minKey;
            if (n.maxValue > b.maxValue) b.maxValue = n.maxValue, b.maxKey = n.maxKey;
        }
        merged.push_back(b);
    }
    m_buckets = std::move(merged);
    m_perBucket *= 2;
    m_graph->data()->clear();
    for (const auto& b : m_buckets) draw(b);
}

void BucketedCurve::append(double key, double value)
{
    if (m_points == 0) {
        m_minKey = m_maxKey = key;
        m_minValue = m_maxValue = value;
    } else {
        m_minKey = std::min(m_minKey, key);
        m_maxKey = std::max(m_maxKey, key);
        m_minValue = std::min(m_minValue, value);
        m_maxValue = std::max(m_maxValue, value);
    }
    if (value > 0) m_minPositive = std::min(m_minPositive, value);
    ++m_points;
    if (!m_buckets.empty() && m_buckets.back().count < m_perBucket) {
        Bucket& b = m_buckets.back();
        b.lastKey = key;
        ++b.count;
        if (value < b.minValue) b.minValue = value, b.minKey = key;
        if (value > b.maxValue) b.maxValue = value, b.maxKey = key;
        redrawLast();
        return;
    }
    m_buckets.push_back({key, key, key, value, key, value, 1});
    if (static_cast<int>(m_buckets.size()) > kMaxBuckets) mergePairs();
    else draw(m_buckets.back());
}

MetricPlot::MetricPlot(const QString& yLabel, QWidget* parent) : QCustomPlot(parent)
{
    setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
    xAxis->setLabel(tr("step"));
    yAxis->setLabel(yLabel);
    legend->setVisible(true);
    legend->setFont(font());
    axisRect()->insetLayout()->setInsetAlignment(0, Qt::AlignTop | Qt::AlignRight);
    setNoAntialiasingOnDrag(true);
    setMinimumHeight(160);
    setContextMenuPolicy(Qt::CustomContextMenu);
    connect(this, &QWidget::customContextMenuRequested, this, &MetricPlot::showContextMenu);
    connect(this, &QCustomPlot::mouseDoubleClick, this, [this](QMouseEvent*) {
        m_userMovedView = false;
        fitToData();
    });
    connect(this, &QCustomPlot::mousePress, this, [this](QMouseEvent*) { m_userMovedView = true; });
    connect(this, &QCustomPlot::mouseWheel, this, [this](QWheelEvent*) { m_userMovedView = true; });
    applyPalette();
}

BucketedCurve* MetricPlot::addCurve(const QString& name, const QColor& color)
{
    QCPGraph* graph = addGraph();
    graph->setName(name);
    graph->setPen(QPen(color, 1)); // width 1: wide pens are slow in the raster engine
    graph->setAdaptiveSampling(true);
    m_curves.push_back(std::make_unique<BucketedCurve>(graph));
    return m_curves.back().get();
}

void MetricPlot::clearCurves()
{
    m_curves.clear();
    clearGraphs();
}

OverlayPlot::OverlayPlot(const QString& yLabel, QWidget* parent) : MetricPlot(yLabel, parent)
{
    connect(this, &QCustomPlot::legendClick, this, [this](QCPLegend*, QCPAbstractLegendItem* item, QMouseEvent*) {
        auto* entry = qobject_cast<QCPPlottableLegendItem*>(item);
        if (!entry) return;
        QCPAbstractPlottable* curve = entry->plottable();
        curve->setVisible(!curve->visible());
        QColor text = legend->textColor();
        if (!curve->visible()) text.setAlpha(90);
        entry->setTextColor(text);
        fitToData();
    });
}

void OverlayPlot::setSeries(const std::vector<Series>& series, const QString& xLabel)
{
    clearCurves();
    for (const auto& s : series) {
        BucketedCurve* curve = addCurve(s.name, s.color);
        if (s.points) {
            curve->graph()->setLineStyle(QCPGraph::lsNone);
            curve->graph()->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, s.color, 6));
        }
        for (std::size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) curve->append(s.x[i], s.y[i]);
    }
    xAxis->setLabel(xLabel);
    legend->setVisible(!series.empty());
    resetView();
    fitToData();
}

void MetricPlot::setLogScale(bool log)
{
    yAxis->setScaleType(log ? QCPAxis::stLogarithmic : QCPAxis::stLinear);
    if (log) yAxis->setTicker(QSharedPointer<QCPAxisTickerLog>::create());
    else yAxis->setTicker(QSharedPointer<QCPAxisTicker>::create());
    fitToData();
}

void MetricPlot::placeLegendAbove()
{
    if (!axisRect()->insetLayout()->take(legend)) return;
    plotLayout()->insertRow(0);
    plotLayout()->addElement(0, 0, legend);
    plotLayout()->setRowStretchFactor(0, 0.001);
    legend->setFillOrder(QCPLegend::foColumnsFirst);
    legend->setMargins(QMargins(6, 2, 6, 2));
}

void MetricPlot::resetAxes()
{
    resetView();
    xAxis->setRange(0.0, 1.0);
    yAxis->setRange(yAxis->scaleType() == QCPAxis::stLogarithmic ? 0.1 : 0.0, 1.0);
    requestReplot();
}

void MetricPlot::fitToData()
{
    // From the curves' running bounds: O(curves), not a walk over every point.
    bool any = false;
    double x0 = 0, x1 = 0, y0 = 0, y1 = 0, positive = std::numeric_limits<double>::infinity();
    for (const auto& c : m_curves) {
        if (c->empty() || !c->graph()->visible()) continue;
        x0 = any ? std::min(x0, c->minKey()) : c->minKey();
        x1 = any ? std::max(x1, c->maxKey()) : c->maxKey();
        y0 = any ? std::min(y0, c->minValue()) : c->minValue();
        y1 = any ? std::max(y1, c->maxValue()) : c->maxValue();
        positive = std::min(positive, c->minPositiveValue());
        any = true;
    }
    if (!any) {
        requestReplot();
        return;
    }
    for (const MetricPlot* partner : m_keyPartners) {
        double lower = 0, upper = 0;
        if (!partner->keyBounds(lower, upper)) continue;
        x0 = std::min(x0, lower);
        x1 = std::max(x1, upper);
    }
    // Half a step (or 1% of the span) beyond the first and last points, so
    // validation dots at the ends are drawn whole.
    const double xPad = std::max(0.5, (x1 - x0) * 0.01);
    xAxis->setRange(x0 - xPad, (x1 > x0 ? x1 : x0 + 1) + xPad);
    // A margin above and below, so curves at the extremes do not sit on the frame.
    QCPRange y(y0, y1 > y0 ? y1 : y0 + 1e-9);
    if (yAxis->scaleType() == QCPAxis::stLogarithmic) {
        const double low = std::isfinite(positive) ? positive : 1e-6;
        y = QCPRange(std::max(low, 1e-6) / 1.1, std::max(y.upper, low) * 1.1);
    } else {
        // Zero-based plots measure the margin from zero: a flat memory curve
        // (lower == upper) sat on the top frame, hidden by it.
        const double lower = m_zeroBased ? std::min(0.0, y.lower) : y.lower;
        const double pad = std::max((y.upper - lower) * 0.05, 1e-9);
        y = QCPRange(m_zeroBased ? lower : y.lower - pad, y.upper + pad);
    }
    yAxis->setRange(y);
    requestReplot();
}

void MetricPlot::shareKeyRangeWith(MetricPlot* other)
{
    m_keyPartners.push_back(other);
    other->m_keyPartners.push_back(this);
}

bool MetricPlot::keyBounds(double& lower, double& upper) const
{
    bool any = false;
    for (const auto& c : m_curves) {
        if (c->empty() || !c->graph()->visible()) continue;
        lower = any ? std::min(lower, c->minKey()) : c->minKey();
        upper = any ? std::max(upper, c->maxKey()) : c->maxKey();
        any = true;
    }
    return any;
}

double IntegerTicker::getTickStep(const QCPRange& range)
{
    // QCustomPlot's readable steps include 2.5 x 10^k; on a step axis 2.5 put
    // ticks at 2.5, 7.5, ... labelled with rounded whole numbers ("3" at 2.5).
    // The step is a whole 1, 2 or 5 x 10^k instead, at least one.
    const double step = QCPAxisTicker::getTickStep(range);
    if (!(step > 1.0)) return 1.0;
    const double magnitude = std::pow(10.0, std::floor(std::log10(step)));
    for (double mantissa : {1.0, 2.0, 5.0, 10.0}) {
        if (mantissa * magnitude >= step * (1.0 - 1e-9)) return std::round(mantissa * magnitude);
    }
    return std::round(10.0 * magnitude);
}

int IntegerTicker::getSubTickCount(double tickStep)
{
    // Sub-ticks only where they land on whole numbers.
    const auto step = static_cast<long long>(std::llround(tickStep));
    if (step <= 1) return 0;
    for (int n : {4, 3, 1}) {
        if (step % (n + 1) == 0) return n;
    }
    return 0;
}

void useIntegerTicks(QCPAxis* axis)
{
    axis->setTicker(QSharedPointer<IntegerTicker>::create());
    axis->setNumberFormat("f");
    axis->setNumberPrecision(0);
}

void MetricPlot::followData()
{
    if (!m_userMovedView) fitToData();
    else requestReplot();
}

void MetricPlot::changeEvent(QEvent* event)
{
    if (event->type() == QEvent::PaletteChange) applyPalette();
    QCustomPlot::changeEvent(event);
}

void applyPlotPalette(QCustomPlot* plot)
{
    const QPalette p = plot->palette();
    plot->setBackground(p.color(QPalette::Base));
    const QColor text = p.color(QPalette::Text);
    QColor grid = text;
    grid.setAlpha(40);
    for (QCPAxis* axis : plot->axisRect()->axes()) {
        axis->setBasePen(QPen(text));
        axis->setTickPen(QPen(text));
        axis->setSubTickPen(QPen(text));
        axis->setTickLabelColor(text);
        axis->setLabelColor(text);
        axis->grid()->setPen(QPen(grid));
    }
    plot->legend->setBrush(p.color(QPalette::Base));
    plot->legend->setTextColor(text);
    plot->legend->setBorderPen(QPen(grid));
}

void MetricPlot::applyPalette()
{
    applyPlotPalette(this);
    requestReplot();
}

void MetricPlot::showContextMenu(const QPoint& pos)
{
    QMenu menu(this);
    menu.addAction(tr("Fit to data"), this, [this] {
        m_userMovedView = false;
        fitToData();
    });
    menu.addSeparator();
    menu.addAction(tr("Export PNG…"), this, [this] { exportTo("png"); });
    menu.addAction(tr("Export PDF…"), this, [this] { exportTo("pdf"); });
    menu.exec(mapToGlobal(pos));
}

void MetricPlot::exportTo(const QString& format)
{
    const QString filter = format == "png" ? tr("PNG image (*.png)") : tr("PDF document (*.pdf)");
    QString path = saveFileName(this, tr("Export plot"), yAxis->label() + "." + format, filter);
    if (path.isEmpty()) return;
    if (!path.endsWith("." + format, Qt::CaseInsensitive)) path += "." + format;
    const bool ok = format == "png" ? savePng(path, 0, 0, 2.0) : savePdf(path);
    if (!ok) plainWarning(this, tr("Export plot"), tr("Could not write %1.").arg(path));
}

} // namespace tb::ui
