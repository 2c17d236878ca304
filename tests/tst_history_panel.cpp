// The History panel: the run table over the store (filter, sort, lazy rows),
// overlays of the selected runs, the config diff, name/tags/note edits,
// delete and CSV export, and "Open in editor".
#include <QtTest>

#include <QComboBox>

#include <QElapsedTimer>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLabel>
#include <QLineEdit>
#include <QProcess>
#include <QPushButton>
#include <QSortFilterProxyModel>
#include <QStatusBar>
#include <QTabWidget>
#include <QTableView>
#include <QTableWidget>

#include <QMenu>
#include <QSettings>
#include <QScrollBar>
#include "ConfigDocument.h"
#include "HistoryPanel.h"
#include "MainWindow.h"
#include "MetricPlot.h"
#include "run/RunSession.h"
#include "store/RunStore.h"
#include "store/Sqlite.h"

using namespace tb;
using namespace tb::ui;

class TestHistoryPanel : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void initTestCase() { QStandardPaths::setTestModeEnabled(true); }
    void init();
    void cleanup() { m_window.reset(); }
    void tableFiltersSortsAndFetchesLazily();
    void overlayDiffAndStableColours();
    void everyStoredMetricOverlays();
    void reportIsOneSelfContainedFile();
    void editsDeleteAndExport();
    void interruptedRunShowsItsMetricsAndOpensInTheEditor();
    void lineageResumeSmoothingAndLegend();
    void tenThousandRuns();
    void configColumnsAndAPinnedId();
    void defaultRunNamesCarryIdAndDifferences();

private:
    QString db() const { return m_dir->filePath("exp.db"); }
    HistoryPanel* history() const { return m_window->historyPanel(); }
    std::unique_ptr<QTemporaryDir> m_dir;
    std::unique_ptr<MainWindow> m_window;
    std::vector<std::int64_t> m_ids;
};

void TestHistoryPanel::init()
{
    m_dir = std::make_unique<QTemporaryDir>();
    m_ids.clear();
    {
        RunStore store(db().toStdString());
        for (int i = 0; i < 3; ++i) {
            const std::string name = i == 2 ? "<b>wide</b> run" : "run " + std::to_string(i);
            const auto id = store.createRun({name,
                                             R"({"name":"x","model":{"type":"gpt","n_layer":2,"d_model":64,"n_head":4},)"
                                             R"("train":{"batch_size":)" + std::to_string(8 << i) + R"(,"steps":50}})",
                                             "cpu", "fp32", "0", "1.13", 50});
            std::vector<MetricPoint> points;
            for (int step = 1; step <= 50; ++step) {
                points.push_back({id, step, "loss", 3.0 - step * 0.01 * (i + 1), 100.0 + step});
                points.push_back({id, step, "mem_peak_bytes", 1048576.0 * (10 + i), 100.0 + step});
            }
            store.appendMetrics(points);
            store.setEstimate(id, 1048576 * (10 + i), "{}");
            store.markEnded(id, i == 1 ? RunStatus::Failed : RunStatus::Finished, {50, 2.5 - i * 0.1, std::nullopt, std::nullopt, ""});
            m_ids.push_back(id);
        }
        store.addTag(m_ids[0], "baseline");
    }
    QSettings().remove("history/configColumns"); // no columns left by an earlier test run
    m_window = std::make_unique<MainWindow>(db());
    m_window->setAskBeforeClosing(false);
    m_window->tabs()->setCurrentWidget(history());
    m_window->resize(1400, 900);
    m_window->show();
    QVERIFY(QTest::qWaitForWindowExposed(m_window.get()));
}

