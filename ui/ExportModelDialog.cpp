#include "ExportModelDialog.h"

#include <QButtonGroup>
#include <QDesktopServices>
#include <QDir>
#include <QFileInfo>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLineEdit>
#include <QProcess>
#include <QProgressBar>
#include <QPushButton>
#include <QRadioButton>
#include <QUrl>
#include <QVBoxLayout>

#include "CliProgram.h"
#include "FileDialogs.h"
#include "PlainText.h"
#include "config/RunConfig.h"
#include "train/ModelTools.h"

namespace tb::ui {

namespace {

QString folderSuffix(ExportModelDialog::Kind kind, const std::string& quantize)
{
    switch (kind) {
    case ExportModelDialog::Kind::Adapter: return "adapter";
    case ExportModelDialog::Kind::Merged: return "merged";
    case ExportModelDialog::Kind::Quantized: return QString::fromStdString("bnb-" + quantize);
    case ExportModelDialog::Kind::Weights: return "model";
    case ExportModelDialog::Kind::Bundle: return "bundle.json";
    }
    return "model";
}

QString slug(const QString& name)
{
    QString out;
    for (const QChar c : name) out += c.isLetterOrNumber() || c == '-' || c == '_' || c == '.' ? c : QChar('-');
    while (out.contains("--")) out.replace("--", "-");
    return out.left(48);
}

} // namespace

ExportModelDialog::ExportModelDialog(const QString& dbPath, std::int64_t runId, const QString& runName,
                                     const QString& configJson, const QString& defaultFolder, QWidget* parent)
    : QDialog(parent), m_dbPath(dbPath), m_runId(runId), m_runName(runName)
{
    setWindowTitle(tr("Export the model of run %1").arg(runId));
    std::string type = "gpt", quantize = "none";
    int rank = 0;
    try {
        const auto config = parseConfig(configJson.toStdString(), "the run's stored config");
        type = config.model.type;
        quantize = config.model.quantize;
        rank = config.lora.rank;
    } catch (const std::exception&) {
        // export-model reports what is wrong with the stored config when run.
    }
    const bool hf = type == "hf";
    // What this run can be written as, the most common first.
    if (rank > 0 && hf) m_kinds.push_back(Kind::Adapter);
    if (rank > 0) m_kinds.push_back(Kind::Merged);
    if (rank > 0 && quantize != "none") m_kinds.push_back(Kind::Quantized);
    if (rank == 0 || !hf) m_kinds.push_back(Kind::Weights);
    m_kinds.push_back(Kind::Bundle);

    m_group = new QButtonGroup(this);
    auto* choices = new QVBoxLayout;
    const auto label = [&](Kind k) -> QString {
        switch (k) {
        case Kind::Adapter:
            return tr("&Adapter: a PEFT folder (adapter_config.json, adapter_model.safetensors) naming its base");
        case Kind::Merged:
            return quantize != "none" ? tr("&Merged: the %1 base dequantized, the adapters folded in, written in bf16")
                                            .arg(QString::fromStdString(quantize))
                                      : tr("&Merged: the adapters folded into the base weights (W + alpha/r · B A)");
        case Kind::Quantized:
            return tr("Merged and &quantized again: a bitsandbytes %1 folder, as transformers saves one")
                .arg(QString::fromStdString(quantize));
        case Kind::Weights:
            return rank > 0 ? tr("&Weights as trained, the adapters as separate lora_A / lora_B tensors")
                            : tr("&Weights: model.safetensors%1").arg(type == "llama" || hf ? tr(" and config.json") : QString());
        case Kind::Bundle:
            return tr("Run &bundle: its config, metrics, events and findings as one file (import-run reads it), its "
                      "latest checkpoint beside it");
        }
        return {};
    };
    for (const Kind k : m_kinds) {
        auto* button = new QRadioButton(label(k), this);
        m_group->addButton(button, static_cast<int>(k));
        choices->addWidget(button);
    }
    m_group->buttons().front()->setChecked(true);

    m_folder = new QLineEdit(this);
    m_folder->setAccessibleName(tr("Output folder"));
    m_folder->setToolTip(tr("The folder to write into; it is created if missing"));
    const QString base = defaultFolder + "/" + slug(runName.isEmpty() ? tr("run") : runName) + "-run" + QString::number(runId) + "-";
    const auto suggest = [this, base, quantize] { m_folder->setText(base + folderSuffix(kind(), quantize)); };
    suggest();
    // The suggested name follows the kind until the user types their own.
    connect(m_group, &QButtonGroup::idClicked, this, [this, base, suggest] {
        if (m_folder->text().startsWith(base)) suggest();
    });
    m_browse = new QPushButton(tr("&Browse…"), this);
    connect(m_browse, &QPushButton::clicked, this, [this] {
        const QString chosen = kind() == Kind::Bundle
            ? saveFileName(this, tr("Export the run bundle"), folder(), tr("Run bundles (*.json)"))
            : existingDirectory(this, tr("Export into folder"), QFileInfo(m_folder->text()).absolutePath());
        if (!chosen.isEmpty()) m_folder->setText(chosen);
    });
    auto* folderRow = new QHBoxLayout;
    folderRow->addWidget(m_folder, 1);
    folderRow->addWidget(m_browse);

    m_progress = new QProgressBar(this);
    m_progress->setRange(0, 1);
    m_progress->setValue(0);
    m_progress->setTextVisible(false);
    m_status = plainLabel(this, tr("Writes the run's latest checkpoint."));
    m_status->setWordWrap(true);
    m_status->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_status->setMinimumWidth(520);
    // Room for what it says when done (the folder and each file written), so the choices above keep their size.
    m_status->setMinimumHeight(m_status->fontMetrics().lineSpacing() * 5);

    m_export = new QPushButton(tr("&Export"), this);
    m_export->setDefault(true);
    m_openFolder = new QPushButton(tr("&Open folder"), this);
    m_openFolder->setEnabled(false);
    m_openFolder->setToolTip(tr("Show the exported folder in the file manager"));
    m_close = new QPushButton(tr("Close"), this);
    connect(m_export, &QPushButton::clicked, this, &ExportModelDialog::startOrCancel);
    connect(m_openFolder, &QPushButton::clicked, this, [this] { QDesktopServices::openUrl(QUrl::fromLocalFile(folder())); });
    connect(m_close, &QPushButton::clicked, this, &QDialog::reject);
    auto* buttons = new QHBoxLayout;
    buttons->addWidget(m_openFolder);
    buttons->addStretch(1);
    buttons->addWidget(m_export);
    buttons->addWidget(m_close);

    auto* form = new QFormLayout;
    form->addRow(tr("Run"), plainLabel(this, tr("%1 (%2)").arg(runId).arg(runName)));
    form->addRow(tr("Write"), choices);
    form->addRow(tr("Into"), folderRow);
    auto* layout = new QVBoxLayout(this);
    layout->addLayout(form);
    layout->addWidget(m_progress);
    layout->addWidget(m_status);
    layout->addLayout(buttons);

    m_tick.setInterval(500);
    connect(&m_tick, &QTimer::timeout, this, [this] {
        m_status->setText(tr("Writing %1 into %2 … %3 s").arg(kindWords(kind()), folder()).arg(m_clock.elapsed() / 1000));
    });
}

ExportModelDialog::~ExportModelDialog()
{
    if (!m_process) return;
    m_process->disconnect(this);
    m_process->kill();
    m_process->waitForFinished(3000);
}

bool ExportModelDialog::selectKind(Kind k)
{
    auto* button = m_group->button(static_cast<int>(k));
    if (!button) return false;
    button->click();
    return true;
}

ExportModelDialog::Kind ExportModelDialog::kind() const { return static_cast<Kind>(m_group->checkedId()); }

void ExportModelDialog::setFolder(const QString& f) { m_folder->setText(f); }

QString ExportModelDialog::folder() const { return QDir::cleanPath(m_folder->text().trimmed()); }

QString ExportModelDialog::statusText() const { return m_status->text(); }

QString ExportModelDialog::kindWords(Kind k) const
{
    switch (k) {
    case Kind::Adapter: return tr("the adapter");
    case Kind::Merged: return tr("the merged model");
    case Kind::Quantized: return tr("the quantized merged model");
    case Kind::Weights: return tr("the weights");
    case Kind::Bundle: return tr("the run bundle");
    }
    return {};
}

QStringList ExportModelDialog::exportArguments() const
{
    if (kind() == Kind::Bundle) return {"export-run", QString::number(m_runId), "--db", m_dbPath, "--output", folder(), "--checkpoint"};
    QStringList args{"export-model", QString::number(m_runId), "--db", m_dbPath, "--output", folder()};
    if (kind() == Kind::Merged) args << "--merge-lora";
    if (kind() == Kind::Quantized) args << "--quantized";
    return args;
}

void ExportModelDialog::setRunning(bool running)
{
    m_export->setText(running ? tr("&Cancel") : tr("&Export"));
    m_close->setEnabled(!running);
    m_browse->setEnabled(!running);
    m_folder->setEnabled(!running);
    for (auto* b : m_group->buttons()) b->setEnabled(!running);
    // Busy while it writes (export-model reports when it is done, not how far it is).
    m_progress->setRange(0, running ? 0 : 1);
    m_progress->setValue(running ? 0 : (m_succeeded ? 1 : 0));
    if (running) m_tick.start();
    else m_tick.stop();
}

void ExportModelDialog::startOrCancel()
{
    if (m_process) {
        m_cancelled = true;
        m_process->kill(); // finished() reports
        return;
    }
    if (folder().isEmpty()) {
        m_status->setText(tr("Name the folder to write into."));
        return;
    }
    QStringList present;
    if (kind() == Kind::Bundle) {
        if (QFileInfo::exists(folder())) present << QFileInfo(folder()).fileName();
    } else {
        // A folder holding one of export-model's files is replaced only when the user says so.
        for (const auto& f : exportModelFiles()) {
            if (QFileInfo::exists(QDir(folder()).filePath(QString::fromStdString(f)))) present << QString::fromStdString(f);
        }
    }
    if (!present.isEmpty() && m_askReplace
        && plainMessage(this, QMessageBox::Question, tr("Replace files?"),
                        kind() == Kind::Bundle ? tr("%1 exists. Replace it?").arg(folder())
                                               : tr("%1 already holds %2. Export and replace them?").arg(folder(), present.join(", ")),
                        QMessageBox::Yes | QMessageBox::Cancel, QMessageBox::Cancel)
               != QMessageBox::Yes) {
        m_status->setText(tr("Not exported: %1 keeps its files. Choose another folder.").arg(folder()));
        return;
    }
    // export-model makes its folder; a bundle's folder is made here.
    if (kind() == Kind::Bundle && !QDir().mkpath(QFileInfo(folder()).absolutePath())) {
        m_status->setText(tr("Not exported: cannot make the folder %1").arg(QFileInfo(folder()).absolutePath()));
        return;
    }
    m_cancelled = m_succeeded = false;
    m_stdout.clear();
    m_stderr.clear();
    m_openFolder->setEnabled(false);
    m_process = new QProcess(this);
    m_process->setProgram(cliProgram());
    m_process->setArguments(exportArguments());
    m_process->setStandardInputFile(QProcess::nullDevice());
    connect(m_process, &QProcess::readyReadStandardOutput, this,
            [this] { m_stdout += QString::fromUtf8(m_process->readAllStandardOutput()); });
    connect(m_process, &QProcess::readyReadStandardError, this,
            [this] { m_stderr += QString::fromUtf8(m_process->readAllStandardError()); });
    connect(m_process, &QProcess::finished, this,
            [this](int code, QProcess::ExitStatus status) { finished(code, status != QProcess::NormalExit); });
    connect(m_process, &QProcess::errorOccurred, this, [this](QProcess::ProcessError e) {
        if (e != QProcess::FailedToStart) return;
        m_stderr = tr("error: cannot start %1: %2 (set TRAINBENCH_CLI to its path)")
                       .arg(m_process->program(), m_process->errorString());
        finished(-1, false);
    });
    m_clock.start();
    setRunning(true);
    m_status->setText(tr("Writing %1 into %2 …").arg(kindWords(kind()), folder()));
    m_process->start();
}

void ExportModelDialog::finished(int code, bool crashed)
{
    m_stdout += QString::fromUtf8(m_process->readAllStandardOutput());
    m_stderr += QString::fromUtf8(m_process->readAllStandardError());
    m_process->deleteLater();
    m_process = nullptr;
    m_succeeded = !crashed && code == 0;
    setRunning(false);
    if (m_succeeded) {
        // What was written, as export-model says it ("wrote FILE (...)"), less the folder named once.
        QStringList wrote;
        for (const auto& line : m_stdout.split('\n', Qt::SkipEmptyParts)) {
            if (line.startsWith("wrote ")) wrote << QFileInfo(line.mid(6).section(" (", 0, 0)).fileName() + " (" + line.section(" (", 1);
        }
        const double seconds = static_cast<double>(m_clock.elapsed()) / 1000.0;
        if (wrote.isEmpty()) wrote << QFileInfo(folder()).fileName();
        m_status->setText(tr("Exported %1 of run %2 to %3 in %4 s:\n%5")
                              .arg(kindWords(kind()))
                              .arg(m_runId)
                              .arg(folder())
                              .arg(seconds, 0, 'f', 1)
                              .arg(wrote.join("\n")));
        m_openFolder->setEnabled(true);
        Q_EMIT exported(tr("Exported %1 of run %2 to %3").arg(kindWords(kind())).arg(m_runId).arg(folder()));
        return;
    }
    if (m_cancelled) {
        m_status->setText(tr("Cancelled; %1 may hold part of the export.").arg(folder()));
        return;
    }
    // The error as the command line says it: its last "error: " line.
    QString error;
    for (const auto& line : m_stderr.split('\n', Qt::SkipEmptyParts)) {
        if (line.contains("error: ")) error = line.section("error: ", 1).trimmed();
    }
    if (error.isEmpty()) error = crashed ? tr("trainbench-cli stopped unexpectedly") : tr("trainbench-cli ended with exit code %1").arg(code);
    m_status->setText(tr("Not exported: %1").arg(error));
}

} // namespace tb::ui
