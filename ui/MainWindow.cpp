#include "PlainText.h"
#include "FileDialogs.h"
#include "MainWindow.h"

#include <QAction>
#include <QApplication>
#include <QCloseEvent>
#include <QCoreApplication>
#include <QDir>
#include <QDockWidget>
#include <QFileDialog>
#include <QFileInfo>
#include <QFrame>
#include <QInputDialog>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLabel>
#include <QMenuBar>
#include <QMessageBox>
#include <QSettings>
#include <QStatusBar>
#include <QTabWidget>
#include <QTimer>

#include "ConfigDocument.h"
#include "ExperimentPanel.h"
#include "GpuTargetModel.h"
#include "HardwarePanel.h"
#include "ChatPanel.h"
#include "DiagnosticsPanel.h"
#include "HistoryPanel.h"
#include "HostsDialog.h"
#include "MemoryPlannerPanel.h"
#include "StepDeriver.h"
#include "RunPanel.h"
#include "SlurmDialog.h"
#include "SweepDialog.h"
#include "common/Version.h"
#include "store/RunStore.h"
#include "train/Trainer.h"

// The .qrc lives in a static library: its registration must be pulled in by hand.
static void initResources() { Q_INIT_RESOURCE(trainbench); }

namespace tb::ui {

MainWindow::MainWindow(const QString& dbPath, QWidget* parent) : QMainWindow(parent)
{
    initResources();
    setObjectName("MainWindow");
    setWindowIcon(QIcon(":/icons/trainbench.svg"));
    m_document = new ConfigDocument(this);
    m_run = new RunPanel(this);
    m_run->setDatabasePath(dbPath.isEmpty() ? QString::fromStdString(RunStore::defaultPath()) : dbPath);
    m_tabs = new QTabWidget(this);
    m_tabs->setDocumentMode(true);
    setCentralWidget(m_tabs);
    // Panels: one line each.
    m_tabs->addTab(m_run, tr("Run"));
    m_experiment = new ExperimentPanel(m_document, this);
    QDockWidget* experimentDock = addPanel(m_experiment, tr("Experiment"), Qt::LeftDockWidgetArea);
    m_targets = new GpuTargetModel(this);
    m_hardware = new HardwarePanel(std::shared_ptr<GpuDriver>(makeNvidiaDriver()), torchCudaInfo(), this, m_targets);
    tabifyDockWidget(experimentDock, addPanel(m_hardware, tr("Hardware"), Qt::LeftDockWidgetArea));
    experimentDock->raise();
    m_planner = new MemoryPlannerPanel(m_document, this);
    m_tabs->addTab(m_planner, tr("Memory planner"));
    m_planner->setTargetModel(m_targets);
    m_experiment->setTargetModel(m_targets);
    connect(m_experiment, &ExperimentPanel::planRequested, this, [this] { m_tabs->setCurrentWidget(m_planner); });
    m_history = new HistoryPanel(this);
    m_tabs->addTab(m_history, tr("History"));
    m_history->setDatabasePath(m_run->databasePath());
    m_diagnostics = new DiagnosticsPanel(m_document, this);
    m_tabs->addTab(m_diagnostics, tr("Diagnostics"));
    m_diagnostics->setTargetModel(m_targets);
    m_chat = new ChatPanel(this);
    m_tabs->addTab(m_chat, tr("Chat"));
    m_chat->setDatabasePath(m_run->databasePath());
    connect(m_chat, &ChatPanel::message, this, [this](const QString& message) { statusBar()->showMessage(message, 8000); });
    connect(m_history, &HistoryPanel::chatRequested, this, [this](const QList<qint64>& ids) {
        const QString refusal = m_chat->chatWithRuns(ids);
        if (!refusal.isEmpty()) {
            statusBar()->showMessage(tr("Cannot chat: %1").arg(refusal), 8000);
            return;
        }
        m_tabs->setCurrentWidget(m_chat);
        m_chat->messageEdit()->setFocus();
    });
    // One deriver: a plan derived for the planner answers preflight, and the other way.
    auto* deriver = new StepDeriver(this);
    m_planner->setStepDeriver(deriver);
    m_diagnostics->setStepDeriver(deriver);
    m_experiment->setStepDeriver(deriver);
    connect(m_diagnostics, &DiagnosticsPanel::launchVerdictChanged, m_run, &RunPanel::setPreflightVerdict);
    // A failed run opens its explanation.
    connect(m_run, &RunPanel::runFinished, this, [this](const tb::SessionOutcome& outcome) {
        if (outcome.status != RunStatus::Failed || outcome.runId == 0 || outcome.failureFindings.empty()) return;
        m_diagnostics->showFailure(outcome.runId, outcome.failureFindings);
        m_tabs->setCurrentWidget(m_diagnostics);
    });
    connect(m_run, &RunPanel::runFinished, m_history, [this] { m_history->refresh(); });
    connect(m_run, &RunPanel::runStarted, m_history, [this] { m_history->refresh(); });
    connect(m_history, &HistoryPanel::attachRequested, this, [this](const QString& host, qint64 remoteId) {
        if (m_run->isRunning()) {
            statusBar()->showMessage(tr("A run is shown in the Run tab; stop watching it first"), 8000);
            return;
        }
        m_tabs->setCurrentWidget(m_run);
        m_run->attach(host, remoteId);
    });
    connect(m_history, &HistoryPanel::resumeRequested, this, [this](qint64 id) {
        if (m_run->isRunning()) {
            plainWarning(this, tr("Resume"), tr("A run is in progress; stop it first."));
            return;
        }
        m_tabs->setCurrentWidget(m_run);
        m_run->resume(id);
    });
    connect(m_planner, &MemoryPlannerPanel::applied, this, [this](const QString& message) {
        statusBar()->showMessage(message, 8000);
    });
    connect(m_history, &HistoryPanel::exported, this, [this](const QString& message) {
        statusBar()->showMessage(message, 8000);
    });
    connect(m_history, &HistoryPanel::openConfigRequested, this, [this](const QString& json, const QString& name) {
        if (!maybeSave()) return;
        m_document->loadText(json, name + ".json");
        m_tabs->setCurrentWidget(m_run);
    });

    m_dbLabel = plainLabel(this);
    m_runLabel = plainLabel(this, tr("idle"));
    m_targetLabel = plainLabel(this);
    m_targetLabel->setToolTip(tr("Target GPU for planning and preflight (Hardware panel)"));
    statusBar()->addWidget(m_runLabel, 1);
    m_linkLabel = plainLabel(this);
    m_linkLabel->setToolTip(tr("The link to the host of the run shown (over ssh)"));
    m_linkLabel->hide();
    // The permanent fields are set off from the messages and from each other
    // by a rule (they ran together: "…checkpoint savedtarget: H100store: …").
    const auto rule = [this] {
        auto* line = new QFrame(this);
        line->setFrameShape(QFrame::VLine);
        line->setFrameShadow(QFrame::Sunken);
        return line;
    };
    statusBar()->addPermanentWidget(rule());
    statusBar()->addPermanentWidget(m_linkLabel);
    connect(m_run, &RunPanel::linkChanged, this, [this](const QString& text) {
        m_linkLabel->setText(text);
        m_linkLabel->setVisible(!text.isEmpty());
        m_linkLabel->setStyleSheet(text.contains("reconnecting") ? "color: #b9770e"
                                   : text.contains("lost")       ? "color: #c0392b"
                                                                 : "color: #1e8449");
    });
    statusBar()->addPermanentWidget(m_targetLabel);
    statusBar()->addPermanentWidget(rule());
    statusBar()->addPermanentWidget(m_dbLabel);
    const auto showTarget = [this] {
        m_targetLabel->setText(tr("target: %1").arg(QString::fromStdString(m_targets->target().label())));
    };
    showTarget();
    connect(m_targets, &GpuTargetModel::changed, this, showTarget);
    showStore(m_run->databasePath());

    buildMenus();
    connect(m_document, &ConfigDocument::changed, this, &MainWindow::onDocumentChanged);
    connect(m_document, &ConfigDocument::modifiedChanged, this, &MainWindow::updateTitle);
    connect(m_document, &ConfigDocument::fileChanged, this, &MainWindow::updateTitle);
    connect(m_run, &RunPanel::runningChanged, this, [this](bool running) {
        m_stopAction->setEnabled(running);
        m_resumeAction->setEnabled(!running);
        onDocumentChanged();
        if (!running) m_runLabel->setText(m_run->statusLabel()->text().section('\n', 0, 0));
    });
    connect(m_run, &RunPanel::progressShown, this, [this](int step, int total) {
        m_runLabel->setText(tr("run %1: step %2 of %3").arg(m_run->currentRunId()).arg(step).arg(total));
    });

    resize(1280, 820);
    QSettings settings;
    restoreGeometry(settings.value("window/geometry").toByteArray());
    restoreState(settings.value("window/state").toByteArray());
    onDocumentChanged();
    updateTitle();
}

MainWindow::~MainWindow() = default;

namespace {
// A docked panel's width by default, and the least at which its form is usable.
constexpr int kDockWidth = 430;
constexpr int kDockMinUsableWidth = 300;
} // namespace

void MainWindow::showEvent(QShowEvent* event)
{
    QMainWindow::showEvent(event);
    if (m_layoutRepaired) return;
    m_layoutRepaired = true;
    // After the restored state is laid out.
    QTimer::singleShot(0, this, [this] {
        const QStringList repaired = repairLayout();
        if (!repaired.isEmpty())
            statusBar()->showMessage(tr("The saved window layout left %1 too narrow to use; restored its width").arg(repaired.join(tr(" and "))), 10000);
    });
}

void MainWindow::showStore(const QString& path)
{
    // A long path is cut in the middle, not into the messages; the tooltip has it whole.
    const QString text = tr("store: %1").arg(path);
    m_dbLabel->setText(m_dbLabel->fontMetrics().elidedText(text, Qt::ElideMiddle, 420));
    m_dbLabel->setToolTip(tr("Experiment database: %1").arg(path));
}

QStringList MainWindow::repairLayout()
{
    QStringList repaired;
    for (QDockWidget* dock : findChildren<QDockWidget*>()) {
        // A dock behind another in a tab group is hidden: its width is not shown.
        if (dock->isFloating() || !dock->isVisible() || dock->visibleRegion().isEmpty()) continue;
        const Qt::DockWidgetArea area = dockWidgetArea(dock);
        if (area != Qt::LeftDockWidgetArea && area != Qt::RightDockWidgetArea) continue;
        if (dock->width() >= kDockMinUsableWidth) continue;
        resizeDocks({dock}, {kDockWidth}, Qt::Horizontal);
        repaired << dock->windowTitle();
    }
    return repaired;
}

QDockWidget* MainWindow::addPanel(QWidget* panel, const QString& title, Qt::DockWidgetArea area)
{
    auto* dock = new QDockWidget(title, this);
    dock->setObjectName(title + "Dock"); // saveState needs stable names
    dock->setWidget(panel);
    dock->setFeatures(QDockWidget::DockWidgetMovable | QDockWidget::DockWidgetFloatable);
    addDockWidget(area, dock);
    resizeDocks({dock}, {kDockWidth}, Qt::Horizontal);
    return dock;
}

void MainWindow::buildMenus()
{
    QMenu* file = menuBar()->addMenu(tr("&File"));
    file->addAction(tr("&New"), QKeySequence::New, this, &MainWindow::newConfig);
    file->addAction(tr("&Open config…"), QKeySequence::Open, this, &MainWindow::openConfigDialog);
    file->addAction(tr("Open model &folder…"), QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_O), this, [this] {
        if (!maybeSave()) return;
        const QString folder = existingDirectory(this, tr("Open a Hugging Face model folder"));
        if (!folder.isEmpty()) openModelFolder(folder);
    });
    QMenu* examples = file->addMenu(tr("&Examples"));
    for (const QString& name : QDir(":/examples").entryList({"*.json"}, QDir::Files, QDir::Name)) {
        examples->addAction(name, this, [this, name] {
            if (maybeSave()) openExample(":/examples/" + name);
        });
    }
    m_recentMenu = file->addMenu(tr("&Recent configs"));
    updateRecentMenu();
    file->addSeparator();
    file->addAction(tr("&Save"), QKeySequence::Save, this, &MainWindow::save);
    // Spelled out: QKeySequence::SaveAs is empty on desktops without GNOME's or KDE's key bindings.
    file->addAction(tr("Save &As…"), QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_S), this, &MainWindow::saveAs);
    file->addSeparator();
    file->addAction(tr("Open experiment &database…"), this, &MainWindow::openDatabase);
    file->addSeparator();
    // Spelled out: QKeySequence::Quit is empty on some platforms (Qt's generic one among them).
    file->addAction(tr("&Quit"), QKeySequence(Qt::CTRL | Qt::Key_Q), this, &QWidget::close);

    QMenu* run = menuBar()->addMenu(tr("&Run"));
    m_startAction = run->addAction(tr("&Start"), QKeySequence(Qt::CTRL | Qt::Key_R), m_run, &RunPanel::start);
    m_stopAction = run->addAction(tr("S&top"), QKeySequence(Qt::CTRL | Qt::Key_Period), m_run, &RunPanel::stop);
    m_stopAction->setEnabled(false);
    m_resumeAction = run->addAction(tr("&Resume last stopped run"), this, &MainWindow::resumeLatest);
    run->addSeparator();
    run->addAction(tr("&Hosts…"), QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_H), this, &MainWindow::showHosts);
    run->addSeparator();
    run->addAction(tr("Run on several &processes…"), QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_R), this,
                   &MainWindow::runOnSeveralProcesses);
    run->addAction(tr("Run on a S&lurm cluster…"), this, &MainWindow::runOnSlurm);
    run->addAction(tr("S&weep…"), QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_W), this, &MainWindow::showSweeps);
    QMenu* view = menuBar()->addMenu(tr("&View"));
    view->addAction(tr("&Run"), QKeySequence(Qt::CTRL | Qt::Key_1), this, [this] { m_tabs->setCurrentWidget(m_run); });
    view->addAction(tr("&Memory planner"), QKeySequence(Qt::CTRL | Qt::Key_2), this,
                    [this] { m_tabs->setCurrentWidget(m_planner); });
    view->addAction(tr("&History"), QKeySequence(Qt::CTRL | Qt::Key_3), this, [this] { m_tabs->setCurrentWidget(m_history); });
    view->addAction(tr("&Diagnostics"), QKeySequence(Qt::CTRL | Qt::Key_4), this,
                    [this] { m_tabs->setCurrentWidget(m_diagnostics); });
    view->addAction(tr("&Chat"), QKeySequence(Qt::CTRL | Qt::Key_5), this, [this] {
        m_tabs->setCurrentWidget(m_chat);
        m_chat->messageEdit()->setFocus();
    });

    QMenu* help = menuBar()->addMenu(tr("&Help"));
    help->addAction(tr("&About Trainbench"), this, &MainWindow::about);
}