void TestHistoryPanel::tableFiltersSortsAndFetchesLazily()
{
    auto* model = history()->model();
    QCOMPARE(model->totalRuns(), 3);
    QVERIFY(history()->setFilter("status=failed"));
    QCOMPARE(model->totalRuns(), 1);
    QCOMPARE(model->run(0).id, m_ids[1]);
    QVERIFY(history()->setFilter("train.batch_size>=16 tag:baseline"));
    QCOMPARE(model->totalRuns(), 0);
    QVERIFY(history()->setFilter("tag:baseline"));
    QCOMPARE(model->totalRuns(), 1);
    QVERIFY(!history()->setFilter("colour=red"));
    QVERIFY(history()->messageLabel()->text().contains("unknown field"));
    QVERIFY(history()->setFilter(""));
    QCOMPARE(model->totalRuns(), 3);
    // A run name is text, not markup.
    const auto name = model->data(model->index(2, RunTableModel::Name), Qt::DisplayRole).toString();
    QCOMPARE(name, QString("<b>wide</b> run"));
    // Sorting by loss puts the lowest first; the estimate error column is computed.
    auto* table = history()->table();
    table->sortByColumn(RunTableModel::Loss, Qt::AscendingOrder);
    const auto first = table->model()->index(0, RunTableModel::Id).data().toLongLong();
    QCOMPARE(first, m_ids[2]);
    QCOMPARE(model->data(model->index(0, RunTableModel::Error), Qt::DisplayRole).toString(), QString("0.0%"));

    // 1,200 runs: rows arrive 500 at a time as the table scrolls.
    std::vector<RunRecord> many(1200);
    for (int i = 0; i < 1200; ++i) many[static_cast<std::size_t>(i)].id = i + 1;
    model->setRuns(many);
    QCOMPARE(model->rowCount(), RunTableModel::kFetchBatch);
    QVERIFY(model->canFetchMore({}));
    model->fetchMore({});
    QCOMPARE(model->rowCount(), 2 * RunTableModel::kFetchBatch);
}

void TestHistoryPanel::overlayDiffAndStableColours()
{
    history()->selectRuns({m_ids[0], m_ids[2]});
    QCOMPARE(history()->selectedRunIds(), (std::vector<std::int64_t>{m_ids[0], m_ids[2]}));
    QCOMPARE(history()->lossPlot()->seriesCount(), 2);
    QCOMPARE(history()->memoryPlot()->seriesCount(), 2);
    const QColor colour = history()->lossPlot()->graph(1)->pen().color();
    // Only the batch size differs between the two configs.
    auto* diff = history()->diffTable();
    QCOMPARE(diff->rowCount(), 1);
    QCOMPARE(diff->item(0, 0)->text(), QString("train.batch_size"));
    QCOMPARE(diff->item(0, 2)->text(), QString("32"));
    // The same run keeps its colour when the selection changes.
    history()->selectRuns({m_ids[1], m_ids[2]});
    QCOMPARE(history()->lossPlot()->graph(1)->pen().color(), colour);
    history()->tabs()->setCurrentIndex(0);
    QCoreApplication::processEvents(); // the plots replot on the next turn of the event loop
    QVERIFY(history()->lossPlot()->xAxis->range().upper >= 50); // fitted to the 50 steps
    QVERIFY(m_window->grab().save(QCoreApplication::applicationDirPath() + "/history-overlay.png"));
    history()->tabs()->setCurrentIndex(1);
    QCoreApplication::processEvents();
    QVERIFY(m_window->grab().save(QCoreApplication::applicationDirPath() + "/history-diff.png"));
}

