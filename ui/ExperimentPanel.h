#pragma once
// The config editor: a form for the common fields and a JSON view of the
// whole config, kept in sync both ways through the ConfigDocument. Each
// field shows core's validation message beside it as you type.

#include <QFutureWatcher>
#include <QTimer>
#include <QPointer>
#include <QWidget>

#include <vector>

#include "config/RunConfig.h"
#include "gpu/Catalogue.h"

class QComboBox;
class QJsonValue;
class QFormLayout;
class QLabel;
class QPushButton;
class QPlainTextEdit;
class QTextBrowser;

namespace tb::ui {

class DatasetBrowser;

class ConfigDocument;
class LearningRatePlot;
class GpuTargetModel;
class StepDeriver;

// The data preview of an hf model with text or jsonl data, made off the GUI thread.
struct DataPreview {
    QString key;    // what it was made for
    QString header; // "First document (line 1): 57 tokens ..." or the error
    QString html;   // the tokens, alternately shaded
    bool error = false;
};

class ExperimentPanel final : public QWidget {
    Q_OBJECT

public:
    explicit ExperimentPanel(ConfigDocument* document, QWidget* parent = nullptr);

    // For tests and keyboard users: the editor of a JSON path, and its message.
    QWidget* fieldEditor(const QString& path) const;
    QString fieldMessage(const QString& path) const;
    // Problems of settings the form has no field for (shown under the JSON).
    QString otherIssuesText() const;
    QPlainTextEdit* jsonView() const { return m_json; }
    // The GPU the estimate line plans for (the Hardware panel's target).
    // The window's target GPU: the estimate follows its changes.
    void setTargetModel(GpuTargetModel* targets);
    // The window's deriver: the config's own step is traced there and its
    // estimate shown once derived, the plan the Memory planner shows.
    void setStepDeriver(StepDeriver* deriver);
    // The current config's memory estimate, as shown under the form.
    QString estimateText() const;
    // File › Open model folder…: model.type hf with that folder, its sizes
    // left to its config.json, and token-id data.
    void openModelFolder(const QString& folder);
    // The read-only architecture line of an hf model (empty otherwise).
    // The memory estimate line under the form.
    QLabel* estimateLabel() const { return m_estimate; }
    QString architectureText() const;
    // The data preview's header line (empty while hidden): the first document's
    // token count, or why there is none.
    QString dataPreviewHeader() const;
    // The preview's tokens as plain text.
    QString dataPreviewTokens() const;
    // Browse data… (Ctrl+Shift+D): the dataset browser for the config's data (shown; deleted when closed); null without one.
    DatasetBrowser* openDatasetBrowser();
    QPushButton* browseDataButton() const { return m_browseData; }

Q_SIGNALS:
    // "Plan…" next to the estimate: open the memory planner.
    void planRequested();

private:
    QWidget* buildForm(); // the form's fields, in a scroll area
    enum class Kind { Text, Integer, Number, Choice, Flag, Path, List };
    static QString fieldText(const QJsonValue& v);
    // A field's default, from the config parser's (configToJson of a default RunConfig).
    static QString defaultText(const QString& path);
    struct Field {
        QString path;
        Kind kind;
        QWidget* editor = nullptr;
        QLabel* message = nullptr;
    };
    void addField(QFormLayout* form, const QString& label, const QString& path, Kind kind,
                  const QStringList& choices = {}, const QString& tip = {});
    void refreshFromDocument();
    void fieldEdited(const Field& field);
    // A file for a path field (data.path, model.path), which also sets what it is for.
    void browseFile(const QString& field);
    void updateEstimate();
    void refreshArchitecture();
    void updateEstimateFor(const RunConfig& config);
    void updatePreview();
    void updateScheduleAndTargets();

    ConfigDocument* m_document;
    std::vector<Field> m_fields;
    QPlainTextEdit* m_json;
    QLabel* m_otherIssues;
    QLabel* m_estimate;
    QLabel* m_architecture;
    LearningRatePlot* m_schedule = nullptr;
    QLabel* m_scheduleSummary = nullptr;
    QWidget* m_previewHost;
    QLabel* m_previewHeader;
    QPushButton* m_browseData;
    QTextBrowser* m_preview;
    QString m_previewKey;
    QFutureWatcher<DataPreview> m_previewWatcher;
    GpuTargetModel* m_targets = nullptr;
    QPointer<StepDeriver> m_deriver;
    QTimer m_jsonDebounce;
    bool m_updating = false;
};

} // namespace tb::ui
