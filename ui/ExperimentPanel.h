#pragma once
// The config editor: a form for the common fields and a JSON view of the
// whole config, kept in sync both ways through the ConfigDocument. Each
// field shows core's validation message beside it as you type.

#include <QTimer>
#include <QWidget>

#include <vector>

#include "config/RunConfig.h"
#include "gpu/Catalogue.h"

class QComboBox;
class QFormLayout;
class QLabel;
class QPlainTextEdit;

namespace tb::ui {

class ConfigDocument;

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
    void setTarget(const GpuTarget& target);
    // The current config's memory estimate, as shown under the form.
    QString estimateText() const;
    // File › Open model folder…: model.type hf with that folder, its sizes
    // left to its config.json, and token-id data.
    void openModelFolder(const QString& folder);
    // The read-only architecture line of an hf model (empty otherwise).
    QString architectureText() const;

Q_SIGNALS:
    // "Plan…" next to the estimate: open the memory planner.
    void planRequested();

private:
    enum class Kind { Text, Integer, Number, Choice, Flag, Path };
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

    ConfigDocument* m_document;
    std::vector<Field> m_fields;
    QPlainTextEdit* m_json;
    QLabel* m_otherIssues;
    QLabel* m_estimate;
    QLabel* m_architecture;
    GpuTarget m_target;
    bool m_haveTarget = false;
    QTimer m_jsonDebounce;
    bool m_updating = false;
};

} // namespace tb::ui