// Every metric a run stores can be overlaid (TensorBoard's scalars): the
// right-hand plot takes any key the selected runs have, smoothed as the loss
// is, and the loss overlay carries each run's validation points.
void TestHistoryPanel::everyStoredMetricOverlays()
{
    std::int64_t withScalars;
    {
        RunStore store(db().toStdString());
        withScalars = store.createRun({"scalars", R"({"name":"s"})", "cpu", "fp32", "0", "1.13", 20});
        std::vector<MetricPoint> points;
        for (int step = 1; step <= 20; ++step) {
            points.push_back({withScalars, step, "loss", 3.0 - step * 0.05, 10.0 + step});
            points.push_back({withScalars, step, "lr", step < 5 ? 1e-3 * step / 5 : 1e-3, 10.0 + step});
            points.push_back({withScalars, step, "grad_norm", 2.0 + (step % 3), 10.0 + step});
            if (step % 5 == 0) points.push_back({withScalars, step, "val_loss", 3.1 - step * 0.04, 10.0 + step});
        }
        store.appendMetrics(points);
        store.markEnded(withScalars, RunStatus::Finished, {20, 2.0, 2.3, std::nullopt, ""});
    }
    history()->refresh();
    history()->selectRuns({m_ids[0], withScalars});
    // The metrics the two runs store, named; memory first as before (run 0 has it).
    auto* box = history()->metricBox();
    QStringList names;
    for (int i = 0; i < box->count(); ++i) names << box->itemText(i);
    QCOMPARE(names, (QStringList{"gradient norm", "learning rate", "peak tensor memory (MiB)", "validation loss"}));
    QCOMPARE(box->currentText(), QString("peak tensor memory (MiB)"));
    QCOMPARE(history()->memoryPlot()->seriesCount(), 1); // only run 0 measured memory
    // Two loss curves and the scalar run's four validation points, as discs.
    auto* loss = history()->lossPlot();
    QCOMPARE(loss->seriesCount(), 3);
    QCOMPARE(loss->graph(2)->lineStyle(), QCPGraph::lsNone);
    QCOMPARE(loss->graph(2)->data()->size(), 4);
    QVERIFY(loss->graph(2)->name().endsWith("(validation)"));
    QVERIFY(history()->selectMetric("lr"));
    QCOMPARE(history()->memoryPlot()->seriesCount(), 1);
    QCOMPARE(history()->memoryPlot()->yAxis->label(), QString("learning rate"));
    QCOMPARE(history()->memoryPlot()->graph(0)->data()->at(19)->value, 1e-3);
    // Smoothing applies to the metric too; the choice stays while the selection moves.
    history()->setSmoothing(0.5);
    QVERIFY(history()->memoryPlot()->graph(0)->data()->at(2)->value < 1e-3 * 3 / 5);
    history()->setSmoothing(0);
    history()->selectRuns({withScalars});
    QCOMPARE(box->currentText(), QString("learning rate"));
    // A metric the selected runs lack falls back to one they have.
    history()->selectRuns({m_ids[1]});
    QCOMPARE(box->currentText(), QString("peak tensor memory (MiB)"));
    QCOMPARE(history()->memoryPlot()->seriesCount(), 1);
    history()->selectRuns({m_ids[0], withScalars});
    QVERIFY(history()->selectMetric("grad_norm"));
    history()->tabs()->setCurrentIndex(0);
    QCoreApplication::processEvents();
    QVERIFY(m_window->grab().save(QCoreApplication::applicationDirPath() + "/history-metrics.png"));
}

// Report…: the selected runs in one self-contained HTML file: their final
// metrics, the two plots as drawn, the config differences and the notes,
// user text escaped.
void TestHistoryPanel::reportIsOneSelfContainedFile()
{
    {
        RunStore store(db().toStdString());
        store.setNote(m_ids[2], "Larger batch <fast> & stable.");
    }
    history()->refresh();
    history()->selectRuns({m_ids[0], m_ids[2]});
    QVERIFY(history()->reportButton()->isEnabled());
    const QString path = m_dir->filePath("report.html");
    QString error;
    QVERIFY2(history()->writeReport(path, &error), qPrintable(error));
    QFile::remove(QCoreApplication::applicationDirPath() + "/history-report.html");
    QFile::copy(path, QCoreApplication::applicationDirPath() + "/history-report.html");
    QFile f(path);
    QVERIFY(f.open(QIODevice::ReadOnly));
    const QString html = QString::fromUtf8(f.readAll());
    QVERIFY(html.startsWith("<!DOCTYPE html>"));
    QCOMPARE(html.count("data:image/png;base64,"), 2);  // the plots inside, no file beside it
    QVERIFY(!html.contains("src=\"http") && !html.contains("<link"));
    QVERIFY(html.contains("&lt;b&gt;wide&lt;/b&gt; run") && !html.contains("<b>wide</b>"));
    QVERIFY(html.contains("Larger batch &lt;fast&gt; &amp; stable."));
    QVERIFY(html.contains("<td>train.batch_size</td>") && html.contains("class=differs"));
    QVERIFY(html.contains("2.5000") && html.contains("2.3000")); // the two runs' final losses
    QVERIFY(html.contains("baseline"));                           // run 0's tag
    QVERIFY(!history()->writeReport("/proc/no-such-dir/report.html", &error));
    QVERIFY2(error.startsWith("Cannot write /proc/no-such-dir/report.html"), qPrintable(error));
}

