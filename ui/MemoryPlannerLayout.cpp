// The Memory planner's widgets: the inputs column, the results (verdict,
// terms, fit map) and the wiring between inputs and plan. The planning
// itself is in MemoryPlannerPanel.cpp.
#include "FileDialogs.h"
#include "MemoryPlannerPanel.h"

#include <QCheckBox>
#include <QComboBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QKeySequence>
#include <QLabel>
#include <QLocale>
#include <QPushButton>
#include <QScrollArea>
#include <QShortcut>
#include <QSlider>
#include <QSpinBox>
#include <QVBoxLayout>

#include <algorithm>

#include "ConfigDocument.h"
#include "MetricPlot.h"
#include "PlainText.h"
#include "memory/Architectures.h"

namespace tb::ui {
namespace {

QSpinBox* spinBox(QWidget* parent, int lo, int hi, int value)
{
    auto* box = new QSpinBox(parent);
    box->setRange(lo, hi);
    box->setValue(value);
    box->setAccelerated(true);
    return box;
}

} // namespace

QWidget* MemoryPlannerPanel::buildInputs()
{
    auto* inputs = new QWidget(this);
    auto* form = new QFormLayout(inputs);
    form->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);
    m_source = new QComboBox(inputs);
    m_source->setObjectName("plannerSource");
    m_source->addItem(tr("Current experiment"), "experiment");
    m_source->insertSeparator(1);
    // Sorted by family and size; the titles carry the size, the tooltip the exact count.
    for (const auto& p : bundledArchitectures()) {
        m_source->addItem(QString::fromStdString(p.title), QString::fromStdString(p.id));
        m_source->setItemData(m_source->count() - 1,
                              tr("%1 parameters").arg(QLocale().toString(static_cast<qlonglong>(p.arch.publishedParameters))),
                              Qt::ToolTipRole);
    }
    m_source->setToolTip(tr("The model to plan for: the experiment being edited, a published model, or an imported config.json"));
    m_import = new QPushButton(tr("Import config.json…"), inputs);
    m_import->setToolTip(tr("Plan for any decoder-only model described by a Hugging Face config.json"));
    auto* sourceRow = new QWidget(inputs);
    auto* sourceLayout = new QVBoxLayout(sourceRow);
    sourceLayout->setContentsMargins(0, 0, 0, 0);
    sourceLayout->addWidget(m_source);
    sourceLayout->addWidget(m_import);
    form->addRow(tr("Model"), sourceRow);
    m_targetLabel = plainLabel(inputs);
    m_targetLabel->setWordWrap(true);
    m_targetLabel->setToolTip(tr("Choose the target GPU in the Hardware panel"));
    form->addRow(tr("Target"), m_targetLabel);

    const auto sliderRow = [&](QSlider*& slider, QSpinBox*& box, int hi, int value, const QString& name) {
        auto* row = new QWidget(inputs);
        auto* h = new QHBoxLayout(row);
        h->setContentsMargins(0, 0, 0, 0);
        slider = new QSlider(Qt::Horizontal, row);
        slider->setRange(1, hi);
        slider->setValue(value);
        slider->setObjectName(name + "Slider");
        box = spinBox(row, 1, kBatchLimit, value);
        box->setObjectName(name + "Box");
        h->addWidget(slider, 1);
        h->addWidget(box);
        return row;
    };
    form->addRow(tr("&Batch"), sliderRow(m_batchSlider, m_batchBox, 256, 8, "batch"));
    form->addRow(tr("&Sequence"), sliderRow(m_seqSlider, m_seqBox, 2048, 512, "seq"));
    m_seqBox->setRange(1, 1 << 20);

