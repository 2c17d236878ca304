// The config editor: form and JSON stay in sync; invalid values are marked and block Start.
#include <QtTest>

#include <QAction>
#include <QApplication>
#include <QScreen>
#include <QComboBox>
#include <QDialog>
#include <QJsonArray>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QSignalSpy>

#include <filesystem>
#include <QScrollArea>

#include "ConfigDocument.h"
#include "LearningRatePlot.h"
#include "config/LearningRate.h"
#include "ExperimentPanel.h"
#include "DatasetBrowser.h"
#include "QCustomPlotInclude.h"
#include "MainWindow.h"
#include "MemoryPlannerPanel.h"
#include "RunPanel.h"
#include "TestPaths.h"
#include "TinyTokenizerFolder.h"

using namespace tb::ui;

class TestExperimentPanel : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void initTestCase()
    {
        QStandardPaths::setTestModeEnabled(true);
        qputenv("TRAINBENCH_CLI", TB_CLI_PATH); // a LoRA config's estimate is traced by it
    }
    void init();
    void cleanup() { m_window.reset(); }
    void formEditUpdatesJson();
    void formEditKeepsTheKeyOrder();
    void choiceUpdatesJson();
    void jsonEditUpdatesForm();
    void invalidValueDisablesStartWithMessage();
    void malformedJsonBlocksFormAndStart();
    void unsavedChangesMarkTheTitle();
    void nonUtf8ConfigIsRefusedUntouched();
    void filesThatAreNotConfigsAreRefusedUntouched();
    void ownTorchScriptModel();
    void openModelFolder();
    void leftOutFieldsShowWhatTrains();
    void tunedSettingsHaveFieldsWithTheirDefaults();
    void halfPrecisionBaseWaitsForLora();
    void schedulePreviewDrawsTheRateAsEdited();
    void estimateIsInTheUnitThatSuitsIt();
    void menuShortcutsAreTheDocumentedOnes();
    void fileDialogOpensLargeEnoughToRead();
    void openPythiaFolder();
    void dataPreviewTokenizesTheFirstDocument();
    void datasetBrowserCountsPagesAndMarksTheLoss();

private:
    QLineEdit* line(const QString& path) { return qobject_cast<QLineEdit*>(m_window->experimentPanel()->fieldEditor(path)); }
    void typeInto(QLineEdit* edit, const QString& text)
    {
        edit->setFocus();
        edit->selectAll();
        QTest::keyClick(edit, Qt::Key_Delete);
        QTest::keyClicks(edit, text);
    }
    std::unique_ptr<QTemporaryDir> m_dir;
    std::unique_ptr<MainWindow> m_window;
};

void TestExperimentPanel::init()
{
    m_dir = std::make_unique<QTemporaryDir>();
    m_window = std::make_unique<MainWindow>(m_dir->filePath("exp.db"));
    m_window->setAskBeforeClosing(false);
    m_window->openExample(":/examples/default.json");
    m_window->show();
    QVERIFY(QTest::qWaitForWindowExposed(m_window.get()));
}

void TestExperimentPanel::formEditUpdatesJson()
{
    typeInto(line("train.batch_size"), "16");
    QCOMPARE(m_window->document()->value("train.batch_size").toInt(), 16);
    QVERIFY(m_window->experimentPanel()->jsonView()->toPlainText().contains("\"batch_size\": 16"));
    QVERIFY(m_window->document()->isValid());
    QCOMPARE(m_window->document()->config()->train.batchSize, 16);
}

// The JSON box keeps the user's key order through form edits (it re-sorted
// them on the first edit); a new key goes last in its object.
void TestExperimentPanel::formEditKeepsTheKeyOrder()
{
    auto* doc = m_window->document();
    doc->loadText(R"({
    "name": "ordered",
    "train": {"steps": 50, "batch_size": 8},
    "model": {"type": "gpt", "n_layer": 1, "d_model": 32, "n_head": 2},
    "data": {"source": "text", "seq_len": 16}
})", "ordered.json");
    QVERIFY(doc->isValid());
    typeInto(line("train.batch_size"), "16");
    QCOMPARE(doc->value("train.batch_size").toInt(), 16);
    doc->setValue("optim.lr", 0.002);
    const QString text = m_window->experimentPanel()->jsonView()->toPlainText();
    const QStringList order{"\"name\"", "\"train\"", "\"steps\"", "\"batch_size\": 16", "\"model\"", "\"type\"",
                            "\"n_layer\"", "\"d_model\"", "\"n_head\"", "\"data\"", "\"source\"", "\"seq_len\"",
                            "\"optim\"", "\"lr\": 0.002"};
    qsizetype at = -1;
    for (const QString& key : order) {
        const qsizetype next = text.indexOf(key);
        QVERIFY2(next > at, qPrintable(key + " out of order in:\n" + text));
        at = next;
    }
    // Removing the last key of an object removes the object.
    doc->setValue("optim.lr", QJsonValue(QJsonValue::Undefined));
    QVERIFY(!m_window->experimentPanel()->jsonView()->toPlainText().contains("optim"));
}

