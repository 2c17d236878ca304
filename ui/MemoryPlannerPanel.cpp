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
    if (!m_deriveProcess) return;
    // Its signals must not reach a panel being destroyed.
    m_deriveProcess->disconnect(this);
    m_deriveProcess->kill();
    m_deriveProcess->waitForFinished(3000);
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
    try {
        m_imported = loadHfConfigFile(path.toStdString());
    } catch (const std::exception& e) {
        if (error) *error = QString::fromStdString(e.what());
        return false;
    }
    const QString label = tr("Imported: %1 (%2)")
                              .arg(QFileInfo(path).dir().dirName() + "/" + QFileInfo(path).fileName(),
                                   tr("%1 M parameters").arg(static_cast<double>(parameterCount(*m_imported)) / 1e6, 0, 'f', 0));
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
void MemoryPlannerPanel::setSeqLen(int seqLen) { m_seqBox->setValue(seqLen); }
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

std::optional<MemoryPlannerPanel::Plan> MemoryPlannerPanel::currentPlan(QString* why) const
{
    Plan plan;
    const QString src = source();
    std::vector<std::string> targets;
    QString targetText = m_loraTargets->currentData().toString();
    if (targetText == "custom") targetText = m_loraTargets->currentData(Qt::UserRole + 1).toString();
    for (const QString& t : targetText.split(',', Qt::SkipEmptyParts)) targets.push_back(t.toStdString());
    if (src == "experiment") {
        auto config = m_document->config();
        if (!config) {
            const auto& issues = m_document->issues();
            *why = m_document->jsonIsObject() && !issues.empty()
                ? tr("The experiment's config is not valid yet: %1").arg(QString::fromStdString(issues.front().text()))
                : tr("The experiment's config is not valid JSON yet.");
            return std::nullopt;
        }
        if (plannedFromItsStep(*config)) {
            // A TorchScript model, or a folder the hand replay does not model:
            // its plan is the step derived from the model itself.
            std::string key;
            QString cannot;
            const auto traced = derivedConfig(&key, &cannot);
            if (!traced) {
                *why = cannot;
                return std::nullopt;
            }
            if (!m_derived || m_derivedKey != key) {
                *why = m_deriveProcess ? tr("Tracing the model's training step on this computer's CPU: %1…")
                                             .arg(m_deriveProgress.isEmpty() ? tr("starting") : m_deriveProgress)
                     : !m_deriveError.isEmpty() && m_deriveErrorKey == key
                         ? tr("The plan could not be derived: %1").arg(m_deriveError)
                         : plannableModel(*config) && config->model.quantize != "none"
                         ? tr("A quantized base (%1, QLoRA) is planned from its own training step: Derive plan records "
                              "the step on this CPU (seconds) and plans from it.")
                               .arg(QString::fromStdString(config->model.quantize))
                         : plannableModel(*config)
                         ? tr("This folder's model is planned from its own training step (its head size is not hidden / "
                              "heads): Derive plan records the step on this CPU (seconds) and plans from it.")
                         : tr("A TorchScript model: Derive plan traces its training step on this CPU (seconds) "
                              "and plans from it.");
                return std::nullopt;
            }
            plan.derived = &*m_derived;
            plan.setup = planOnTarget(*traced, std::optional<GpuTarget>(target())).setup;
            plan.setup.batch = batch();
            plan.setup.seqLen = seqLen();
            return plan;
        }
        if (config->data.source == "text") config->data.seqLen = seqLen();
        const TargetPlan resolved = planOnTarget(*config, std::optional<GpuTarget>(target()));
        plan.arch = resolved.arch;
        plan.setup = resolved.setup;
        plan.setup.loraTargets = plannedLoraTargets(config->model.type, targets);
    } else {
        if (src == "imported") {
            if (!m_imported) return std::nullopt;
            plan.arch = *m_imported;
        } else {
            plan.arch = findArchitecture(src.toStdString()).arch;
        }
        plan.setup.loraTargets = loraProjections(plan.arch.family, targets);
    }
    auto& s = plan.setup;
    s.batch = batch();
    s.seqLen = seqLen();
    s.precision = m_precision->currentData().toString().toStdString();
    s.optimizer = m_optimizer->currentData().toString().toStdString();
    s.checkpointing = m_checkpointing->isChecked();
    s.attention = m_attention->currentData().toString().toStdString();
    s.loraRank = m_loraRank->value();
    if (s.loraRank == 0) s.loraTargets.clear();
    s.gradAccum = m_gradAccum->value();
    // Published models are fine-tuned with the frozen base loaded in half precision.
    s.halfBase = src != "experiment" && s.loraRank > 0 && s.precision != "fp32";
    s.gpu = true;
    s.gpus = target().count;
    if (target().gpu.cc.known()) s.computeCapability = target().gpu.cc.major * 10 + target().gpu.cc.minor;
    return plan;
}