    m_precision = new QComboBox(inputs);
    m_precision->addItem(tr("fp32"), "fp32");
    m_precision->addItem(tr("fp16 mixed"), "fp16");
    m_precision->addItem(tr("bf16 mixed"), "bf16");
    m_precision->addItem(tr("bf16 pure"), "bf16-pure");
    m_precision->setToolTip(tr("Mixed: fp16/bf16 compute with fp32 master weights. Pure bf16: weights, gradients and "
                               "optimizer state in bf16 (train.precision \"bf16-pure\")."));
    form->addRow(tr("Precision"), m_precision);
    m_optimizer = new QComboBox(inputs);
    m_optimizer->setObjectName("plannerOptimizer");
    m_optimizer->addItem(tr("AdamW"), "adamw");
    m_optimizer->addItem(tr("SGD with momentum"), "sgd");
    m_optimizer->addItem(tr("SGD"), "sgd-plain");
    m_optimizer->setToolTip(tr("The optimizer the step is traced with (optim.optimizer, optim.momentum)"));
    form->addRow(tr("Optimizer"), m_optimizer);
    m_checkpointing = new QCheckBox(tr("recompute blocks"), inputs);
    m_checkpointing->setToolTip(tr("Activation checkpointing: keep only each block's input and recompute the block in "
                                   "backward; less memory, about a third more compute"));
    form->addRow(tr("Checkpointing"), m_checkpointing);
    m_attention = new QComboBox(inputs);
    m_attention->setObjectName("plannerAttention");
    m_attention->addItem(tr("eager (seq² maps)"), "eager");
    m_attention->addItem(tr("fused / flash"), "fused");
    m_attention->setToolTip(tr("eager keeps batch x heads x seq² score and probability maps per attention module; "
                               "fused (SDPA, FlashAttention) keeps none. Past a Mistral model's sliding window "
                               "the trainer runs eager attention either way, and the plan follows it"));
    form->addRow(tr("Attention"), m_attention);
    m_loraRank = spinBox(inputs, 0, 4096, 0);
    m_loraRank->setSpecialValueText(tr("off"));
    form->addRow(tr("LoRA rank"), m_loraRank);
    m_loraTargets = new QComboBox(inputs);
    m_loraTargets->setObjectName("plannerLoraTargets");
    m_loraTargets->addItem(tr("attention projections"), "attn");
    m_loraTargets->addItem(tr("MLP projections"), "mlp");
    m_loraTargets->addItem(tr("attention + MLP"), "attn,mlp");
    form->addRow(tr("LoRA targets"), m_loraTargets);
    m_gradAccum = spinBox(inputs, 1, 1 << 16, 1);
    m_gradAccum->setObjectName("plannerGradAccum");
    form->addRow(tr("Grad accumulation"), m_gradAccum);
    m_apply = new QPushButton(tr("&Apply to experiment"), inputs);
    m_tuneButton = new QPushButton(tr("T&une…"), inputs);
    m_tuneButton->setObjectName("plannerTune");
    auto* applyRow = new QHBoxLayout;
    applyRow->addWidget(m_apply);
    applyRow->addWidget(m_tuneButton);
    applyRow->addStretch();
    form->addRow(QString(), applyRow);
    connect(m_tuneButton, &QPushButton::clicked, this, [this] { openTuneDialog(); });
    auto* tuneShortcut = new QShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_T), this);
    tuneShortcut->setContext(Qt::WidgetWithChildrenShortcut);
    connect(tuneShortcut, &QShortcut::activated, this, [this] {
        if (m_tuneButton->isEnabled()) openTuneDialog();
    });
    m_applyNote = new QLabel(inputs);
    m_applyNote->setObjectName("plannerApplyNote");
    m_applyNote->setWordWrap(true);
    m_applyNote->setStyleSheet("color: palette(placeholder-text)");
    m_applyNote->hide();
    form->addRow(QString(), m_applyNote);
    auto* applyShortcut = new QShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_A), this);
    applyShortcut->setContext(Qt::WidgetWithChildrenShortcut);
    connect(applyShortcut, &QShortcut::activated, this, [this] {
        if (m_apply->isEnabled()) applyToExperiment();
    });

    auto* scroll = new QScrollArea(this);
    scroll->setWidget(inputs);
    scroll->setWidgetResizable(true);
    scroll->setFrameShape(QFrame::NoFrame);
    // Long names (presets, imported paths) are elided, not allowed to widen the column.
    for (QComboBox* box : inputs->findChildren<QComboBox*>()) {
        box->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
        box->setMinimumContentsLength(14);
        box->setMinimumWidth(120); // the separator makes the source box ask for more

    }
    scroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    scroll->setFixedWidth(330);

    return scroll;
}