void TestExperimentPanel::choiceUpdatesJson()
{
    auto* combo = qobject_cast<QComboBox*>(m_window->experimentPanel()->fieldEditor("model.positional_encoding"));
    QVERIFY(combo);
    combo->setCurrentText("rope");
    QCOMPARE(m_window->document()->value("model.positional_encoding").toString(), QString("rope"));
    QVERIFY(m_window->experimentPanel()->jsonView()->toPlainText().contains("\"rope\""));
}

void TestExperimentPanel::jsonEditUpdatesForm()
{
    auto* json = m_window->experimentPanel()->jsonView();
    QString text = json->toPlainText();
    text.replace("\"steps\": 300", "\"steps\": 1234");
    json->setPlainText(text);
    QTRY_COMPARE(line("train.steps")->text(), QString("1234"));
    QCOMPARE(m_window->document()->config()->train.steps, 1234);
}

void TestExperimentPanel::invalidValueDisablesStartWithMessage()
{
    QVERIFY(m_window->runPanel()->startButton()->isEnabled());
    typeInto(line("train.batch_size"), "-4");
    QVERIFY(m_window->experimentPanel()->fieldMessage("train.batch_size").contains("must be a positive integer"));
    QVERIFY(!m_window->runPanel()->startButton()->isEnabled());
    const auto reasons = m_window->runPanel()->findChildren<QLabel*>();
    const bool shown = std::any_of(reasons.begin(), reasons.end(), [](QLabel* l) {
        return l->isVisible() && l->text().contains("Cannot start: train.batch_size");
    });
    QVERIFY(shown);
    typeInto(line("train.batch_size"), "8");
    QVERIFY(m_window->experimentPanel()->fieldMessage("train.batch_size").isEmpty());
    QVERIFY(m_window->runPanel()->startButton()->isEnabled());
}

void TestExperimentPanel::malformedJsonBlocksFormAndStart()
{
    m_window->experimentPanel()->jsonView()->setPlainText("{ \"train\": ");
    QTRY_VERIFY(!m_window->runPanel()->startButton()->isEnabled());
    QVERIFY(!line("train.steps")->isEnabled());
    QVERIFY(!m_window->document()->jsonIsObject());
}

void TestExperimentPanel::unsavedChangesMarkTheTitle()
{
    QVERIFY(!m_window->isWindowModified());
    QVERIFY(m_window->windowTitle().contains("Trainbench"));
    typeInto(line("train.steps"), "10");
    QVERIFY(m_window->isWindowModified());
    QString error;
    QVERIFY(m_window->document()->saveAs(m_dir->filePath("saved.json"), &error));
    QVERIFY(!m_window->isWindowModified());
    QVERIFY(m_window->windowTitle().startsWith("saved.json"));
}

void TestExperimentPanel::nonUtf8ConfigIsRefusedUntouched()
{
    const QString path = m_dir->filePath("latin1.json");
    const QByteArray bytes = "{\"name\": \"caf\xe9\"}\n"; // Latin-1, not UTF-8
    QFile file(path);
    QVERIFY(file.open(QIODevice::WriteOnly));
    file.write(bytes);
    file.close();
    const QString before = m_window->document()->text();
    QString error;
    QVERIFY(!m_window->document()->loadFile(path, &error));
    QVERIFY2(error.contains("not UTF-8"), qPrintable(error));
    QCOMPARE(m_window->document()->text(), before);
    QVERIFY(file.open(QIODevice::ReadOnly));
    QCOMPARE(file.readAll(), bytes);
}

// Random bytes, text that is not JSON, and JSON that is not a config each get
// one message saying what the file is, and the open config stays as it was
// (text that was not JSON used to load into the editor behind a stale form).
void TestExperimentPanel::filesThatAreNotConfigsAreRefusedUntouched()
{
    QByteArray random(2048, '\0');
    for (int i = 0; i < random.size(); ++i) random[i] = static_cast<char>((i * 7919 + 13) % 256);
    const std::pair<QByteArray, const char*> cases[] = {
        {random, "not a text file"},
        {"hello, this is a note\n", "not a JSON document (line 1"},
        {"{\"model\": {\"type\": \"gpt\"},\n  oops}\n", "not a JSON document (line 2"},
        {"[1, 2, 3]", "its top level is not an object"},
        {"{\"weights\": [0.1, 0.2]}", "no model, data, optim or train section"},
    };
    const QString before = m_window->document()->text();
    for (const auto& [bytes, expected] : cases) {
        const QString path = m_dir->filePath("not-a-config.json");
        QFile file(path);
        QVERIFY(file.open(QIODevice::WriteOnly | QIODevice::Truncate));
        file.write(bytes);
        file.close();
        QString error;
        QVERIFY2(!m_window->document()->loadFile(path, &error), expected);
        QVERIFY2(error.contains(expected), qPrintable(error));
        QCOMPARE(m_window->document()->text(), before);
    }
    // Any key the config parser reads makes it a config, not only the sections.
    const QString minimal = m_dir->filePath("minimal.json");
    QFile file(minimal);
    QVERIFY(file.open(QIODevice::WriteOnly));
    file.write("{\"device\": \"cpu\"}\n");
    file.close();
    QString error;
    QVERIFY2(m_window->document()->loadFile(minimal, &error), qPrintable(error));
}

