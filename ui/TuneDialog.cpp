#include "TuneDialog.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDialogButtonBox>
#include <QDir>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QJsonArray>
#include <QJsonDocument>
#include <QLabel>
#include <QProcess>
#include <QPushButton>
#include <QShortcut>
#include <QSpinBox>
#include <QTableWidget>
#include <QTemporaryFile>
#include <QVBoxLayout>

#include "CliProgram.h"
#include "ConfigDocument.h"
#include "ConfigEdits.h"
#include "Units.h"
#include "config/RunConfig.h"
#include "diagnose/TargetPlan.h"

namespace tb::ui {
namespace {

enum Column { Configuration, Planned, Share, Verdict, Predicted, Measured, Columns };

QString describe(const QJsonObject& c)
{
    QString text = QObject::tr("batch %1").arg(c["batch_size"].toInt());
    if (c["grad_accum"].toInt() > 1) text += QObject::tr(" × accumulation %1").arg(c["grad_accum"].toInt());
    if (c["activation_checkpointing"].toBool()) text += QObject::tr(", checkpointing");
    return text + ", " + c["precision"].toString() + ", " + c["attention"].toString();
}

QString perSecond(double value) { return value > 0 ? QString::number(value, 'f', 0) : QStringLiteral("–"); }

} // namespace

TuneDialog::TuneDialog(ConfigDocument* document, const GpuTarget& card, QWidget* parent)
    : QDialog(parent), m_document(document), m_card(card)
{
    setWindowTitle(tr("Tune the experiment"));
    setObjectName("tuneDialog");
    auto* layout = new QVBoxLayout(this);
    auto* intro = new QLabel(tr("Finds the fastest batch, gradient accumulation, checkpointing, precision and attention "
                                "that fit: every candidate is planned, what does not fit or does not run is left out, "
                                "the rest are ranked by predicted speed, and on this computer the best few are trained "
                                "for a few steps to measure it."),
                             this);
    intro->setWordWrap(true);
    layout->addWidget(intro);

    auto* form = new QFormLayout;
    m_target = new QComboBox(this);
    m_target->setObjectName("tuneTarget");
    m_target->addItem(tr("%1 (the planner's target; planned, not measured)").arg(QString::fromStdString(card.label())), "card");
    m_target->addItem(tr("This computer (measured)"), "local");
    m_target->setToolTip(tr("A card from the catalogue is planned and ranked; this computer is planned, ranked and "
                            "its best candidates measured"));
    form->addRow(tr("&Target"), m_target);
    m_budget = new QDoubleSpinBox(this);
    m_budget->setObjectName("tuneBudget");
    m_budget->setRange(0.01, 4096);
    m_budget->setDecimals(2);
    m_budget->setValue(4.0);
    m_budget->setSuffix(tr(" GiB"));
    m_budget->setToolTip(tr("The memory a training step may use on this computer (default 4 GiB)"));
    form->addRow(tr("&Budget"), m_budget);
    m_keepEffective = new QCheckBox(tr("&Keep the effective batch (batch × accumulation)"), this);
    m_keepEffective->setObjectName("tuneKeepEffective");
    m_keepEffective->setToolTip(tr("Off (default): the micro-batch varies and the accumulation stays, which changes "
                                   "what the run learns per step. On: batch × accumulation stays as the experiment has it."));
    form->addRow(QString(), m_keepEffective);
    auto* measureRow = new QHBoxLayout;
    m_steps = new QSpinBox(this);
    m_steps->setObjectName("tuneMeasureSteps");
    m_steps->setRange(0, 1000);
    m_steps->setValue(5);
    m_steps->setToolTip(tr("Steps each measured candidate trains after one untimed step (default 5; 0: plan only)"));
    m_top = new QSpinBox(this);
    m_top->setObjectName("tuneMeasureTop");
    m_top->setRange(1, 50);
    m_top->setValue(3);
    m_top->setToolTip(tr("How many of the best predicted candidates are measured (default 3)"));
    measureRow->addWidget(m_steps);
    measureRow->addWidget(new QLabel(tr("steps, the best"), this));
    measureRow->addWidget(m_top);
    measureRow->addWidget(new QLabel(tr("candidates"), this));
    measureRow->addStretch();
    auto* measureLabel = new QLabel(tr("&Measure"), this);
    measureLabel->setBuddy(m_steps);
    form->addRow(measureLabel, measureRow);
    layout->addLayout(form);

    m_status = new QLabel(this);
    m_status->setObjectName("tuneStatus");
    m_status->setWordWrap(true);
    m_status->setTextInteractionFlags(Qt::TextSelectableByMouse);
    layout->addWidget(m_status);

    m_table = new QTableWidget(0, Columns, this);
    m_table->setObjectName("tuneTable");
    m_table->setHorizontalHeaderLabels({tr("Configuration"), tr("Planned peak"), tr("Budget"), tr("Verdict"),
                                        tr("Predicted tokens/s"), tr("Measured tokens/s")});
    m_table->setEditTriggers(QAbstractItemView::NoEditTriggers);
    m_table->setSelectionBehavior(QAbstractItemView::SelectRows);
    m_table->verticalHeader()->hide();
    m_table->horizontalHeader()->setSectionResizeMode(Configuration, QHeaderView::Stretch);
    for (int c = Planned; c < Columns; ++c) m_table->horizontalHeader()->setSectionResizeMode(c, QHeaderView::ResizeToContents);
    layout->addWidget(m_table, 1);

    m_result = new QLabel(this);
    m_result->setObjectName("tuneResult");
    m_result->setWordWrap(true);
    m_result->setTextInteractionFlags(Qt::TextSelectableByMouse);
    layout->addWidget(m_result);

    auto* buttons = new QDialogButtonBox(this);
    m_tune = buttons->addButton(tr("&Tune"), QDialogButtonBox::ActionRole);
    m_tune->setObjectName("tuneStart");
    m_tune->setToolTip(tr("Plan, rank and measure (Ctrl+Return); while it runs, Stop ends it"));
    m_apply = buttons->addButton(tr("&Apply winner"), QDialogButtonBox::ApplyRole);
    m_apply->setObjectName("tuneApply");
    m_apply->setEnabled(false);
    m_apply->setToolTip(tr("Write the winning configuration into the experiment"));
    buttons->addButton(QDialogButtonBox::Close);
    layout->addWidget(buttons);
    connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
    connect(m_tune, &QPushButton::clicked, this, &TuneDialog::startOrStop);
    connect(m_apply, &QPushButton::clicked, this, [this] { applyWinner(); });
    auto* shortcut = new QShortcut(QKeySequence(Qt::CTRL | Qt::Key_Return), this);
    connect(shortcut, &QShortcut::activated, this, &TuneDialog::startOrStop);
    connect(m_target, &QComboBox::currentIndexChanged, this, &TuneDialog::targetChanged);
    targetChanged();
    setStatus(tr("Press Tune to search."));
    resize(860, 560);
}

TuneDialog::~TuneDialog()
{
    if (m_process) {
        m_process->disconnect(this);
        m_process->kill();
        m_process->waitForFinished(3000);
    }
}

void TuneDialog::setCard(const GpuTarget& card)
{
    m_card = card;
    m_target->setItemText(0, tr("%1 (the planner's target; planned, not measured)").arg(QString::fromStdString(card.label())));
}

void TuneDialog::targetChanged()
{
    const bool local = m_target->currentData().toString() == "local";
    m_budget->setEnabled(local);
    m_steps->setEnabled(local);
    m_top->setEnabled(local);
}

QStringList TuneDialog::tuneArguments() const
{
    QStringList args{"--json"};
    if (m_target->currentData().toString() == "card") {
        args << "--gpu" << (m_card.count > 1 ? QString::number(m_card.count) + "x" : QString()) + QString::fromStdString(m_card.gpu.id);
    } else {
        const auto bytes = static_cast<qint64>(m_budget->value() * 1024.0 * 1024.0 * 1024.0);
        args << "--budget" << QString::number(bytes) << "--measure-steps" << QString::number(m_steps->value())
             << "--measure-top" << QString::number(m_top->value());
    }
    if (m_keepEffective->isChecked()) args << "--keep-effective-batch";
    return args;
}

void TuneDialog::setStatus(const QString& text, bool error)
{
    m_status->setText(text);
    m_status->setStyleSheet(error ? "color: #c0392b" : QString());
}

QString TuneDialog::statusText() const { return m_status->text(); }
QString TuneDialog::resultText() const { return m_result->text(); }

void TuneDialog::startOrStop()
{
    if (m_process) {
        m_stopped = true;
        m_process->kill(); // finished() tidies up
        return;
    }
    auto config = m_document->config();
    if (!config) {
        setStatus(tr("The experiment's config is not valid yet; fix it in the Experiment tab, then tune."), true);
        return;
    }
    // The temporary copy lives elsewhere: its relative paths made absolute.
    if (!config->data.path.empty()) config->data.path = resolvedDataPath(*config);
    if (!config->model.path.empty()) config->model.path = resolvedModelPath(*config);
    m_config = new QTemporaryFile(QDir::tempPath() + "/trainbench-tune-XXXXXX.json", this);
    if (!m_config->open() || m_config->write(QByteArray::fromStdString(configToJson(*config))) < 0) {
        setStatus(tr("Cannot write a temporary config in %1: %2").arg(QDir::tempPath(), m_config->errorString()), true);
        delete m_config;
        m_config = nullptr;
        return;
    }
    m_config->flush();
    m_error.clear();
    m_stopped = false;
    m_winner = {};
    m_apply->setEnabled(false);
    m_table->setRowCount(0);
    m_result->clear();
    m_process = new QProcess(this);
    m_process->setProgram(cliProgram());
    m_process->setArguments(QStringList{"tune", "--config", m_config->fileName()} + tuneArguments());
    m_process->setStandardInputFile(QProcess::nullDevice());
    const auto tidy = [this] {
        m_process->deleteLater();
        m_process = nullptr;
        m_config->deleteLater();
        m_config = nullptr;
        m_tune->setText(tr("&Tune"));
        Q_EMIT finished();
    };
    connect(m_process, &QProcess::readyReadStandardError, this, [this] {
        const auto lines = QString::fromUtf8(m_process->readAllStandardError()).split('\n', Qt::SkipEmptyParts);
        for (const auto& line : lines) {
            if (line.startsWith("measuring ")) setStatus(tr("Measuring %1…").arg(line.mid(10)));
            else if (line.contains("error: ")) m_error = line.section("error: ", -1).trimmed();
        }
    });
    connect(m_process, &QProcess::finished, this, [this, tidy](int code, QProcess::ExitStatus status) {
        const QByteArray out = m_process->readAllStandardOutput();
        if (status != QProcess::NormalExit) {
            setStatus(m_stopped ? tr("Stopped; nothing was applied. Press Tune to search again.")
                                : tr("trainbench-cli stopped unexpectedly (%1).").arg(m_process->errorString()),
                      !m_stopped);
        } else if (code == 0 || code == 1) {
            const auto json = QJsonDocument::fromJson(out);
            if (json.isObject()) showResult(json.object());
            else setStatus(m_error.isEmpty() ? tr("tune printed no result (exit code %1).").arg(code) : m_error, true);
        } else {
            setStatus(m_error.isEmpty() ? tr("trainbench-cli stopped with exit code %1.").arg(code) : m_error, true);
        }
        tidy();
    });
    connect(m_process, &QProcess::errorOccurred, this, [this, tidy](QProcess::ProcessError error) {
        if (error != QProcess::FailedToStart) return;
        setStatus(tr("Cannot start %1: %2 (set TRAINBENCH_CLI to its path).").arg(m_process->program(), m_process->errorString()),
                  true);
        tidy();
    });
    m_tune->setText(tr("&Stop"));
    setStatus(m_target->currentData().toString() == "local" && m_steps->value() > 0
                  ? tr("Planning every candidate, then measuring the best %1…").arg(m_top->value())
                  : tr("Planning every candidate…"));
    m_process->start();
}

void TuneDialog::showResult(const QJsonObject& result)
{
    const auto candidates = result["candidates"].toArray();
    const int winner = result["winner"].toInt(-1);
    const double budget = result["budget_bytes"].toDouble();
    int rejected = 0, measured = 0;
    for (int i = 0; i < candidates.size(); ++i) {
        const auto c = candidates[i].toObject();
        if (c.contains("rejected")) {
            ++rejected;
            continue;
        }
        const int row = m_table->rowCount();
        m_table->insertRow(row);
        const bool won = i == winner;
        const auto cell = [&](int column, const QString& text, Qt::Alignment align = Qt::AlignRight | Qt::AlignVCenter) {
            auto* item = new QTableWidgetItem(text);
            item->setTextAlignment(align);
            if (won) {
                QFont font = item->font();
                font.setBold(true);
                item->setFont(font);
                item->setBackground(QColor(0xd5, 0xf5, 0xe3));
                item->setForeground(QColor(0x14, 0x5a, 0x32));
            }
            m_table->setItem(row, column, item);
        };
        cell(Configuration, (won ? QStringLiteral("★ ") : QString()) + describe(c), Qt::AlignLeft | Qt::AlignVCenter);
        cell(Planned, bytesText(static_cast<std::int64_t>(c["planned_peak_bytes"].toDouble())));
        cell(Share, QString::number(100.0 * c["budget_share"].toDouble(), 'f', 0) + "%");
        cell(Verdict, c["verdict"].toString() == "tight" ? tr("tight") : tr("fits"), Qt::AlignLeft | Qt::AlignVCenter);
        cell(Predicted, perSecond(c["predicted_tokens_per_second"].toDouble()));
        QString measuredText = perSecond(c["measured_tokens_per_second"].toDouble(-1));
        if (c.contains("measure_error")) measuredText = tr("failed");
        cell(Measured, measuredText);
        if (c.contains("measure_error")) m_table->item(row, Measured)->setToolTip(c["measure_error"].toString());
        if (c.contains("measured_tokens_per_second")) ++measured;
    }
    const QString target = result["target"].toString();
    QString status = tr("%1 candidates planned for %2 (budget %3): %4 fit")
                         .arg(candidates.size())
                         .arg(target, bytesText(static_cast<std::int64_t>(budget)))
                         .arg(candidates.size() - rejected);
    if (rejected > 0) status += tr(", %1 do not fit or do not run").arg(rejected);
    if (measured > 0) status += tr("; %1 measured").arg(measured);
    setStatus(status + ".");
    QStringList lines;
    if (winner < 0) {
        lines << tr("<b>Nothing fits.</b> The smallest changes that would:");
        for (const auto& s : result["nothing_fits"].toArray()) lines << "• " + s.toString().toHtmlEscaped();
        m_result->setText(lines.join("<br>"));
        return;
    }
    m_winner = candidates[winner].toObject();
    const bool wasMeasured = m_winner.contains("measured_tokens_per_second");
    lines << tr("<b>Winner: %1</b> (%2).")
                 .arg(describe(m_winner).toHtmlEscaped(), wasMeasured ? tr("the fastest measured") : tr("the fastest predicted"));
    const auto changes = result["changes"].toArray();
    if (changes.isEmpty()) {
        lines << tr("It is the experiment as it stands.");
    } else {
        QStringList list;
        for (const auto& c : changes) list << c.toString().toHtmlEscaped();
        lines << tr("Changes: %1.").arg(list.join("; "));
    }
    if (!result["effective_batch_note"].toString().isEmpty()) {
        lines << tr("Note: %1.").arg(result["effective_batch_note"].toString().toHtmlEscaped());
    }
    for (const auto& n : result["notes"].toArray()) lines << tr("Note: %1.").arg(n.toString().toHtmlEscaped());
    m_result->setText(lines.join("<br>"));
    m_apply->setEnabled(!changes.isEmpty());
}

QString TuneDialog::applyWinner()
{
    auto config = m_document->config();
    if (m_winner.isEmpty() || !config) return {};
    ConfigEdits edits;
    const auto set = [&edits](const QString& path, const QString& label, const QJsonValue& value, const QString& was,
                              const QString& now) { edits.set(path, label, value, was, now); };
    auto& values = edits.values;
    const auto& changes = edits.changes;
    const int batch = m_winner["batch_size"].toInt(), accum = m_winner["grad_accum"].toInt();
    const bool checkpointing = m_winner["activation_checkpointing"].toBool();
    const QString precision = m_winner["precision"].toString(), attention = m_winner["attention"].toString();
    const bool card = m_target->currentData().toString() == "card";
    set("train.batch_size", tr("batch"), batch, QString::number(config->train.batchSize), QString::number(batch));
    set("train.grad_accum", tr("gradient accumulation"), accum, QString::number(config->train.gradAccum),
        QString::number(accum));
    set("train.activation_checkpointing", tr("checkpointing"), checkpointing,
        config->train.activationCheckpointing ? tr("on") : tr("off"), checkpointing ? tr("on") : tr("off"));
    // "auto" stays when it already resolves to the winner's precision on the target.
    const auto resolved = card ? planOnTarget(*config, std::optional<GpuTarget>(m_card)).setup.precision
                               : planOnTarget(*config, std::optional<GpuTarget>()).setup.precision;
    if (resolved != precision.toStdString()) {
        set("train.precision", tr("precision"), precision, QString::fromStdString(config->train.precision), precision);
    }
    set("model.attention", tr("attention"), attention, QString::fromStdString(config->model.attention), attention);
    if (card && config->device == "cpu") set("device", tr("device"), "cuda", "cpu", "cuda");
    QString message;
    if (values.empty()) {
        message = tr("The experiment already has the tuned configuration; nothing changed.");
    } else {
        m_document->setValues(values);
        message = tr("Applied the tuned configuration to the experiment: %1.").arg(changes.join(", "));
    }
    m_apply->setEnabled(false);
    setStatus(message);
    Q_EMIT applied(message);
    return message;
}

} // namespace tb::ui
