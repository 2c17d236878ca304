#pragma once
// Open, save and folder dialogs at a size that shows the files. Where no
// desktop supplies its own dialog (a bare X session, a remote desktop), Qt's
// opens at about 520x390, too small to read a folder; these open at the size
// the user last gave one, or 900x560 (within the screen).

#include <QFileDialog>
#include <QString>

class QWidget;

namespace tb::ui {

QString openFileName(QWidget* parent, const QString& caption, const QString& directory = {}, const QString& filter = {});
QString saveFileName(QWidget* parent, const QString& caption, const QString& directory = {}, const QString& filter = {},
                     QFileDialog::Options options = {});
QString existingDirectory(QWidget* parent, const QString& caption, const QString& directory = {});

} // namespace tb::ui