// Choosing torchscript asks for the model file; with it the config is valid
// and the estimate line says the planner does not plan it.
void TestExperimentPanel::ownTorchScriptModel()
{
    auto* type = qobject_cast<QComboBox*>(m_window->experimentPanel()->fieldEditor("model.type"));
    QVERIFY(type);
    type->setCurrentText("torchscript");
    QCOMPARE(m_window->document()->value("model.type").toString(), QString("torchscript"));
    QVERIFY(m_window->experimentPanel()->fieldMessage("model.path").contains("needs the file of the saved module"));
    QVERIFY(!m_window->runPanel()->startButton()->isEnabled());
    const QString model = m_dir->filePath("model.pt");
    QFile f(model);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.close();
    typeInto(line("model.path"), model);
    QVERIFY(m_window->document()->isValid());
    QVERIFY(m_window->experimentPanel()->fieldMessage("model.path").isEmpty());
    QVERIFY(m_window->experimentPanel()->estimateText().contains("TorchScript"));
    QVERIFY(!line("model.n_layer")->isEnabled()); // the built-in model's size does not apply
    QVERIFY(line("lora.rank")->isEnabled());
    m_window->grab().save(QDir::currentPath() + "/experiment-torchscript.png");
}

// File › Open model folder…: the folder's config.json decides the
// architecture, shown read-only; the data becomes token ids.
void TestExperimentPanel::openModelFolder()
{
    const QString folder = m_dir->filePath("TinyLlama-1.1B");
    QVERIFY(QDir().mkpath(folder));
    QFile f(folder + "/config.json");
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write(R"({"model_type": "llama", "vocab_size": 32000, "hidden_size": 2048, "intermediate_size": 5632,
        "num_hidden_layers": 22, "num_attention_heads": 32, "num_key_value_heads": 4, "max_position_embeddings": 2048,
        "rms_norm_eps": 1e-05, "tie_word_embeddings": false, "hidden_act": "silu"})");
    f.close();
    auto* panel = m_window->experimentPanel();
    QVERIFY(panel->architectureText().isEmpty()); // a built-in model shows no architecture line
    // What an earlier experiment set (and an earlier fix's accumulation) does
    // not carry over: opening a folder starts a new config for it.
    auto* doc = m_window->document();
    doc->setValues({{"name", QString("addition sweep")}, {"model.dropout", 0.3}, {"optim.warmup_steps", 77},
                    {"optim.optimizer", QString("sgd")}, {"train.grad_accum", 86}});
    QVERIFY(m_window->openModelFolder(folder));
    QCOMPARE(doc->value("name").toString(), QString("TinyLlama-1.1B"));
    for (const char* key : {"model.dropout", "optim.warmup_steps", "optim.optimizer", "train.grad_accum"})
        QVERIFY2(doc->value(key).isUndefined(), key);
    QCOMPARE(doc->value("model.type").toString(), QString("hf"));
    QCOMPARE(doc->value("model.path").toString(), folder);
    QCOMPARE(doc->value("data.source").toString(), QString("tokens"));
    QVERIFY(doc->value("model.n_layer").isUndefined()); // the folder's, not the form's
    const QString arch = panel->architectureText().simplified();
    QVERIFY2(arch.contains("llama, 22 layers, hidden 2048") && arch.contains("32 heads (4 key/value)"), qPrintable(arch));
    QVERIFY(!line("model.n_layer")->isEnabled());
    QCOMPARE(line("model.n_layer")->placeholderText(), QString("22")); // the folder's, shown where the size was
    // The data file is still missing: the config says so and Start waits.
    QVERIFY(panel->fieldMessage("data.path").contains("token ids"));
    QVERIFY(!m_window->runPanel()->startButton()->isEnabled());
    // A folder whose config.json is refused says why in the architecture line.
    QFile bad(m_dir->filePath("moe/config.json"));
    QVERIFY(QDir().mkpath(m_dir->filePath("moe")));
    QVERIFY(bad.open(QIODevice::WriteOnly));
    bad.write(R"({"model_type": "mixtral", "num_local_experts": 8})");
    bad.close();
    QTest::qWait(50); // the form lays out the architecture lines
    m_window->grab().save(QDir::currentPath() + "/experiment-hf-folder.png");
    panel->openModelFolder(m_dir->filePath("moe"));
    QVERIFY2(panel->architectureText().contains("mixtral"), qPrintable(panel->architectureText()));
    QVERIFY(!m_window->runPanel()->startButton()->isEnabled());
}

