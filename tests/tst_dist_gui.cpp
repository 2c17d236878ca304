// The window's data-parallel entry points: Run > Run on a Slurm cluster…
// (the same sbatch script as 'trainbench-cli slurm', refusals shown as one
// sentence, saved into the shared folder) and Run > Run on several
// processes… (trainbench-cli train --nproc in the background, shown live in
// the Run panel, stopped and resumed from it, and listed in History with its
// world size). Screenshots: slurm-dialog.png, nproc-run.png,
// nproc-stopping.png and nproc-history.png beside this binary.
#include <QtTest>

#include <QComboBox>
#include <QDir>
#include <QElapsedTimer>
#include <QPushButton>
#include <QSignalSpy>
#include <QFile>
#include <QLabel>
#include <QLineEdit>
#include <QSpinBox>
#include <QTabWidget>
#include <QTemporaryDir>

#include <csignal>

#include "TestPaths.h"
#include "ConfigDocument.h"
#include "HistoryPanel.h"
#include "LossPlot.h"
#include "RunPanel.h"
#include "RunTableModel.h"
#include "MainWindow.h"
#include "SlurmDialog.h"
#include "config/RunConfig.h"
#include "store/RunStore.h"

using namespace tb;
using namespace tb::ui;

namespace {

const char* kConfig = R"({
  "name": "dp-window",
  "device": "cpu",
  "model": {"type": "gpt", "n_layer": 2, "d_model": 64, "n_head": 4, "positional_encoding": "learned", "dropout": 0.0},
  "data": {"source": "addition", "digits": 3},
  "optim": {"optimizer": "adamw", "lr": 0.002, "warmup_steps": 5},
  "train": {"batch_size": 4, "steps": 40, "seed": 2, "precision": "fp32", "eval_every": 20, "dist_timeout_s": 30}
})";

} // namespace

