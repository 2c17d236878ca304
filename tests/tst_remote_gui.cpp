// The window with runs on a host, against the real sshd of tst_remote.py
// (which starts it, saves the host "gpu" and runs this binary): Attach from
// History shows the remote run live, with the link in the status bar; a run
// started on the host from the Run tab outlives the window that launched it;
// Stop from the window stops it there; "send data" copies a local text file
// to the host and the run there trains on the copy. Without tst_remote.py's environment
// the cases are skipped (ctest runs this binary through tst_remote only).
#include <QtTest>

#include <QApplication>
#include <QCheckBox>
#include <QLabel>
#include <QPlainTextEdit>
#include <QLineEdit>
#include <QPushButton>
#include <QStatusBar>
#include <QTableView>
#include <QTableWidget>

#include "ExperimentPanel.h"
#include "HostsDialog.h"
#include "HistoryPanel.h"
#include "LossPlot.h"
#include "MainWindow.h"
#include "RunPanel.h"
#include "TestPrinters.h"
#include "store/RunStore.h"

using namespace tb;
using namespace tb::ui;

class TestRemoteGui : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void init();
    void cleanup() { m_window.reset(); }
    void hostsDialogTestsASavedHost();
    void attachFromHistoryShowsTheRemoteRunLive();
    void runStartedOnTheHostOutlivesTheWindowAndStopsFromIt();
    void sendDataCopiesTheLocalDataFileBeforeTraining();

private:
    void openWindow()
    {
        m_window = std::make_unique<MainWindow>(m_localDb);
        m_window->setAskBeforeClosing(false);
        m_window->resize(1400, 900);
        m_window->show();
        QVERIFY(QTest::qWaitForWindowExposed(m_window.get()));
    }
    // The local copy of remote run `remoteId` (History's row for it).
    std::optional<RunRecord> copyOf(qint64 remoteId)
    {
        RunStore store(m_localDb.toStdString(), RunStore::Mode::ReadOnly);
        for (const auto& r : store.listRuns()) {
            if (r.origin.runId == remoteId && r.origin.label == "gpu") return r;
        }
        return std::nullopt;
    }
    QString statusBarLink() const
    {
        for (auto* label : m_window->statusBar()->findChildren<QLabel*>()) {
            if (label->text().startsWith("gpu: ")) return label->text();
        }
        return {};
    }
    QString m_localDb;
    QString m_remoteDb;
    qint64 m_runningRemoteId = 0;
    std::unique_ptr<MainWindow> m_window;
};

void TestRemoteGui::init()
{
    m_localDb = qEnvironmentVariable("TB_TEST_LOCAL_DB");
    m_remoteDb = qEnvironmentVariable("TB_TEST_REMOTE_DB");
    m_runningRemoteId = qEnvironmentVariable("TB_TEST_REMOTE_RUN").toLongLong();
    if (m_localDb.isEmpty() || m_remoteDb.isEmpty() || m_runningRemoteId == 0) {
        QSKIP("run by tst_remote.py, which starts the sshd and the remote run");
    }
    openWindow();
}