// A built-in llama without positional_encoding trains with RoPE (the config
// parser's default for the family); the form showed the list's first entry,
// "learned".
// The settings people tune have fields, each with a tooltip ending in its
// default, the parser's; LoRA's targets are a list typed with commas.
void TestExperimentPanel::tunedSettingsHaveFieldsWithTheirDefaults()
{
    auto* panel = m_window->experimentPanel();
    const tb::RunConfig d;
    const std::vector<std::pair<QString, QString>> fields{
        {"train.grad_accum", QString::number(d.train.gradAccum)},   {"train.eval_every", QString::number(d.train.evalEvery)},
        {"train.checkpoint_every", QString::number(d.train.checkpointEvery)},
        {"optim.warmup_steps", QString::number(d.optim.warmupSteps)}, {"optim.schedule", QString::fromStdString(d.optim.schedule)},
        {"optim.min_lr_ratio", QString::number(d.optim.minLrRatio)}, {"optim.weight_decay", QString::number(d.optim.weightDecay)},
        {"optim.grad_clip", QString::number(d.optim.gradClip)},     {"lora.alpha", QString::number(d.lora.alpha)},
        {"lora.targets", "attn, mlp"}};
    for (const auto& [path, value] : fields) {
        QWidget* editor = panel->fieldEditor(path);
        QVERIFY2(editor, qPrintable(path + " has no field"));
        QVERIFY2(editor->toolTip().endsWith("Default: " + value), qPrintable(path + ": " + editor->toolTip()));
    }
    // LoRA's fields wait for a rank; then the targets take a list.
    QVERIFY(!line("lora.targets")->isEnabled());
    typeInto(line("lora.rank"), "4");
    QVERIFY(line("lora.targets")->isEnabled());
    typeInto(line("lora.targets"), "attn,  mlp");
    QCOMPARE(m_window->document()->value("lora.targets").toArray(), (QJsonArray{"attn", "mlp"}));
    QVERIFY(m_window->document()->isValid());
    typeInto(line("lora.targets"), "attn, q_proj");
    QVERIFY(!m_window->document()->isValid()); // a GPT has no q_proj: the field says so
    QVERIFY2(panel->fieldMessage("lora.targets").contains("q_proj"), qPrintable(panel->fieldMessage("lora.targets")));
    QVERIFY(line("lora.targets")->toolTip().contains("This model's: attn, mlp"));
}

// The base's dtype (train.weights_dtype) is a LoRA setting: its field
// waits for a rank (and for no quantized base), and a config with it is
// planned from its own step.
void TestExperimentPanel::halfPrecisionBaseWaitsForLora()
{
    m_window->resize(1600, 1000);
    auto* panel = m_window->experimentPanel();
    auto* base = qobject_cast<QComboBox*>(panel->fieldEditor("train.weights_dtype"));
    QVERIFY(base);
    QCOMPARE(base->currentText(), QString("fp32"));
    QVERIFY(base->toolTip().endsWith("Default: fp32"));
    QVERIFY(!base->isEnabled());
    typeInto(line("lora.rank"), "8");
    QVERIFY(base->isEnabled());
    qobject_cast<QComboBox*>(panel->fieldEditor("train.precision"))->setCurrentText("bf16");
    base->setCurrentText("bf16");
    QCOMPARE(m_window->document()->value("train.weights_dtype").toString(), QString("bf16"));
    const auto config = m_window->document()->config();
    QVERIFY(config && config->train.weightsDtype == "bf16");
    // LoRA is planned from its own step: traced through the window's
    // deriver, then the figure (the Memory planner's) is shown.
    QVERIFY2(panel->estimateText().contains("tracing its training step on this CPU (seconds)"),
             qPrintable(panel->estimateText()));
    QTRY_VERIFY2_WITH_TIMEOUT(panel->estimateText().contains(" of tensors at the peak (during "), qPrintable(panel->estimateText()), 60000);
    QScrollArea* form = nullptr;
    for (QWidget* w = base->parentWidget(); w && !form; w = w->parentWidget()) form = qobject_cast<QScrollArea*>(w);
    QVERIFY(form);
    form->ensureWidgetVisible(base, 0, 200);
    QCoreApplication::processEvents();
    m_window->grab().save(QDir::currentPath() + "/experiment-half-base.png");
    typeInto(line("lora.rank"), "0");
    QVERIFY(!base->isEnabled());
}

// The learning-rate preview is the trainer's schedule, drawn again as the
// fields change; a warmup as long as the run says so.
void TestExperimentPanel::schedulePreviewDrawsTheRateAsEdited()
{
    m_window->resize(1600, 1000);
    auto* plot = m_window->experimentPanel()->findChild<LearningRatePlot*>("schedulePreview");
    auto* summary = m_window->experimentPanel()->findChild<QLabel*>("scheduleSummary");
    QVERIFY(plot && summary);
    typeInto(line("train.steps"), "120");
    typeInto(line("optim.warmup_steps"), "12");
    typeInto(line("optim.lr"), "0.002");
    qobject_cast<QComboBox*>(m_window->experimentPanel()->fieldEditor("optim.schedule"))->setCurrentText("linear");
    typeInto(line("optim.min_lr_ratio"), "0.25");
    const auto config = m_window->document()->config();
    QVERIFY(config.has_value());
    QCOMPARE(config->optim.schedule, std::string("linear"));
    const auto* data = plot->graph(0)->data().data();
    QCOMPARE(data->size(), 120);
    for (int step : {1, 12, 13, 60, 120}) {
        const double drawn = data->at(step - 1)->value;
        QCOMPARE(drawn, learningRateAt(config->optim, step, 120));
    }
    QCOMPARE(data->at(119)->value, 0.0005);
    QVERIFY2(summary->text().contains("warmup 12 steps to 0.002") && summary->text().contains("linear decay to 0.0005 at step 120"),
             qPrintable(summary->text()));
    // The form scrolls to it (as the user would) for the screenshots.
    QScrollArea* form = nullptr;
    for (QWidget* w = plot->parentWidget(); w && !form; w = w->parentWidget()) form = qobject_cast<QScrollArea*>(w);
    QVERIFY(form);
    form->ensureWidgetVisible(summary, 0, 0);
    QCoreApplication::processEvents();
    QVERIFY(plot->height() >= 120);
    m_window->grab().save(QDir::currentPath() + "/experiment-schedule.png");
    m_window->resize(1280, 720);
    QCoreApplication::processEvents();
    form->ensureWidgetVisible(summary, 0, 0);
    QCoreApplication::processEvents();
    m_window->grab().save(QDir::currentPath() + "/experiment-schedule-1280.png");

    typeInto(line("optim.warmup_steps"), "120");
    QVERIFY2(summary->text().startsWith("Warmup never ends"), qPrintable(summary->text()));
    QCOMPARE(plot->graph(0)->data()->at(119)->value, 0.002);
}

