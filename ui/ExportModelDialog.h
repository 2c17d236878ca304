#pragma once
// Export model…: a stored run's weights written as a folder other tools load,
// by `trainbench-cli export-model` (a process of its own: the window stays
// responsive while a 7B is merged and written, and Cancel ends it at once).
// What can be written follows the run: a LoRA run's adapter as a PEFT folder,
// the model with the adapters merged (a quantized base dequantized, in bf16),
// a QLoRA run's merged model quantized again as a bitsandbytes folder, or a
// run's weights as they are. When done the dialog names the folder and what
// it holds. The run bundle (its config, metrics, events and findings as one
// JSON file import-run reads, with its latest checkpoint beside it) is
// offered for every run.

#include <QDialog>
#include <QElapsedTimer>
#include <QTimer>

#include <cstdint>

class QButtonGroup;
class QLabel;
class QLineEdit;
class QProcess;
class QProgressBar;
class QPushButton;
class QRadioButton;

namespace tb::ui {

class ExportModelDialog final : public QDialog {
    Q_OBJECT

public:
    // `configJson` is the run's stored config; `defaultFolder` where the output goes unless changed.
    ExportModelDialog(const QString& dbPath, std::int64_t runId, const QString& runName, const QString& configJson,
                      const QString& defaultFolder, QWidget* parent = nullptr);
    ~ExportModelDialog() override; // ends an export in progress

    enum class Kind { Adapter, Merged, Quantized, Weights, Bundle };
    // The kinds this run offers, the first being the default.
    const std::vector<Kind>& kinds() const { return m_kinds; }
    bool selectKind(Kind kind);
    Kind kind() const;
    void setFolder(const QString& folder);
    QString folder() const; // the bundle's file for Kind::Bundle
    // The arguments export-model is run with.
    QStringList exportArguments() const;

    QPushButton* exportButton() const { return m_export; }
    QProgressBar* progressBar() const { return m_progress; }
    QString statusText() const;
    bool running() const { return m_process != nullptr; }
    bool succeeded() const { return m_succeeded; }
    // Replace without asking (tests; the user is asked).
    void setConfirmReplace(bool ask) { m_askReplace = ask; }

public Q_SLOTS:
    void startOrCancel();

Q_SIGNALS:
    // Done: the sentence for the status bar ("Exported run 3's adapter to DIR").
    void exported(const QString& message);

private:
    void finished(int code, bool crashed);
    void setRunning(bool running);
    QString kindWords(Kind kind) const;

    QString m_dbPath;
    std::int64_t m_runId;
    QString m_runName;
    std::vector<Kind> m_kinds;
    QButtonGroup* m_group;
    QLineEdit* m_folder;
    QPushButton* m_browse;
    QPushButton* m_export;
    QPushButton* m_close;
    QPushButton* m_openFolder;
    QProgressBar* m_progress;
    QLabel* m_status;
    QProcess* m_process = nullptr;
    QElapsedTimer m_clock;
    QTimer m_tick;
    QString m_stdout, m_stderr;
    bool m_cancelled = false;
    bool m_succeeded = false;
    bool m_askReplace = true;
};

} // namespace tb::ui
