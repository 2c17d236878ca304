// The memory planner's plots: the fit heat map over batch x sequence (its
// ranges, the frontier, the current point, clicks that move it) and the bar of
// memory terms against the usable memory.
#include "MemoryPlannerPanel.h"
#include "MetricPlot.h"
#include "Units.h"

#include <QToolTip>
#include <QCheckBox>
#include <QComboBox>
#include <QLabel>
#include <QPushButton>
#include <QSlider>
#include <QSpinBox>

#include <algorithm>
#include <cmath>

#include "memory/Architectures.h"

namespace tb::ui {
namespace {

constexpr double kGiB = 1073741824.0;

// A clicked batch or sequence length, rounded to what people type: exact up to
// 8, else to a quarter of its power of two (37 -> 40, 700 -> 640, 1500 -> 1536).
int snapToRound(double value)
{
    const auto v = std::max<long long>(1, std::llround(value));
    if (v <= 8) return static_cast<int>(v);
    long long step = 1;
    while (step * 8 <= v) step *= 2; // 2^(floor(log2 v) - 2)
    return static_cast<int>(std::max(step, (v + step / 2) / step * step));
}

// Distinct, readable on light and dark backgrounds; one per term, in order.
QColor termColor(const std::string& name)
{
    static const std::vector<std::pair<std::string, QColor>> colors{
        {"weights", QColor(0x1f, 0x77, 0xb4)},        {"gradients", QColor(0xff, 0x7f, 0x0e)},
        {"optimizer_state", QColor(0x2c, 0xa0, 0x2c)}, {"data", QColor(0x8c, 0x56, 0x4b)},
        {"activations", QColor(0x94, 0x67, 0xbd)},     {"attention_maps", QColor(0xd6, 0x27, 0x28)},
        {"logits", QColor(0xe3, 0x77, 0xc2)},          {"workspace", QColor(0x7f, 0x7f, 0x7f)},
        {"ddp_buckets", QColor(0xbc, 0xbd, 0x22)},     {"allocator_reserved", QColor(0x17, 0xbe, 0xcf)},
        {"cuda_context", QColor(0x39, 0x3b, 0x79)},    {"weight_copies", QColor(0x6b, 0x6e, 0xcf)},
        {"cublas_workspace", QColor(0xe7, 0xba, 0x52)}, {"model_state", QColor(0x1f, 0x77, 0xb4)},
        {"optimizer_step", QColor(0x98, 0xdf, 0x8a)},  {"resident", QColor(0x55, 0x55, 0x55)},
        {"step", QColor(0xaa, 0xaa, 0xaa)}};
    for (const auto& [n, c] : colors) {
        if (n == name) return c;
    }
    return QColor(0x55, 0x55, 0x55);
}

} // namespace

void MemoryPlannerPanel::syncSliderRanges(const Plan& plan)
{
    // The sequence axis: the model's context for published models, and for
    // the built-in model (built for the sequence it trains on) up to 4x the
    // current length. The addition task's sequence is fixed by its digits.
    const bool fixedSeq = source() == "experiment"
        && (plan.setup.dataset == "addition" || plan.memory.step().fixedSeqLen > 0);
    // The batch axis: twice the largest batch that fits at this sequence
    // length (a power of two, at least 16), so the frontier sits inside the map.
    // Both follow the model: a 7B model on a T4 fits batch 2 and a few
    // thousand tokens, a toy thousands of sequences, and the frontier should
    // cross the middle of the map either way.
    const auto fitting = plan.memory.largestBatch(plan.setup.seqLen, plan.setup, budgetBytes(), 1024);
    int batchMax = 4;
    while (batchMax < std::max<std::int64_t>(2 * fitting, batch()) && batchMax < kBatchLimit) batchMax *= 2;
    // The sequence axis: up to twice the longest sequence that fits at batch 1.
    std::int64_t seqCap = source() == "experiment" ? std::max<std::int64_t>(1024, 4 * plan.setup.seqLen)
                                                   : plan.memory.arch().maxPositions;
    seqCap = std::min<std::int64_t>(seqCap, 1 << 20);
    const std::int64_t seqFit = plan.memory.largestSequence(1, plan.setup, budgetBytes());
    std::int64_t seqMax = 256;
    while (seqMax < std::max<std::int64_t>(2 * seqFit, seqLen()) && seqMax < seqCap) seqMax *= 2;
    seqMax = std::min(seqMax, seqCap);
    m_updating = true;
    m_batchSlider->setMaximum(batchMax);
    m_batchSlider->setValue(m_batchBox->value());
    m_seqSlider->setMaximum(static_cast<int>(seqMax));
    m_seqBox->setMaximum(static_cast<int>(seqMax));
    m_seqSlider->setValue(m_seqBox->value());
    m_seqSlider->setEnabled(!fixedSeq);
    m_seqBox->setEnabled(!fixedSeq);
    const QString fixedTip = plan.setup.dataset == "addition" ? tr("The addition task's sequence length is fixed by its digits")
                                                              : tr("The model's saved weights fix its sequence length");
    m_seqSlider->setToolTip(fixedSeq ? fixedTip : QString());
    m_seqBox->setToolTip(fixedSeq ? fixedTip : QString());
    m_loraTargets->setEnabled(m_loraRank->value() > 0);
    m_updating = false;
}

void MemoryPlannerPanel::rebuildMap(const Plan& plan)
{
    const auto batches = fitMapAxis(1, m_batchSlider->maximum(), kMapCells);
    const bool fixedSeq = !m_seqSlider->isEnabled();
    const auto seqs = fixedSeq ? std::vector<std::int64_t>{plan.setup.seqLen}
                               : fitMapAxis(1, m_seqSlider->maximum(), kMapCells);
    m_map = plan.memory.fitMap(plan.setup, budgetBytes(), batches, seqs);
    const int nx = static_cast<int>(batches.size()), ny = static_cast<int>(seqs.size());
    auto* data = m_colorMap->data();
    const double y0 = static_cast<double>(seqs.front()), y1 = static_cast<double>(fixedSeq ? seqs.front() + 1 : seqs.back());
    data->setSize(nx, ny);
    data->setRange(QCPRange(static_cast<double>(batches.front()), static_cast<double>(batches.back())), QCPRange(y0, y1));
    const double budget = static_cast<double>(std::max<std::int64_t>(budgetBytes(), 1));
    QVector<double> fx, fy;
    for (int col = 0; col < nx; ++col) {
        std::int64_t longest = 0;
        for (int row = 0; row < ny; ++row) {
            const auto peak = m_map.at(static_cast<std::size_t>(row), static_cast<std::size_t>(col));
            // Over the budget shows in the dark red band, whatever by how much.
            double share = static_cast<double>(peak) / budget;
            if (share > 1.0) share = std::max(share, 1.0 + 1e-3);
            data->setCell(col, row, std::min(share, 1.25));
            if (peak <= budgetBytes()) longest = seqs[static_cast<std::size_t>(row)];
        }
        if (longest > 0 && !fixedSeq) {
            fx << static_cast<double>(batches[static_cast<std::size_t>(col)]);
            fy << static_cast<double>(longest);
        }
    }
    m_frontier->setData(fx, fy, true);
    // Half a cell beyond the first and last cell centres, and at least 4% of
    // the span: the cells are drawn whole, and the 14 px marker at the map's
    // edge (batch 1, the largest batch) is drawn inside it (half a point, 0.5,
    // left it half outside a map of many cells).
    const double spanX = static_cast<double>(batches.back() - batches.front());
    const double halfX = std::max(nx > 1 ? spanX / (2.0 * (nx - 1)) : 0.5, 0.04 * spanX);
    const double halfY = std::max(ny > 1 ? (y1 - y0) / (2.0 * (ny - 1)) : 0.5, 0.04 * (y1 - y0));
    m_mapPlot->xAxis->setRange(static_cast<double>(batches.front()) - halfX, static_cast<double>(batches.back()) + halfX);
    m_mapPlot->yAxis->setRange(y0 - halfY, y1 + halfY);
    m_mapPlot->yAxis->setTicks(!fixedSeq);
    m_mapPlot->yAxis->setLabel(fixedSeq ? tr("sequence length %1 (fixed)").arg(y0) : tr("sequence length"));
}

void MemoryPlannerPanel::showTerms()
{
    m_termPlot->clearPlottables();
    if (!m_estimate) return;
    QCPBars* below = nullptr;
    for (const auto& t : m_estimate->terms) {
        auto* bars = new QCPBars(m_termPlot->yAxis, m_termPlot->xAxis);
        bars->setName(QString::fromStdString(t.name).replace('_', ' '));
        const QColor c = termColor(t.name);
        bars->setPen(QPen(c.darker(130)));
        bars->setBrush(c);
        bars->setWidth(0.6);
        bars->addData(1.0, static_cast<double>(t.bytes) / kGiB);
        if (below) bars->moveAbove(below);
        below = bars;
    }
    const double budget = static_cast<double>(budgetBytes()) / kGiB;
    const double peak = static_cast<double>(m_estimate->peakBytes) / kGiB;
    m_termPlot->xAxis->setRange(0, std::max(peak, budget) * 1.05);
    m_termPlot->yAxis->setRange(0.5, 1.5);
    m_budgetLine->point1->setCoords(budget, 0);
    m_budgetLine->point2->setCoords(budget, 1);
    m_termPlot->replot();
}

void MemoryPlannerPanel::showMarker()
{
    m_marker->setData({static_cast<double>(batch())},
                      {static_cast<double>(m_seqSlider->isEnabled() ? seqLen() : seqLen() + 0.5)});
    m_mapPlot->replot();
}

QString MemoryPlannerPanel::termTipAt(const QPoint& pos) const
{
    if (!m_estimate) return {};
    const double x = m_termPlot->xAxis->pixelToCoord(pos.x()) * kGiB;
    const double y = m_termPlot->yAxis->pixelToCoord(pos.y());
    if (y < 0.7 || y > 1.3) return {};
    double start = 0;
    for (const auto& t : m_estimate->terms) {
        const double end = start + static_cast<double>(t.bytes);
        if (x >= start && x < end) {
            return tr("%1: %2\n%3")
                .arg(QString::fromStdString(t.name).replace('_', ' '), bytesText(t.bytes), QString::fromStdString(t.formula));
        }
        start = end;
    }
    return {};
}

void MemoryPlannerPanel::termPlotHover(QMouseEvent* event)
{
    const QString tip = termTipAt(event->pos());
    if (tip.isEmpty()) QToolTip::hideText();
    else QToolTip::showText(event->globalPosition().toPoint(), tip, m_termPlot);
}

void MemoryPlannerPanel::mapClicked(QMouseEvent* event)
{
    if (m_map.batches.empty()) return;
    const double bx = m_mapPlot->xAxis->pixelToCoord(event->pos().x());
    const double sy = m_mapPlot->yAxis->pixelToCoord(event->pos().y());
    const int b = std::min(snapToRound(std::clamp(bx, 1.0, static_cast<double>(m_batchSlider->maximum()))),
                           m_batchSlider->maximum());
    if (m_seqSlider->isEnabled()) {
        const int s = std::min(snapToRound(std::clamp(sy, 1.0, static_cast<double>(m_seqSlider->maximum()))),
                               m_seqSlider->maximum());
        m_updating = true;
        m_seqBox->setValue(s);
        m_seqSlider->setValue(s);
        m_updating = false;
    }
    m_batchBox->setValue(b);
    pointChanged();
}

} // namespace tb::ui