void TestExperimentPanel::leftOutFieldsShowWhatTrains()
{
    auto* doc = m_window->document();
    auto* positional = m_window->experimentPanel()->findChild<QComboBox*>("model.positional_encoding");
    QVERIFY(positional);
    doc->setValues({{"model.type", QString("llama")}, {"model.positional_encoding", QJsonValue(QJsonValue::Undefined)}});
    QVERIFY(doc->isValid());
    QCOMPARE(doc->config()->model.positionalEncoding, std::string("rope"));
    QCOMPARE(positional->currentText(), QString("rope"));
    QCOMPARE(doc->effectiveValue("model.tie_embeddings").toBool(true), false); // a llama's head is untied
    // Still the family's default while another field is invalid.
    doc->setValue("train.steps", -5);
    QVERIFY(!doc->isValid());
    QCOMPARE(positional->currentText(), QString("rope"));
    doc->setValues({{"train.steps", 10}, {"model.type", QString("gpt")}});
    QCOMPARE(positional->currentText(), QString("learned"));
    QVERIFY(doc->value("model.positional_encoding").isUndefined()); // shown, not written
}

// The estimate line showed "261900.0 MiB" beside the GPU's "268.36 GiB".
void TestExperimentPanel::estimateIsInTheUnitThatSuitsIt()
{
    auto* doc = m_window->document();
    doc->setValues({{"model.d_model", 2048}, {"model.n_layer", 24}, {"model.n_head", 16}, {"data.source", QString("text")},
                    {"data.seq_len", 512}, {"train.batch_size", 16}});
    QVERIFY(doc->isValid());
    // (Its own step, traced in the background first.)
    QTRY_VERIFY2_WITH_TIMEOUT(!m_window->experimentPanel()->estimateLabel()->text().contains("tracing"),
                              qPrintable(m_window->experimentPanel()->estimateLabel()->text()), 60000);
    const QString text = m_window->experimentPanel()->estimateLabel()->text();
    QVERIFY2(QRegularExpression("Memory estimate: \\d+\\.\\d\\d GiB of tensors").match(text).hasMatch(), qPrintable(text));
    QVERIFY2(!text.contains("MiB"), qPrintable(text));
}

// docs/window.md's menu table names each entry's shortcut; Save As… had none
// on a desktop without GNOME's or KDE's key bindings (QKeySequence::SaveAs is
// empty there), though the docs and the README listed Ctrl+Shift+S.
void TestExperimentPanel::menuShortcutsAreTheDocumentedOnes()
{
    QFile doc(QString::fromUtf8(tb::test::sourceDir()) + "/docs/window.md");
    QVERIFY(doc.open(QIODevice::ReadOnly));
    const QString text = QString::fromUtf8(doc.readAll());
    const QRegularExpression entry("(?:^|, )([^,|(]+?) \\(([^)]+)\\)");
    int checked = 0;
    for (const QString& line : text.split('\n')) {
        if (!line.startsWith("| File |") && !line.startsWith("| Run |") && !line.startsWith("| View |")) continue;
        const QString entries = line.section('|', 2, 2).trimmed();
        for (auto it = entry.globalMatch(entries); it.hasNext();) {
            const auto m = it.next();
            const QString name = m.captured(1).trimmed();
            const QKeySequence documented = QKeySequence::fromString(m.captured(2));
            QStringList found;
            bool match = false;
            for (QAction* action : m_window->findChildren<QAction*>()) {
                if (action->text().remove('&') != name) continue;
                found << action->shortcut().toString();
                match = match || action->shortcut() == documented;
            }
            QVERIFY2(match, qPrintable(QString("%1: documented %2, the window has [%3]").arg(name, m.captured(2), found.join(", "))));
            ++checked;
        }
    }
    QVERIFY2(checked >= 12, qPrintable(QString::number(checked)));
}