void TestHistoryPanel::editsDeleteAndExport()
{
    history()->selectRuns({m_ids[1]});
    history()->tabs()->setCurrentIndex(2);
    QCoreApplication::processEvents();
    QVERIFY(m_window->grab().save(QCoreApplication::applicationDirPath() + "/history-details.png"));
    QSignalSpy edited(history(), &HistoryPanel::edited);
    history()->saveDetails("lr sweep 3", "sweep, lr", "diverged at step 3; try 3e-4");
    QVERIFY(edited.wait(10000));
    QCOMPARE(edited.first().first().toString(), QString());
    {
        RunStore store(db().toStdString(), RunStore::Mode::ReadOnly);
        const auto run = store.run(m_ids[1]);
        QCOMPARE(run->name, std::string("lr sweep 3"));
        QCOMPARE(run->tags, (std::vector<std::string>{"lr", "sweep"}));
        QCOMPARE(run->note, std::string("diverged at step 3; try 3e-4"));
    }
    // A bad tag changes nothing and says why.
    edited.clear();
    history()->saveDetails("other name", "has space, \"q\"", "");
    QVERIFY(edited.wait(10000));
    QVERIFY(edited.first().first().toString().contains("tag"));
    {
        RunStore store(db().toStdString(), RunStore::Mode::ReadOnly);
        QCOMPARE(store.run(m_ids[1])->name, std::string("lr sweep 3"));
    }
    // A name typed into the form is saved when another run is selected, not lost.
    history()->selectRuns({m_ids[0]});
    history()->nameEdit()->clear();
    QTest::keyClicks(history()->nameEdit(), "renamed by moving on");
    edited.clear();
    history()->selectRuns({m_ids[1]});
    QVERIFY(edited.wait(10000));
    {
        RunStore store(db().toStdString(), RunStore::Mode::ReadOnly);
        QCOMPARE(store.run(m_ids[0])->name, std::string("renamed by moving on"));
        QCOMPARE(store.run(m_ids[1])->name, std::string("lr sweep 3"));
    }
    QCOMPARE(history()->nameEdit()->text(), QString("lr sweep 3"));

    history()->selectRuns({m_ids[0], m_ids[1]});
    const QString csv = m_dir->filePath("runs.csv");
    // The export says what it wrote and where (it used to say nothing).
    QSignalSpy said(history(), &HistoryPanel::exported);
    QVERIFY(history()->exportCsvAndReport(csv));
    QCOMPARE(said.count(), 1);
    const QString message = said.first().first().toString();
    QVERIFY2(message.contains("200 metric rows") && message.contains("2 runs")
                 && message.contains(QDir::toNativeSeparators(csv)),
             qPrintable(message));
    QCOMPARE(m_window->statusBar()->currentMessage(), message);
    QVERIFY(m_window->grab().save(QCoreApplication::applicationDirPath() + "/history-exported.png"));
    QFile f(csv);
    QVERIFY(f.open(QIODevice::ReadOnly));
    const auto lines = QString::fromUtf8(f.readAll()).split('\n', Qt::SkipEmptyParts);
    QCOMPARE(lines.front(), QString("run,step,key,value,wall_time"));
    QCOMPARE(lines.size(), 1 + 2 * 100); // two runs, 50 steps, two keys

    edited.clear();
    history()->deleteSelected(true);
    QVERIFY(edited.wait(10000));
    QCOMPARE(history()->model()->totalRuns(), 1);
    QCOMPARE(history()->model()->run(0).id, m_ids[2]);
}