class TestDistGui : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void initTestCase()
    {
        QVERIFY(m_dir.isValid());
        m_config = m_dir.filePath("dp-window.json");
        QFile f(m_config);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write(kConfig);
    }

    void slurmDialogShowsTheScriptAndRefusals()
    {
        SlurmDialog dialog(m_config, "dp-window");
        dialog.folder()->setText(m_dir.filePath("shared"));
        dialog.nodes()->setValue(2);
        dialog.perNode()->setValue(4);
        dialog.partition()->setText("gpu");
        dialog.timeLimit()->setText("12:00:00");
        QString s = dialog.script();
        for (const char* line : {"#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=4", "#SBATCH --gpus-per-node=4",
                                 "#SBATCH --partition=gpu", "#SBATCH --time=12:00:00", "#SBATCH --signal=USR1@120"}) {
            QVERIFY2(s.contains(line), line);
        }
        QVERIFY(s.contains(m_config));
        dialog.perNodeKind()->setCurrentIndex(1); // CPU nodes
        s = dialog.script();
        QVERIFY(s.contains("#SBATCH --ntasks-per-node=4") && !s.contains("--gpus-per-node"));
        // A refusal: one sentence in the dialog, nothing to save or submit.
        dialog.timeLimit()->setText("2 hours");
        QVERIFY(dialog.script().isEmpty());
        QVERIFY2(dialog.statusLabel()->text().contains("not a Slurm time"), qPrintable(dialog.statusLabel()->text()));
        QVERIFY(!dialog.saveScript());
        dialog.timeLimit()->setText("1-00:00:00");
        QVERIFY(!dialog.script().isEmpty());
        QVERIFY(dialog.saveScript());
        QFile saved(dialog.scriptPath());
        QVERIFY(saved.open(QIODevice::ReadOnly));
        QCOMPARE(QString::fromUtf8(saved.readAll()), dialog.script());
        dialog.resize(900, 700);
        dialog.show();
        QVERIFY(QTest::qWaitForWindowExposed(&dialog));
        QVERIFY(dialog.grab().save(QCoreApplication::applicationDirPath() + "/slurm-dialog.png"));
    }

    void slurmDialogSubmitsWithoutBlockingTheWindow()
    {
        // A stand-in sbatch on PATH: slow, then the job id (or a refusal).
        const QString bin = m_dir.filePath("fake-bin");
        QVERIFY(QDir().mkpath(bin));
        QFile fake(bin + "/sbatch");
        QVERIFY(fake.open(QIODevice::WriteOnly));
        fake.write("#!/bin/sh\nsleep 1\nif [ -f \"$TB_FAKE_SBATCH_REFUSE\" ]; then echo 'sbatch: error: invalid partition'; exit 1; fi\n"
                   "echo '4242;cluster'\n");
        fake.close();
        fake.setPermissions(fake.permissions() | QFileDevice::ExeOwner);
        const QByteArray path = qgetenv("PATH");
        qputenv("PATH", (bin + ":" + path).toUtf8());
        const QString refuse = m_dir.filePath("refuse");
        qputenv("TB_FAKE_SBATCH_REFUSE", refuse.toUtf8());
        SlurmDialog dialog(m_config, "dp-window");
        qputenv("PATH", path);
        dialog.folder()->setText(m_dir.filePath("shared-submit"));
        QVERIFY(dialog.canSubmit());
        QSignalSpy submitted(&dialog, &SlurmDialog::submitted);
        QSignalSpy refused(&dialog, &SlurmDialog::refused);
        QElapsedTimer clock;
        clock.start();
        dialog.submit();
        // submit() returns at once; the window keeps running while sbatch does.
        QVERIFY2(clock.elapsed() < 500, qPrintable(QString::number(clock.elapsed())));
        QVERIFY(!dialog.submitButton()->isEnabled());
        QVERIFY2(dialog.statusLabel()->text().startsWith("Submitting with"), qPrintable(dialog.statusLabel()->text()));
        QVERIFY(submitted.wait(20000));
        QCOMPARE(submitted.takeFirst().at(0).toString(), QString("4242"));
        QVERIFY2(dialog.statusLabel()->text().startsWith("Submitted job 4242"), qPrintable(dialog.statusLabel()->text()));
        QVERIFY(dialog.submitButton()->isEnabled());
        dialog.resize(900, 700);
        dialog.show();
        QVERIFY(QTest::qWaitForWindowExposed(&dialog));
        QVERIFY(dialog.grab().save(QCoreApplication::applicationDirPath() + "/slurm-submitted.png"));
        QFile(refuse).open(QIODevice::WriteOnly);
        dialog.submit();
        QVERIFY(refused.wait(20000));
        QVERIFY2(dialog.statusLabel()->text().contains("sbatch refused the job: sbatch: error: invalid partition"),
                 qPrintable(dialog.statusLabel()->text()));
        QVERIFY(submitted.isEmpty());
        qunsetenv("TB_FAKE_SBATCH_REFUSE");
    }

    void severalProcessesRunShowsInRunPanelAndHistory()
    {
        // The window finds trainbench-cli beside itself or on PATH.
        const QString cliDir = QFileInfo(TB_CLI_PATH).absolutePath();
        qputenv("PATH", (cliDir + ":" + qgetenv("PATH")).toUtf8());
        const QString db = m_dir.filePath("window.db");
        MainWindow window(db);
        window.setAskBeforeClosing(false);
        QVERIFY(window.openConfig(m_config));
        window.resize(1400, 900);
        window.show();
        QVERIFY(QTest::qWaitForWindowExposed(&window));
        RunPanel* run = window.runPanel();
        QSignalSpy finished(run, &RunPanel::runFinished);
        const QString log = window.startProcesses(2);
        QVERIFY(!log.isEmpty());
        // The Run panel shows it live, like a run in the window's own thread.
        QCOMPARE(window.tabs()->currentWidget(), static_cast<QWidget*>(run));
        QVERIFY(run->isProcessRun());
        QVERIFY(run->stopButton()->isEnabled());
        QVERIFY(finished.wait(120000));
        const auto outcome = finished.takeFirst().at(0).value<tb::SessionOutcome>();
        QCOMPARE(outcome.status, RunStatus::Finished);
        const QString status = run->statusLabel()->text();
        QVERIFY2(status.contains("on 2 processes here finished after 40 of 40 steps"), qPrintable(status));
        QVERIFY2(status.contains("Memory: peak"), qPrintable(status));
        QCOMPARE(run->lossPlot()->trainingPointCount(), 40);
        QVERIFY(!run->isRunning());
        QTest::qWait(300); // the plots' queued replot
        QVERIFY(window.grab().save(QCoreApplication::applicationDirPath() + "/nproc-run.png"));

        // Stored once, with world size 2; History shows it in its Processes column.
        RunStore store(db.toStdString(), RunStore::Mode::ReadOnly);
        auto runs = store.listRuns();
        QCOMPARE(runs.size(), std::size_t{1});
        QCOMPARE(runs.front().worldSize(), 2);
        QCOMPARE(outcome.runId, runs.front().id);
        window.tabs()->setCurrentWidget(window.historyPanel());
        QVERIFY(window.historyPanel()->refresh());
        auto* model = window.historyPanel()->model();
        const int row = model->rowOf(runs.front().id);
        QVERIFY(row >= 0);
        QCOMPARE(model->data(model->index(row, RunTableModel::Processes), Qt::DisplayRole).toString(), QString("2"));
        QCOMPARE(model->headerData(RunTableModel::Processes, Qt::Horizontal, Qt::DisplayRole).toString(), QString("Processes"));
        window.historyPanel()->selectRuns({runs.front().id});
        window.historyPanel()->table()->scrollTo(window.historyPanel()->table()->model()->index(0, RunTableModel::Processes));
        QTest::qWait(300);
        QVERIFY(window.grab().save(QCoreApplication::applicationDirPath() + "/nproc-history.png"));
        QFile output(log);
        QVERIFY(output.open(QIODevice::ReadOnly));
        QVERIFY2(output.readAll().contains("finished: 40/40 steps"), qPrintable(log));

        // Stop from the panel: every rank stops after its step, rank 0 keeps a
        // checkpoint; Resume continues it in two processes again.
        QFile longer(m_dir.filePath("dp-long.json"));
        QVERIFY(longer.open(QIODevice::WriteOnly));
        longer.write(QByteArray(kConfig).replace("\"steps\": 40", "\"steps\": 3000").replace("dp-window", "dp-long"));
        longer.close();
        QVERIFY(window.openConfig(longer.fileName()));
        QSignalSpy progress(run, &RunPanel::progressShown);
        QVERIFY(!window.startProcesses(2).isEmpty());
        QTRY_VERIFY_WITH_TIMEOUT(!progress.isEmpty() && progress.last().at(0).toInt() >= 20, 120000);
        run->stop();
        // A second press ends ranks that hang: the button says so.
        QCOMPARE(run->stopButton()->text(), QString("Abort"));
        QVERIFY(run->stopButton()->isEnabled());
        QVERIFY2(run->statusLabel()->text().contains("Stopping the 2 processes here"), qPrintable(run->statusLabel()->text()));
        QVERIFY(window.grab().save(QCoreApplication::applicationDirPath() + "/nproc-stopping.png"));
        QVERIFY(finished.wait(120000));
        QCOMPARE(run->stopButton()->text(), QString("Stop"));
        const auto stopped = finished.takeFirst().at(0).value<tb::SessionOutcome>();
        QCOMPARE(stopped.status, RunStatus::Cancelled);
        QVERIFY2(run->statusLabel()->text().contains("cancelled"), qPrintable(run->statusLabel()->text()));
        QVERIFY(stopped.stepsDone >= 20 && stopped.stepsDone < 3000);
        const int stoppedAt = stopped.stepsDone;
        run->resume(stopped.runId);
        QVERIFY(run->isProcessRun());
        QTRY_VERIFY_WITH_TIMEOUT(!progress.isEmpty() && progress.last().at(0).toInt() > stoppedAt + 5, 120000);
        run->stop();
        QVERIFY(finished.wait(120000));
        const auto resumed = finished.takeFirst().at(0).value<tb::SessionOutcome>();
        QCOMPARE(resumed.runId, stopped.runId);
        QCOMPARE(resumed.status, RunStatus::Cancelled);
        QVERIFY(resumed.stepsDone > stoppedAt);
        // Each step stored once, across the stop and the resume.
        const auto losses = RunStore(db.toStdString(), RunStore::Mode::ReadOnly).metricsFrom(resumed.runId, "loss", 0);
        QCOMPARE(static_cast<int>(losses.size()), resumed.stepsDone);
        QCOMPARE(losses.back().step, resumed.stepsDone);

        // Rank 0 killed: the launcher ends the others and itself, the run is
        // left "running" in the store; the panel marks it interrupted and ends.
        QVERIFY(!window.startProcesses(2).isEmpty());
        QTRY_VERIFY_WITH_TIMEOUT(!progress.isEmpty() && progress.last().at(0).toInt() >= 10 && run->currentRunId() > 0, 120000);
        const qint64 killedRun = run->currentRunId();
        const auto owner = RunStore(db.toStdString(), RunStore::Mode::ReadOnly).run(killedRun)->ownerPid;
        QVERIFY(owner && *owner > 0);
        QCOMPARE(::kill(static_cast<pid_t>(*owner), SIGKILL), 0);
        QVERIFY(finished.wait(60000));
        const auto killed = finished.takeFirst().at(0).value<tb::SessionOutcome>();
        QCOMPARE(killed.runId, killedRun);
        QCOMPARE(killed.status, RunStatus::Interrupted);
        QVERIFY(!run->isRunning());

        // Processes that end before their run starts: one sentence with what they said.
        QVERIFY(!run->startProcesses({"resume", "999", "--db", db}, 2, "Resuming run 999…").isEmpty());
        QVERIFY(finished.wait(60000));
        QCOMPARE(finished.takeFirst().at(0).value<tb::SessionOutcome>().status, RunStatus::Failed);
        const QString refused = run->statusLabel()->text();
        QVERIFY2(refused.startsWith("Not started: the 2 processes ended before the run started") && refused.contains("999"),
                 qPrintable(refused));
        QVERIFY(!run->isRunning());
    }

private:
    QTemporaryDir m_dir;
    QString m_config;
};

QTEST_MAIN(TestDistGui)
#include "tst_dist_gui.moc"