// Qt's own file dialog (no desktop's in a bare X session) opened at about
// 520x390, too small to read a folder.
void TestExperimentPanel::fileDialogOpensLargeEnoughToRead()
{
    QAction* open = nullptr;
    for (QAction* action : m_window->findChildren<QAction*>()) {
        if (action->text() == "&Open config…") open = action;
    }
    QVERIFY(open);
    QSize size;
    QTimer::singleShot(0, m_window.get(), [&] {
        if (auto* dialog = qobject_cast<QDialog*>(QApplication::activeModalWidget())) {
            size = dialog->size();
            dialog->reject();
        }
    });
    open->trigger();
    QVERIFY(size.isValid());
    const QSize screen = m_window->screen()->availableGeometry().size();
    QVERIFY2(size.width() >= std::min(800, int(screen.width() * 0.85)) && size.height() >= std::min(500, int(screen.height() * 0.85)),
             qPrintable(QString("%1x%2 on a %3x%4 screen").arg(size.width()).arg(size.height()).arg(screen.width()).arg(screen.height())));
}

// A GPT-NeoX folder: its own architecture line, LoRA on its own projection
// names, and a Memory planner that plans its LoRA run like any other (its
// layer's replay is exact: no "not yet exact" note).
void TestExperimentPanel::openPythiaFolder()
{
    const QString folder = m_dir->filePath("pythia-160m");
    QVERIFY(QDir().mkpath(folder));
    QFile f(folder + "/config.json");
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write(R"({"model_type": "gpt_neox", "vocab_size": 50304, "hidden_size": 768, "num_hidden_layers": 12,
        "num_attention_heads": 12, "intermediate_size": 3072, "max_position_embeddings": 2048, "rotary_pct": 0.25,
        "rotary_emb_base": 10000, "use_parallel_residual": true, "hidden_act": "gelu", "tie_word_embeddings": false})");
    f.close();
    auto* panel = m_window->experimentPanel();
    panel->openModelFolder(folder);
    const QString arch = panel->architectureText().simplified();
    QVERIFY2(arch.contains("gpt_neox, 12 layers, hidden 768") && arch.contains("rotary 16 of 64")
                 && arch.contains("parallel residual"),
             qPrintable(arch));
    // The disabled positional choice shows the folder's rotary, not the form's default.
    auto* positional = m_window->experimentPanel()->findChild<QComboBox*>("model.positional_encoding");
    QVERIFY(positional && !positional->isEnabled());
    QCOMPARE(positional->currentText(), QString("rope"));
    auto* doc = m_window->document();
    QVERIFY(doc->value("model.positional_encoding").isUndefined());
    QFile tokens(m_dir->filePath("pythia-train.bin"));
    QVERIFY(tokens.open(QIODevice::WriteOnly));
    tokens.write(QByteArray(4096, '\1')); // ids 257, within the vocabulary
    tokens.close();
    doc->setValue("data.path", tokens.fileName());
    doc->setValue("lora.rank", 8);
    doc->setValue("lora.targets", QJsonArray{"query_key_value"});
    QVERIFY2(panel->fieldMessage("lora.targets").isEmpty(), qPrintable(panel->fieldMessage("lora.targets")));
    doc->setValue("lora.targets", QJsonArray{"q_proj"}); // a Llama name on a NeoX model: said under the targets
    QTRY_VERIFY2(panel->fieldMessage("lora.targets").contains("\"q_proj\" is not a projection of a gpt_neox model")
                     && panel->fieldMessage("lora.targets").contains("query_key_value"),
                 qPrintable(panel->fieldMessage("lora.targets") + " | " + panel->otherIssuesText()));
    QVERIFY(!panel->otherIssuesText().contains("lora.targets"));
    QVERIFY2(panel->fieldEditor("lora.targets")->toolTip().contains("This model's: attn, mlp, query_key_value, dense"),
             qPrintable(panel->fieldEditor("lora.targets")->toolTip()));
    doc->setValue("lora.targets", QJsonArray{"query_key_value"});
    QTRY_VERIFY2(m_window->document()->isValid(), qPrintable(panel->otherIssuesText()));
    QTest::qWait(50);
    m_window->grab().save(QDir::currentPath() + "/experiment-pythia-folder.png");
    m_window->tabs()->setCurrentWidget(m_window->plannerPanel());
    auto* notes = m_window->plannerPanel()->findChild<QLabel*>("plannerNotes");
    QVERIFY(notes);
    // One answer: the planner adapts query_key_value as the run will (it planned
    // 0 trainable parameters, so no backward, 2.18 GiB against the form's 3.06).
    QTRY_VERIFY2_WITH_TIMEOUT(notes->text().contains(QLocale().toString(qlonglong(12 * 8 * (768 + 3 * 768))) + " trainable"),
                              qPrintable(notes->text() + " | " + m_window->plannerPanel()->verdictText()), 60000);
    QTRY_VERIFY2_WITH_TIMEOUT(panel->estimateText().contains(" of tensors at the peak"), qPrintable(panel->estimateText()), 60000);
    QVERIFY2(!notes->text().contains("not yet exact"), qPrintable(notes->text()));
    const QRegularExpression gib("([0-9.]+ GiB) of ([0-9.]+ GiB)");
    const auto inForm = gib.match(panel->estimateText()), inPlanner = gib.match(m_window->plannerPanel()->verdictText());
    QVERIFY2(inForm.hasMatch() && inPlanner.hasMatch() && inForm.captured(0) == inPlanner.captured(0),
             qPrintable(panel->estimateText() + " | " + m_window->plannerPanel()->verdictText()));
    m_window->grab().save(QDir::currentPath() + "/planner-pythia-folder.png");
}