QWidget* MemoryPlannerPanel::buildResults()
{
    m_verdict = plainLabel(this);
    m_verdict->setObjectName("plannerVerdict");
    m_verdict->setWordWrap(true);
    QFont big = m_verdict->font();
    big.setBold(true);
    big.setPointSizeF(big.pointSizeF() * 1.15);
    m_verdict->setFont(big);
    m_verdict->setMinimumHeight(2 * QFontMetrics(big).lineSpacing() + 2); // room for a wrapped line
    m_verdict->setAlignment(Qt::AlignLeft | Qt::AlignTop);
    m_answers = plainLabel(this);
    m_answers->setObjectName("plannerAnswers");
    m_answers->setWordWrap(true);
    m_answers->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_notes = plainLabel(this);
    m_notes->setObjectName("plannerNotes");
    m_notes->setWordWrap(true);
    m_notes->setTextInteractionFlags(Qt::TextSelectableByMouse);
    QFont small = m_notes->font();
    small.setPointSizeF(small.pointSizeF() * 0.9);
    m_notes->setFont(small);

    buildTermPlot();
    buildMapPlot();

    m_derive = new QPushButton(tr("&Derive plan from the model"), this);
    m_derive->setObjectName("plannerDerive");
    m_derive->setToolTip(tr("Trains the model's step a few times at small batches and sequences on this computer's CPU "
                            "(a few seconds) and plans every batch and sequence from what it allocated (Alt+D)"));
    m_derive->hide();
    connect(m_derive, &QPushButton::clicked, this, &MemoryPlannerPanel::deriveOrCancel);

    m_compareNf4 = new QPushButton(tr("Compare with &NF4"), this);
    m_compareNf4->setObjectName("plannerCompareNf4");
    m_compareNf4->setToolTip(tr("Plans this LoRA run with its frozen base stored in NF4 (QLoRA): its own step is "
                                "traced on this computer's CPU (seconds), and the plan is shown beside this one (Alt+N)"));
    m_compareNf4->hide();
    connect(m_compareNf4, &QPushButton::clicked, this, &MemoryPlannerPanel::compareWithNf4);

    auto* results = new QWidget(this);
    auto* r = new QVBoxLayout(results);
    r->setContentsMargins(0, 0, 0, 0);
    r->addWidget(m_verdict);
    auto* buttons = new QHBoxLayout;
    buttons->addWidget(m_derive);
    buttons->addWidget(m_compareNf4);
    buttons->addStretch(1);
    r->addLayout(buttons);
    r->addWidget(m_answers);
    r->addWidget(m_termPlot);
    r->addWidget(m_mapPlot, 1);
    r->addWidget(m_notes);

    return results;

}

void MemoryPlannerPanel::buildTermPlot()
{
    m_termPlot = new QCustomPlot(this);
    m_termPlot->setObjectName("plannerTerms");
    m_termPlot->setMinimumHeight(170);
    m_termPlot->setMaximumHeight(210);
    m_termPlot->setMouseTracking(true);
    m_termPlot->yAxis->setVisible(false);
    m_termPlot->xAxis->setLabel(tr("GiB at the peak (line: usable memory per card)"));
    m_termPlot->legend->setVisible(true);
    m_termPlot->legend->setFillOrder(QCPLayoutGrid::foColumnsFirst);
    m_termPlot->legend->setWrap(3);
    m_termPlot->plotLayout()->addElement(1, 0, m_termPlot->legend);
    m_termPlot->plotLayout()->setRowStretchFactor(1, 0.001);
    m_budgetLine = new QCPItemStraightLine(m_termPlot);
    m_budgetLine->setPen(QPen(QColor(0xc0, 0x39, 0x2b), 2, Qt::DashLine));
    applyPlotPalette(m_termPlot);
    m_termPlot->legend->setBorderPen(Qt::NoPen);
    connect(m_termPlot, &QCustomPlot::mouseMove, this, &MemoryPlannerPanel::termPlotHover);
}

