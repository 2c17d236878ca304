#include "FileDialogs.h"

#include <QGuiApplication>
#include <QScreen>
#include <QSettings>

namespace tb::ui {
namespace {

QString run(QFileDialog& dialog)
{
    QSettings settings;
    const QByteArray geometry = settings.value("fileDialog/geometry").toByteArray();
    if (geometry.isEmpty() || !dialog.restoreGeometry(geometry)) {
        QSize size(900, 560);
        if (const QScreen* screen = dialog.screen() ? dialog.screen() : QGuiApplication::primaryScreen()) {
            size = size.boundedTo(screen->availableGeometry().size() * 0.9);
        }
        dialog.resize(size);
    }
    const bool accepted = dialog.exec() == QDialog::Accepted;
    settings.setValue("fileDialog/geometry", dialog.saveGeometry());
    const QStringList files = dialog.selectedFiles();
    return accepted && !files.isEmpty() ? files.first() : QString();
}

} // namespace

QString openFileName(QWidget* parent, const QString& caption, const QString& directory, const QString& filter)
{
    QFileDialog dialog(parent, caption, directory, filter);
    dialog.setAcceptMode(QFileDialog::AcceptOpen);
    dialog.setFileMode(QFileDialog::ExistingFile);
    return run(dialog);
}

QString saveFileName(QWidget* parent, const QString& caption, const QString& directory, const QString& filter,
                     QFileDialog::Options options)
{
    QFileDialog dialog(parent, caption, directory, filter);
    dialog.setAcceptMode(QFileDialog::AcceptSave);
    dialog.setFileMode(QFileDialog::AnyFile);
    dialog.setOptions(dialog.options() | options);
    return run(dialog);
}

QString existingDirectory(QWidget* parent, const QString& caption, const QString& directory)
{
    QFileDialog dialog(parent, caption, directory);
    dialog.setFileMode(QFileDialog::Directory);
    dialog.setOption(QFileDialog::ShowDirsOnly, true);
    return run(dialog);
}

} // namespace tb::ui