void TestRemoteGui::hostsDialogTestsASavedHost()
{
    HostsDialog dialog(m_window.get());
    dialog.show();
    QVERIFY(QTest::qWaitForWindowExposed(&dialog));
    QCOMPARE(dialog.table()->rowCount(), 1);
    QCOMPARE(dialog.table()->item(0, 0)->text(), QString("gpu"));
    // Add…: every field wide enough for its placeholder (they were cut off).
    QStringList narrow;
    bool seen = false;
    QTimer::singleShot(0, &dialog, [&] {
        auto* form = qobject_cast<QDialog*>(QApplication::activeModalWidget());
        if (!form) return;
        seen = true;
        for (auto* edit : form->findChildren<QLineEdit*>()) {
            if (edit->width() < edit->fontMetrics().horizontalAdvance(edit->placeholderText()) + 8) narrow << edit->placeholderText();
        }
        form->reject();
    });
    dialog.addButton()->click();
    QVERIFY(seen);
    QVERIFY2(narrow.isEmpty(), qPrintable(narrow.join(" | ")));
    dialog.table()->selectRow(0);
    QSignalSpy done(&dialog, &HostsDialog::checkDone);
    QSignalSpy tested(&dialog, &HostsDialog::hostTested);
    dialog.testSelected();
    QVERIFY(dialog.busy());
    QVERIFY(done.wait(30000));
    QVERIFY2(dialog.resultLabel()->text().startsWith("gpu: trainbench-cli"), qPrintable(dialog.resultLabel()->text()));
    QCOMPARE(tested.size(), 1);
    QVERIFY(dialog.grab().save(QCoreApplication::applicationDirPath() + "/remote-hosts-dialog.png"));
    // A name already saved is refused before any connection.
    tb::remote::Host again;
    again.name = "gpu";
    again.destination = "nowhere.invalid";
    dialog.addHost(again);
    QVERIFY2(dialog.resultLabel()->text().contains("already saved"), qPrintable(dialog.resultLabel()->text()));
    // A host that does not resolve: one sentence, nothing saved.
    tb::remote::Host missing;
    missing.name = "missing";
    missing.destination = "nowhere.invalid";
    done.clear();
    dialog.addHost(missing);
    QVERIFY(done.wait(30000));
    QVERIFY2(dialog.resultLabel()->text().contains("does not resolve"), qPrintable(dialog.resultLabel()->text()));
    QCOMPARE(dialog.table()->rowCount(), 1);
    // Connecting can be cancelled (there was no way to): a host whose
    // trainbench-cli never answers.
    QTemporaryDir scripts;
    const QString slow = scripts.filePath("slow-cli");
    {
        QFile f(slow);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write("#!/bin/sh\nsleep 60\n");
        f.close();
        QVERIFY(f.setPermissions(f.permissions() | QFileDevice::ExeOwner));
    }
    auto hung = tb::remote::HostBook().find("gpu");
    QVERIFY(hung);
    hung->name = "hung";
    hung->remoteCli = slow.toStdString();
    done.clear();
    dialog.addHost(*hung);
    QVERIFY(dialog.busy() && dialog.cancelButton()->isVisible());
    QTest::qWait(1500); // connected; the command there waits
    QVERIFY(dialog.busy());
    QElapsedTimer sinceCancel;
    sinceCancel.start();
    dialog.cancelButton()->click();
    QVERIFY(done.wait(10000));
    QVERIFY2(sinceCancel.elapsed() < 3000, qPrintable(QString::number(sinceCancel.elapsed())));
    QVERIFY2(dialog.resultLabel()->text().contains("was cancelled"), qPrintable(dialog.resultLabel()->text()));
    QVERIFY(!dialog.busy() && !dialog.cancelButton()->isVisible());
    QCOMPARE(dialog.table()->rowCount(), 1);
}

void TestRemoteGui::attachFromHistoryShowsTheRemoteRunLive()
{
    const auto copy = copyOf(m_runningRemoteId);
    QVERIFY2(copy && copy->status == RunStatus::Running, "the copy of the remote run is listed as running");
    HistoryPanel* history = m_window->historyPanel();
    history->refresh();
    history->selectRuns({copy->id});
    const QString status = history->table()->model()->index(history->table()->currentIndex().row(), 2).data().toString();
    QVERIFY2(history->attachButton()->isEnabled(), "Attach is offered for a run on a host");

    RunPanel* panel = m_window->runPanel();
    QSignalSpy finished(panel, &RunPanel::runFinished);
    QTest::mouseClick(history->attachButton(), Qt::LeftButton);
    QCOMPARE(m_window->tabs()->currentWidget(), panel);
    QTRY_VERIFY_WITH_TIMEOUT(panel->lossPlot()->trainingPointCount() >= 20, 60000);
    QTRY_COMPARE_WITH_TIMEOUT(statusBarLink(), QString("gpu: connected"), 10000);
    QVERIFY(panel->isRemoteRun());
    QVERIFY(m_window->grab().save(QCoreApplication::applicationDirPath() + "/remote-attach.png"));
    // It follows the run to its end; the copy here then says how it ended.
    QVERIFY(finished.wait(180000) || !finished.isEmpty());
    const auto outcome = finished.first().first().value<SessionOutcome>();
    QCOMPARE(outcome.status, RunStatus::Finished);
    QVERIFY2(panel->statusLabel()->text().contains("finished"), qPrintable(panel->statusLabel()->text()));
    QTRY_VERIFY_WITH_TIMEOUT(statusBarLink().isEmpty(), 5000);
    const auto after = copyOf(m_runningRemoteId);
    QVERIFY(after && after->status == RunStatus::Finished && after->stepsDone == after->stepsTotal);
    // Every step of the run reached the plot once (attached mid-run: the first steps come from the host too).
    QCOMPARE(panel->lossPlot()->trainingPointCount(), static_cast<std::int64_t>(after->stepsTotal));
    Q_UNUSED(status);
}

