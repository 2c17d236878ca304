#pragma once
// The Diagnostics panel: preflight findings for the current config (against
// the target GPU, and for a launch here), the explanation of the last failed
// run, and a paste box / drop target that explains any log or traceback.
// Each finding shows its cause, its fix and what its kind means; an
// automatic fix edits the config. Preflight runs off the GUI thread, a
// moment after the last edit. The device audit tab lists every tensor a
// step touches against the run's device (or the GPU it will rent).

#include <QFutureWatcher>
#include <QPointer>
#include <QTimer>
#include <QWidget>

#include <vector>

#include <optional>

#include "diagnose/Finding.h"
#include "diagnose/Preflight.h"
#include "gpu/Catalogue.h"
#include "train/DeviceAudit.h"

class QCheckBox;
class QComboBox;
class QLabel;
class QPlainTextEdit;
class QTabWidget;
class QTableWidget;
class QPushButton;
class QTextBrowser;
class QTreeWidget;

namespace tb::ui {

class ConfigDocument;
class GpuTargetModel;
class StepDeriver;

class DiagnosticsPanel final : public QWidget {
    Q_OBJECT

public:
    explicit DiagnosticsPanel(ConfigDocument* document, QWidget* parent = nullptr);
    ~DiagnosticsPanel() override;

    // The window's target GPU: findings for it follow its changes.
    void setTargetModel(GpuTargetModel* targets);
    // The window's deriver, shared with the Memory planner (the panel has its
    // own until then). A config planned from its own step (a quantized base),
    // and the NF4 alternative of a LoRA run that does not fit, are derived
    // there in the background; preflight runs again when the plan is in.
    void setStepDeriver(StepDeriver* deriver);
    // Block (processing events) until preflight and the plans it asked for are done.
    void waitForDerivedPreflight();
    // A failed run's explanation (SessionOutcome::failureFindings).
    void showFailure(qint64 runId, const std::vector<Finding>& findings);
    // Explains text (pasted, dropped or read from a file) into its own group,
    // off the GUI thread (a 4 MiB log: about 0.1-0.2 s on the development machine).
    void explainText(const QString& text, const QString& source);
    bool explainFile(const QString& path, QString* error = nullptr);
    // Block (processing events) until the preflight or explanation in progress has finished.
    void waitForPreflight();
    void waitForExplanation();

    const std::vector<Finding>& plannedFindings() const { return m_planned; }
    const std::vector<Finding>& launchFindings() const { return m_launch; }
    const std::vector<Finding>& explainedFindings() const { return m_explained; }
    QTreeWidget* findingsView() const { return m_tree; }
    QTextBrowser* detailsView() const { return m_details; }
    QPushButton* applyFixButton() const { return m_apply; }
    QPlainTextEdit* pasteBox() const { return m_paste; }
    QPushButton* explainButton() const { return m_explain; }
    // Selects the first finding of this kind; false when there is none.
    bool selectKind(const QString& kind);

    // The device audit of the current config for `device` ("" = the config's
    // device; a GPU this machine lacks is judged), off the GUI thread.
    void runAudit(const QString& device = QString());
    void waitForAudit();
    const std::optional<DeviceAuditReport>& auditReport() const { return m_audit; }
    QTableWidget* auditTable() const { return m_auditTable; }
    QCheckBox* onlyMisplacedBox() const { return m_onlyMisplaced; }
    QComboBox* auditDeviceBox() const { return m_auditDevice; }
    QTabWidget* tools() const { return m_tools; }

Q_SIGNALS:
    // The verdict of preflight for a launch on this machine: 0 clean, 1 warnings, 2 errors.
    void launchVerdictChanged(const QString& text, int level);

protected:
    void dragEnterEvent(QDragEnterEvent* event) override;
    void dropEvent(QDropEvent* event) override;

private:
    // The device audit: every tensor a step touches, against the run's device.
    QWidget* buildAuditTab();
    struct Result {
        std::vector<Finding> planned;
        std::vector<Finding> launch;
        LocalMachine local; // gathered once, on the first pass
        // Plans preflight asked for and the deriver has not got: config as
        // traced, and its key.
        std::vector<std::pair<RunConfig, std::string>> wanted;
    };
    void schedulePreflight();
    void derivedChanged();
    void showDeriving(); // the summary line, with the plan being derived
    void startPreflight();
    void onPreflightDone();
    void onExplained();
    void rebuild();
    void showSelected();
    void applySelectedFix();
    const Finding* selectedFinding() const;
    void onAudited();
    void fillAuditTable();

    ConfigDocument* m_document;
    GpuTargetModel* m_targets = nullptr;
    QPointer<StepDeriver> m_deriver; // the window's may be destroyed first
    std::vector<std::string> m_awaited; // keys of plans preflight waits for
    QTimer m_debounce;
    QFutureWatcher<Result> m_watcher;
    QFutureWatcher<std::vector<Finding>> m_explainWatcher;
    struct AuditResult {
        std::optional<DeviceAuditReport> report;
        QString error;
    };
    QFutureWatcher<AuditResult> m_auditWatcher;
    bool m_auditing = false;
    std::optional<DeviceAuditReport> m_audit;
    std::optional<LocalMachine> m_local;
    bool m_checking = false; // until onPreflightDone has taken the result
    bool m_pending = false;
    bool m_explaining = false; // until onExplained has taken the result
    std::vector<Finding> m_planned;
    std::vector<Finding> m_launch;
    std::vector<Finding> m_failure;
    std::vector<Finding> m_explained;
    qint64 m_failureRun = 0;
    QString m_explainedSource;

    QLabel* m_summary;
    QTreeWidget* m_tree;
    QTextBrowser* m_details;
    QPushButton* m_apply;
    QPlainTextEdit* m_paste;
    QPushButton* m_explain;
    QPushButton* m_openLog;
    QTabWidget* m_tools;
    QComboBox* m_auditDevice;
    QPushButton* m_auditButton;
    QCheckBox* m_onlyMisplaced;
    QLabel* m_auditSummary;
    QTableWidget* m_auditTable;
};

} // namespace tb::ui
