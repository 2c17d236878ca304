#include "HostsDialog.h"

#include <QDialogButtonBox>
#include <QFormLayout>
#include <QFutureWatcher>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QMessageBox>
#include <QPointer>
#include <QPushButton>
#include <QTableWidget>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>

#include <sstream>

#include "PlainText.h"

namespace tb::ui {
namespace {

struct CheckResult {
    tb::remote::HostCheck check;
    QString error;
};

} // namespace

HostsDialog::HostsDialog(QWidget* parent) : QDialog(parent)
{
    qRegisterMetaType<std::vector<tb::remote::RemoteGpu>>();
    setWindowTitle(tr("Hosts"));
    m_table = new QTableWidget(0, 4, this);
    m_table->setHorizontalHeaderLabels({tr("Name"), tr("ssh destination"), tr("trainbench-cli there"), tr("Store there")});
    m_table->horizontalHeader()->setStretchLastSection(true);
    m_table->setSelectionBehavior(QAbstractItemView::SelectRows);
    m_table->setSelectionMode(QAbstractItemView::SingleSelection);
    m_table->setEditTriggers(QAbstractItemView::NoEditTriggers);
    m_table->verticalHeader()->hide();
    m_result = plainLabel(this, tr("Runs on a host go over ssh with your own keys, agent and ~/.ssh/config; nothing runs "
                                   "there but trainbench-cli."));
    m_result->setWordWrap(true);
    m_result->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_add = new QPushButton(tr("&Add…"), this);
    m_test = new QPushButton(tr("&Test connection"), this);
    m_remove = new QPushButton(tr("&Remove…"), this);
    m_cancelCheck = new QPushButton(tr("Ca&ncel"), this);
    m_cancelCheck->setToolTip(tr("Stop connecting (nothing is saved)"));
    m_cancelCheck->hide();
    auto* close = new QPushButton(tr("Close"), this);
    auto* buttons = new QHBoxLayout;
    buttons->addWidget(m_add);
    buttons->addWidget(m_test);
    buttons->addWidget(m_remove);
    buttons->addWidget(m_cancelCheck);
    buttons->addStretch(1);
    buttons->addWidget(close);
    auto* layout = new QVBoxLayout(this);
    layout->addWidget(m_table, 1);
    layout->addWidget(m_result);
    layout->addLayout(buttons);
    resize(760, 360);

    connect(m_add, &QPushButton::clicked, this, &HostsDialog::askForNewHost);
    connect(m_test, &QPushButton::clicked, this, &HostsDialog::testSelected);
    connect(m_remove, &QPushButton::clicked, this, &HostsDialog::removeSelected);
    connect(close, &QPushButton::clicked, this, &QDialog::accept);
    connect(m_cancelCheck, &QPushButton::clicked, this, [this] {
        if (!m_cancel) return;
        m_cancel->store(true);
        m_cancelCheck->setEnabled(false);
        m_result->setText(tr("Cancelling…"));
    });
    connect(m_table, &QTableWidget::itemSelectionChanged, this, [this] { setBusy(m_busy, m_result->text()); });
    m_askKey = [this](const QString& host, const QString& key) {
        return QMessageBox::question(this, tr("New host key"),
                                     tr("%1 is not in your known_hosts yet. Its key is\n\n%2\n\nAccept this key and save it "
                                        "in ~/.ssh/known_hosts? Check it with the server's owner if you are not sure.")
                                         .arg(host, key),
                                     QMessageBox::Yes | QMessageBox::Cancel, QMessageBox::Cancel)
            == QMessageBox::Yes;
    };
    m_askRemove = [this](const QString& host) {
        return QMessageBox::question(this, tr("Remove host"),
                                     tr("Remove %1 from the host list? Runs on it are not touched.").arg(host),
                                     QMessageBox::Yes | QMessageBox::Cancel, QMessageBox::Cancel)
            == QMessageBox::Yes;
    };
    reload();
}

void HostsDialog::reload()
{
    m_table->setRowCount(0);
    try {
        const tb::remote::HostBook book;
        for (const auto& h : book.hosts()) {
            const int row = m_table->rowCount();
            m_table->insertRow(row);
            const QStringList cells{QString::fromStdString(h.name), QString::fromStdString(h.destination),
                                    QString::fromStdString(h.remoteCli),
                                    h.remoteDb.empty() ? tr("(its default)") : QString::fromStdString(h.remoteDb)};
            for (int c = 0; c < cells.size(); ++c) m_table->setItem(row, c, new QTableWidgetItem(cells[c]));
        }
    } catch (const std::exception& e) {
        m_result->setText(QString::fromUtf8(e.what()));
    }
    m_table->resizeColumnsToContents();
    setBusy(false, m_result->text());
}

void HostsDialog::setBusy(bool busy, const QString& text)
{
    m_busy = busy;
    m_result->setText(text);
    const bool selected = !m_table->selectedItems().isEmpty();
    m_add->setEnabled(!busy);
    m_test->setEnabled(!busy && selected);
    m_remove->setEnabled(!busy && selected);
    m_cancelCheck->setVisible(busy);
    m_cancelCheck->setEnabled(busy);
}

void HostsDialog::check(const tb::remote::Host& host, bool acceptNewKey,
                        std::function<void(const tb::remote::HostCheck&, const QString&)> then)
{
    m_cancel = std::make_shared<std::atomic<bool>>(false);
    const auto cancel = m_cancel;
    auto* watcher = new QFutureWatcher<CheckResult>(this);
    connect(watcher, &QFutureWatcher<CheckResult>::finished, this, [watcher, then] {
        const CheckResult r = watcher->result();
        watcher->deleteLater();
        then(r.check, r.error);
    });
    watcher->setFuture(QtConcurrent::run([host, acceptNewKey, cancel] {
        CheckResult r;
        try {
            r.check = tb::remote::checkHost(host, acceptNewKey, cancel.get());
        } catch (const std::exception& e) {
            r.error = QString::fromUtf8(e.what());
        }
        return r;
    }));
}

QString HostsDialog::describe(const tb::remote::Host& host, const tb::remote::HostCheck& check) const
{
    QString text = tr("%1: %2").arg(QString::fromStdString(host.label()), QString::fromStdString(check.version));
    if (check.keyAccepted) text += tr("; host key %1 saved in known_hosts").arg(QString::fromStdString(check.hostKey));
    if (check.gpus.empty()) {
        text += tr("; no GPU there (runs train on its CPU)");
    } else {
        QStringList gpus;
        for (const auto& g : check.gpus) {
            gpus << tr("%1 (%2 GiB)").arg(QString::fromStdString(g.name)).arg(qRound(g.memoryBytes / 1073741824.0));
        }
        text += tr("; GPUs: %1 (now targets in the Hardware panel)").arg(gpus.join(", "));
    }
    return text;
}

void HostsDialog::askForNewHost()
{
    QDialog form(this);
    form.setWindowTitle(tr("Add host"));
    auto* name = new QLineEdit(&form);
    name->setPlaceholderText(tr("gpu-box"));
    auto* destination = new QLineEdit(&form);
    destination->setPlaceholderText(tr("an alias of ~/.ssh/config, or user@host[:port]"));
    auto* cli = new QLineEdit(QStringLiteral("trainbench-cli"), &form);
    auto* store = new QLineEdit(&form);
    store->setPlaceholderText(tr("its default store"));
    auto* options = new QLineEdit(&form);
    options->setPlaceholderText(tr("extra ssh arguments, e.g. -i ~/.ssh/gpu_key"));
    // Wide enough to read every placeholder whole.
    for (QLineEdit* edit : {name, destination, cli, store, options}) {
        edit->setMinimumWidth(edit->fontMetrics().horizontalAdvance(edit->placeholderText()) + 32);
    }
    auto* layout = new QFormLayout(&form);
    layout->addRow(tr("Name"), name);
    layout->addRow(tr("ssh destination"), destination);
    layout->addRow(tr("trainbench-cli there"), cli);
    layout->addRow(tr("Store there"), store);
    layout->addRow(tr("ssh options"), options);
    auto* box = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, &form);
    box->button(QDialogButtonBox::Ok)->setText(tr("Connect and add"));
    layout->addRow(box);
    connect(box, &QDialogButtonBox::accepted, &form, &QDialog::accept);
    connect(box, &QDialogButtonBox::rejected, &form, &QDialog::reject);
    if (form.exec() != QDialog::Accepted) return;
    tb::remote::Host host;
    host.name = name->text().trimmed().toStdString();
    host.destination = destination->text().trimmed().toStdString();
    if (!cli->text().trimmed().isEmpty()) host.remoteCli = cli->text().trimmed().toStdString();
    host.remoteDb = store->text().trimmed().toStdString();
    std::istringstream words(options->text().toStdString());
    for (std::string w; words >> w;) host.sshOptions.push_back(w);
    addHost(host);
}

