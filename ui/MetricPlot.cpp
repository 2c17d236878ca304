#include "PlainText.h"
#include "MetricPlot.h"

#include <QFileDialog>
#include <QMenu>
#include <QMessageBox>

namespace tb::ui {

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

QCPGraph* MetricPlot::addCurve(const QString& name, const QColor& color)
{
    QCPGraph* graph = addGraph();
    graph->setName(name);
    graph->setPen(QPen(color, 1)); // width 1: wide pens are slow in the raster engine
    graph->setAdaptiveSampling(true);
    return graph;
}

void MetricPlot::fitToData()
{
    rescaleAxes(true);
    // A margin above and below, so curves at the extremes do not sit on the frame.
    QCPRange y = yAxis->range();
    if (yAxis->scaleType() == QCPAxis::stLogarithmic) {
        y = QCPRange(std::max(y.lower, 1e-6) / 1.1, y.upper * 1.1);
    } else {
        const double pad = std::max(y.size() * 0.05, 1e-9);
        y = QCPRange(m_zeroBased ? 0.0 : y.lower - pad, y.upper + pad);
    }
    yAxis->setRange(y);
    requestReplot();
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

void MetricPlot::applyPalette()
{
    const QPalette p = palette();
    setBackground(p.color(QPalette::Base));
    const QColor text = p.color(QPalette::Text);
    QColor grid = text;
    grid.setAlpha(40);
    for (QCPAxis* axis : {xAxis, yAxis}) {
        axis->setBasePen(QPen(text));
        axis->setTickPen(QPen(text));
        axis->setSubTickPen(QPen(text));
        axis->setTickLabelColor(text);
        axis->setLabelColor(text);
        axis->grid()->setPen(QPen(grid));
    }
    legend->setBrush(p.color(QPalette::Base));
    legend->setTextColor(text);
    legend->setBorderPen(QPen(grid));
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
    QString path = QFileDialog::getSaveFileName(this, tr("Export plot"), yAxis->label() + "." + format, filter);
    if (path.isEmpty()) return;
    if (!path.endsWith("." + format, Qt::CaseInsensitive)) path += "." + format;
    const bool ok = format == "png" ? savePng(path, 0, 0, 2.0) : savePdf(path);
    if (!ok) plainWarning(this, tr("Export plot"), tr("Could not write %1.").arg(path));
}

} // namespace tb::ui
