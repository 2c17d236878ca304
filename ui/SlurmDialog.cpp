#include "SlurmDialog.h"
#include "FileDialogs.h"
#include "CliProgram.h"

#include <QComboBox>
#include <QCoreApplication>
#include <QDialogButtonBox>
#include <QDir>
#include <QFile>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QProcess>
#include <QPushButton>
#include <QSpinBox>
#include <QStandardPaths>
#include <QVBoxLayout>

#include "common/Errors.h"
#include "dist/SlurmScript.h"

namespace tb::ui {

SlurmDialog::SlurmDialog(const QString& configPath, const QString& name, QWidget* parent)
    : QDialog(parent), m_configPath(QFileInfo(configPath).absoluteFilePath()), m_name(name)
{
    setWindowTitle(tr("Run on a Slurm cluster"));
    m_cli = cliProgram();
    m_sbatch = QStandardPaths::findExecutable("sbatch");

    m_nodes = new QSpinBox(this);
    m_nodes->setRange(1, 100000);
    m_kind = new QComboBox(this);
    m_kind->addItems({tr("GPUs per node (one rank per GPU)"), tr("ranks per node (CPU nodes)")});
    m_perNode = new QSpinBox(this);
    m_perNode->setRange(1, 1024);
    m_perNode->setValue(2);
    m_partition = new QLineEdit(this);
    m_partition->setPlaceholderText(tr("the cluster's default"));
    m_time = new QLineEdit(this);
    m_time->setPlaceholderText(tr("e.g. 12:00:00 (120 s before it the run checkpoints and requeues)"));
    m_account = new QLineEdit(this);
    m_account->setPlaceholderText(tr("none"));
    m_folder = new QLineEdit(QFileInfo(m_configPath).absolutePath() + "/trainbench-slurm", this);
    auto* browse = new QPushButton(tr("Browse…"), this);
    connect(browse, &QPushButton::clicked, this, [this] {
        const QString dir = existingDirectory(this, tr("A folder every node sees"), m_folder->text());
        if (!dir.isEmpty()) m_folder->setText(dir);
    });
    auto* perNodeRow = new QHBoxLayout;
    perNodeRow->addWidget(m_perNode);
    perNodeRow->addWidget(m_kind, 1);
    auto* folderRow = new QHBoxLayout;
    folderRow->addWidget(m_folder, 1);
    folderRow->addWidget(browse);

    auto* form = new QFormLayout;
    form->addRow(tr("Config:"), new QLabel(m_configPath, this));
    form->addRow(tr("&Nodes:"), m_nodes);
    form->addRow(tr("Per node:"), perNodeRow);
    form->addRow(tr("P&artition:"), m_partition);
    form->addRow(tr("&Time limit:"), m_time);
    form->addRow(tr("A&ccount:"), m_account);
    form->addRow(tr("Shared folder:"), folderRow);

    m_preview = new QPlainTextEdit(this);
    m_preview->setReadOnly(true);
    m_preview->setLineWrapMode(QPlainTextEdit::NoWrap);
    QFont mono(QStringLiteral("monospace"));
    mono.setStyleHint(QFont::Monospace);
    m_preview->setFont(mono);
    m_preview->setMinimumSize(720, 300);
    m_status = new QLabel(this);
    m_status->setWordWrap(true);
    m_status->setTextInteractionFlags(Qt::TextSelectableByMouse);

    auto* buttons = new QDialogButtonBox(QDialogButtonBox::Close, this);
    m_save = buttons->addButton(tr("&Save script"), QDialogButtonBox::ActionRole);
    m_submit = buttons->addButton(tr("S&ubmit"), QDialogButtonBox::ActionRole);
    m_submit->setToolTip(m_sbatch.isEmpty() ? tr("sbatch is not on this machine's PATH: save the script and submit it on the cluster")
                                            : tr("sbatch %1").arg(m_sbatch));
    connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
    connect(m_save, &QPushButton::clicked, this, [this] {
        if (saveScript()) m_status->setText(tr("Saved %1. Submit it with: sbatch %1").arg(scriptPath()));
    });
    connect(m_submit, &QPushButton::clicked, this, &SlurmDialog::submit);
    connect(this, &SlurmDialog::submitted, this, [this](const QString& id) {
        m_status->setText(tr("Submitted job %1 (%2). Its output: %3/slurm-%1.out; the run appears in the store %3/experiments.db.")
                              .arg(id, scriptPath(), m_folder->text()));
    });

    auto* layout = new QVBoxLayout(this);
    layout->addLayout(form);
    layout->addWidget(new QLabel(tr("The script:"), this));
    layout->addWidget(m_preview, 1);
    layout->addWidget(m_status);
    layout->addWidget(buttons);

    for (auto* spin : {m_nodes, m_perNode}) connect(spin, &QSpinBox::valueChanged, this, &SlurmDialog::refresh);
    connect(m_kind, &QComboBox::currentIndexChanged, this, &SlurmDialog::refresh);
    for (auto* edit : {m_partition, m_time, m_account, m_folder}) connect(edit, &QLineEdit::textChanged, this, &SlurmDialog::refresh);
    refresh();
}

void SlurmDialog::refresh()
{
    SlurmJob job;
    job.name = m_name.toStdString();
    job.configPath = m_configPath.toStdString();
    job.cliPath = m_cli.toStdString();
    job.folder = QDir::cleanPath(QDir(m_folder->text().trimmed()).absolutePath()).toStdString();
    job.nodes = m_nodes->value();
    (m_kind->currentIndex() == 0 ? job.gpusPerNode : job.tasksPerNode) = m_perNode->value();
    job.partition = m_partition->text().trimmed().toStdString();
    job.time = m_time->text().trimmed().toStdString();
    job.account = m_account->text().trimmed().toStdString();
    try {
        m_script = QString::fromStdString(slurmScript(job));
        m_problem.clear();
        m_preview->setPlainText(m_script);
        m_status->setText(m_sbatch.isEmpty() ? tr("sbatch is not on this machine's PATH: save the script and submit it on the cluster.")
                                             : tr("%1 rank(s).").arg(job.nodes * m_perNode->value()));
    } catch (const InputError& e) {
        m_script.clear();
        m_problem = QString::fromStdString(e.what());
        m_status->setText(m_problem);
    }
    m_save->setEnabled(!m_script.isEmpty());
    m_submit->setEnabled(canSubmit());
}

QString SlurmDialog::script() const { return m_script; }
QString SlurmDialog::problem() const { return m_problem; }
bool SlurmDialog::canSubmit() const { return !m_script.isEmpty() && !m_sbatch.isEmpty(); }

QString SlurmDialog::scriptPath() const
{
    return QDir::cleanPath(QDir(m_folder->text().trimmed()).absolutePath()) + "/"
        + QString::fromStdString(slurmJobName(m_name.toStdString())) + ".sbatch";
}

bool SlurmDialog::saveScript()
{
    if (m_script.isEmpty()) return false;
    const QString path = scriptPath();
    if (!QDir().mkpath(QFileInfo(path).absolutePath())) {
        m_problem = tr("Cannot create the folder %1.").arg(QFileInfo(path).absolutePath());
        m_status->setText(m_problem);
        return false;
    }
    QFile file(path);
    if (!file.open(QIODevice::WriteOnly | QIODevice::Truncate) || file.write(m_script.toUtf8()) < 0) {
        m_problem = tr("Cannot write %1: %2.").arg(path, file.errorString());
        m_status->setText(m_problem);
        return false;
    }
    file.setPermissions(file.permissions() | QFileDevice::ExeOwner);
    return true;
}

void SlurmDialog::submit()
{
    if (m_sbatchRun || !canSubmit() || !saveScript()) return;
    m_status->setText(tr("Submitting with %1…").arg(m_sbatch));
    m_submit->setEnabled(false);
    m_sbatchRun = new QProcess(this);
    m_sbatchRun->setProcessChannelMode(QProcess::MergedChannels);
    const auto done = [this](bool ok, const QString& said) {
        m_sbatchRun->deleteLater();
        m_sbatchRun = nullptr;
        m_submit->setEnabled(canSubmit());
        if (ok) {
            Q_EMIT submitted(said.section(';', 0, 0));
            return;
        }
        m_problem = tr("sbatch refused the job: %1").arg(said);
        m_status->setText(m_problem);
        Q_EMIT refused(m_problem);
    };
    connect(m_sbatchRun, &QProcess::finished, this, [this, done](int code, QProcess::ExitStatus status) {
        const QString said = QString::fromUtf8(m_sbatchRun->readAll()).trimmed();
        done(status == QProcess::NormalExit && code == 0 && !said.isEmpty(), said);
    });
    connect(m_sbatchRun, &QProcess::errorOccurred, this, [this, done](QProcess::ProcessError error) {
        if (error == QProcess::FailedToStart) done(false, m_sbatchRun->errorString());
    });
    m_sbatchRun->start(m_sbatch, {"--parsable", scriptPath()});
}

} // namespace tb::ui
