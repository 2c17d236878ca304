#include "PlainText.h"
#include "MemoryPlannerPanel.h"

#include "GpuTargetModel.h"
#include "TuneDialog.h"
#include "MetricPlot.h"
#include "Units.h"

#include <QCheckBox>
#include <QComboBox>
#include <QElapsedTimer>
#include <QDir>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLabel>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QKeySequence>
#include <QProcess>
#include <QPushButton>
#include <QScrollArea>
#include <QTemporaryFile>
#include <QShortcut>
#include <QSlider>
#include <QSpinBox>
#include <QToolTip>
#include <QVBoxLayout>

#include <algorithm>

#include "CliProgram.h"
#include "StepDeriver.h"
#include "ConfigDocument.h"
#include "common/Errors.h"
#include "config/RunConfig.h"
#include "gpu/Capability.h"
#include "diagnose/TargetPlan.h"
#include "memory/Architectures.h"
#include "memory/Verdict.h"

namespace tb::ui {

MemoryPlannerPanel::MemoryPlannerPanel(ConfigDocument* document, QWidget* parent)
    : QWidget(parent), m_document(document)
{
    m_targets = new GpuTargetModel(this); // until the window gives its own
    m_deriver = new StepDeriver(this);     // likewise
    connect(m_deriver, &StepDeriver::changed, this, &MemoryPlannerPanel::inputsChanged);

    auto* layout = new QHBoxLayout(this);
    layout->setContentsMargins(4, 4, 4, 4);
    layout->addWidget(buildInputs());
    layout->addWidget(buildResults(), 1);
    wireInputs();
    loadFromExperiment();
    showTarget();
}

MemoryPlannerPanel::~MemoryPlannerPanel()
{
    // A deriver the window shares outlives the panel: its signals must not reach it.
    if (m_deriver) m_deriver->disconnect(this);
}

QString MemoryPlannerPanel::source() const { return m_source->currentData().toString(); }

bool MemoryPlannerPanel::selectSource(const QString& source)
{
    const int index = m_source->findData(source);
    if (index < 0) return false;
    m_source->setCurrentIndex(index);
    return true;
}

bool MemoryPlannerPanel::importHfConfig(const QString& path, QString* error)
{
    const std::string source = path.toStdString();
    ModelSpec model;
    try {
        const auto text = readHfConfigText(source);
        model = modelFromHfConfig(text, source);
        // Planned from its own step, traced from a scratch folder holding
        // the config.json (read whole before any of it replaces what was
        // imported before). One the trainer does not build cannot be planned.
        auto step = publishedExperiment(text, source);
        m_importedStep = std::move(step);
    } catch (const std::exception& e) {
        if (error) *error = QString::fromStdString(e.what());
        return false;
    }
    const QString label = tr("Imported: %1 (%2)")
                              .arg(QFileInfo(path).dir().dirName() + "/" + QFileInfo(path).fileName(),
                                   tr("%1 M parameters").arg(static_cast<double>(parameterCount(model)) / 1e6, 0, 'f', 0));
    int index = m_source->findData("imported");
    if (index < 0) {
        m_source->addItem(label, "imported");
        index = m_source->count() - 1;
    } else {
        m_source->setItemText(index, label);
    }
    if (m_source->currentIndex() == index) inputsChanged();
    else m_source->setCurrentIndex(index);
    return true;
}

void MemoryPlannerPanel::setTargetModel(GpuTargetModel* targets)
{
    if (m_targets->parent() == this) delete m_targets;
    m_targets = targets;
    connect(targets, &GpuTargetModel::changed, this, &MemoryPlannerPanel::showTarget);
    showTarget();
}

const GpuTarget& MemoryPlannerPanel::target() const { return m_targets->target(); }

std::int64_t MemoryPlannerPanel::budgetBytes() const { return target().gpu.memoryBytes; }

void MemoryPlannerPanel::showTarget()
{
    const GpuTarget& target = this->target();
    m_targetLabel->setText(tr("%1: %2 usable per card%3")
                               .arg(QString::fromStdString(target.label()), bytesText(target.gpu.memoryBytes),
                                    target.count > 1 ? tr(", data parallel over %1 cards").arg(target.count) : QString()));
    if (m_tuneDialog) m_tuneDialog->setCard(target);
    inputsChanged();
}

void MemoryPlannerPanel::setBatch(int batch) { m_batchBox->setValue(batch); }
void MemoryPlannerPanel::setSeqLen(int seqLen)
{
    // (The axes follow the plan; while a plan is traced they may be shorter.)
    if (seqLen > m_seqBox->maximum()) {
        m_seqSlider->setMaximum(seqLen);
        m_seqBox->setMaximum(seqLen);
    }
    m_seqBox->setValue(seqLen);
}
int MemoryPlannerPanel::batch() const { return m_batchBox->value(); }
int MemoryPlannerPanel::seqLen() const { return m_seqBox->value(); }

// The experiment's values become the planner's inputs.
void MemoryPlannerPanel::loadFromExperiment()
{
    const auto config = m_document->config();
    updateApplyState();
    if (!config || source() != "experiment") return;
    m_updating = true;
    m_batchBox->setValue(config->train.batchSize);
    if (config->train.batchSize > m_batchSlider->maximum()) {
        int hi = m_batchSlider->maximum();
        while (hi < config->train.batchSize) hi *= 2;
        m_batchSlider->setMaximum(std::min(hi, kBatchLimit));
    }
    m_batchSlider->setValue(config->train.batchSize);
    // (The axes follow the plan; while a plan is traced they may be shorter.)
    if (effectiveSeqLen(*config) > m_seqBox->maximum()) {
        m_seqBox->setMaximum(effectiveSeqLen(*config));
        m_seqSlider->setMaximum(effectiveSeqLen(*config));
    }
    m_seqBox->setValue(effectiveSeqLen(*config));
    // What the trainer will use on the target: "auto" resolved there, as
    // the Experiment form, preflight and `estimate` resolve it.
    const auto setup = planOnTarget(*config, std::optional<GpuTarget>(target())).setup;
    m_precision->setCurrentIndex(std::max(0, m_precision->findData(QString::fromStdString(setup.precision))));
    m_optimizer->setCurrentIndex(std::max(0, m_optimizer->findData(QString::fromStdString(setup.optimizer))));
    m_checkpointing->setChecked(config->train.activationCheckpointing);
    m_attention->setCurrentIndex(config->model.attention == "sdpa" ? 1 : 0);
    m_loraRank->setValue(config->lora.rank);
    QStringList targets;
    for (const auto& t : config->lora.targets) targets << QString::fromStdString(t);
    const QString joined = targets.join(',');
    int index = m_loraTargets->findData(joined);
    if (index < 0) {
        index = m_loraTargets->findData("custom");
        if (index < 0) {
            m_loraTargets->addItem(QString(), "custom");
            index = m_loraTargets->count() - 1;
        }
        m_loraTargets->setItemText(index, tr("as configured: %1").arg(targets.join(", ")));
        m_loraTargets->setItemData(index, joined, Qt::UserRole + 1);
    }
    m_loraTargets->setCurrentIndex(index);
    m_gradAccum->setValue(config->train.gradAccum);
    m_updating = false;
}

// The plan of a config planned from its own step (the experiment's, or an
// imported config.json's): the deriver's, once traced; else why not yet.
std::optional<MemoryPlannerPanel::Plan> MemoryPlannerPanel::derivedPlan(QString* why, const std::string* quantize,
                                                                       const RunConfig& config) const
{
    std::string key;
    QString cannot;
    const auto traced = derivedConfig(&key, &cannot, quantize);
    if (!traced) {
        *why = cannot;
        return std::nullopt;
    }
    const auto derived = m_deriver->plan(key);
    if (!derived) {
        *why = m_deriver->running() && m_deriver->runningKey() == key
            ? tr("Tracing the model's training step on this computer's CPU (the plan is recorded from it): %1…")
                  .arg(m_deriver->progress().isEmpty() ? tr("starting") : m_deriver->progress())
            : m_deriver->queuedKey() == key
            ? tr("Waiting for another plan being traced, then tracing this one…")
            : !m_deriver->error(key).isEmpty()
            ? tr("The plan could not be derived: %1").arg(m_deriver->error(key))
            : plannableModel(config) && config.model.quantize != "none"
            ? tr("A quantized base (%1, QLoRA) is planned from its own training step: Derive plan records "
                 "the step on this CPU (seconds) and plans from it.")
                  .arg(QString::fromStdString(config.model.quantize))
            : plannableModel(config)
            ? tr("This model is planned from its own training step: Derive plan records the step on this CPU "
                 "(seconds) and plans from it.")
            : tr("A TorchScript model: Derive plan traces its training step on this CPU (seconds) "
                 "and plans from it.");
        return std::nullopt;
    }
    // What the panel reads of the model besides its step: its context length.
    ArchitectureSpec model;
    QString unused;
    if (const auto* published = publishedStep(&unused)) model.maxPositions = published->model.maxLen;
    Plan plan{MemoryPlan(derived, model), planOnTarget(*traced, std::optional<GpuTarget>(target())).setup};
    plan.setup.batch = batch();
    plan.setup.seqLen = seqLen();
    return plan;
}

std::optional<MemoryPlannerPanel::Plan> MemoryPlannerPanel::currentPlan(QString* why, const std::string* quantize) const
{
    // Every model's plan is the step derived from the model itself (the
    // experiment's, a preset's or an imported config.json's).
    if (source() == "experiment") {
        auto config = m_document->config();
        if (!config) {
            const auto& issues = m_document->issues();
            *why = m_document->jsonIsObject() && !issues.empty()
                ? tr("The experiment's config is not valid yet: %1").arg(QString::fromStdString(issues.front().text()))
                : tr("The experiment's config is not valid JSON yet.");
            return std::nullopt;
        }
        return derivedPlan(why, quantize, *config);
    }
    const auto* published = publishedStep(why);
    if (!published) {
        if (why->isEmpty() && source() == "imported") *why = tr("Import a config.json to plan it.");
        return std::nullopt;
    }
    return derivedPlan(why, quantize, published->config);
}

std::optional<TrainingSetup> MemoryPlannerPanel::plannedSetup() const
{
    QString why;
    const auto plan = currentPlan(&why);
    if (!plan) return std::nullopt;
    return plan->setup;
}

void MemoryPlannerPanel::inputsChanged()
{
    if (m_updating) return;
    QElapsedTimer timer;
    timer.start();
    updateApplyState();
    updateDeriveButton();
    updateCompareButton();
    QString why;
    auto plan = currentPlan(&why);
    if (!plan && m_deriver) {
        deriveShownPlan();
        plan = currentPlan(&why);
    } else if (plan && m_deriver && !m_deriver->running()) {
        deriveUnquantizedComparison();
    }
    if (!plan) {
        m_estimate.reset();
        m_map = {};
        m_colorMap->data()->clear();
        m_frontier->data()->clear();
        m_marker->data()->clear();
        m_verdict->setText(why);
        m_verdict->setStyleSheet({}); // a reason, not a verdict
        m_verdict->setToolTip(why);
        m_answers->clear();
        m_notes->clear();
        // Empty plots would only show bare axes: hidden until there is a plan.
        m_termPlot->hide();
        m_mapPlot->hide();
        m_termPlot->clearPlottables();
        m_termPlot->replot();
        m_mapPlot->replot();
        return;
    }
    m_termPlot->show();
    m_mapPlot->show();
    syncSliderRanges(*plan);
    rebuildMap(*plan);
    pointChanged();
}

void MemoryPlannerPanel::pointChanged()
{
    if (m_updating) return;
    QElapsedTimer timer;
    timer.start();
    QString why;
    const auto plan = currentPlan(&why);
    if (!plan) {
        inputsChanged();
        return;
    }
    const auto budget = budgetBytes();
    auto answers = plan->memory.answersAt(plan->setup.batch, plan->setup.seqLen, plan->setup, budget, kBatchLimit,
                                          m_seqSlider->isEnabled());
    m_estimate = std::move(answers.estimate);
    // Preflight's precision verdict for this card, shown before the memory's.
    m_precisionError = QString::fromStdString(precisionError(
        plan->setup.precision, target().gpu.cc.known() ? std::optional<ComputeCapability>(target().gpu.cc) : std::nullopt));
    m_largestBatch = answers.largestBatch;
    m_largestSeq = answers.largestSequence;
    if (m_seqSlider->isEnabled() && source() != "experiment") {
        m_largestSeq = std::min<std::int64_t>(m_largestSeq, plan->memory.arch().maxPositions);
    }
    m_verdict->setText(verdictText());
    m_verdict->setToolTip(tr("Peak of the plan against the usable memory of one %1").arg(QString::fromStdString(target().gpu.name)));
    const auto verdict = memoryVerdict(m_estimate->peakBytes, budget, m_precisionError.toStdString());
    m_verdict->setStyleSheet(verdict == MemoryVerdict::Fits    ? "color: #1e8449"
                             : verdict == MemoryVerdict::Tight ? "color: #b9770e"
                                                               : "color: #c0392b");
    if (!m_precisionError.isEmpty()) m_verdict->setToolTip(m_precisionError);
    m_answers->setText(answersText());
    QStringList notes;
    for (const auto& n : m_estimate->notes) notes << QString::fromStdString(n);
    if (!target().note.empty()) notes << QString::fromStdString(target().note);
    notes << tr("%1 parameters, %2 trainable; peak during %3.")
                 .arg(QLocale().toString(static_cast<qlonglong>(m_estimate->parameters)),
                      QLocale().toString(static_cast<qlonglong>(m_estimate->trainableParameters)),
                      QString::fromStdString(m_estimate->peakPhase));
    m_notes->setText(notes.join("\n"));
    showTerms();
    showMarker();
    Q_EMIT updated(static_cast<double>(timer.nsecsElapsed()) / 1e6);
}

bool MemoryPlannerPanel::plannedFromStep() const
{
    if (source() == "imported") return m_importedStep.has_value();
    return source() != "experiment" || m_document->config().has_value();
}

const PublishedExperiment* MemoryPlannerPanel::publishedStep(QString* why) const
{
    const QString src = source();
    if (src == "experiment") return nullptr;
    if (src == "imported") return m_importedStep ? &*m_importedStep : nullptr;
    // (Kept per preset: its scratch folder, and so the plans derived from it, last while the panel does.)
    if (const auto it = m_presetSteps.find(src); it != m_presetSteps.end()) return &it->second;
    try {
        const auto& preset = findArchitecture(src.toStdString());
        return &m_presetSteps.emplace(src, publishedExperiment(preset.configJson, "resources/architectures/" + preset.id + ".json"))
                    .first->second;
    } catch (const std::exception& e) {
        *why = tr("The preset cannot be traced: %1").arg(QString::fromStdString(e.what()));
        return nullptr;
    }
}

// A quantized LoRA experiment's plan is shown beside its unquantized self
// (quantizedComparison), LoRA's own step too: traced once the deriver is free.
void MemoryPlannerPanel::deriveUnquantizedComparison()
{
    if (source() != "experiment" || m_loraRank->value() <= 0) return;
    const auto config = m_document->config();
    if (!config || config->model.quantize == "none") return;
    const std::string none = "none";
    std::string key;
    QString why;
    const auto unquantized = derivedConfig(&key, &why, &none);
    if (!unquantized || m_deriver->plan(key) || !m_deriver->error(key).isEmpty()) return;
    m_deriver->derive(*unquantized);
}

void MemoryPlannerPanel::deriveShownPlan()
{
    if (!plannedFromStep()) return;
    std::string key;
    QString why;
    const auto config = derivedConfig(&key, &why);
    // (A TorchScript model's trace takes longer: on Derive plan only.)
    if (!config || !plannableModel(*config) || m_deriver->plan(key) || !m_deriver->error(key).isEmpty()) return;
    if (m_deriver->running() && (m_deriver->runningKey() == key || m_deriver->queuedKey() == key)) return;
    m_deriveRequested = key;
    m_deriver->derive(*config);
}

std::optional<RunConfig> MemoryPlannerPanel::derivedConfig(std::string* key, QString* why, const std::string* quantize) const
{
    std::optional<RunConfig> config;
    if (source() == "experiment") {
        config = m_document->config();
    } else if (const auto* published = publishedStep(why)) {
        config = published->config;
    }
    if (!config) return std::nullopt;
    if (quantize) {
        config->model.quantize = *quantize;
        config->model.doubleQuant = true;
    }
    const QString precision = m_precision->currentData().toString();
    const QString optimizer = m_optimizer->currentData().toString();
    auto& c = *config;
    c.train.precision = precision.toStdString(); // the trainer's own names, bf16-pure included
    c.optim.optimizer = optimizer == "adamw" ? "adamw" : "sgd";
    if (optimizer == "sgd-plain") c.optim.momentum = 0.0;
    else if (optimizer == "sgd" && c.optim.momentum <= 0.0) c.optim.momentum = 0.9;
    c.train.activationCheckpointing = m_checkpointing->isChecked();
    c.model.attention = m_attention->currentData().toString() == "fused" ? "sdpa" : "eager";
    c.lora.rank = m_loraRank->value();
    if (c.lora.rank > 0) {
        QString targets = m_loraTargets->currentData().toString();
        if (targets == "custom") targets = m_loraTargets->currentData(Qt::UserRole + 1).toString();
        c.lora.targets.clear();
        for (const QString& t : targets.split(',', Qt::SkipEmptyParts)) c.lora.targets.push_back(t.toStdString());
    }
    c.train.gradAccum = m_gradAccum->value();
    if (source() != "experiment") loadBaseAsPublished(c); // the base in half precision, as PEFT loads it
    // (A built-in or Hugging Face model's step is traced with the weights on
    // the device, as the trainer runs in their place: deriveStep.)
    const bool halfWeights = config->train.weightsDtype != "fp32" && config->lora.rank <= 0, offload = config->train.offload != "none";
    if ((halfWeights || offload) && !plannableModel(*config)) {
        const QString weightsField = tr("train.weights_dtype \"%1\"").arg(QString::fromStdString(config->train.weightsDtype));
        const QString offloadField = tr("train.offload \"%1\"").arg(QString::fromStdString(config->train.offload));
        const QString fields = halfWeights && offload ? tr("%1 and %2").arg(weightsField, offloadField)
                               : halfWeights          ? weightsField
                                                      : offloadField;
        const QString fixes = halfWeights && offload ? tr("train.weights_dtype to \"fp32\" and train.offload to \"none\"")
                              : halfWeights          ? tr("train.weights_dtype to \"fp32\"")
                                                     : tr("train.offload to \"none\"");
        *why = tr("This model's plan is derived from its own training step, which Trainbench runs with the "
                  "trainable weights in fp32 (or bf16-pure) on the device; %1 is a setup it only plans. Set %2 to derive it.")
                   .arg(fields, fixes);
        return std::nullopt;
    }
    if (const auto problem = halfBaseProblem(c, c.train.precision); !problem.empty()) {
        *why = QString::fromStdString(problem);
        return std::nullopt;
    }
    if (source() != "experiment") c.data.seqLen = seqLen(); // (the key leaves it out)
    c = StepDeriver::standalone(std::move(c));
    *key = StepDeriver::keyFor(c);
    return config;
}

void MemoryPlannerPanel::updateDeriveButton()
{
    const bool scripted = plannedFromStep();
    std::string key;
    QString why;
    const bool traceable = scripted && derivedConfig(&key, &why).has_value();
    // While this plan is traced the button cancels it, whatever is planned meanwhile.
    const bool mine = m_deriver->running() && !m_deriveRequested.empty()
        && (m_deriver->runningKey() == m_deriveRequested || m_deriver->queuedKey() == m_deriveRequested);
    m_derive->setVisible(scripted || mine);
    if (mine) {
        m_derive->setText(tr("Cancel &deriving"));
        m_derive->setEnabled(true);
        return;
    }
    if (!scripted) return;
    m_derive->setText(traceable && m_deriver->plan(key) ? tr("&Derive plan again") : tr("&Derive plan from the model"));
    m_derive->setEnabled(traceable);
}

void MemoryPlannerPanel::deriveOrCancel()
{
    if (m_deriver->running() && !m_deriveRequested.empty()
        && (m_deriver->runningKey() == m_deriveRequested || m_deriver->queuedKey() == m_deriveRequested)) {
        m_deriver->cancel(m_deriveRequested);
        return;
    }
    std::string key;
    QString why;
    const auto config = derivedConfig(&key, &why);
    if (!config) return;
    m_deriveRequested = key;
    m_deriver->derive(*config, true);
    inputsChanged();
}

bool MemoryPlannerPanel::deriving() const { return m_deriver->running(); }

void MemoryPlannerPanel::setStepDeriver(StepDeriver* deriver)
{
    if (m_deriver) m_deriver->disconnect(this);
    m_deriver = deriver;
    connect(m_deriver, &StepDeriver::changed, this, &MemoryPlannerPanel::inputsChanged);
    inputsChanged();
}

QString MemoryPlannerPanel::verdictText() const
{
    if (!m_estimate) return m_verdict->text();
    const auto budget = budgetBytes();
    const double use = static_cast<double>(m_estimate->peakBytes) / static_cast<double>(budget);
    // Short enough for one line; the target is named in the Target row and the tooltip.
    const QString amount = m_estimate->lowerBound ? tr("at least %1 of %2").arg(bytesText(m_estimate->peakBytes), bytesText(budget))
                                                  : tr("%1 of %2").arg(bytesText(m_estimate->peakBytes), bytesText(budget));
    const QString percent = QString::number(100.0 * use, 'f', 0) + "%";
    const auto verdict = memoryVerdict(m_estimate->peakBytes, budget, m_precisionError.toStdString());
    QString words = QString::fromUtf8(verdictWords(verdict));
    words[0] = words[0].toUpper();
    if (verdict == MemoryVerdict::DoesNotRun) return tr("%1: %2 %3").arg(words, m_precision->currentText(), m_precisionError);
    return tr("%1 (%2): %3").arg(words, percent, amount);
}

QString MemoryPlannerPanel::answersText() const
{
    QStringList lines;
    lines << (m_largestBatch > 0 ? tr("Largest batch at sequence %1: %2").arg(seqLen()).arg(m_largestBatch)
                                 : tr("At sequence %1 not even batch 1 fits.").arg(seqLen()));
    if (m_seqSlider->isEnabled()) {
        const bool capped = source() != "experiment" && m_largestSeq == m_seqSlider->maximum();
        lines << (m_largestSeq > 0 ? tr("Largest sequence at batch %1: %2%3")
                                         .arg(batch())
                                         .arg(m_largestSeq)
                                         .arg(capped ? tr(" (the model's context length)") : QString())
                                   : tr("At batch %1 not even sequence 1 fits.").arg(batch()));
    }
    const QString compared = quantizedComparison();
    if (!compared.isEmpty()) lines << compared;
    return lines.join("\n");
}

// The experiment's LoRA run with its frozen base stored the other way, beside
// the plan shown: NF4 (its own step's plan, derived on request) for an
// unquantized base, the unquantized plan for a quantized one.
QString MemoryPlannerPanel::quantizedComparison() const
{
    if (source() != "experiment" || m_loraRank->value() <= 0) return {};
    const auto config = m_document->config();
    if (!config || (config->model.type != "llama" && config->model.type != "hf")) return {};
    const bool quantized = config->model.quantize != "none";
    const std::string other = quantized ? "none" : "nf4";
    QString why;
    const auto plan = currentPlan(&why, &other);
    if (!plan) {
        if (quantized) return {}; // the unquantized LoRA step not derived (yet): nothing to compare with
        return m_largestBatch <= 0
            ? tr("With LoRA the frozen base can be stored in NF4 (QLoRA): Compare with NF4 plans it here; Quantized "
                 "base in the Experiment form chooses it.")
            : QString();
    }
    const auto e = plan->memory.at(plan->setup.batch, plan->setup.seqLen, plan->setup);
    const auto budget = budgetBytes();
    const QString share = QString::number(100.0 * static_cast<double>(e.peakBytes) / static_cast<double>(budget), 'f', 0) + "%";
    QString words = QString::fromUtf8(verdictWords(memoryVerdict(e.peakBytes, budget, m_precisionError.toStdString())));
    const QString amount = e.lowerBound ? tr("at least %1").arg(bytesText(e.peakBytes)) : bytesText(e.peakBytes);
    return quantized ? tr("Unquantized base (as LoRA): %1, %2 (%3).").arg(amount, words, share)
                     : tr("Base stored in NF4 (QLoRA): %1, %2 (%3).").arg(amount, words, share);
}

void MemoryPlannerPanel::updateCompareButton()
{
    const auto config = m_document->config();
    const std::string nf4 = "nf4";
    std::string key;
    QString why;
    const bool offered = source() == "experiment" && m_loraRank->value() > 0 && config && config->model.quantize == "none"
        && (config->model.type == "llama" || config->model.type == "hf") && derivedConfig(&key, &why, &nf4).has_value();
    const bool running = offered && m_deriver->running() && m_deriver->runningKey() == key;
    m_compareNf4->setVisible(offered && !m_deriver->plan(key));
    m_compareNf4->setEnabled(!running && m_deriver->queuedKey() != key);
    m_compareNf4->setText(running ? tr("Deriving the NF4 plan: %1…").arg(m_deriver->progress().isEmpty() ? tr("starting") : m_deriver->progress())
                                  : tr("Compare with &NF4"));
    if (offered && !m_deriver->error(key).isEmpty()) m_compareNf4->setToolTip(tr("The NF4 plan could not be derived: %1").arg(m_deriver->error(key)));
}

void MemoryPlannerPanel::compareWithNf4()
{
    const std::string nf4 = "nf4";
    std::string key;
    QString why;
    if (const auto config = derivedConfig(&key, &why, &nf4)) m_deriver->derive(*config, true);
}

} // namespace tb::ui
