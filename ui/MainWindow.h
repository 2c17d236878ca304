#pragma once
// The main window assembles panels (one line each in the constructor) and
// owns menus, shortcuts, recent files and persistence; the panels do the work.

#include <QMainWindow>
#include <QPointer>

#include "run/RunSession.h"

class QLabel;
class QMenu;
class QTabWidget;

namespace tb::ui {

class ConfigDocument;
class DiagnosticsPanel;
class ChatPanel;
class SweepDialog;
class ExperimentPanel;
class GpuTargetModel;
class HardwarePanel;
class HistoryPanel;
class MemoryPlannerPanel;
class RunPanel;

class MainWindow final : public QMainWindow {
    Q_OBJECT

public:
    // dbPath empty: the default store ($TRAINBENCH_DB, XDG data folder).
    explicit MainWindow(const QString& dbPath = {}, QWidget* parent = nullptr);
    ~MainWindow() override;

    bool openConfig(const QString& path);
    void openExample(const QString& resourcePath);
    // File › Open model folder…: a new config for a Hugging Face folder (asks
    // to save the current one first); false when that was cancelled.
    bool openModelFolder(const QString& folder);
    ConfigDocument* document() const { return m_document; }
    ExperimentPanel* experimentPanel() const { return m_experiment; }
    HardwarePanel* hardwarePanel() const { return m_hardware; }
    RunPanel* runPanel() const { return m_run; }
    MemoryPlannerPanel* plannerPanel() const { return m_planner; }
    HistoryPanel* historyPanel() const { return m_history; }
    DiagnosticsPanel* diagnosticsPanel() const { return m_diagnostics; }
    ChatPanel* chatPanel() const { return m_chat; }
    // The Sweeps dialog while it is open (Run ▸ Sweep…), else null.
    SweepDialog* sweepDialog() const;
    // Run ▸ Sweep…: start a sweep of the saved experiment and review the store's sweeps.
    void showSweeps();
    // The central tabs: Run, Memory planner, History, Diagnostics.
    QTabWidget* tabs() const { return m_tabs; }
    // Skips the save/stop questions on close (tests, scripted use).
    void setAskBeforeClosing(bool ask) { m_askBeforeClosing = ask; }
    // Run > Run on several processes… without its question (tests): starts
    // 'trainbench-cli train --nproc N' in the background; its log's path.
    QString startProcesses(int processes);

    // Repairs a restored layout that leaves a docked panel too narrow to use
    // (a saved state can hold one squeezed by a window that grew): such a
    // dock gets its default width back. Runs once, after the first show;
    // returns the panels repaired.
    QStringList repairLayout();

protected:
    void closeEvent(QCloseEvent* event) override;
    void showEvent(QShowEvent* event) override;

private:
    QDockWidget* addPanel(QWidget* panel, const QString& title, Qt::DockWidgetArea area);
    void buildMenus();
    void newConfig();
    void openConfigDialog();
    bool save();
    bool saveAs();
    bool maybeSave();
    void openDatabase();
    void resumeLatest();
    void showHosts();
    // Data parallel: both read the config from its file, saved first.
    bool savedConfigFor(const QString& what);
    void runOnSeveralProcesses();
    void runOnSlurm();
    void about();
    void updateTitle();
    void showStore(const QString& path);
    void updateRecentMenu();
    void rememberRecent(const QString& path);
    void onDocumentChanged();

    ConfigDocument* m_document;
    ExperimentPanel* m_experiment;
    GpuTargetModel* m_targets;
    HardwarePanel* m_hardware;
    RunPanel* m_run;
    MemoryPlannerPanel* m_planner;
    HistoryPanel* m_history;
    DiagnosticsPanel* m_diagnostics;
    ChatPanel* m_chat;
    QTabWidget* m_tabs;
    QPointer<SweepDialog> m_sweepDialog;
    QMenu* m_recentMenu = nullptr;
    QLabel* m_dbLabel;
    QLabel* m_runLabel;
    QLabel* m_targetLabel;
    QLabel* m_linkLabel;
    QAction* m_startAction = nullptr;
    QAction* m_stopAction = nullptr;
    QAction* m_resumeAction = nullptr;
    bool m_askBeforeClosing = true;
    bool m_layoutRepaired = false;
};

} // namespace tb::ui
