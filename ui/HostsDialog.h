#pragma once
// Run > Hosts…: the GPU servers remote runs go to, kept in the same host list
// as 'trainbench-cli hosts'. Add (the first connection shows the server's key
// for the user to accept), Test (version and GPUs there), Remove.

#include <QDialog>

#include <atomic>
#include <functional>
#include <memory>
#include <vector>

#include "remote/HostCheck.h"

class QLabel;
class QPushButton;
class QTableWidget;

namespace tb::ui {

class HostsDialog final : public QDialog {
    Q_OBJECT

public:
    explicit HostsDialog(QWidget* parent = nullptr);

    // Adds a host after checking it (in the background; the result shows in the dialog).
    void addHost(const tb::remote::Host& host);
    void testSelected();
    void removeSelected();
    // Replaced in tests: whether to accept a host key (message boxes otherwise).
    void setKeyQuestion(std::function<bool(const QString& host, const QString& key)> ask) { m_askKey = std::move(ask); }
    void setRemoveQuestion(std::function<bool(const QString& host)> ask) { m_askRemove = std::move(ask); }
    QTableWidget* table() const { return m_table; }
    QLabel* resultLabel() const { return m_result; }
    QPushButton* addButton() const { return m_add; }
    // Shown while a connection is checked: stops it (the ssh in flight is killed).
    QPushButton* cancelButton() const { return m_cancelCheck; }
    bool busy() const { return m_busy; }

Q_SIGNALS:
    void hostsChanged();
    // A host answered a test: its GPUs (for the Hardware panel's targets).
    void hostTested(const QString& name, const std::vector<tb::remote::RemoteGpu>& gpus);
    // A check ended (tests wait for it).
    void checkDone();

private:
    void reload();
    void askForNewHost();
    // Runs checkHost off the GUI thread; `then` gets the result or the error on the GUI thread.
    void check(const tb::remote::Host& host, bool acceptNewKey,
               std::function<void(const tb::remote::HostCheck&, const QString& error)> then);
    void setBusy(bool busy, const QString& text);
    QString describe(const tb::remote::Host& host, const tb::remote::HostCheck& check) const;

    QTableWidget* m_table;
    QLabel* m_result;
    QPushButton* m_add;
    QPushButton* m_test;
    QPushButton* m_remove;
    QPushButton* m_cancelCheck;
    std::shared_ptr<std::atomic<bool>> m_cancel; // the check in flight's
    bool m_busy = false;
    std::function<bool(const QString&, const QString&)> m_askKey;
    std::function<bool(const QString&)> m_askRemove;
};

} // namespace tb::ui

Q_DECLARE_METATYPE(std::vector<tb::remote::RemoteGpu>)
