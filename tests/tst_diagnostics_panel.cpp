// The Diagnostics panel: preflight as the config is edited, Apply fix, the
// paste box and log files, the verdict beside Start, and launching past
// preflight errors from the Run panel.
#include <QtTest>

#include <QCheckBox>
#include <QComboBox>
#include <QFile>
#include <QTabWidget>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QLabel>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QTextBrowser>
#include <QTreeWidget>

#include "TestPaths.h"
#include "ConfigDocument.h"
#include "ScriptFixtures.h"
#include "DiagnosticsPanel.h"
#include "GpuTargetModel.h"
#include "RunPanel.h"
#include "diagnose/ErrorExplainer.h"
#include "store/RunStore.h"

using namespace tb;
using namespace tb::ui;

namespace {

QString exampleText()
{
    QFile f(QString::fromStdString(tb::test::sourcePath("resources/examples/default.json")));
    f.open(QIODevice::ReadOnly);
    return QString::fromUtf8(f.readAll());
}

bool has(const std::vector<Finding>& findings, const std::string& kind)
{
    for (const auto& f : findings) {
        if (f.kind == kind) return true;
    }
    return false;
}

bool cudaUsableHere() { return torch::cuda::is_available(); }

} // namespace

class TestDiagnosticsPanel final : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void initTestCase() { QStandardPaths::setTestModeEnabled(true); }
    void preflightFollowsEditsAndAppliesFixes();
    void pasteAndFilesAreExplained();
    void ctrlReturnExplainsEveryTime();
    void verdictBesideStartAndForcedLaunch();
    void auditTableListsMisplacedTensors();
};

// Story 1 on a laptop: the audit for the GPU the run will rent lists the
// plain tensor attributes that will stay behind, and only them by default.
void TestDiagnosticsPanel::auditTableListsMisplacedTensors()
{
    QTemporaryDir dir;
    const QString model = dir.filePath("story1.pt");
    fixtures::scriptedLm(fixtures::ScriptVariant::PlainTensor).save(model.toStdString());
    ConfigDocument doc;
    doc.loadText(QString(R"({"name": "own model", "device": "cpu", "model": {"type": "torchscript", "path": "%1"},
                             "data": {"source": "text", "seq_len": 32}})").arg(model),
                 "own.json");
    DiagnosticsPanel panel(&doc);
    panel.resize(1100, 700);
    panel.waitForPreflight();
    QVERIFY(has(panel.launchFindings(), "memory_not_planned"));
    for (const auto& f : panel.launchFindings()) QVERIFY2(f.severity != Severity::Error, f.kind.c_str());
    panel.runAudit(cudaUsableHere() ? "cpu" : "cuda:0");
    panel.waitForAudit();
    QVERIFY(panel.auditReport());
    QCOMPARE(panel.auditReport()->flagged(), 4);
    QCOMPARE(panel.auditTable()->rowCount(), 4);
    QCOMPARE(panel.auditTable()->item(0, 0)->text(), QString("blocks.0.pe.position_scaling"));
    QCOMPARE(panel.auditTable()->item(0, 1)->text(), QString("attribute"));
    QVERIFY(panel.auditTable()->item(0, 5)->text().contains("neither parameter nor buffer"));
    panel.tools()->setCurrentIndex(1);
    QCOMPARE(panel.auditDeviceBox()->currentText(), QString(cudaUsableHere() ? "cpu" : "cuda:0"));
    panel.show();
    QVERIFY(QTest::qWaitForWindowExposed(&panel));
    panel.auditTable()->setCurrentCell(1, 0);
    QVERIFY(panel.detailsView()->toPlainText().contains("Register it as a parameter"));
    panel.grab().save(QDir::currentPath() + "/diagnostics-audit.png");
    panel.onlyMisplacedBox()->setChecked(false);
    QCOMPARE(panel.auditTable()->rowCount(), static_cast<int>(panel.auditReport()->tensors.size()));
    // A device name that is not one: one sentence, no table.
    panel.runAudit("tpu:0");
    panel.waitForAudit();
    QVERIFY(!panel.auditReport());
    QCOMPARE(panel.auditTable()->rowCount(), 0);
}

