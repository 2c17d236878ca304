#pragma once
// User text (run names, paths, error messages) is shown as plain text: a run
// named "<b>x</b>" reads "<b>x</b>", it is not rendered as HTML.

#include <QLabel>
#include <QMessageBox>

namespace tb::ui {

inline QLabel* plainLabel(QWidget* parent, const QString& text = {})
{
    auto* label = new QLabel(parent);
    label->setTextFormat(Qt::PlainText);
    label->setText(text);
    return label;
}

inline QMessageBox::StandardButton plainMessage(QWidget* parent, QMessageBox::Icon icon, const QString& title,
                                                const QString& text,
                                                QMessageBox::StandardButtons buttons = QMessageBox::Ok,
                                                QMessageBox::StandardButton defaultButton = QMessageBox::NoButton)
{
    QMessageBox box(icon, title, text, buttons, parent);
    box.setTextFormat(Qt::PlainText);
    if (defaultButton != QMessageBox::NoButton) box.setDefaultButton(defaultButton);
    return static_cast<QMessageBox::StandardButton>(box.exec());
}

inline void plainWarning(QWidget* parent, const QString& title, const QString& text)
{
    plainMessage(parent, QMessageBox::Warning, title, text);
}

} // namespace tb::ui
