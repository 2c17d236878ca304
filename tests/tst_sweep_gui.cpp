// Run ▸ Sweep…: a sweep of the saved experiment started from the window
// (trainbench-cli sweep, detached), its trials shown as they end with the
// skipped ones explained and the best marked, the scatter and parallel
// coordinates drawn from them, and Open run showing the run in History
// among its sweep's runs. Screenshot: sweep-dialog.png beside this binary.
#include <QtTest>

#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFile>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSignalSpy>
#include <QTabWidget>
#include <QTableView>
#include <QTableWidget>
#include <QTemporaryDir>

#include "HistoryPanel.h"
#include "MainWindow.h"
#include "QCustomPlotInclude.h"
#include "RunTableModel.h"
#include "SweepDialog.h"
#include "TestPaths.h"

using namespace tb;
using namespace tb::ui;

namespace {

const char* kConfig = R"({
  "name": "sweep-window", "device": "cpu",
  "model": {"type": "gpt", "n_layer": 1, "d_model": 32, "n_head": 2},
  "data": {"source": "text", "seq_len": 16},
  "optim": {"schedule": "constant", "warmup_steps": 0},
  "train": {"batch_size": 4, "steps": 40, "eval_every": 10, "threads": 1}
})";

const char* kSweep = R"({"name": "window grid", "method": "grid", "metric": {"name": "val_loss"},
  "parameters": {"optim.lr": {"values": [0.003, 0.001, 0.000001]}, "train.batch_size": {"values": [4, 8192]}}})";

} // namespace

class TestSweepGui : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void sweepFromTheWindow()
    {
        qputenv("TRAINBENCH_CLI", TB_CLI_PATH);
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        const QString config = dir.filePath("sweep-window.json"), sweep = dir.filePath("grid.json");
        for (const auto& [path, text] : {std::pair{config, kConfig}, std::pair{sweep, kSweep}}) {
            QFile f(path);
            QVERIFY(f.open(QIODevice::WriteOnly));
            f.write(text);
        }
        MainWindow window(dir.filePath("exp.db"));
        window.setAskBeforeClosing(false);
        QVERIFY(window.openConfig(config));
        window.show();
        QVERIFY(QTest::qWaitForWindowExposed(&window));
        window.showSweeps();
        SweepDialog* dialog = window.sweepDialog();
        QVERIFY(dialog);
        QVERIFY(dialog->startButton()->isEnabled());
        // A bad file is refused in the dialog, nothing started.
        dialog->sweepFileEdit()->setText(dir.filePath("missing.json"));
        QVERIFY(dialog->startSweep().contains("sweep file not found"));
        QCOMPARE(dialog->sweepBox()->count(), 0);

        // A value that makes no valid config: the command refuses it, the dialog says why, nothing is stored.
        const QString bad = dir.filePath("bad.json");
        {
            QFile f(bad);
            QVERIFY(f.open(QIODevice::WriteOnly));
            f.write(R"({"parameters": {"train.batch_size": {"values": [4, -1]}}})");
        }
        dialog->sweepFileEdit()->setText(bad);
        dialog->startSweep();
        QTRY_VERIFY_WITH_TIMEOUT(dialog->statusText().contains("train.batch_size"), 30000);
        QVERIFY2(dialog->statusText().contains("trial 2"), qPrintable(dialog->statusText()));
        QCOMPARE(dialog->sweepBox()->count(), 0);

        dialog->sweepFileEdit()->setText(sweep);
        dialog->budgetBox()->setValue(0.01); // about 10 MiB: batch 8192 does not fit
        QSignalSpy messages(dialog, &SweepDialog::message);
        dialog->startButton()->click();
        QTRY_VERIFY_WITH_TIMEOUT(dialog->statusText().contains("Sweep 1, finished"), 180000);
        QCOMPARE(dialog->sweepBox()->count(), 1);
        QVERIFY(!messages.isEmpty() && messages.first().first().toString().startsWith("Started sweep 1 (6 trials)"));
        auto* table = dialog->trialTable();
        QCOMPARE(table->rowCount(), 6);
        const int statusColumn = 3, whyColumn = 6;
        int skipped = 0, finished = 0, bold = 0;
        for (int row = 0; row < 6; ++row) {
            const QString status = table->item(row, statusColumn)->text();
            if (status == "skipped") {
                ++skipped;
                QVERIFY2(table->item(row, whyColumn)->text().startsWith("does not fit: planned"), qPrintable(table->item(row, whyColumn)->text()));
            }
            if (status == "finished") ++finished;
            if (table->item(row, 0)->font().bold()) ++bold;
        }
        QCOMPARE(skipped, 3);
        QCOMPARE(finished, 3);
        QCOMPARE(bold, 1);
        QVERIFY(dialog->statusText().contains("Best: trial"));
        QVERIFY(!dialog->stopButton()->isEnabled());
        QVERIFY(!dialog->resumeButton()->isEnabled()); // finished
        // The plots: three trials with a metric, the best among them.
        int points = 0;
        for (int g = 0; g < dialog->scatterPlot()->graphCount(); ++g) points += dialog->scatterPlot()->graph(g)->data()->size();
        QCOMPARE(points, 3);
        QCOMPARE(dialog->parallelPlot()->graphCount(), 3);
        dialog->resize(1000, 720);
        QCoreApplication::processEvents();
        QVERIFY(dialog->grab().save(QCoreApplication::applicationDirPath() + "/sweep-dialog.png"));

        // Open run: History, filtered to the sweep, the run selected.
        int row = -1;
        for (int r = 0; r < 6; ++r) {
            if (table->item(r, 0)->font().bold()) row = r;
        }
        table->selectRow(row);
        const qint64 runId = table->item(row, 4)->text().toLongLong();
        Q_EMIT table->cellDoubleClicked(row, 0);
        QCOMPARE(window.tabs()->currentWidget(), static_cast<QWidget*>(window.historyPanel()));
        auto* history = window.historyPanel();
        QCOMPARE(history->selectedRunIds(), std::vector<std::int64_t>{runId});
        QCOMPARE(history->model()->rowCount(), 3); // the sweep's runs
        const auto sweepCell = history->model()->index(0, RunTableModel::Sweep).data().toString();
        QVERIFY2(sweepCell.startsWith("sweep 1, trial "), qPrintable(sweepCell));
        dialog->close();
    }
};

QTEST_MAIN(TestSweepGui)
#include "tst_sweep_gui.moc"