void MemoryPlannerPanel::buildMapPlot()
{
    m_mapPlot = new QCustomPlot(this);
    m_mapPlot->setObjectName("plannerMap");
    m_mapPlot->setMinimumHeight(260);
    m_mapPlot->xAxis->setLabel(tr("batch size"));
    m_mapPlot->yAxis->setLabel(tr("sequence length"));
    useIntegerTicks(m_mapPlot->xAxis);
    useIntegerTicks(m_mapPlot->yAxis);
    m_mapPlot->setToolTip(tr("Peak memory as a share of the target's usable memory. Click a cell to plan at that batch and sequence."));
    m_colorMap = new QCPColorMap(m_mapPlot->xAxis, m_mapPlot->yAxis);
    m_colorMap->setInterpolate(false);
    QCPColorGradient gradient;
    gradient.setColorStopAt(0.0, QColor(0x1b, 0x5e, 0x20));
    gradient.setColorStopAt(0.45, QColor(0x7c, 0xb3, 0x42));
    gradient.setColorStopAt(0.72, QColor(0xfb, 0xc0, 0x2d)); // 90% of the budget
    gradient.setColorStopAt(0.799, QColor(0xef, 0x6c, 0x00));
    gradient.setColorStopAt(0.801, QColor(0x8e, 0x1b, 0x1b)); // over the budget
    gradient.setColorStopAt(1.0, QColor(0x4a, 0x0c, 0x0c));
    m_colorMap->setGradient(gradient);
    m_colorMap->setDataRange(QCPRange(0.0, 1.25));
    auto* scale = new QCPColorScale(m_mapPlot);
    scale->setType(QCPAxis::atRight);
    scale->setDataRange(QCPRange(0.0, 1.25));
    scale->setGradient(gradient);
    scale->axis()->setLabel(tr("peak / usable memory"));
    m_mapPlot->plotLayout()->addElement(0, 1, scale);
    m_colorMap->setColorScale(scale);
    m_frontier = m_mapPlot->addGraph();
    m_frontier->setName(tr("largest sequence that fits"));
    m_frontier->setPen(QPen(Qt::white, 2));
    m_frontier->setLineStyle(QCPGraph::lsStepLeft);
    m_marker = m_mapPlot->addGraph();
    m_marker->setLineStyle(QCPGraph::lsNone);
    m_marker->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCrossCircle, QPen(Qt::white, 2), Qt::NoBrush, 14));
    applyPlotPalette(m_mapPlot);
    scale->axis()->setTickLabelColor(palette().color(QPalette::Text));
    scale->axis()->setLabelColor(palette().color(QPalette::Text));
    connect(m_mapPlot, &QCustomPlot::mousePress, this, &MemoryPlannerPanel::mapClicked);
}

void MemoryPlannerPanel::wireInputs()
{
    connect(m_batchSlider, &QSlider::valueChanged, this, [this](int v) {
        if (!m_updating && v != m_batchBox->value()) m_batchBox->setValue(v);
    });
    connect(m_seqSlider, &QSlider::valueChanged, this, [this](int v) {
        if (!m_updating && v != m_seqBox->value()) m_seqBox->setValue(v);
    });
    connect(m_batchBox, &QSpinBox::valueChanged, this, [this](int v) {
        if (m_updating) return;
        if (v > m_batchSlider->maximum()) { // past the map: widen it
            int hi = m_batchSlider->maximum();
            while (hi < v) hi *= 2;
            m_updating = true;
            m_batchSlider->setMaximum(std::min(hi, kBatchLimit));
            m_updating = false;
            m_batchSlider->setValue(v);
            inputsChanged();
            return;
        }
        m_updating = true;
        m_batchSlider->setValue(v);
        m_updating = false;
        pointChanged();
    });
    connect(m_seqBox, &QSpinBox::valueChanged, this, [this](int v) {
        if (m_updating) return;
        m_updating = true;
        m_seqSlider->setValue(v);
        m_updating = false;
        pointChanged();
    });
    for (QComboBox* box : {m_precision, m_optimizer, m_attention, m_loraTargets}) {
        connect(box, &QComboBox::currentIndexChanged, this, [this] {
            if (!m_updating) inputsChanged();
        });
    }
    connect(m_checkpointing, &QCheckBox::toggled, this, [this] {
        if (!m_updating) inputsChanged();
    });
    for (QSpinBox* box : {m_loraRank, m_gradAccum}) {
        connect(box, &QSpinBox::valueChanged, this, [this] {
            if (!m_updating) inputsChanged();
        });
    }
    connect(m_source, &QComboBox::currentIndexChanged, this, [this] {
        if (m_updating) return;
        if (source() == "experiment") loadFromExperiment();
        else if (m_lastSource == "experiment") {
            // From the experiment to a published model: plan its usual fine-tuning
            // point (batch 1, 512 tokens) rather than the small model's values.
            m_updating = true;
            m_loraTargets->setCurrentIndex(m_loraTargets->findData("attn"));
            m_batchBox->setValue(1);
            m_seqBox->setMaximum(1 << 20);
            m_seqBox->setValue(512);
            m_updating = false;
        }
        m_lastSource = source();
        inputsChanged();
    });
    connect(m_import, &QPushButton::clicked, this, [this] {
        const QString path = openFileName(this, tr("Import a model's config.json"), QString(),
                                          tr("Model configs (*.json);;All files (*)"));
        if (path.isEmpty()) return;
        QString error;
        if (!importHfConfig(path, &error)) plainWarning(this, tr("Import config.json"), error);
    });
    connect(m_apply, &QPushButton::clicked, this, &MemoryPlannerPanel::applyToExperiment);
    connect(m_document, &ConfigDocument::changed, this, [this] {
        if (source() != "experiment") return;
        loadFromExperiment();
        inputsChanged();
    });
}

} // namespace tb::ui
