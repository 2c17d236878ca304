// "Apply to experiment": the planned setup copied into the experiment's config,
// field by field, with what changed said in the status bar, and why the button
// is greyed out when it is.
#include "MemoryPlannerPanel.h"

#include "GpuTargetModel.h"
#include "PlainText.h"
#include "TuneDialog.h"

#include <QJsonArray>
#include <QCheckBox>
#include <QComboBox>
#include <QLabel>
#include <QPushButton>
#include <QSlider>
#include <QSpinBox>

#include <algorithm>
#include <cmath>

#include "ConfigDocument.h"
#include "ConfigEdits.h"
#include "config/RunConfig.h"
#include "diagnose/TargetPlan.h"

namespace tb::ui {

void MemoryPlannerPanel::updateApplyState()
{
    const bool experiment = source() == "experiment";
    const bool valid = m_document->config().has_value();
    m_apply->setEnabled(experiment && valid);
    const QString why = !experiment ? tr("The planned model is a published one, not the experiment's: the experiment "
                                          "trains its own model. Choose \"Current experiment\" as the model to apply a plan.")
                        : !valid    ? tr("The experiment's config is not valid yet; fix it in the Experiment tab first.")
                                    : QString();
    m_applyNote->setText(why);
    m_tuneButton->setEnabled(experiment && valid);
    m_tuneButton->setToolTip(why.isEmpty() ? tr("Find the fastest batch, accumulation, checkpointing, precision and "
                                                "attention of the experiment that fit (Ctrl+Shift+T)")
                                           : why);
    m_applyNote->setVisible(!why.isEmpty());
    m_apply->setToolTip(why.isEmpty() ? tr("Copy batch, sequence, precision, checkpointing, attention, LoRA, gradient "
                                           "accumulation and optimizer into the experiment's config (Ctrl+Shift+A)")
                                      : why);
}

QString MemoryPlannerPanel::applyNote() const { return m_applyNote->isHidden() ? QString() : m_applyNote->text(); }

QString MemoryPlannerPanel::applyToExperiment()
{
    auto config = m_document->config();
    if (source() != "experiment" || !config) return {};
    const QString precision = m_precision->currentData().toString();
    const QString optimizer = m_optimizer->currentData().toString();
    ConfigEdits edits;
    const auto set = [&edits](const QString& path, const QString& label, const QJsonValue& value, const QString& was,
                              const QString& now) { edits.set(path, label, value, was, now); };
    auto& values = edits.values;
    const auto& changes = edits.changes;
    set("train.batch_size", tr("batch"), batch(), QString::number(config->train.batchSize), QString::number(batch()));
    if (config->data.source == "text") {
        set("data.seq_len", tr("sequence"), seqLen(), QString::number(effectiveSeqLen(*config)), QString::number(seqLen()));
    }
    // "auto" stays when it already resolves to the planned precision on the target.
    const std::string resolved = planOnTarget(*config, std::optional<GpuTarget>(target())).setup.precision;
    if (resolved != precision.toStdString()) {
        set("train.precision", tr("precision"), precision, QString::fromStdString(config->train.precision), precision);
    }
    set("train.activation_checkpointing", tr("checkpointing"), m_checkpointing->isChecked(),
        config->train.activationCheckpointing ? tr("on") : tr("off"), m_checkpointing->isChecked() ? tr("on") : tr("off"));
    const QString attention = m_attention->currentData().toString() == "fused" ? "sdpa" : "eager";
    set("model.attention", tr("attention"), attention, QString::fromStdString(config->model.attention), attention);
    set("train.grad_accum", tr("gradient accumulation"), m_gradAccum->value(), QString::number(config->train.gradAccum),
        QString::number(m_gradAccum->value()));
    const QString wasOptimizer = QString::fromStdString(config->optim.optimizer == "sgd" && config->optim.momentum == 0.0
                                                            ? std::string("sgd-plain")
                                                            : config->optim.optimizer);
    if (optimizer != wasOptimizer) {
        set("optim.optimizer", tr("optimizer"), optimizer == "adamw" ? "adamw" : "sgd", wasOptimizer, optimizer);
        if (optimizer == "sgd-plain") values.emplace_back("optim.momentum", 0.0);
        else if (optimizer == "sgd" && config->optim.momentum == 0.0) values.emplace_back("optim.momentum", 0.9);
    }
    set("lora.rank", tr("LoRA rank"), m_loraRank->value(), QString::number(config->lora.rank),
        QString::number(m_loraRank->value()));
    if (m_loraRank->value() > 0) {
        QString targets = m_loraTargets->currentData().toString();
        if (targets == "custom") targets = m_loraTargets->currentData(Qt::UserRole + 1).toString();
        QStringList was;
        for (const auto& t : config->lora.targets) was << QString::fromStdString(t);
        QJsonArray list;
        for (const QString& t : targets.split(',', Qt::SkipEmptyParts)) list.append(t);
        set("lora.targets", tr("LoRA targets"), list, was.join(','), targets);
    }
    QString message;
    if (values.empty()) {
        message = tr("The experiment already has this plan; nothing changed.");
    } else {
        m_document->setValues(values); // one change: the planner reloads from it once
        message = tr("Applied to the experiment: %1.").arg(changes.join(", "));
    }
    Q_EMIT applied(message);
    return message;
}

} // namespace tb::ui

namespace tb::ui {

TuneDialog* MemoryPlannerPanel::openTuneDialog()
{
    if (!m_tuneDialog) {
        m_tuneDialog = new TuneDialog(m_document, target(), this);
        m_tuneDialog->setAttribute(Qt::WA_DeleteOnClose);
        connect(m_tuneDialog, &TuneDialog::applied, this, &MemoryPlannerPanel::applied);
    }
    m_tuneDialog->show();
    m_tuneDialog->raise();
    m_tuneDialog->activateWindow();
    return m_tuneDialog;
}

} // namespace tb::ui