void HostsDialog::addHost(const tb::remote::Host& host)
{
    try {
        tb::remote::checkHostName(host.name);
        tb::remote::sshDestination(host.destination);
        if (tb::remote::HostBook().find(host.name)) {
            throw std::runtime_error("a host named \"" + host.name + "\" is already saved: choose another name");
        }
    } catch (const std::exception& e) {
        setBusy(false, QString::fromUtf8(e.what()));
        Q_EMIT checkDone();
        return;
    }
    const QString label = QString::fromStdString(host.name);
    setBusy(true, tr("Connecting to %1 (%2)…").arg(label, QString::fromStdString(host.destination)));
    const auto save = [this, host](const tb::remote::HostCheck& result) {
        try {
            tb::remote::HostBook book;
            book.add(host, false);
            book.save();
        } catch (const std::exception& e) {
            setBusy(false, QString::fromUtf8(e.what()));
            Q_EMIT checkDone();
            return;
        }
        reload();
        setBusy(false, tr("Added. %1").arg(describe(host, result)));
        Q_EMIT hostsChanged();
        Q_EMIT hostTested(QString::fromStdString(host.name), result.gpus);
        Q_EMIT checkDone();
    };
    check(host, false, [this, host, label, save](const tb::remote::HostCheck& result, const QString& error) {
        if (!error.isEmpty()) {
            setBusy(false, tr("Not added: %1").arg(error));
            Q_EMIT checkDone();
            return;
        }
        if (!result.unknownHostKey) return save(result);
        if (!m_askKey(label, QString::fromStdString(result.hostKey))) {
            setBusy(false, tr("Not added: the host key %1 was not accepted.").arg(QString::fromStdString(result.hostKey)));
            Q_EMIT checkDone();
            return;
        }
        setBusy(true, tr("Connecting to %1 with the accepted key…").arg(label));
        check(host, true, [this, save](const tb::remote::HostCheck& again, const QString& error2) {
            if (!error2.isEmpty()) {
                setBusy(false, tr("Not added: %1").arg(error2));
                Q_EMIT checkDone();
                return;
            }
            save(again);
        });
    });
}

