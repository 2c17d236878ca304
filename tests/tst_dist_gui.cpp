// The window's data-parallel entry points: Run > Run on a Slurm cluster…
// (the same sbatch script as 'trainbench-cli slurm', refusals shown as one
// sentence, saved into the shared folder) and Run > Run on several
// processes… (trainbench-cli train --nproc in the background; the run shows
// in History, with its world size). Screenshots: slurm-dialog.png,
// nproc-history.png beside this binary.
#include <QtTest>

#include <QComboBox>
#include <QFile>
#include <QLabel>
#include <QLineEdit>
#include <QSpinBox>
#include <QTabWidget>
#include <QTemporaryDir>

#include "ConfigDocument.h"
#include "HistoryPanel.h"
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

    void severalProcessesRunShowsInHistory()
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
        const QString log = window.startProcesses(2);
        QVERIFY(!log.isEmpty());
        QCOMPARE(window.tabs()->currentWidget(), static_cast<QWidget*>(window.historyPanel()));
        // The run: finished, stored once, with world size 2 in its config.
        std::optional<RunRecord> run;
        QTRY_VERIFY_WITH_TIMEOUT(
            [&] {
                if (!QFile::exists(db)) return false;
                RunStore store(db.toStdString(), RunStore::Mode::ReadOnly);
                const auto runs = store.listRuns();
                if (runs.size() != 1 || runs.front().status != RunStatus::Finished) return false;
                run = runs.front();
                return true;
            }(),
            120000);
        const auto config = parseConfig(run->configJson, "the stored config");
        QCOMPARE(config.train.worldSize, 2);
        QVERIFY(window.historyPanel()->refresh());
        window.historyPanel()->selectRuns({run->id});
        QTest::qWait(300);
        QVERIFY(window.grab().save(QCoreApplication::applicationDirPath() + "/nproc-history.png"));
        QFile output(log);
        QVERIFY(output.open(QIODevice::ReadOnly));
        QVERIFY2(output.readAll().contains("finished: 40/40 steps"), qPrintable(log));
    }

private:
    QTemporaryDir m_dir;
    QString m_config;
};

QTEST_MAIN(TestDistGui)
#include "tst_dist_gui.moc"
