#pragma once
// Run > Run on a Slurm cluster…: the sbatch script of a data-parallel run
// (core/dist/SlurmScript, the same script 'trainbench-cli slurm' writes),
// shown as it is edited, saved into the shared folder, and submitted with
// sbatch when sbatch is on this machine's PATH.

#include <QDialog>

class QProcess;

class QComboBox;
class QLabel;
class QLineEdit;
class QPlainTextEdit;
class QPushButton;
class QSpinBox;

namespace tb::ui {

class SlurmDialog final : public QDialog {
    Q_OBJECT

public:
    // configPath: the saved config every rank reads; name: its run name.
    SlurmDialog(const QString& configPath, const QString& name, QWidget* parent = nullptr);

    QString script() const;   // empty while the fields are refused
    QString problem() const;  // why, in one sentence
    QString scriptPath() const;
    // Writes the script into the folder; false with problem() set.
    bool saveScript();
    // Saves, then starts sbatch --parsable without blocking the window (a
    // slow or hung slurmctld must not freeze it): submitted() gives the job
    // id, or refused() the reason (also in problem() and the status line).
    void submit();
    bool canSubmit() const;

    QSpinBox* nodes() const { return m_nodes; }
    QComboBox* perNodeKind() const { return m_kind; }
    QSpinBox* perNode() const { return m_perNode; }
    QLineEdit* partition() const { return m_partition; }
    QLineEdit* timeLimit() const { return m_time; }
    QLineEdit* folder() const { return m_folder; }
    QLabel* statusLabel() const { return m_status; }
    QPushButton* submitButton() const { return m_submit; }

Q_SIGNALS:
    void submitted(const QString& jobId);
    void refused(const QString& reason);

private:
    void refresh();

    QString m_configPath, m_name, m_cli, m_sbatch;
    QSpinBox* m_nodes;
    QComboBox* m_kind;
    QSpinBox* m_perNode;
    QLineEdit* m_partition;
    QLineEdit* m_time;
    QLineEdit* m_account;
    QLineEdit* m_folder;
    QPlainTextEdit* m_preview;
    QLabel* m_status;
    QPushButton* m_save;
    QPushButton* m_submit;
    QString m_script, m_problem;
    QProcess* m_sbatchRun = nullptr; // while sbatch runs
};

} // namespace tb::ui