// A folder with a tokenizer.json trains on text: opening it picks text data,
// and the preview shows the first document tokenized as training sees it
// (BOS from the template, EOS from tokenizer_config.json), off the GUI thread.
void TestExperimentPanel::dataPreviewTokenizesTheFirstDocument()
{
    const QString folder = m_dir->filePath("tiny-llama");
    QVERIFY(QDir().mkpath(folder));
    auto write = [](const QString& path, const QByteArray& text) {
        QFile f(path);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write(text);
    };
    writeTinyTokenizerFolder(folder, R"({"bos_token": "<s>", "eos_token": "</s>"})");
    auto* panel = m_window->experimentPanel();
    auto* doc = m_window->document();
    panel->openModelFolder(folder);
    QCOMPARE(doc->value("data.source").toString(), QString("text"));
    QVERIFY(doc->value("data.path").isUndefined());

    write(m_dir->filePath("chat.jsonl"), "\n{\"text\": \"hello world\"}\n{\"text\": \"hello\"}\n");
    doc->setValues({{"data.source", QString("jsonl")}, {"data.path", m_dir->filePath("chat.jsonl")},
                    {"data.seq_len", 8}});
    QTRY_VERIFY2(panel->dataPreviewHeader().contains("(line 2): 9 tokens"), qPrintable(panel->dataPreviewHeader()));
    // <s> hello " " w o r l d </s>: each token its own shaded run.
    QCOMPARE(panel->dataPreviewTokens(), QString("<s>hello world</s>"));
    QVERIFY(panel->fieldEditor("data.field")->isEnabled());

    // A missing field is named, with its line.
    doc->setValue("data.field", QString("body"));
    QTRY_VERIFY2(panel->dataPreviewHeader().contains("line 2: no string field \"body\""), qPrintable(panel->dataPreviewHeader()));
    doc->setValue("data.field", QJsonValue(QJsonValue::Undefined));
    QTRY_VERIFY2(panel->dataPreviewHeader().contains("9 tokens"), qPrintable(panel->dataPreviewHeader()));
    QTest::qWait(50);
    m_window->grab().save(QDir::currentPath() + "/experiment-data-preview.png");

    // Chat data: the first conversation rendered with the folder's template, the
    // assistant's tokens (and the </s> ending its turn) counted as trained.
    write(folder + "/tokenizer_config.json", R"({"bos_token": "<s>", "eos_token": "</s>", "chat_template":
        "{% for m in messages %}{% if m.role == 'user' %}{{ m.content }}{% else %}{{ ' ' + m.content + eos_token }}{% endif %}{% endfor %}"})");
    write(m_dir->filePath("chat-data.jsonl"),
          R"({"messages": [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "world"}]})" "\n");
    doc->setValues({{"data.source", QString("chat")}, {"data.path", m_dir->filePath("chat-data.jsonl")}});
    QTRY_VERIFY2(panel->dataPreviewHeader().contains("9 tokens, 6 of them the assistant's"), qPrintable(panel->dataPreviewHeader()));
    QCOMPARE(panel->dataPreviewTokens(), QString("<s>hello world</s>"));
    QTest::qWait(50);
    m_window->grab().save(QDir::currentPath() + "/experiment-chat-preview.png");

    // Built-in models have no preview.
    doc->setValues({{"model.type", QString("gpt")}, {"model.path", QJsonValue(QJsonValue::Undefined)},
                    {"data.source", QString("text")}, {"data.path", QJsonValue(QJsonValue::Undefined)}});
    QTRY_VERIFY(panel->dataPreviewHeader().isEmpty());
}