void HostsDialog::testSelected()
{
    const auto items = m_table->selectedItems();
    if (items.isEmpty()) return;
    const QString name = m_table->item(items.front()->row(), 0)->text();
    const auto host = tb::remote::HostBook().find(name.toStdString());
    if (!host) return reload();
    setBusy(true, tr("Testing %1…").arg(name));
    check(*host, false, [this, host, name](const tb::remote::HostCheck& result, const QString& error) {
        if (!error.isEmpty()) setBusy(false, error);
        else if (result.unknownHostKey) {
            setBusy(false, tr("The host key of %1 is not in known_hosts (it is %2): remove the host and add it again to "
                              "accept it.").arg(name, QString::fromStdString(result.hostKey)));
        } else {
            setBusy(false, describe(*host, result));
            Q_EMIT hostTested(name, result.gpus);
        }
        Q_EMIT checkDone();
    });
}

void HostsDialog::removeSelected()
{
    const auto items = m_table->selectedItems();
    if (items.isEmpty()) return;
    const QString name = m_table->item(items.front()->row(), 0)->text();
    if (!m_askRemove(name)) return;
    try {
        tb::remote::HostBook book;
        book.remove(name.toStdString());
        book.save();
    } catch (const std::exception& e) {
        setBusy(false, QString::fromUtf8(e.what()));
        return;
    }
    reload();
    setBusy(false, tr("Removed %1.").arg(name));
    Q_EMIT hostsChanged();
}

} // namespace tb::ui