void MainWindow::onDocumentChanged()
{
    QString reason;
    if (!m_document->jsonIsObject()) reason = tr("the JSON does not parse.");
    else if (!m_document->isValid()) {
        const auto& issue = m_document->issues().front();
        reason = QString::fromStdString(issue.text());
        if (m_document->issues().size() > 1) reason += tr(" (and %1 more)").arg(m_document->issues().size() - 1);
    }
    m_run->setConfig(m_document->config(), reason);
    m_startAction->setEnabled(!m_run->isRunning() && m_document->isValid());
}

void MainWindow::updateTitle()
{
    setWindowTitle(tr("%1[*] — Trainbench").arg(m_document->displayName()));
    setWindowModified(m_document->isModified());
}

bool MainWindow::openConfig(const QString& path)
{
    QString error;
    if (!m_document->loadFile(path, &error)) {
        plainWarning(this, tr("Open config"), error);
        return false;
    }
    rememberRecent(m_document->filePath());
    return true;
}

void MainWindow::openExample(const QString& resourcePath)
{
    QFile file(resourcePath);
    if (!file.open(QIODevice::ReadOnly)) {
        plainWarning(this, tr("Open example"), tr("The bundled example %1 is missing from this build.").arg(resourcePath));
        return;
    }
    m_document->loadText(QString::fromUtf8(file.readAll()), QFileInfo(resourcePath).fileName());
}