void MemoryPlannerPanel::inputsChanged()
{
    if (m_updating) return;
    QElapsedTimer timer;
    timer.start();
    updateApplyState();
    updateDeriveButton();
    QString why;
    const auto plan = currentPlan(&why);
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
    m_estimate = planAt(*plan, plan->setup.batch, plan->setup.seqLen);
    // Preflight's precision verdict for this card, shown before the memory's.
    m_precisionError = QString::fromStdString(precisionError(
        plan->setup.precision, target().gpu.cc.known() ? std::optional<ComputeCapability>(target().gpu.cc) : std::nullopt));
    const auto budget = budgetBytes();
    m_largestBatch = largestBatchOf(*plan, plan->setup.seqLen, kBatchLimit);
    if (m_seqSlider->isEnabled()) {
        m_largestSeq = largestSeqOf(*plan, plan->setup.batch);
        if (source() != "experiment") m_largestSeq = std::min<std::int64_t>(m_largestSeq, plan->arch.maxPositions);
    } else {
        m_largestSeq = 0;
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

MemoryEstimate MemoryPlannerPanel::planAt(const Plan& plan, std::int64_t batch, std::int64_t seqLen) const
{
    auto setup = plan.setup;
    setup.batch = batch;
    setup.seqLen = seqLen;
    return plan.derived ? plan.derived->at(batch, seqLen, setup) : estimateMemory(plan.arch, setup);
}

std::int64_t MemoryPlannerPanel::largestBatchOf(const Plan& plan, std::int64_t seqLen, std::int64_t limit) const
{
    auto setup = plan.setup;
    setup.seqLen = seqLen;
    if (!plan.derived) return largestBatch(plan.arch, setup, budgetBytes(), limit);
    return plan.derived->largestBatch(seqLen, setup, budgetBytes(), limit);
}

std::int64_t MemoryPlannerPanel::largestSeqOf(const Plan& plan, std::int64_t batch) const
{
    auto setup = plan.setup;
    setup.batch = batch;
    if (!plan.derived) return largestSequence(plan.arch, setup, budgetBytes());
    return plan.derived->largestSeqLen(batch, setup, budgetBytes());
}

std::optional<RunConfig> MemoryPlannerPanel::derivedConfig(std::string* key, QString* why) const
{
    auto config = m_document->config();
    if (!config) return std::nullopt;
    const QString precision = m_precision->currentData().toString();
    const QString optimizer = m_optimizer->currentData().toString();
    if (optimizer == "adamw8bit") {
        *why = tr("8-bit AdamW is a planning option the trainer does not run, so this model's step cannot be "
                  "traced with it: choose AdamW or SGD.");
        return std::nullopt;
    }
    const bool halfWeights = config->train.weightsDtype != "fp32", offload = config->train.offload != "none";
    if (halfWeights || offload) {
        const QString weightsField = tr("train.weights_dtype \"%1\"").arg(QString::fromStdString(config->train.weightsDtype));
        const QString offloadField = tr("train.offload \"%1\"").arg(QString::fromStdString(config->train.offload));
        const QString fields = halfWeights && offload ? tr("%1 and %2").arg(weightsField, offloadField)
                               : halfWeights          ? weightsField
                                                      : offloadField;
        const QString fixes = halfWeights && offload ? tr("train.weights_dtype to \"fp32\" and train.offload to \"none\"")
                              : halfWeights          ? tr("train.weights_dtype to \"fp32\"")
                                                     : tr("train.offload to \"none\"");
        *why = tr("This model's plan is derived from its own training step, which Trainbench runs with the "
                  "weights in fp32 on the device; %1 is a setup it only plans. Set %2 to derive it.")
                   .arg(fields, fixes);
        return std::nullopt;
    }
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
    // The traced steps run from a temporary file: paths made absolute.
    c.model.path = resolvedModelPath(c);
    c.data.path = resolvedDataPath(c);
    const QString init = QString::fromStdString(c.train.initFrom);
    const bool runReference = init.startsWith("run:") || (!init.isEmpty() && init.toLongLong() > 0);
    if (!init.isEmpty() && !runReference && QFileInfo(init).isRelative() && !c.baseDir.empty()) {
        c.train.initFrom = QDir(QString::fromStdString(c.baseDir)).absoluteFilePath(init).toStdString();
    }
    // The key: what the traced step depends on. Batch and sequence are the
    // plan's inputs, not the step's; the name, the learning-rate schedule,
    // the seed and how long and how often a run trains or reports do not
    // change what a step allocates (DerivedPlan.cpp sets its own steps,
    // evaluation and threads, and traces one rank of a data-parallel run). The model file's size and modification time
    // are in it: a TorchScript file saved again is another model.
    auto keyed = c;
    keyed.name.clear();
    keyed.train.batchSize = 1;
    keyed.data.seqLen = 0;
    keyed.optim.lr = 0;
    keyed.optim.warmupSteps = 0;
    keyed.optim.schedule.clear();
    keyed.optim.minLrRatio = 0;
    keyed.train.steps = 0;
    keyed.train.seed = 0;
    keyed.train.evalEvery = 0;
    keyed.train.logEvery = 0;
    keyed.train.checkpointEvery = 0;
    keyed.train.keepCheckpoints = 0;
    keyed.train.threads = 0;
    keyed.train.worldSize = 1; // one rank's step is traced; the plan adds the others' share
    keyed.train.distTimeoutS = 0;
    // The model file, or a folder's config.json (edited in place, the
    // folder's own time does not move).
    QFileInfo file(QString::fromStdString(c.model.path));
    if (file.isDir()) file = QFileInfo(QDir(file.filePath()).filePath("config.json"));
    *key = configToJson(keyed) + "\n" + std::to_string(file.size()) + " "
        + std::to_string(file.lastModified().toMSecsSinceEpoch());
    return config;
}

void MemoryPlannerPanel::updateDeriveButton()
{
    const auto config = m_document->config();
    const bool scripted = source() == "experiment" && config && plannedFromItsStep(*config);
    // While it runs it stays, to be cancelled, whatever is planned meanwhile.
    m_derive->setVisible(scripted || m_deriveProcess);
    if (m_deriveProcess) {
        m_derive->setText(tr("Cancel &deriving"));
        m_derive->setEnabled(true);
        return;
    }
    if (!scripted) return;
    std::string key;
    QString why;
    const bool traceable = derivedConfig(&key, &why).has_value();
    m_derive->setText(m_derived && key == m_derivedKey ? tr("&Derive plan again") : tr("&Derive plan from the model"));
    m_derive->setEnabled(traceable);
}

void MemoryPlannerPanel::deriveOrCancel()
{
    if (m_deriveProcess) {
        m_deriveCancelled = true;
        m_deriveProcess->kill(); // finished() tidies up
        return;
    }
    std::string key;
    QString why;
    const auto config = derivedConfig(&key, &why);
    if (!config) return;
    m_deriveError.clear();
    m_deriveErrorKey = key;
    m_deriveProgress.clear();
    m_deriveCancelled = false;
    m_deriveConfig = new QTemporaryFile(QDir::tempPath() + "/trainbench-derive-XXXXXX.json", this);
    if (!m_deriveConfig->open() || m_deriveConfig->write(QByteArray::fromStdString(configToJson(*config))) < 0) {
        m_deriveError = tr("cannot write a temporary config in %1: %2").arg(QDir::tempPath(), m_deriveConfig->errorString());
        delete m_deriveConfig;
        m_deriveConfig = nullptr;
        inputsChanged();
        return;
    }
    m_deriveConfig->flush();
    m_derivingKey = key;
    m_deriveProcess = new QProcess(this);
    m_deriveProcess->setProgram(cliProgram());
    m_deriveProcess->setArguments({"estimate", "--derived", "--json", "--config", m_deriveConfig->fileName()});
    m_deriveProcess->setStandardInputFile(QProcess::nullDevice());
    const auto tidy = [this] {
        m_deriveProcess->deleteLater();
        m_deriveProcess = nullptr;
        m_deriveConfig->deleteLater();
        m_deriveConfig = nullptr;
        inputsChanged();
    };
    connect(m_deriveProcess, &QProcess::readyReadStandardError, this, [this] {
        // "traced step N (batch B, sequence T)" per step; an error comes last.
        const auto lines = QString::fromUtf8(m_deriveProcess->readAllStandardError()).split('\n', Qt::SkipEmptyParts);
        for (const auto& line : lines) {
            if (line.startsWith("traced step")) m_deriveProgress = line;
            else if (line.contains("error: ")) m_deriveError = line.section("error: ", -1).trimmed();
        }
        inputsChanged();
    });
    connect(m_deriveProcess, &QProcess::finished, this, [this, tidy](int code, QProcess::ExitStatus status) {
        const QByteArray out = m_deriveProcess->readAllStandardOutput();
        if (status != QProcess::NormalExit) {
            m_deriveError = m_deriveCancelled ? tr("cancelled; press Derive plan to trace it again.")
                                              : tr("trainbench-cli stopped unexpectedly (%1)").arg(m_deriveProcess->errorString());
        } else if (code == 0) {
            try {
                const auto step = QJsonDocument::fromJson(out).object().value("derived_step").toObject();
                m_derived = derivedStepFromJson(QJsonDocument(step).toJson(QJsonDocument::Compact).toStdString());
                m_derivedKey = m_derivingKey;
                m_deriveError.clear();
            } catch (const std::exception& e) {
                m_deriveError = QString::fromStdString(e.what());
            }
        } else if (m_deriveError.isEmpty()) {
            m_deriveError = tr("trainbench-cli stopped with exit code %1").arg(code);
        }
        tidy();
    });
    connect(m_deriveProcess, &QProcess::errorOccurred, this, [this, tidy](QProcess::ProcessError error) {
        if (error != QProcess::FailedToStart) return;
        m_deriveError = tr("cannot start %1: %2 (set TRAINBENCH_CLI to its path)")
                            .arg(m_deriveProcess->program(), m_deriveProcess->errorString());
        tidy();
    });
    m_deriveProcess->start();
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
    // Nothing fits a LoRA run of the experiment's own model: its frozen base
    // may be stored in 4 bits (its plan is then derived from its own step).
    if (m_largestBatch <= 0 && source() == "experiment" && m_loraRank->value() > 0) {
        const auto config = m_document->config();
        if (config && config->model.quantize == "none" && (config->model.type == "llama" || config->model.type == "hf")) {
            lines << tr("With LoRA the frozen base can be stored in NF4 (QLoRA): Quantized base in the Experiment form, "
                        "then Derive plan.");
        }
    }
    return lines.join("\n");
}

} // namespace tb::ui
