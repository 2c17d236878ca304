#pragma once
// The config being edited: JSON text as the source of truth, the file it came
// from, whether it has unsaved changes, and the validator's verdict. Both the
// form and the JSON view edit it; each change re-validates with core's rules.

#include <QJsonObject>
#include <QObject>
#include <QString>

#include <optional>
#include <utility>
#include <vector>

#include "config/RunConfig.h"

namespace tb::ui {

class ConfigDocument final : public QObject {
    Q_OBJECT

public:
    explicit ConfigDocument(QObject* parent = nullptr);

    bool loadFile(const QString& path, QString* error);
    // Text that is not a file (a bundled example, a new config): saving asks for a path.
    void loadText(const QString& text, const QString& displayName);
    bool save(QString* error);
    bool saveAs(const QString& path, QString* error);

    QString text() const { return m_text; }
    // From the JSON view: any text, valid or not.
    void setText(const QString& text);
    // From the form: a value at a dotted path ("train.batch_size"); an
    // undefined value removes the key (the default applies).
    void setValue(const QString& path, const QJsonValue& value);
    // Several values as one change (one validation, one changed()).
    void setValues(const std::vector<std::pair<QString, QJsonValue>>& values);
    QJsonValue value(const QString& path) const;

    bool jsonIsObject() const { return m_jsonOk; }
    const std::vector<ConfigIssue>& issues() const { return m_issues; }
    bool isValid() const { return m_issues.empty(); }
    // The validated config (with baseDir set); empty while invalid.
    std::optional<RunConfig> config() const;
    // The value the run takes at a path: the config's own, or, where it leaves
    // the key out, what the config parser gives it (a built-in llama's RoPE,
    // not the GPT's learned positions), so the form shows what will train.
    // While the config is invalid, the defaults of its model type.
    QJsonValue effectiveValue(const QString& path) const;

    bool isModified() const { return m_modified; }
    void setModified(bool modified);
    QString filePath() const { return m_path; }
    QString displayName() const { return m_displayName; }

Q_SIGNALS:
    void changed();
    void modifiedChanged(bool modified);
    void fileChanged(const QString& path);

private:
    void revalidate();
    QString m_text;
    QJsonObject m_object;
    bool m_jsonOk = false;
    std::vector<ConfigIssue> m_issues;
    std::optional<RunConfig> m_config;
    QJsonObject m_effective; // the parsed config written back as JSON (effectiveValue)
    QString m_path;
    QString m_displayName;
    bool m_modified = false;
};

} // namespace tb::ui