bool MainWindow::openModelFolder(const QString& folder)
{
    if (!maybeSave()) return false;
    // A new config for that model, named after the folder: nothing of the
    // previous experiment (its name, dropout, warmup, optimizer, accumulation)
    // carries over into a fine-tune it was never planned for.
    const QJsonObject fresh{{"name", QFileInfo(folder).fileName()}};
    m_document->loadText(QString::fromUtf8(QJsonDocument(fresh).toJson()), "untitled.json");
    m_experiment->openModelFolder(folder);
    statusBar()->showMessage(tr("New config for the model folder %1: %2").arg(folder, m_experiment->architectureText()), 8000);
    return true;
}

void MainWindow::newConfig()
{
    if (!maybeSave()) return;
    m_document->loadText("{\n  \"name\": \"experiment\"\n}\n", "untitled.json");
}

void MainWindow::openConfigDialog()
{
    if (!maybeSave()) return;
    const QString path = openFileName(this, tr("Open config"), QString(), tr("Configs (*.json);;All files (*)"));
    if (!path.isEmpty()) openConfig(path);
}

bool MainWindow::save()
{
    if (m_document->filePath().isEmpty()) return saveAs();
    QString error;
    if (!m_document->save(&error)) {
        plainWarning(this, tr("Save"), error);
        return false;
    }
    statusBar()->showMessage(tr("Saved %1").arg(m_document->filePath()), 3000);
    return true;
}