// Browse data…: every conversation of a chat file as training sees it. The
// numbers (examples, rows dropped, those longer than the training window)
// are trainbench-cli data's (tst_tokenizers checks those against the
// reference tokenizer's count); pages move with Next and the example number.
void TestExperimentPanel::datasetBrowserCountsPagesAndMarksTheLoss()
{
    const QString folder = m_dir->filePath("tiny-chat");
    QVERIFY(QDir().mkpath(folder));
    auto write = [](const QString& path, const QByteArray& text) {
        QFile f(path);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write(text);
    };
    writeTinyTokenizerFolder(folder, R"({"bos_token": "<s>", "eos_token": "</s>", "chat_template":
        "{% for m in messages %}{% if m.role == 'user' %}{{ m.content }}{% else %}{{ ' ' + m.content + eos_token }}{% endif %}{% endfor %}"})");
    const QByteArray hello = R"({"messages": [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "world"}]})";
    // Four conversations (ShareGPT's and Alpaca's shapes too), one longer than
    // the window of 9 tokens, and a row that is not JSON (dropped, counted).
    write(m_dir->filePath("browse.jsonl"),
          hello + "\n{\"conversations\": [{\"from\": \"human\", \"value\": \"hello\"}, {\"from\": \"gpt\", \"value\": \"hello\"}]}\n"
          + "{not json\n{\"instruction\": \"hello\", \"output\": \"world\"}\n"
          + R"({"messages": [{"role": "user", "content": "hello hello hello"}, {"role": "assistant", "content": "hello world world"}]})" + "\n");
    auto* panel = m_window->experimentPanel();
    auto* doc = m_window->document();
    panel->openModelFolder(folder);
    doc->setValues({{"data.source", QString("chat")}, {"data.path", m_dir->filePath("browse.jsonl")}, {"data.seq_len", 8},
                    {"data.skip_bad_lines", true}});
    // (Laid out once the preview appears.)
    QTRY_VERIFY(panel->browseDataButton()->isEnabled() && panel->browseDataButton()->height() > 0);
    QVERIFY2(doc->isValid(), doc->issues().empty() ? "" : doc->issues().front().text().c_str());
    QTest::mouseClick(panel->browseDataButton(), Qt::LeftButton);
    auto* browser = panel->findChild<DatasetBrowser*>();
    QVERIFY(browser);
    QTRY_VERIFY_WITH_TIMEOUT(!browser->loading(), 30000);
    QVERIFY2(browser->stats().has_value(), qPrintable(browser->errorText()));
    const auto& stats = *browser->stats();
    QCOMPARE(stats.documents, std::uint64_t(4));
    QCOMPARE(stats.skippedLines, std::uint64_t(1));
    QCOMPARE(stats.longerThanWindow(8), std::uint64_t(1));
    const QString summary = browser->summaryText();
    QVERIFY2(summary.contains("4 conversations") && summary.contains("1 of 4 longer than a training window of 9 tokens")
                 && summary.contains("1 row dropped as bad data") && summary.contains("line 3"),
             qPrintable(summary));
    // The first conversation, as the data preview shows it.
    QCOMPARE(browser->example(), 1);
    QVERIFY2(browser->exampleHeader().startsWith("9 tokens, 6 of them the assistant's"), qPrintable(browser->exampleHeader()));
    QCOMPARE(browser->exampleText(), QString("<s>hello world</s>"));
    QTest::mouseClick(browser->nextButton(), Qt::LeftButton);
    QCOMPARE(browser->example(), 2);
    QCOMPARE(browser->exampleText(), QString("<s>hello hello</s>"));
    browser->showExample(4);
    QVERIFY2(browser->exampleHeader().contains("longer than the training window (9)"), qPrintable(browser->exampleHeader()));
    QVERIFY(!browser->nextButton()->isEnabled());
    QVERIFY(browser->histogramPlot()->isVisible() && browser->histogramPlot()->plottableCount() == 1);
    browser->resize(1600, 1000);
    QTest::qWait(50);
    browser->grab().save(QDir::currentPath() + "/dataset-browser-1600.png");
    browser->resize(1280, 720);
    QTest::qWait(50);
    browser->grab().save(QDir::currentPath() + "/dataset-browser-1280.png");
    browser->close();

    // A large file is read in the background, the progress bar following it
    // (three blocks of 8 MiB here); Cancel stops it and caches nothing.
    {
        QFile big(m_dir->filePath("big.jsonl"));
        QVERIFY(big.open(QIODevice::WriteOnly));
        const QByteArray row = R"({"messages": [{"role": "user", "content": "hello hello"}, {"role": "assistant", "content": "world"}]})" "\n";
        for (int i = 0; i < (20 << 20) / row.size(); ++i) big.write(row);
    }
    doc->setValue("data.path", m_dir->filePath("big.jsonl"));
    QTRY_VERIFY(panel->browseDataButton()->isEnabled());
    auto* large = panel->openDatasetBrowser();
    QVERIFY(large);
    QSignalSpy progressed(large->progressBar(), &QProgressBar::valueChanged);
    QTRY_VERIFY_WITH_TIMEOUT(!large->loading(), 120000);
    QVERIFY2(large->stats().has_value(), qPrintable(large->errorText()));
    QVERIFY2(progressed.count() >= 2, qPrintable(QString::number(progressed.count())));
    large->close();
    std::filesystem::last_write_time(m_dir->filePath("big.jsonl").toStdString(), std::filesystem::file_time_type::clock::now());
    auto* cancelled = panel->openDatasetBrowser();
    QVERIFY(cancelled);
    QTest::mouseClick(cancelled->cancelButton(), Qt::LeftButton);
    QTRY_VERIFY_WITH_TIMEOUT(!cancelled->loading(), 120000);
    QVERIFY2(!cancelled->stats().has_value() && cancelled->errorText().startsWith("Cancelled"), qPrintable(cancelled->errorText()));
    cancelled->close();
    doc->setValue("data.path", m_dir->filePath("browse.jsonl"));

    // Without skip_bad_lines the bad row is the answer: its line, and no numbers.
    doc->setValue("data.skip_bad_lines", false);
    QTRY_VERIFY(panel->browseDataButton()->isEnabled());
    auto* refused = panel->openDatasetBrowser();
    QVERIFY(refused);
    QTRY_VERIFY_WITH_TIMEOUT(!refused->loading(), 30000);
    QVERIFY(!refused->stats().has_value());
    QVERIFY2(refused->errorText().contains("line 3"), qPrintable(refused->errorText()));
    refused->close();
}

QTEST_MAIN(TestExperimentPanel)
#include "tst_experiment_panel.moc"
