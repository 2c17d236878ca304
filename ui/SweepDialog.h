#pragma once
// Run ▸ Sweep…: start a sweep of the saved experiment from a sweep file
// (`trainbench-cli sweep`, started detached so the queue goes on when the
// window closes), and review the store's sweeps: each trial's values,
// status, run and metric with the best marked, the metric against each
// varied field (scatter) and across all of them (parallel coordinates).
// Stop asks the sweep to checkpoint its trials and stop; Resume continues
// it; Open shows a trial's run in History.

#include <QDialog>
#include <QElapsedTimer>

#include <optional>

#include "store/RunStore.h"
#include "tune/Sweep.h"

class QComboBox;
class QCustomPlot;
class QDoubleSpinBox;
class QLabel;
class QLineEdit;
class QPushButton;
class QSpinBox;
class QTableWidget;
class QTimer;

namespace tb::ui {

class SweepDialog final : public QDialog {
    Q_OBJECT

public:
    // configPath: the saved experiment a new sweep trains (empty: only review).
    SweepDialog(const QString& databasePath, const QString& configPath, QWidget* parent = nullptr);

    QLineEdit* sweepFileEdit() const { return m_file; }
    QDoubleSpinBox* budgetBox() const { return m_budget; }
    QSpinBox* parallelBox() const { return m_parallel; }
    QComboBox* sweepBox() const { return m_sweeps; }
    QComboBox* fieldBox() const { return m_field; }
    QTableWidget* trialTable() const { return m_table; }
    QCustomPlot* scatterPlot() const { return m_scatter; }
    QCustomPlot* parallelPlot() const { return m_coordinates; }
    QPushButton* startButton() const { return m_start; }
    QPushButton* stopButton() const { return m_stop; }
    QPushButton* resumeButton() const { return m_resume; }
    QString statusText() const;
    // Whether a sweep process holds the sweep now (its lock in the store's folder).
    bool sweepRunning(std::int64_t sweepId) const;

public Q_SLOTS:
    // Starts `sweep` for the experiment and the file chosen (detached); the
    // sweep is selected once it reaches the store. Returns the message shown.
    QString startSweep();
    // Re-reads the store (every 2 s while a sweep of it runs).
    void refresh();
    void selectSweep(std::int64_t sweepId);

Q_SIGNALS:
    // Open: the run of the selected trial.
    void openRunRequested(qint64 runId);
    void message(const QString& text);

private:
    void showSweep();
    void plotScatter();
    void plotCoordinates();
    void stopSweep();
    void resumeSweep();
    bool launch(const QStringList& args, const QString& what);
    QString lockPath(std::int64_t sweepId) const;

    QString m_db, m_config;
    QLineEdit* m_file;
    QDoubleSpinBox* m_budget;
    QSpinBox* m_parallel;
    QPushButton* m_start;
    QLabel* m_status;
    QComboBox* m_sweeps;
    QTableWidget* m_table;
    QComboBox* m_field;
    QCustomPlot* m_scatter;
    QCustomPlot* m_coordinates;
    QPushButton* m_stop;
    QPushButton* m_resume;
    QPushButton* m_open;
    QTimer* m_timer;
    std::vector<SweepRecord> m_records;
    std::vector<bool> m_running; // m_records' runners, as the last refresh found them
    std::optional<SweepSpec> m_spec; // the selected sweep's
    int m_best = -1;                 // the selected sweep's best finished trial
    std::optional<std::size_t> m_waitingFor; // a sweep being started: how many there were
    std::int64_t m_started = 0;              // the id the command answered with
    // Since a command answered: for a while the list is refreshed even with
    // no runner seen (one on a slow machine, or a host's, may take its lock later).
    QElapsedTimer m_answered;
};

} // namespace tb::ui