bool MainWindow::saveAs()
{
    QString path = saveFileName(this, tr("Save config as"), m_document->displayName(), tr("Configs (*.json)"));
    if (path.isEmpty()) return false;
    if (!path.endsWith(".json", Qt::CaseInsensitive)) path += ".json";
    QString error;
    if (!m_document->saveAs(path, &error)) {
        plainWarning(this, tr("Save as"), error);
        return false;
    }
    rememberRecent(path);
    return true;
}

bool MainWindow::maybeSave()
{
    if (!m_document->isModified() || !m_askBeforeClosing) return true;
    const auto answer = QMessageBox::question(this, tr("Unsaved changes"),
                                              tr("Save the changes to %1?").arg(m_document->displayName()),
                                              QMessageBox::Save | QMessageBox::Discard | QMessageBox::Cancel);
    if (answer == QMessageBox::Save) return save();
    return answer == QMessageBox::Discard;
}

void MainWindow::openDatabase()
{
    const QString path = saveFileName(this, tr("Open or create an experiment database"), m_run->databasePath(),
                                      tr("Experiment databases (*.db);;All files (*)"), QFileDialog::DontConfirmOverwrite);
    if (path.isEmpty()) return;
    try {
        // Refuses non-SQLite, foreign or newer files, read-only and without a
        // write lock on the GUI thread. A new file is created by its first run.
        if (QFileInfo::exists(path)) RunStore probe(path.toStdString(), RunStore::Mode::ReadOnly);
    } catch (const std::exception& e) {
        plainWarning(this, tr("Open experiment database"), QString::fromStdString(e.what()));
        return;
    }
    m_run->setDatabasePath(path);
    m_chat->setDatabasePath(path);
    m_history->setDatabasePath(path);
    showStore(path);
}