void TestHistoryPanel::interruptedRunShowsItsMetricsAndOpensInTheEditor()
{
    // The run's process is killed mid-run: it was "running", owned by a pid that is gone.
    QProcess gone;
    gone.start("true");
    QVERIFY(gone.waitForFinished());
    const auto deadPid = gone.processId();
    {
        RunStore store(db().toStdString());
        store.markRunning(m_ids[2], 50, "cpu", "fp32");
        Statement s(store.database(), "UPDATE runs SET owner_pid=?, ended_at=NULL WHERE id=?");
        s.bind(1, static_cast<std::int64_t>(deadPid > 0 ? deadPid : 999999)).bind(2, m_ids[2]);
        s.run();
    }
    // The panel reads the store read-only and judges the dead owner itself:
    // "interrupted" at once, with nothing written (it showed "running" until a
    // read-write open reconciled the store).
    QVERIFY(history()->refresh());
    QVERIFY(history()->setFilter("status=interrupted"));
    QCOMPARE(history()->model()->totalRuns(), 1);
    history()->selectRuns({m_ids[2]});
    QCOMPARE(history()->lossPlot()->seriesCount(), 1);
    QCOMPARE(history()->lossPlot()->graph(0)->dataCount() > 0, true);
    QSignalSpy open(history(), &HistoryPanel::openConfigRequested);
    // Open in editor loads the stored config as a new, unsaved document.
    for (auto* button : history()->findChildren<QPushButton*>()) {
        if (button->text().contains("Open in editor")) button->click();
    }
    QVERIFY(open.count() >= 1);
    QCOMPARE(m_window->document()->value("train.batch_size").toInt(), 32);
}

void TestHistoryPanel::lineageResumeSmoothingAndLegend()
{
    std::int64_t child, stopped;
    const QString checkpoint = m_dir->filePath("step-0000010.pt");
    {
        RunStore store(db().toStdString());
        child = store.createRun({"fine-tune", R"({"name":"ft","train":{"init_from":"run:)" + std::to_string(m_ids[0]) + R"(","batch_size":8}})",
                                 "cpu", "fp32", "0", "1.13", 50});
        store.appendMetrics({{child, 1, "loss", 1.9, 1}, {child, 2, "loss", 1.8, 2}});
        store.markEnded(child, RunStatus::Finished, {2, 1.8, std::nullopt, std::nullopt, ""});
        stopped = store.createRun({"stopped", R"({"name":"s"})", "cpu", "fp32", "0", "1.13", 50});
        store.markEnded(stopped, RunStatus::Cancelled, {10, 2.0, std::nullopt, std::nullopt, "cancelled"});
        QFile f(checkpoint);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write("weights");
        f.close();
        store.addArtifact({stopped, "checkpoint", 10, checkpoint.toStdString(), 7, 1});
    }
    // A panel of its own: Resume here only emits, nothing trains.
    HistoryPanel panel;
    panel.setDatabasePath(db());
    auto* model = panel.model();
    for (int row = 0; row < model->totalRuns(); ++row) {
        if (model->run(row).id == child) {
            QCOMPARE(model->data(model->index(row, RunTableModel::Parent), Qt::DisplayRole).toString(),
                     QString("run %1").arg(m_ids[0]));
        }
    }
    panel.selectRuns({child});
    QCOMPARE(panel.lossPlot()->seriesCount(), 1);
    panel.setFollowLineage(true);
    QCOMPARE(panel.lossPlot()->seriesCount(), 2); // the parent it started from
    QVERIFY(!panel.resumeButton()->isEnabled()); // finished, and the button says so as `resume` does
    QVERIFY2(panel.resumeButton()->toolTip().contains("already finished"), qPrintable(panel.resumeButton()->toolTip()));

    panel.selectRuns({m_ids[0]});
    const double raw = panel.lossPlot()->graph(0)->data()->at(10)->value;
    panel.setSmoothing(0.9);
    const double smooth = panel.lossPlot()->graph(0)->data()->at(10)->value;
    QVERIFY(smooth > raw); // a falling curve, smoothed, lags above it
    // A legend click hides a curve; another shows it again.
    auto* plot = panel.lossPlot();
    Q_EMIT plot->legendClick(plot->legend, plot->legend->itemWithPlottable(plot->graph(0)), nullptr);
    QVERIFY(!plot->graph(0)->visible());
    Q_EMIT plot->legendClick(plot->legend, plot->legend->itemWithPlottable(plot->graph(0)), nullptr);
    QVERIFY(plot->graph(0)->visible());

    // Stopped before its first checkpoint: greyed out, with the command line's reason.
    std::int64_t early;
    {
        RunStore store(db().toStdString());
        early = store.createRun({"early", R"({"name":"e"})", "cpu", "fp32", "0", "1.13", 50});
        store.markEnded(early, RunStatus::Cancelled, {3, 2.5, std::nullopt, std::nullopt, "cancelled"});
        QCOMPARE(QString::fromStdString(resumeRefusal(store, stopped)), QString());
    }
    panel.refresh();
    panel.selectRuns({early});
    QVERIFY(!panel.resumeButton()->isEnabled());
    QVERIFY2(panel.resumeButton()->toolTip().contains("has no checkpoint to resume from"),
             qPrintable(panel.resumeButton()->toolTip()));
    panel.selectRuns({stopped});
    QVERIFY(panel.resumeButton()->isEnabled());
    QSignalSpy resume(&panel, &HistoryPanel::resumeRequested);
    panel.resumeButton()->click();
    QCOMPARE(resume.count(), 1);
    QCOMPARE(resume.first().first().toLongLong(), stopped);
    const QString exported = m_dir->filePath("config.json");
    QSignalSpy said(&panel, &HistoryPanel::exported);
    QVERIFY(panel.exportConfigAndReport(exported));
    QCOMPARE(said.count(), 1);
    QVERIFY2(said.first().first().toString().contains(exported), qPrintable(said.first().first().toString()));
    QFile f(exported);
    QVERIFY(f.open(QIODevice::ReadOnly));
    QCOMPARE(QJsonDocument::fromJson(f.readAll()).object()["name"].toString(), QString("s"));
}