void TestDiagnosticsPanel::preflightFollowsEditsAndAppliesFixes()
{
    ConfigDocument doc;
    doc.loadText(exampleText(), "default.json");
    DiagnosticsPanel panel(&doc);
    panel.resize(1100, 700);
    GpuTargetModel targets;
    targets.setTarget(GpuCatalogue::bundled().resolve("T4"));
    panel.setTargetModel(&targets);
    panel.waitForPreflight();
    QVERIFY(!has(panel.plannedFindings(), "bf16_unsupported"));

    doc.setValues({{"train.precision", QJsonValue("bf16")}});
    panel.waitForPreflight();
    QVERIFY(has(panel.plannedFindings(), "bf16_unsupported"));
    QVERIFY(panel.selectKind("bf16_unsupported"));
    const QString details = panel.detailsView()->toPlainText();
    QVERIFY2(details.contains("7.5") && details.contains("What bf16_unsupported means"), qPrintable(details));
    QVERIFY(panel.applyFixButton()->isEnabled());
    panel.show();
    QVERIFY(QTest::qWaitForWindowExposed(&panel));
    panel.grab().save(QDir::currentPath() + "/diagnostics-preflight.png");
    QTest::mouseClick(panel.applyFixButton(), Qt::LeftButton);
    QCOMPARE(doc.config()->train.precision, std::string("auto"));
    panel.waitForPreflight();
    QVERIFY(!has(panel.plannedFindings(), "bf16_unsupported"));
    // The fix creates no finding for a launch on this machine either (fp16 would: no CUDA here).
    QVERIFY(!has(panel.launchFindings(), "precision_unsupported"));

    // An invalid config is reported as findings, not as silence.
    doc.setValues({{"optim.lr", QJsonValue(0)}});
    panel.waitForPreflight();
    QVERIFY(has(panel.launchFindings(), "learning_rate"));
}

void TestDiagnosticsPanel::pasteAndFilesAreExplained()
{
    ConfigDocument doc;
    doc.loadText(exampleText(), "default.json");
    DiagnosticsPanel panel(&doc);
    panel.resize(1100, 700);
    panel.pasteBox()->setPlainText("Traceback (most recent call last):\n  File \"qa.py\", line 77, in forward\n"
                                   "RuntimeError: Expected all tensors to be on the same device, but got index is on "
                                   "cuda:0, different from other tensors on cpu (when checking argument for argument "
                                   "index in method wrapper_CUDA__index_select)");
    QTest::mouseClick(panel.explainButton(), Qt::LeftButton);
    panel.waitForExplanation();
    QCOMPARE(panel.explainedFindings().front().kind, std::string("device_mismatch"));
    const QString details = panel.detailsView()->toPlainText();
    QVERIFY2(details.contains("cuda:0 and cpu meet at argument index of index_select"), qPrintable(details));
    QVERIFY(details.contains("register_buffer"));
    panel.show();
    QVERIFY(QTest::qWaitForWindowExposed(&panel));
    panel.grab().save(QDir::currentPath() + "/diagnostics-explained.png");

    QTemporaryDir dir;
    const QString log = dir.filePath("train.log");
    {
        QFile f(log);
        QVERIFY(f.open(QIODevice::WriteOnly));
        for (int i = 0; i < 20000; ++i) f.write(QByteArray("step ") + QByteArray::number(i) + " loss 2.1\r\n");
        f.write("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
                "of 23.65 GiB of which 1.10 GiB is free.\n");
    }
    QVERIFY(panel.explainFile(log));
    panel.waitForExplanation();
    QCOMPARE(panel.explainedFindings().front().kind, std::string("cuda_oom"));

    // An out-of-memory message: the likely cause for its numbers first (not every
    // possible cause), sizes in readable units, and the batch that fits with the open config.
    panel.pasteBox()->setPlainText(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 200.00 MiB. GPU 0 has a total capacity of "
        "14.74 GiB of which 4.19 MiB is free. Including non-PyTorch memory, this process has 14.73 GiB memory in use. "
        "Of the allocated memory 14.50 GiB is allocated by PyTorch, and 30.00 MiB is reserved by PyTorch but "
        "unallocated.");
    QTest::mouseClick(panel.explainButton(), Qt::LeftButton);
    panel.waitForExplanation();
    const Finding oom = panel.explainedFindings().front();
    QCOMPARE(oom.kind, std::string("cuda_oom"));
    QCOMPARE(oom.text.at("verdict"), std::string("over_budget"));
    QVERIFY2(oom.cause.find("The step needs more memory than the GPU has") != std::string::npos, oom.cause.c_str());
    QVERIFY2(oom.cause.find("another process") == std::string::npos, oom.cause.c_str());
    QVERIFY2(oom.numbers.count("fitting_batch") && oom.fix.find("batch") != std::string::npos, oom.fix.c_str());
    const QString oomDetails = panel.detailsView()->toPlainText();
    QVERIFY2(oomDetails.contains("(4.19 MiB)") && !oomDetails.contains("0.00 GiB"), qPrintable(oomDetails));
    panel.grab().save(QDir::currentPath() + "/diagnostics-oom.png");
    QString error;
    QVERIFY(!panel.explainFile(dir.filePath("missing.log"), &error));
    QVERIFY(error.contains("missing.log"));
}

