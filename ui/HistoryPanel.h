#pragma once
// Past experiments: a run table over the store (filter, sort, multi-select,
// rows fetched as they scroll into view), the selected runs' loss and memory
// curves overlaid with a stable colour per run, a diff of their configs
// showing only what differs, and per-run name, tags and note. Delete asks
// first; CSV export writes the selected runs' metrics in long format.
// Reads use a read-only connection; edits run off the GUI thread.

#include <QAbstractTableModel>
#include <QWidget>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "RunTableModel.h"
#include "store/RunStore.h"

class QCheckBox;
class QComboBox;
class QMenu;
class QLabel;
class QLineEdit;
class QPlainTextEdit;
class QPushButton;
class QSlider;
class QSortFilterProxyModel;
class QTableView;
class QTableWidget;
class QTabWidget;

namespace tb::ui {

class ExportModelDialog;
class MetricPlot;
class OverlayPlot;

class HistoryPanel final : public QWidget {
    Q_OBJECT

public:
    explicit HistoryPanel(QWidget* parent = nullptr);

    void setDatabasePath(const QString& path);
    // Re-reads the store with the current filter; false (and the message
    // shown) when the filter or the database cannot be read.
    bool refresh();
    bool setFilter(const QString& filter);
    void selectRuns(const std::vector<std::int64_t>& ids);
    std::vector<std::int64_t> selectedRunIds() const;

    RunTableModel* model() const { return m_model; }
    QTableView* table() const { return m_table; }
    OverlayPlot* lossPlot() const { return m_lossPlot; }
    // The right-hand overlay: the metric chosen in metricBox (peak tensor memory at first).
    OverlayPlot* memoryPlot() const { return m_memoryPlot; }
    QComboBox* metricBox() const { return m_metric; }
    // Chooses the right-hand overlay's metric by its stored key ("lr", "grad_norm", ...); false when no selected run has it.
    bool selectMetric(const QString& key);
    QTableWidget* diffTable() const { return m_diff; }
    QLabel* messageLabel() const { return m_message; }
    QTabWidget* tabs() const { return m_tabs; }
    // The selected runs' metrics as CSV (run,step,key,value,wall_time); `rows`
    // gets the number of data rows written.
    bool exportCsv(const QString& path, QString* error, qint64* rows = nullptr) const;
    // Export metrics / Export config after their file dialogs: write, then say
    // where the file went (exported()), or warn with the reason.
    bool exportCsvAndReport(const QString& path);
    // Report…: the selected runs as one self-contained HTML file (their
    // plots as shown, the config differences, names, notes, tags and final
    // metrics), written through a temporary file. False with the reason.
    bool writeReport(const QString& path, QString* error) const;
    QPushButton* reportButton() const { return m_report; }
    bool exportConfigAndReport(const QString& path);
    // Edits of the current run, off the GUI thread; the panel refreshes when done.
    void saveDetails(const QString& name, const QString& tags, const QString& note);
    // The same for a given run (edits left in the form are saved when the selection moves on).
    void saveDetailsOf(qint64 runId, const QString& name, const QString& tags, const QString& note);
    // Deletes the selected runs (after the caller asked); their checkpoint folders too if asked.
    void deleteSelected(bool checkpoints);
    // The overlay also draws each selected run's ancestors (init_from parents).
    void setFollowLineage(bool follow);
    // 0: raw; towards 1: smoother (EMA) loss curves.
    void setSmoothing(double factor);
    // The current run's config, pretty JSON, to a file (temporary file, then rename).
    bool exportConfig(const QString& path, QString* error) const;
    QPushButton* resumeButton() const { return m_resume; }
    QPushButton* attachButton() const { return m_attach; }
    QPushButton* exportModelButton() const { return m_exportModel; }
    QPushButton* chatButton() const { return m_chat; }
    // Export model…: the dialog for the current run (shown, deleted when closed); null without one.
    ExportModelDialog* openExportModel();
    // The run table's header menu for a column: add or remove config fields as
    // columns (grouped by section), hide a built-in column (never ID or Name),
    // show them all again. Public for tests; a right-click on the header opens it.
    std::unique_ptr<QMenu> headerMenu(int column);
    // Config fields shown as columns (kept across sessions).
    void setConfigColumns(const std::vector<std::string>& paths);
    // The ID column, kept in view when the table scrolls sideways.
    QTableView* frozenIdView() const { return m_frozen; }
    QLineEdit* nameEdit() const { return m_name; }

protected:
    bool eventFilter(QObject* watched, QEvent* event) override;

Q_SIGNALS:
    // "Open in editor": a stored run's config as JSON text.
    void openConfigRequested(const QString& json, const QString& name);
    // After an edit has been written (or failed: message non-empty).
    void edited(const QString& message);
    // "Resume": continue a cancelled or interrupted run from its checkpoint.
    void resumeRequested(qint64 runId);
    // "Attach": watch a run that runs on a host again (its copy here is selected).
    void attachRequested(const QString& host, qint64 remoteRunId);
    // "Chat": talk to the selected run's model (two runs: side by side).
    void chatRequested(const QList<qint64>& runIds);
    // An export finished: what was written and where (for the status bar).
    void exported(const QString& message);

private:
    QWidget* buildOverlays(); // the selected runs' curves and their options
    QWidget* buildDetails();  // name, tags, note and the actions on the current run
    void selectionChanged();
    void showOverlay();
    void showDiff();
    void showDetails();
    void askDelete();
    void askExport();
    void runEdit(std::function<void(RunStore&)> edit);
    const RunRecord* currentRun() const;

    QString m_dbPath;
    RunTableModel* m_model;
    QSortFilterProxyModel* m_proxy;
    QTableView* m_table;
    QTableView* m_frozen = nullptr;
    void placeFrozenIdView();
    void setUpColumns();
    QLineEdit* m_filter;
    QLabel* m_message;
    QLabel* m_count;
    QTabWidget* m_tabs;
    OverlayPlot* m_lossPlot;
    OverlayPlot* m_memoryPlot;
    QComboBox* m_metric;
    bool m_fillingMetrics = false;
    QCheckBox* m_byTime;
    QCheckBox* m_logY;
    QCheckBox* m_lineage;
    QSlider* m_smoothing;
    QTableWidget* m_diff;
    QLineEdit* m_name;
    QLineEdit* m_tags;
    QPlainTextEdit* m_note;
    QPushButton* m_save;
    QPushButton* m_delete;
    QPushButton* m_export;
    QPushButton* m_open;
    QPushButton* m_resume;
    QPushButton* m_attach;
    QPushButton* m_exportModel;
    QPushButton* m_chat;
    QPushButton* m_report;
    QPushButton* m_exportConfig;
    bool m_selecting = false; // selectRuns() updates the views once itself
    // The run whose name, tags and note the form shows (edits typed there are
    // saved when the selection moves on).
    qint64 m_detailsRunId = 0;
};

} // namespace tb::ui