// 10,000 runs: listed at once, the table fills as it scrolls.
void TestHistoryPanel::tenThousandRuns()
{
    {
        RunStore store(db().toStdString());
        Transaction tx(store.database());
        for (int i = 0; i < 10000; ++i) {
            const auto id = store.createRun({"bulk " + std::to_string(i), R"({"name":"b","train":{"batch_size":16}})", "cpu",
                                             "fp32", "0", "1.13", 10});
            store.markEnded(id, RunStatus::Finished, {10, 2.0 + (i % 13) * 0.01, std::nullopt, std::nullopt, ""});
        }
        tx.commit();
    }
    QElapsedTimer timer;
    timer.start();
    QVERIFY(history()->refresh());
    const auto refreshMs = timer.elapsed();
    QCOMPARE(history()->model()->totalRuns(), 10003);
    QCOMPARE(history()->model()->rowCount(), RunTableModel::kFetchBatch);
    timer.restart();
    for (int i = 0; i < 5; ++i) {
        history()->table()->scrollToBottom();
        QCoreApplication::processEvents();
    }
    const auto scrollMs = timer.elapsed();
    QVERIFY(history()->model()->rowCount() > RunTableModel::kFetchBatch);
    timer.restart();
    QVERIFY(history()->setFilter("loss<2.05"));
    const auto filterMs = timer.elapsed();
    qInfo("10,003 runs: refresh %lld ms, five scrolls to the bottom %lld ms, filter %lld ms", refreshMs, scrollMs, filterMs);
}