// Ctrl+Return explains every time, not only until the first explanation resets
// the button's text (which used to replace its shortcut with the Alt+E mnemonic).
void TestDiagnosticsPanel::ctrlReturnExplainsEveryTime()
{
    ConfigDocument doc;
    doc.loadText(exampleText(), "default.json");
    DiagnosticsPanel panel(&doc);
    panel.resize(1000, 620);
    panel.show();
    QVERIFY(QTest::qWaitForWindowExposed(&panel));
    panel.activateWindow();
    QVERIFY(QTest::qWaitForWindowActive(&panel)); // shortcuts fire in the active window only
    for (const char* text : {"RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB",
                             "RuntimeError: Expected all tensors to be on the same device, but found at least two "
                             "devices, cuda:0 and cpu!"}) {
        panel.pasteBox()->setPlainText(text);
        panel.pasteBox()->setFocus();
        QTest::keyClick(panel.pasteBox(), Qt::Key_Return, Qt::ControlModifier);
        panel.waitForExplanation();
        QVERIFY2(!panel.explainedFindings().empty(), text);
    }
    QCOMPARE(panel.explainedFindings().front().kind, std::string("device_mismatch"));
    // The findings get room for their titles (the tree was a sliver beside the details).
    QVERIFY2(panel.findingsView()->width() >= 0.35 * panel.width(),
             qPrintable(QString("findings %1 of %2 px").arg(panel.findingsView()->width()).arg(panel.width())));
    QCOMPARE(panel.findingsView()->columnCount(), 1);
    const QString explainedGroup = panel.findingsView()->topLevelItem(panel.findingsView()->topLevelItemCount() - 1)->text(0);
    QVERIFY2(explainedGroup.endsWith("1 error"), qPrintable(explainedGroup));
    panel.grab().save(QDir::currentPath() + "/diagnostics-ctrl-return.png");
}

void TestDiagnosticsPanel::verdictBesideStartAndForcedLaunch()
{
    QTemporaryDir dir;
    // A model folder whose config has fewer positions than the run's sequence.
    {
        QFile f(dir.filePath("config.json"));
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write(R"({"n_positions": 16})");
    }
    ConfigDocument doc;
    doc.loadText(exampleText(), "default.json");
    doc.setValues({{"train.init_from", QJsonValue(dir.path())}, {"train.steps", QJsonValue(2)},
                   {"optim.warmup_steps", QJsonValue(0)}, {"device", QJsonValue("cpu")}});
    DiagnosticsPanel panel(&doc);
    RunPanel run;
    run.setDatabasePath(dir.filePath("runs.db"));
    connect(&panel, &DiagnosticsPanel::launchVerdictChanged, &run, &RunPanel::setPreflightVerdict);
    run.setConfig(doc.config(), {});
    panel.waitForPreflight();
    QVERIFY2(run.preflightLabel()->text().contains("error"), qPrintable(run.preflightLabel()->text()));
    QVERIFY(run.preflightLabel()->text().contains("Sequence longer than the model"));
    run.resize(900, 600);
    run.show();
    QVERIFY(QTest::qWaitForWindowExposed(&run));
    run.grab().save(QDir::currentPath() + "/run-preflight-verdict.png");

    // Declined: nothing starts, nothing is stored.
    QStringList asked;
    run.setOverrideQuestion([&](const QString& findings) {
        asked << findings;
        return false;
    });
    QSignalSpy finished(&run, &RunPanel::runningChanged);
    run.start();
    QTRY_VERIFY_WITH_TIMEOUT(!run.isRunning() && asked.size() == 1, 60000);
    QVERIFY(asked.front().contains("Sequence longer"));
    {
        RunStore store(dir.filePath("runs.db").toStdString());
        QVERIFY(store.listRuns().empty());
    }
    // Confirmed: the run starts, the override is stored with it, and its failure is explained.
    run.setOverrideQuestion([](const QString&) { return true; });
    QSignalSpy outcomes(&run, &RunPanel::runFinished);
    run.start();
    QVERIFY(outcomes.wait(120000));
    const auto outcome = outcomes.takeFirst().at(0).value<tb::SessionOutcome>();
    QCOMPARE(outcome.status, RunStatus::Failed);
    QVERIFY(!outcome.failureFindings.empty());
    RunStore store(dir.filePath("runs.db").toStdString());
    const auto sets = store.findings(outcome.runId);
    QCOMPARE(sets.size(), std::size_t(2));
    QCOMPARE(sets[0].source, std::string("preflight"));
    QVERIFY(sets[0].overridden);
    QVERIFY(sets[0].findingsJson.find("sequence_too_long") != std::string::npos);
    QCOMPARE(sets[1].source, std::string("failure"));
    bool overrideEvent = false;
    for (const auto& e : store.events(outcome.runId)) overrideEvent |= e.kind == "preflight_override";
    QVERIFY(overrideEvent);
}

QTEST_MAIN(TestDiagnosticsPanel)
#include "tst_diagnostics_panel.moc"