void MainWindow::resumeLatest()
{
    std::optional<RunRecord> candidate;
    try {
        // Read-only on the GUI thread: no write lock to wait for, nothing changed.
        candidate = RunStore(m_run->databasePath().toStdString(), RunStore::Mode::ReadOnly).latestStoppedRun();
    } catch (const std::exception& e) {
        plainWarning(this, tr("Resume"), QString::fromStdString(e.what()));
        return;
    }
    if (!candidate) {
        plainMessage(this, QMessageBox::Information, tr("Resume"),
                     tr("No cancelled or interrupted run in %1.").arg(m_run->databasePath()));
        return;
    }
    const auto answer = plainMessage(
        this, QMessageBox::Question, tr("Resume"),
        tr("Resume run %1 \"%2\" (%3 at step %4 of %5) from its last checkpoint?")
            .arg(candidate->id).arg(QString::fromStdString(candidate->name), QString::fromStdString(runStatusName(candidate->status)))
            .arg(candidate->stepsDone).arg(candidate->stepsTotal),
        QMessageBox::Yes | QMessageBox::No, QMessageBox::Yes);
    if (answer == QMessageBox::Yes) m_run->resume(candidate->id);
}

void MainWindow::about()
{
    QMessageBox::about(this, tr("About Trainbench"),
                       tr("<h3>Trainbench %1</h3><p>A workbench for training deep-learning models.</p>"
                          "<p>Qt %2 · LibTorch %3<br>CUDA: %4</p><p>Experiment store: %5</p>")
                           .arg(kAppVersion, qVersion(), QString::fromStdString(torchVersion()),
                                cudaUsable() ? tr("usable") : tr("not usable here (no GPU, driver, or CUDA build of LibTorch)"),
                                m_run->databasePath().toHtmlEscaped()));
}