// Config fields as columns from the header's menu (the batch of a sweep shows
// in the table), and the ID column in view however far the table scrolls.
void TestHistoryPanel::configColumnsAndAPinnedId()
{
    auto* model = history()->model();
    QCOMPARE(model->columnCount(), int(RunTableModel::kColumns));
    auto menu = history()->headerMenu(RunTableModel::Loss);
    QVERIFY(menu->findChild<QMenu*>("historyConfigColumns"));
    QAction* batch = nullptr;
    for (QAction* a : menu->findChild<QMenu*>("historyConfigColumns")->findChildren<QAction*>()) {
        if (a->text() == "train.batch_size") batch = a;
    }
    QVERIFY(batch);
    batch->trigger();
    QCOMPARE(model->columnCount(), int(RunTableModel::kColumns) + 1);
    QCOMPARE(model->headerData(RunTableModel::kColumns, Qt::Horizontal, Qt::DisplayRole).toString(), QString("train.batch_size"));
    QStringList batches;
    for (int row = 0; row < model->rowCount(); ++row) batches << model->index(row, RunTableModel::kColumns).data().toString();
    batches.sort();
    QCOMPARE(batches, QStringList({"16", "32", "8"}));
    // Sorted as numbers: 8 < 16 < 32.
    history()->table()->sortByColumn(RunTableModel::kColumns, Qt::AscendingOrder);
    QCOMPARE(history()->table()->model()->index(0, RunTableModel::kColumns).data().toString(), QString("8"));
    // Built-in columns can be hidden, but ID and Name offer no "Hide".
    for (int column : {int(RunTableModel::Id), int(RunTableModel::Name)}) {
        // The menu is held for the loop: a temporary one would be deleted before its actions are read.
        const auto header = history()->headerMenu(column);
        for (QAction* a : header->actions()) QVERIFY2(!a->text().startsWith("Hide"), qPrintable(a->text()));
    }
    // Scrolled to the far right, the ID column is still shown, pinned at the left.
    auto* table = history()->table();
    table->horizontalScrollBar()->setValue(table->horizontalScrollBar()->maximum());
    QVERIFY(table->horizontalScrollBar()->maximum() > 0);
    QTest::qWait(50);
    auto* pinned = history()->frozenIdView();
    QVERIFY(pinned->isVisible());
    QVERIFY(!pinned->isColumnHidden(RunTableModel::Id) && pinned->isColumnHidden(RunTableModel::Name));
    QCOMPARE(pinned->columnWidth(RunTableModel::Id), table->columnWidth(RunTableModel::Id));
    QVERIFY(pinned->geometry().left() <= table->frameWidth());
    QVERIFY(m_window->grab().save(QCoreApplication::applicationDirPath() + "/history-config-column.png"));
    // Removed again from its own header menu; the choice is kept for the next session.
    const auto columnMenu = history()->headerMenu(RunTableModel::kColumns);
    QAction* remove = columnMenu->actions().front();
    QCOMPARE(remove->text(), QString("Remove column train.batch_size"));
    remove->trigger();
    QCOMPARE(model->columnCount(), int(RunTableModel::kColumns));
}

// Runs launched from a config are named with their id and what changed since
// the previous run of that config: "x #5 batch_size=16".
void TestHistoryPanel::defaultRunNamesCarryIdAndDifferences()
{
    const auto json = [](int batch, double lr) {
        return R"({"name":"sweep","optim":{"lr":)" + std::to_string(lr) + R"(},"train":{"batch_size":)"
            + std::to_string(batch) + "}}";
    };
    std::int64_t first, second, third;
    {
        RunStore store(db().toStdString());
        first = store.createRun({"sweep", json(8, 0.001), "cpu", "fp32", "0", "1.13", 10, true});
        second = store.createRun({"sweep", json(8, 0.003), "cpu", "fp32", "0", "1.13", 10, true});
        store.createRun({"other", R"({"name":"other"})", "cpu", "fp32", "0", "1.13", 10, true});
        third = store.createRun({"sweep", json(16, 0.003), "cpu", "fp32", "0", "1.13", 10, true});
        QCOMPARE(store.run(first)->name, "sweep #" + std::to_string(first));
        QCOMPARE(store.run(second)->name, "sweep #" + std::to_string(second) + " lr=0.003");
        QCOMPARE(store.run(third)->name, "sweep #" + std::to_string(third) + " batch_size=16");
        // A config of the same name that trains another model (a new config's
        // "experiment" after the addition GPT) is not named against it.
        const auto gpt = store.createRun({"experiment", R"({"name":"experiment","optim":{"lr":0.001}})", "cpu", "fp32", "0", "1.13", 10, true});
        const auto llama = store.createRun({"experiment", R"({"name":"experiment","model":{"type":"llama"},"data":{"source":"text"}})",
                                            "cpu", "fp32", "0", "1.13", 10, true});
        QCOMPARE(store.run(gpt)->name, "experiment #" + std::to_string(gpt));
        QCOMPARE(store.run(llama)->name, "experiment #" + std::to_string(llama));
        // The same model and data, written out or left to the defaults: named by what changed.
        const auto again = store.createRun({"experiment", R"({"name":"experiment","model":{"type":"llama"},"data":{"source":"text"},"train":{"batch_size":4}})",
                                            "cpu", "fp32", "0", "1.13", 10, true});
        QCOMPARE(store.run(again)->name, "experiment #" + std::to_string(again) + " batch_size=4");
    }
    QVERIFY(history()->refresh());
    QVERIFY(history()->model()->find(third));
    QCOMPARE(history()->model()->find(third)->name, "sweep #" + std::to_string(third) + " batch_size=16");
}

QTEST_MAIN(TestHistoryPanel)
#include "tst_history_panel.moc"
