#include "ConfigDocument.h"

#include <QFile>
#include <QStringDecoder>
#include <QFileInfo>
#include <QJsonDocument>
#include <QJsonArray>
#include <QJsonObject>
#include <QSaveFile>

#include <functional>

#include <nlohmann/json.hpp>

namespace tb::ui {

ConfigDocument::ConfigDocument(QObject* parent) : QObject(parent) { loadText("{}", "untitled.json"); }

bool ConfigDocument::loadFile(const QString& path, QString* error)
{
    QFile file(path);
    if (!file.open(QIODevice::ReadOnly)) {
        if (error) *error = tr("Cannot open %1: %2").arg(path, file.errorString());
        return false;
    }
    constexpr qint64 kMaxBytes = 16 << 20;
    if (file.size() > kMaxBytes) {
        if (error) *error = tr("%1 is %2 MiB, too large for a config (at most 16 MiB); it was not opened.")
                                .arg(path).arg(file.size() >> 20);
        return false;
    }
    const QByteArray bytes = file.readAll();
    // Saving re-encodes as UTF-8: a file in another encoding would change
    // silently. Refuse it instead, and leave it as it is.
    QStringDecoder utf8(QStringDecoder::Utf8, QStringDecoder::Flag::Stateless);
    const QString text = utf8.decode(bytes);
    if (utf8.hasError() || bytes.contains('\0')) {
        if (error) {
            // Binary data is not a config in another encoding: iconv would not help.
            int control = 0;
            const auto head = bytes.left(4096);
            for (const char c : head) control += (static_cast<unsigned char>(c) < 0x20 && c != '\n' && c != '\r' && c != '\t');
            if (bytes.contains('\0') || control * 20 > head.size()) {
                *error = tr("%1 is not a text file (it holds binary data), so it is not an experiment config; "
                            "it was not opened and the current config is unchanged.").arg(path);
            } else {
                *error = tr("%1 is not UTF-8 text, so it was not opened (saving it would change its bytes). "
                            "Convert it to UTF-8 first, for example with iconv.").arg(path);
            }
        }
        return false;
    }
    // Only an experiment config replaces the current one.
    QJsonParseError parse;
    const auto json = QJsonDocument::fromJson(bytes, &parse);
    if (parse.error != QJsonParseError::NoError) {
        if (error) {
            const auto upTo = bytes.left(parse.offset);
            *error = tr("%1 is not a JSON document (line %2: %3); it was not opened and the current config is unchanged.")
                         .arg(path)
                         .arg(upTo.count('\n') + 1)
                         .arg(parse.errorString());
        }
        return false;
    }
    // An experiment config is an object with at least one of the keys the
    // config parser reads at its top level (name, device, model, data, ...).
    bool config = false;
    if (json.isObject()) {
        const auto object = json.object();
        for (const auto& field : configFieldPaths()) {
            config = config || object.contains(QString::fromStdString(field.substr(0, field.find('.'))));
        }
    }
    if (!config) {
        if (error) {
            *error = tr("%1 is JSON but not an experiment config: %2; it was not opened and the current config is "
                        "unchanged.")
                         .arg(path, json.isObject()
                                        ? tr("it has no model, data, optim or train section, nor any other config field")
                                        : tr("its top level is not an object { ... }"));
        }
        return false;
    }
    m_path = QFileInfo(path).absoluteFilePath();
    m_displayName = QFileInfo(path).fileName();
    m_text = text;
    revalidate();
    setModified(false);
    Q_EMIT fileChanged(m_path);
    Q_EMIT changed();
    return true;
}

void ConfigDocument::loadText(const QString& text, const QString& displayName)
{
    m_path.clear();
    m_displayName = displayName;
    m_text = text;
    revalidate();
    setModified(false);
    Q_EMIT fileChanged(m_path);
    Q_EMIT changed();
}

bool ConfigDocument::save(QString* error)
{
    if (m_path.isEmpty()) {
        if (error) *error = tr("This config has no file yet; use Save As.");
        return false;
    }
    return saveAs(m_path, error);
}

bool ConfigDocument::saveAs(const QString& path, QString* error)
{
    // QSaveFile writes beside and renames: a failed save never truncates the old file.
    QSaveFile file(path);
    if (!file.open(QIODevice::WriteOnly) || file.write(m_text.toUtf8()) < 0 || !file.commit()) {
        if (error) *error = tr("Cannot save %1: %2").arg(path, file.errorString());
        return false;
    }
    const bool moved = QFileInfo(path).absoluteFilePath() != m_path;
    m_path = QFileInfo(path).absoluteFilePath();
    m_displayName = QFileInfo(path).fileName();
    setModified(false);
    if (moved) {
        revalidate(); // relative data paths now resolve against the new folder
        Q_EMIT fileChanged(m_path);
        Q_EMIT changed();
    }
    return true;
}

void ConfigDocument::setText(const QString& text)
{
    if (text == m_text) return;
    m_text = text;
    revalidate();
    setModified(true);
    Q_EMIT changed();
}

void ConfigDocument::setValue(const QString& path, const QJsonValue& value) { setValues({{path, value}}); }

void ConfigDocument::setValues(const std::vector<std::pair<QString, QJsonValue>>& values)
{
    if (!m_jsonOk) return; // the form is read-only while the JSON text does not parse
    // Edited as ordered JSON: the user's key order survives a form edit (a
    // QJsonObject would sort the keys); new keys go last in their object.
    using Ordered = nlohmann::ordered_json;
    Ordered document;
    try {
        document = Ordered::parse(m_text.toStdString());
    } catch (const Ordered::exception&) {
        return; // m_jsonOk says it parses; nothing to do if it somehow does not
    }
    const Ordered before = document;
    for (const auto& [path, value] : values) {
        const QStringList keys = path.split('.');
        std::function<void(Ordered&, int)> assign = [&](Ordered& object, int depth) {
            const std::string key = keys[depth].toStdString();
            if (depth + 1 == keys.size()) {
                if (value.isUndefined()) {
                    object.erase(key);
                } else {
                    // Through JSON text: a QJsonValue's number keeps its shortest form.
                    const QByteArray bytes = QJsonDocument(QJsonArray{value}).toJson(QJsonDocument::Compact);
                    object[key] = Ordered::parse(bytes.toStdString()).at(0);
                }
                return;
            }
            if (!object.contains(key) || !object[key].is_object()) {
                if (value.isUndefined()) return; // nothing to remove
                object[key] = Ordered::object();
            }
            assign(object[key], depth + 1);
            if (object[key].empty()) object.erase(key);
        };
        assign(document, 0);
    }
    if (document == before) return;
    m_text = QString::fromStdString(document.dump(4)) + "\n";
    revalidate();
    setModified(true);
    Q_EMIT changed();
}

QJsonValue ConfigDocument::value(const QString& path) const
{
    QJsonValue current = m_object;
    for (const auto& key : path.split('.')) {
        if (!current.isObject()) return QJsonValue(QJsonValue::Undefined);
        current = current.toObject().value(key);
    }
    return current;
}

std::optional<RunConfig> ConfigDocument::config() const { return m_config; }

void ConfigDocument::setModified(bool modified)
{
    if (m_modified == modified) return;
    m_modified = modified;
    Q_EMIT modifiedChanged(modified);
}

void ConfigDocument::revalidate()
{
    const QJsonDocument doc = QJsonDocument::fromJson(m_text.toUtf8());
    m_jsonOk = doc.isObject();
    if (m_jsonOk) m_object = doc.object();
    m_issues.clear();
    m_config.reset();
    const std::string baseDir = m_path.isEmpty() ? std::string() : QFileInfo(m_path).absolutePath().toStdString();
    try {
        m_config = parseConfig(m_text.toStdString(), m_displayName.toStdString(), baseDir);
    } catch (const ConfigError& e) {
        m_issues = e.issues();
    }
    m_effective = {};
    std::optional<RunConfig> effective = m_config;
    if (!effective) {
        // The defaults of the config's model type (or the default model's).
        const QJsonValue type = value("model.type");
        const QJsonObject minimal{{"model", QJsonObject{{"type", type.isString() ? type : QJsonValue("gpt")}}}};
        for (const QByteArray& text : {QJsonDocument(minimal).toJson(), QByteArray("{}")}) {
            try {
                effective = parseConfig(text.toStdString(), "defaults", {});
                break;
            } catch (const ConfigError&) {
            }
        }
    }
    if (effective) m_effective = QJsonDocument::fromJson(QByteArray::fromStdString(configToJson(*effective))).object();
}

QJsonValue ConfigDocument::effectiveValue(const QString& path) const
{
    const QJsonValue own = value(path);
    if (!own.isUndefined()) return own;
    QJsonValue current = m_effective;
    for (const auto& key : path.split('.')) {
        if (!current.isObject()) return QJsonValue(QJsonValue::Undefined);
        current = current.toObject().value(key);
    }
    return current;
}

} // namespace tb::ui