void MainWindow::rememberRecent(const QString& path)
{
    QSettings settings;
    QStringList recent = settings.value("recentConfigs").toStringList();
    recent.removeAll(path);
    recent.prepend(path);
    while (recent.size() > 8) recent.removeLast();
    settings.setValue("recentConfigs", recent);
    updateRecentMenu();
}

void MainWindow::updateRecentMenu()
{
    m_recentMenu->clear();
    const QStringList recent = QSettings().value("recentConfigs").toStringList();
    for (const QString& path : recent) {
        m_recentMenu->addAction(path, this, [this, path] {
            if (maybeSave()) openConfig(path);
        });
    }
    m_recentMenu->setEnabled(!recent.isEmpty());
}

void MainWindow::showHosts()
{
    HostsDialog dialog(this);
    connect(&dialog, &HostsDialog::hostsChanged, m_run, &RunPanel::reloadHosts);
    connect(&dialog, &HostsDialog::hostTested, this, [this](const QString& name, const std::vector<remote::RemoteGpu>& gpus) {
        m_hardware->setRemoteGpus(name, gpus);
    });
    dialog.exec();
}

bool MainWindow::savedConfigFor(const QString& what)
{
    if (!m_document->isValid()) {
        plainWarning(this, what, tr("The config is not valid yet; the Experiment panel says what to fix."));
        return false;
    }
    if (m_document->filePath().isEmpty() || m_document->isModified()) {
        if (QMessageBox::question(this, what, tr("Every process reads the config from its file. Save it first?"),
                                  QMessageBox::Save | QMessageBox::Cancel) != QMessageBox::Save) {
            return false;
        }
        if (!save()) return false;
    }
    return true;
}

