#pragma once
// Edits to the experiment's config gathered before one ConfigDocument::
// setValues, with what each changed said as people read it ("batch 32 → 64"):
// the Memory planner's Apply and Tune…'s Apply winner both say it so.

#include <QCoreApplication>
#include <QJsonValue>
#include <QStringList>

#include <utility>
#include <vector>

namespace tb::ui {

struct ConfigEdits {
    std::vector<std::pair<QString, QJsonValue>> values;
    QStringList changes;
    // Records `path` = value when what it shows changes (`was` to `now`).
    void set(const QString& path, const QString& label, const QJsonValue& value, const QString& was, const QString& now)
    {
        if (was == now) return;
        values.emplace_back(path, value);
        changes << QCoreApplication::translate("ConfigEdits", "%1 %2 → %3").arg(label, was, now);
    }
};

} // namespace tb::ui