void TestRemoteGui::runStartedOnTheHostOutlivesTheWindowAndStopsFromIt()
{
    m_window->openExample(":/examples/default.json");
    auto* steps = qobject_cast<QLineEdit*>(m_window->experimentPanel()->fieldEditor("train.steps"));
    steps->selectAll();
    QTest::keyClick(steps, Qt::Key_Delete);
    QTest::keyClicks(steps, "100000");
    RunPanel* panel = m_window->runPanel();
    panel->selectHost("gpu");
    QCOMPARE(panel->selectedHost(), QString("gpu"));
    QSignalSpy started(panel, &RunPanel::runStarted);
    QTRY_VERIFY_WITH_TIMEOUT(panel->startButton()->isEnabled(), 20000);
    QTest::mouseClick(panel->startButton(), Qt::LeftButton);
    QVERIFY(started.wait(60000) || !started.isEmpty());
    QTRY_VERIFY2_WITH_TIMEOUT(panel->lossPlot()->trainingPointCount() >= 3, qPrintable(panel->statusLabel()->text()), 60000);
    const qint64 localId = started.first().first().toLongLong();
    qint64 remoteId = 0;
    {
        RunStore store(m_localDb.toStdString(), RunStore::Mode::ReadOnly);
        const auto copy = store.run(localId);
        QVERIFY(copy && copy->origin.label == "gpu");
        remoteId = copy->origin.runId;
    }
    // Closing the window only stops watching.
    QVERIFY(m_window->close());
    m_window.reset();
    QTest::qWait(1500);
    {
        RunStore remote(m_remoteDb.toStdString(), RunStore::Mode::ReadOnly);
        const auto run = remote.run(remoteId);
        QVERIFY2(run && run->status == RunStatus::Running, "the run goes on on the host after the window closed");
    }
    // A new window lists it as running on the host; Attach, then Stop stops it there.
    openWindow();
    HistoryPanel* history = m_window->historyPanel();
    history->refresh();
    history->selectRuns({localId});
    QVERIFY(history->attachButton()->isEnabled());
    QTest::mouseClick(history->attachButton(), Qt::LeftButton);
    panel = m_window->runPanel();
    QSignalSpy finished(panel, &RunPanel::runFinished);
    QTRY_VERIFY_WITH_TIMEOUT(panel->stopButton()->isEnabled() && panel->lossPlot()->trainingPointCount() >= 3, 60000);
    QTest::mouseClick(panel->stopButton(), Qt::LeftButton);
    QVERIFY(finished.wait(120000) || !finished.isEmpty());
    QCOMPARE(finished.first().first().value<SessionOutcome>().status, RunStatus::Cancelled);
    QVERIFY(m_window->grab().save(QCoreApplication::applicationDirPath() + "/remote-stopped.png"));
    RunStore remote(m_remoteDb.toStdString(), RunStore::Mode::ReadOnly);
    QCOMPARE(remote.run(remoteId)->status, RunStatus::Cancelled);
    QCOMPARE(copyOf(remoteId)->status, RunStatus::Cancelled);
}

void TestRemoteGui::sendDataCopiesTheLocalDataFileBeforeTraining()
{
    const QString config = qEnvironmentVariable("TB_TEST_SEND_CONFIG");
    if (config.isEmpty()) QSKIP("tst_remote.py names the config with a local data file");
    RunPanel* panel = m_window->runPanel();
    panel->selectHost("gpu");
    // The bundled example trains on generated data: nothing to send.
    m_window->openExample(":/examples/default.json");
    QTRY_VERIFY(panel->startButton()->isEnabled());
    QVERIFY(panel->sendDataBox()->isVisibleTo(panel));
    QVERIFY(!panel->sendDataBox()->isEnabled());
    QVERIFY(m_window->openConfig(config));
    QTRY_VERIFY(panel->startButton()->isEnabled());
    QVERIFY(panel->sendDataBox()->isEnabled());
    panel->sendDataBox()->setChecked(true);
    QSignalSpy finished(panel, &RunPanel::runFinished);
    QTest::mouseClick(panel->startButton(), Qt::LeftButton);
    QVERIFY(finished.wait(180000) || !finished.isEmpty());
    const auto outcome = finished.first().first().value<SessionOutcome>();
    QVERIFY2(outcome.status == RunStatus::Finished, outcome.message.c_str());
    const QString log = panel->logView()->toPlainText();
    QVERIFY2(log.contains("data: sent ") && log.contains(m_remoteDb + "-data/"), qPrintable(log));
    QVERIFY(m_window->grab().save(QCoreApplication::applicationDirPath() + "/remote-send-data.png"));
    // The run on the host trained on the copy.
    RunStore remote(m_remoteDb.toStdString(), RunStore::Mode::ReadOnly);
    const auto runs = remote.listRuns();
    QVERIFY(!runs.empty());
    const auto& newest = *std::max_element(runs.begin(), runs.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
    QVERIFY2(QString::fromStdString(newest.configJson).contains(m_remoteDb + "-data/"), newest.configJson.c_str());
}

QTEST_MAIN(TestRemoteGui)
#include "tst_remote_gui.moc"