QString MainWindow::startProcesses(int processes)
{
    if (m_run->isRunning()) {
        plainWarning(this, tr("Run on several processes"), tr("A run is shown in the Run tab; stop it or stop watching it first."));
        return {};
    }
    const auto config = m_document->config();
    const QString name = config ? QString::fromStdString(config->name) : QFileInfo(m_document->filePath()).baseName();
    const QString log = m_run->startProcesses(
        {"train", "--config", m_document->filePath(), "--db", m_run->databasePath(), "--nproc", QString::number(processes)},
        processes, tr("Starting %1 on %2 processes…").arg(name).arg(processes));
    if (log.isEmpty()) {
        plainWarning(this, tr("Run on several processes"), m_run->statusLabel()->text());
        return {};
    }
    statusBar()->showMessage(tr("Started %1 processes; their output is in %2").arg(processes).arg(log), 15000);
    m_tabs->setCurrentWidget(m_run);
    return log;
}

void MainWindow::runOnSeveralProcesses()
{
    const QString what = tr("Run on several processes");
    if (!savedConfigFor(what)) return;
    bool ok = false;
    const int n = QInputDialog::getInt(this, what,
                                       tr("Processes (data-parallel ranks; train.batch_size is per rank, so the global "
                                          "batch grows with them):"),
                                       2, 2, 256, 1, &ok);
    if (ok) startProcesses(n);
}

void MainWindow::runOnSlurm()
{
    if (!savedConfigFor(tr("Run on a Slurm cluster"))) return;
    const auto config = m_document->config();
    SlurmDialog dialog(m_document->filePath(), config ? QString::fromStdString(config->name) : QString(), this);
    dialog.exec();
}

SweepDialog* MainWindow::sweepDialog() const { return m_sweepDialog; }

void MainWindow::showSweeps()
{
    // A sweep trains the saved config; unsaved edits are not in it.
    const bool saved = m_document->isValid() && !m_document->filePath().isEmpty() && !m_document->isModified();
    auto* dialog = new SweepDialog(m_run->databasePath(), saved ? m_document->filePath() : QString(), this);
    dialog->setAttribute(Qt::WA_DeleteOnClose);
    connect(dialog, &SweepDialog::message, this, [this](const QString& text) { statusBar()->showMessage(text, 8000); });
    connect(dialog, &SweepDialog::openRunRequested, this, [this](qint64 runId) {
        // The run among its sweep's runs: History grouped by the sweep.
        std::optional<SweepTrialRecord> trial;
        try {
            trial = RunStore(m_run->databasePath().toStdString(), RunStore::Mode::ReadOnly).sweepTrialOfRun(runId);
        } catch (const std::exception&) {
            // The store cannot be read now: History says why when it refreshes.
        }
        if (trial) m_history->setFilter(QString("sweep:%1").arg(trial->sweepId));
        m_history->selectRuns({runId});
        m_tabs->setCurrentWidget(m_history);
        statusBar()->showMessage(tr("Run %1 in History%2.").arg(runId).arg(trial ? tr(", with the rest of sweep %1 (filter sweep:%1)").arg(trial->sweepId) : QString()), 8000);
    });
    dialog->show();
    m_sweepDialog = dialog;
}

void MainWindow::closeEvent(QCloseEvent* event)
{
    // The config first: a cancelled save keeps the window, and the run shown, as they were.
    if (!maybeSave()) {
        event->ignore();
        return;
    }
    if (m_run->isRemoteRun()) {
        // The run lives on its host: closing only stops watching (History > Attach reopens it).
        m_run->detachRemote();
    } else if (m_run->isRunning()) {
        if (m_askBeforeClosing
            && QMessageBox::question(this, tr("A run is in progress"),
                                     tr("Stop the run (it keeps a checkpoint and can be resumed) and quit?"))
                != QMessageBox::Yes) {
            event->ignore();
            return;
        }
        m_run->stopAndWait();
    }
    QSettings settings;
    settings.setValue("window/geometry", saveGeometry());
    settings.setValue("window/state", saveState());
    event->accept();
}

} // namespace tb::ui
