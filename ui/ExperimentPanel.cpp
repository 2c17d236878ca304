#include "PlainText.h"
#include "FileDialogs.h"
#include "ExperimentPanel.h"

#include "DatasetBrowser.h"
#include "TokenHtml.h"

#include "GpuTargetModel.h"
#include "LearningRatePlot.h"

#include <QCheckBox>
#include <QComboBox>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonValue>
#include <QDir>
#include <QLabel>
#include <QLocale>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QRegularExpression>
#include <QScrollArea>
#include <QSplitter>
#include <QDateTime>
#include <QTextBrowser>
#include <QToolButton>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>

#include <algorithm>
#include <filesystem>
#include <mutex>

#include "ConfigDocument.h"
#include "StepDeriver.h"
#include "common/Errors.h"
#include "config/HfArchitecture.h"
#include "config/ModelSpec.h"
#include "Units.h"
#include "diagnose/TargetPlan.h"
#include "memory/Estimator.h"
#include "memory/MemoryPlan.h"
#include "memory/Verdict.h"
#include "text/ChatTemplate.h"
#include "text/Corpus.h"
#include "text/Tokenizer.h"
#include "train/SampleText.h"

namespace tb::ui {

// What the form shows for a JSON value (absent keys show the default as a
// placeholder); a list of names as "attn, mlp".
QString ExperimentPanel::fieldText(const QJsonValue& v)
{
    if (v.isString()) return v.toString();
    if (v.isBool()) return v.toBool() ? "true" : "false";
    if (v.isDouble()) return QString::number(v.toDouble(), 'g', 10);
    if (v.isUndefined() || v.isNull()) return {};
    const QJsonArray list = v.toArray();
    if (v.isArray() && std::all_of(list.begin(), list.end(), [](const QJsonValue& x) { return x.isString(); })) {
        QStringList names;
        for (const auto& x : list) names << x.toString();
        return names.join(", ");
    }
    return QString::fromUtf8(QJsonDocument(QJsonArray{v}).toJson(QJsonDocument::Compact)).mid(1).chopped(1);
}

namespace {

// Typed text from a numeric field: a number when it reads as one, else the
// text itself, so the validator can say what is wrong with it.
QJsonValue parseNumber(const QString& text, bool integer)
{
    const QString t = text.trimmed();
    if (t.isEmpty()) return QJsonValue(QJsonValue::Undefined);
    bool ok = false;
    const qlonglong i = t.toLongLong(&ok);
    if (ok) return QJsonValue(static_cast<qint64>(i));
    const double d = t.toDouble(&ok);
    if (ok) return integer && d == std::floor(d) && std::abs(d) < 9e15 ? QJsonValue(static_cast<qint64>(d)) : QJsonValue(d);
    return QJsonValue(t);
}

} // namespace

ExperimentPanel::ExperimentPanel(ConfigDocument* document, QWidget* parent)
    : QWidget(parent), m_document(document)
{
    QWidget* scroll = buildForm();

    m_json = new QPlainTextEdit(this);
    m_json->setLineWrapMode(QPlainTextEdit::NoWrap);
    m_json->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
    m_json->setToolTip(tr("The whole config as JSON; edits here update the form"));
    m_otherIssues = plainLabel(this);
    m_otherIssues->setWordWrap(true);
    m_otherIssues->setStyleSheet("color: #c0392b");
    m_otherIssues->setTextInteractionFlags(Qt::TextSelectableByMouse);

    auto* jsonHost = new QWidget(this);
    auto* jsonLayout = new QVBoxLayout(jsonHost);
    jsonLayout->setContentsMargins(0, 0, 0, 0);
    jsonLayout->addWidget(new QLabel(tr("JSON (the whole config)"), this));
    jsonLayout->addWidget(m_json, 1);
    jsonLayout->addWidget(m_otherIssues);

    // The config's memory estimate, updated as it is edited.
    m_estimate = plainLabel(this);
    m_estimate->setObjectName("experimentEstimate");
    m_estimate->setWordWrap(true);
    m_estimate->setTextInteractionFlags(Qt::TextSelectableByMouse);
    auto* plan = new QToolButton(this);
    plan->setText(tr("Plan…"));
    plan->setToolTip(tr("Open the memory planner (Ctrl+2)"));
    connect(plan, &QToolButton::clicked, this, &ExperimentPanel::planRequested);
    auto* formSide = new QWidget(this);
    auto* formLayout = new QVBoxLayout(formSide);
    formLayout->setContentsMargins(0, 0, 0, 0);
    formLayout->addWidget(scroll, 1);
    auto* estimateRow = new QHBoxLayout;
    estimateRow->addWidget(m_estimate, 1);
    estimateRow->addWidget(plan, 0, Qt::AlignTop);
    formLayout->addLayout(estimateRow);

    // The first document of the data, tokenized as training will see it.
    m_previewHost = new QWidget(this);
    auto* previewLayout = new QVBoxLayout(m_previewHost);
    previewLayout->setContentsMargins(0, 0, 0, 0);
    m_previewHeader = plainLabel(this);
    m_previewHeader->setObjectName("dataPreviewHeader");
    m_previewHeader->setWordWrap(true);
    m_previewHeader->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_preview = new QTextBrowser(this);
    m_preview->setObjectName("dataPreview");
    m_preview->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
    m_preview->setToolTip(tr("The first document tokenized with the model folder's tokenizer: each token shaded in "
                             "turn, special tokens (BOS, EOS) in grey, line breaks as ↵"));
    m_browseData = new QPushButton(tr("Browse &data…"), this);
    m_browseData->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_D));
    m_browseData->setToolTip(tr("Every example of the data as training sees it: how many, their lengths against the "
                                "sequence length, rows dropped, and each example's tokens (Ctrl+Shift+D)"));
    connect(m_browseData, &QPushButton::clicked, this, [this] { openDatasetBrowser(); });
    auto* previewTop = new QHBoxLayout;
    previewTop->addWidget(m_previewHeader, 1);
    previewTop->addWidget(m_browseData, 0, Qt::AlignTop);
    previewLayout->addLayout(previewTop);
    previewLayout->addWidget(m_preview, 1);
    m_previewHost->hide();
    connect(&m_previewWatcher, &QFutureWatcher<DataPreview>::finished, this, [this] {
        const DataPreview p = m_previewWatcher.result();
        if (p.key != m_previewKey) return; // made for a config since edited
        m_previewHeader->setText(p.header);
        m_previewHeader->setStyleSheet(p.error ? "color: #c0392b" : "");
        m_preview->setHtml(p.html);
    });

    auto* splitter = new QSplitter(Qt::Vertical, this);
    splitter->addWidget(formSide);
    splitter->addWidget(jsonHost);
    splitter->addWidget(m_previewHost);
    splitter->setStretchFactor(0, 3);
    splitter->setStretchFactor(1, 2);
    splitter->setStretchFactor(2, 1);
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(4, 4, 4, 4);
    layout->addWidget(splitter);

    // Typing in the JSON view re-validates after a short pause, not per key.
    m_jsonDebounce.setSingleShot(true);
    m_jsonDebounce.setInterval(250);
    connect(m_json, &QPlainTextEdit::textChanged, this, [this] {
        if (!m_updating) m_jsonDebounce.start();
    });
    connect(&m_jsonDebounce, &QTimer::timeout, this, [this] {
        m_updating = true;
        m_document->setText(m_json->toPlainText());
        m_updating = false;
        refreshFromDocument();
    });
    connect(m_document, &ConfigDocument::changed, this, [this] {
        if (!m_updating) refreshFromDocument();
    });
    refreshFromDocument();
}

QWidget* ExperimentPanel::fieldEditor(const QString& path) const
{
    for (const auto& f : m_fields) {
        if (f.path == path) return f.editor;
    }
    return nullptr;
}

QString ExperimentPanel::fieldMessage(const QString& path) const
{
    for (const auto& f : m_fields) {
        if (f.path == path) return f.message->isVisibleTo(this) ? f.message->text() : QString();
    }
    return {};
}

QString ExperimentPanel::otherIssuesText() const
{
    return m_otherIssues->isVisibleTo(this) ? m_otherIssues->text() : QString();
}

void ExperimentPanel::fieldEdited(const Field& field)
{
    QJsonValue value;
    switch (field.kind) {
    case Kind::Choice: value = static_cast<QComboBox*>(field.editor)->currentText(); break;
    case Kind::Flag: value = static_cast<QCheckBox*>(field.editor)->isChecked(); break;
    case Kind::Integer: value = parseNumber(static_cast<QLineEdit*>(field.editor)->text(), true); break;
    case Kind::Number: value = parseNumber(static_cast<QLineEdit*>(field.editor)->text(), false); break;
    case Kind::List: {
        // "q_proj, v_proj" (commas or spaces) -> ["q_proj", "v_proj"]; empty: the default.
        QJsonArray names;
        for (const auto& name : static_cast<QLineEdit*>(field.editor)->text().split(QRegularExpression("[,\\s]+"), Qt::SkipEmptyParts))
            names.append(name);
        value = names.isEmpty() ? QJsonValue(QJsonValue::Undefined) : QJsonValue(names);
        break;
    }
    default: {
        const QString text = static_cast<QLineEdit*>(field.editor)->text();
        value = text.isEmpty() ? QJsonValue(QJsonValue::Undefined) : QJsonValue(text);
    }
    }
    m_updating = true;
    m_document->setValue(field.path, value);
    m_updating = false;
    refreshFromDocument();
}

void ExperimentPanel::browseFile(const QString& field)
{
    const QString start = m_document->filePath().isEmpty() ? QString() : QFileInfo(m_document->filePath()).absolutePath();
    const bool model = field == "model.path";
    if (model && m_document->value("model.type").toString() == "hf") {
        const QString folder = existingDirectory(this, tr("Choose a Hugging Face model folder"), start);
        if (!folder.isEmpty()) openModelFolder(folder);
        return;
    }
    if (!model && m_document->value("model.type").toString() == "hf" && m_document->value("data.source").toString() != "tokens") {
        const QString file = openFileName(this, tr("Choose a text or JSON lines file"), start,
                                          tr("Text and JSON lines (*.txt *.md *.jsonl *.json);;All files (*)"));
        if (file.isEmpty()) return;
        // A .jsonl file is records (or conversations, when chat is chosen); anything else is text.
        const bool jsonl = file.endsWith(".jsonl", Qt::CaseInsensitive) || file.endsWith(".json", Qt::CaseInsensitive);
        const QString source = m_document->value("data.source").toString();
        m_document->setValues({{"data.source", QString(jsonl ? (source == "chat" ? "chat" : "jsonl") : "text")}, {field, file}});
        return;
    }
    if (!model && m_document->value("data.source").toString() == "tokens") {
        const QString file = openFileName(this, tr("Choose a token id file"), start, tr("Token ids (*.bin);;All files (*)"));
        if (!file.isEmpty()) m_document->setValue(field, file);
        return;
    }
    const QString path = openFileName(this, model ? tr("Choose a TorchScript model") : tr("Choose a text file"), start,
                                      model ? tr("TorchScript modules (*.pt *.pth *.ts);;All files (*)")
                                            : tr("Text files (*.txt *.md *.csv);;All files (*)"));
    if (path.isEmpty()) return;
    // Choosing the file chooses what it is for.
    if (model) m_document->setValue("model.type", QString("torchscript"));
    else m_document->setValue("data.source", QString("text"));
    m_document->setValue(field, path);
}

void ExperimentPanel::openModelFolder(const QString& folder)
{
    // One edit (one undo step). The folder's sizes are its config.json's: the
    // form's own are removed, since a differing one would be refused.
    std::vector<std::pair<QString, QJsonValue>> values{{"model.type", QString("hf")}, {"model.path", folder}};
    for (const char* key : {"model.n_layer", "model.d_model", "model.n_head", "model.n_kv_head", "model.d_ff",
                            "model.positional_encoding", "model.rope_theta", "model.rms_norm_eps",
                            "model.tie_embeddings", "model.vocab_size"}) {
        values.emplace_back(key, QJsonValue(QJsonValue::Undefined));
    }
    // With a tokenizer the folder trains on text (the bundled sample until
    // a file is chosen); without one, on token ids.
    const QString source = m_document->value("data.source").toString();
    const bool tokenizer = text::Tokenizer::folderHasTokenizer(folder.toStdString());
    if (tokenizer && source != "text" && source != "jsonl" && source != "tokens") {
        values.emplace_back("data.source", QString("text"));
        values.emplace_back("data.path", QJsonValue(QJsonValue::Undefined));
    } else if (!tokenizer && source != "tokens") {
        values.emplace_back("data.source", QString("tokens"));
        values.emplace_back("data.path", QJsonValue(QJsonValue::Undefined));
    }
    m_document->setValues(values);
}

void ExperimentPanel::refreshArchitecture()
{
    const bool hf = m_document->value("model.type").toString() == "hf";
    m_architecture->setVisible(hf);
    // A folder's or script's positions are its own: the disabled choice shows
    // the folder's (rope, or GPT-2's learned table), or nothing for a script,
    // never the built-in default (runs inside refreshFromDocument's update guard).
    auto* positional = qobject_cast<QComboBox*>(fieldEditor("model.positional_encoding"));
    const bool scripted = hf || m_document->value("model.type").toString() == "torchscript";
    if (positional && scripted) positional->setCurrentIndex(-1);
    const RunConfig defaults;
    QString layers = QString::number(defaults.model.nLayer), width = QString::number(defaults.model.dModel),
            heads = QString::number(defaults.model.nHead);
    const auto placeholders = [&] {
        for (const auto& [path, text] : {std::pair{"model.n_layer", layers}, std::pair{"model.d_model", width},
                                         std::pair{"model.n_head", heads}}) {
            if (auto* edit = qobject_cast<QLineEdit*>(fieldEditor(path))) edit->setPlaceholderText(text);
        }
        if (auto* edit = qobject_cast<QLineEdit*>(fieldEditor("data.path"))) {
            edit->setPlaceholderText(m_document->value("data.source").toString() == "tokens" ? tr("the token id file")
                                                                                              : tr("bundled sample text"));
        }
    };
    if (!hf) return placeholders();
    const QString path = m_document->value("model.path").toString();
    if (path.isEmpty()) {
        m_architecture->setText(tr("choose the model folder (File › Open model folder…)"));
        return placeholders();
    }
    QString folder = path;
    if (QFileInfo(path).isRelative() && !m_document->filePath().isEmpty()) {
        folder = QFileInfo(m_document->filePath()).absoluteDir().filePath(path);
    }
    try {
        const auto arch = readHfArchitecture(folder.toStdString());
        // The summary's parts packed into short lines: the form column is narrow.
        QStringList lines{QString()};
        for (const QString& part : QString::fromStdString(arch.summary()).split(", ")) {
            if (!lines.back().isEmpty() && lines.back().size() + part.size() > 34) lines << QString();
            lines.back() += (lines.back().isEmpty() ? "" : ", ") + part;
        }
        lines << tr("%1 parameters").arg(QLocale().toString(
                     static_cast<qlonglong>(parameterCount(modelSpecFromHf(arch, folder.toStdString(), static_cast<int>(arch.maxPositions))))));
        m_architecture->setText(lines.join('\n'));
        m_architecture->setStyleSheet({});
        if (positional) positional->setCurrentIndex(positional->findText(arch.learnedPositions ? "learned" : "rope"));
        layers = QString::number(arch.layers);
        width = QString::number(arch.hiddenSize);
        heads = QString::number(arch.heads);
    } catch (const InputError& e) {
        m_architecture->setText(QString::fromStdString(e.what()));
        m_architecture->setStyleSheet("color: #c0392b");
    }
    placeholders();
}

void ExperimentPanel::refreshFromDocument()
{
    m_updating = true;
    if (m_json->toPlainText() != m_document->text()) {
        // Keep the cursor where it was when the form changed the text.
        const int position = m_json->textCursor().position();
        m_json->setPlainText(m_document->text());
        QTextCursor cursor = m_json->textCursor();
        cursor.setPosition(std::min(position, static_cast<int>(m_document->text().size())));
        m_json->setTextCursor(cursor);
    }
    const bool formUsable = m_document->jsonIsObject();
    QStringList unplaced;
    // Fields that the chosen dataset or model ignores are shown but disabled.
    const bool addition = m_document->value("data.source").toString("addition") == "addition";
    const QString modelType = m_document->value("model.type").toString();
    const bool scripted = modelType == "torchscript" || modelType == "hf"; // sized by the file or folder
    // (LoRA and checkpointing stay editable: set with a torchscript model they are errors to correct.)
    static const QStringList builtInOnly{"model.n_layer", "model.d_model", "model.n_head", "model.positional_encoding"};
    for (auto& f : m_fields) {
        const QString source = m_document->value("data.source").toString("addition");
        bool relevant = f.path == "data.digits" ? addition
                                                : (f.path == "data.path" || f.path == "data.seq_len") ? !addition
                                                                                                      : true;
        if (f.path == "data.field") relevant = source == "jsonl";
        else if (f.path == "optim.min_lr_ratio") relevant = m_document->effectiveValue("optim.schedule").toString() != "constant";
        else if (f.path == "lora.alpha" || f.path == "lora.targets") relevant = m_document->effectiveValue("lora.rank").toInt() > 0;
        else if (f.path == "data.skip_bad_lines") relevant = source == "text" || source == "jsonl" || source == "chat";
        else if (f.path == "model.quantize") relevant = modelType == "llama" || modelType == "hf";
        else if (f.path == "model.double_quant") relevant = m_document->effectiveValue("model.quantize").toString() == "nf4";
        else if (f.path == "train.weights_dtype") {
            relevant = m_document->effectiveValue("lora.rank").toInt() > 0
                && m_document->effectiveValue("model.quantize").toString("none") == "none";
        }
        if (f.path == "model.path") relevant = scripted;
        else if (f.path == "data.source" && modelType == "hf") relevant = true;
        else if (builtInOnly.contains(f.path)) relevant = !scripted;
        f.editor->setEnabled(formUsable && relevant);
        const QJsonValue v = m_document->value(f.path);
        switch (f.kind) {
        case Kind::Choice: {
            auto* combo = static_cast<QComboBox*>(f.editor);
            // Left out: what the run will use (a llama's RoPE), not the list's first entry.
            const QJsonValue shown = m_document->effectiveValue(f.path);
            const QString text = shown.isUndefined() ? combo->itemText(0) : fieldText(shown);
            if (combo->currentText() != text) {
                if (combo->findText(text) < 0 && !combo->isEditable()) combo->addItem(text);
                combo->setCurrentText(text);
            }
            break;
        }
        case Kind::Flag: static_cast<QCheckBox*>(f.editor)->setChecked(m_document->effectiveValue(f.path).toBool(false)); break;
        default: {
            auto* edit = static_cast<QLineEdit*>(f.editor);
            // Do not rewrite the field being typed into ("1e-" is not yet a number).
            if (!edit->hasFocus()) edit->setText(fieldText(v));
        }
        }
        f.message->hide();
    }
    for (const auto& issue : m_document->issues()) {
        const QString path = QString::fromStdString(issue.path);
        const QString message = QString::fromStdString(issue.message);
        // A list's entry ("lora.targets[1]") is the list's field's.
        const QString fieldPath = QString(path).remove(QRegularExpression("\\[\\d+\\]$"));
        auto it = std::find_if(m_fields.begin(), m_fields.end(), [&](const Field& f) { return f.path == fieldPath; });
        if (it != m_fields.end()) {
            it->message->setText(message);
            it->message->show();
        } else {
            unplaced << (path.isEmpty() ? message : path + ": " + message);
        }
    }
    m_otherIssues->setText(unplaced.join('\n'));
    m_otherIssues->setVisible(!unplaced.isEmpty());
    refreshArchitecture();
    updateEstimate();
    updatePreview();
    updateScheduleAndTargets();
    m_updating = false;
}

void ExperimentPanel::updateScheduleAndTargets()
{
    const auto config = m_document->config();
    // LoRA's targets: the names this model has (a folder's by its family).
    if (auto* targets = fieldEditor("lora.targets"); targets && config) {
        QStringList names;
        for (const auto& n : loraTargetNames(*config)) names << QString::fromStdString(n);
        targets->setToolTip(tr("The projections that get adapters, separated by commas. This model's: %1\nDefault: %2")
                                .arg(names.join(", "), defaultText("lora.targets")));
    }
    m_schedule->setEnabled(config.has_value());
    if (!config) {
        m_scheduleSummary->setStyleSheet({});
        m_scheduleSummary->setText(tr("The preview is drawn again when the config is valid (the messages say what to fix)."));
        return;
    }
    m_schedule->showSchedule(config->optim, config->train.steps);
    m_scheduleSummary->setStyleSheet(m_schedule->warmupNeverEnds() ? "color: #c0392b" : QString());
    m_scheduleSummary->setText(m_schedule->summary());
}

void ExperimentPanel::setTargetModel(GpuTargetModel* targets)
{
    m_targets = targets;
    connect(targets, &GpuTargetModel::changed, this, &ExperimentPanel::updateEstimate);
    updateEstimate();
}

QString ExperimentPanel::estimateText() const { return m_estimate->text(); }

QString ExperimentPanel::architectureText() const { return m_architecture->isHidden() ? QString() : m_architecture->text(); }

QString ExperimentPanel::dataPreviewHeader() const { return m_previewHost->isHidden() ? QString() : m_previewHeader->text(); }

QString ExperimentPanel::dataPreviewTokens() const { return m_preview->toPlainText(); }

namespace {

// The folder's tokenizer, loaded once per version of its file (a large tokenizer.json takes a second).
std::shared_ptr<const text::Tokenizer> previewTokenizer(const std::string& folder)
{
    static std::mutex mutex;
    static std::string loadedKey;
    static std::shared_ptr<const text::Tokenizer> loaded;
    std::error_code ec;
    const auto file = text::Tokenizer::folderTokenizerFile(folder);
    const std::string key = file.string() + "|" + std::to_string(std::filesystem::file_size(file, ec)) + "|" +
                            std::to_string(std::filesystem::last_write_time(file, ec).time_since_epoch().count());
    std::lock_guard lock(mutex);
    if (!loaded || key != loadedKey) {
        loaded = std::make_shared<const text::Tokenizer>(text::Tokenizer::fromModelFolder(folder));
        loadedKey = key;
    }
    return loaded;
}

DataPreview makePreview(const QString& key, const std::string& folder, const std::string& dataPath, const std::string& format,
                        const std::string& field)
{
    DataPreview out;
    out.key = key;
    try {
        const auto tok = previewTokenizer(folder);
        text::CorpusSpec spec;
        spec.path = dataPath.empty() ? bundledSampleFile(text::defaultTokenCacheRoot()) : dataPath;
        spec.format = format;
        spec.field = field;
        const auto special = text::readFolderSpecialTokens(folder, *tok);
        spec.eos = special.eos;
        spec.bos = special.bos;
        std::unique_ptr<text::ChatTemplate> chat;
        if (format == "chat") {
            const auto t = text::readFolderChatTemplate(folder);
            chat = std::make_unique<text::ChatTemplate>(t.source, t.where);
            spec.chat = chat.get();
            spec.chatVariables = t.variables;
        }
        const auto p = text::previewFirstDocument(spec, *tok);
        if (!p.error.empty()) {
            out.error = true;
            out.header = QObject::tr("No preview: %1").arg(QString::fromStdString(p.error));
            return out;
        }
        const QString where = dataPath.empty() ? QObject::tr("the bundled sample text") : QFileInfo(QString::fromStdString(dataPath)).fileName();
        if (format == "chat") {
            const auto trained = std::count(p.mask.begin(), p.mask.end(), std::uint8_t(1));
            out.header = QObject::tr("First conversation of %1 (line %2): %3 tokens, %4 of them the assistant's (green: the loss is on these)")
                             .arg(where).arg(p.line).arg(p.tokens).arg(trained);
        } else {
            out.header = QObject::tr("First document of %1 (line %2): %3 tokens").arg(where).arg(p.line).arg(p.tokens);
        }
        if (p.ids.size() < p.tokens) out.header += QObject::tr(", the first %1 shown").arg(p.ids.size());
        if (spec.eos < 0) out.header += QObject::tr("; the folder names no EOS, so documents are packed without one");
        out.html = tokensHtml(*tok, p.ids, p.pieces, p.mask);
    } catch (const std::exception& e) {
        out.error = true;
        out.header = QObject::tr("No preview: %1").arg(QString::fromStdString(e.what()));
    }
    return out;
}

} // namespace

void ExperimentPanel::updatePreview()
{
    const std::optional<RunConfig> config = m_document->config();
    const QString type = m_document->value("model.type").toString();
    const QString source = m_document->value("data.source").toString();
    if (type != "hf" || (source != "text" && source != "jsonl" && source != "chat")) {
        m_previewHost->hide();
        m_previewKey.clear();
        return;
    }
    m_previewHost->show();
    m_browseData->setEnabled(config.has_value());
    if (!config) {
        m_previewKey.clear();
        m_previewHeader->setText(tr("The data preview appears when the config is valid."));
        m_previewHeader->setStyleSheet({});
        m_preview->clear();
        return;
    }
    const std::string folder = resolvedModelPath(*config);
    const std::string data = config->data.path.empty() ? std::string() : resolvedDataPath(*config);
    auto stamp = [](const std::string& path) {
        const QFileInfo info(QString::fromStdString(path));
        return QString::number(info.size()) + "@" + QString::number(info.lastModified().toMSecsSinceEpoch());
    };
    const QString key = QString::fromStdString(folder + "|" + data + "|" + config->data.source + "|" + config->data.field) + "|" +
                        stamp(data) + "|" + stamp(text::Tokenizer::folderTokenizerFile(folder).string());
    if (key == m_previewKey) return;
    m_previewKey = key;
    m_previewHeader->setText(tr("Tokenizing the first document…"));
    m_previewHeader->setStyleSheet({});
    m_previewWatcher.setFuture(QtConcurrent::run(makePreview, key, folder, data, config->data.source, config->data.field));
}

void ExperimentPanel::updateEstimate()
{
    const auto config = m_document->config();
    if (!config) {
        m_estimate->setText(tr("Memory estimate: once the config is valid."));
        return;
    }
    if (!plannableModel(*config)) {
        m_estimate->setText(tr("Memory estimate: a TorchScript model's plan is derived from its own training step "
                               "(Memory planner, Derive plan)."));
        return;
    }
    // The config as each device resolves it (planOnTarget: "auto" precision
    // decided there), the same plan as the planner's, preflight's and `estimate`'s.
    try {
        updateEstimateFor(*config);
    } catch (const InputError& e) {
        m_estimate->setText(tr("Memory estimate: not available (%1)").arg(QString::fromStdString(e.what())));
    }
}

void ExperimentPanel::setStepDeriver(StepDeriver* deriver)
{
    if (m_deriver) m_deriver->disconnect(this);
    m_deriver = deriver;
    connect(m_deriver, &StepDeriver::changed, this, &ExperimentPanel::updateEstimate);
    updateEstimate();
}

void ExperimentPanel::updateEstimateFor(const RunConfig& configValue)
{
    const RunConfig* config = &configValue;
    const TargetPlan here = planOnTarget(*config, std::nullopt);
    // The config's own step, in the precision the device resolves ("auto"
    // is mixed on a GPU, fp32 on the CPU), as the Memory planner traces it,
    // shared with the planner and preflight through the window's deriver;
    // traced on first need.
    QString pending;
    const auto planOf = [&](const TargetPlan& resolved) -> std::optional<MemoryPlan> {
        auto traced = *config;
        traced.train.precision = resolved.setup.precision;
        if (!m_deriver) {
            pending = tr("Memory estimate: this run is planned from its own training step (Memory planner; "
                         "trainbench-cli estimate).");
            return std::nullopt;
        }
        traced = StepDeriver::standalone(std::move(traced));
        const auto key = StepDeriver::keyFor(traced);
        if (auto step = m_deriver->plan(key)) return MemoryPlan(std::move(step), ArchitectureSpec{});
        if (const auto error = m_deriver->error(key); !error.isEmpty()) {
            pending = tr("Memory estimate: its training step could not be traced (%1).").arg(error);
            return std::nullopt;
        }
        m_deriver->derive(traced);
        pending = tr("Memory estimate: tracing its training step on this CPU (seconds)…");
        return std::nullopt;
    };
    const auto cpuPlan = planOf(here);
    if (!cpuPlan) {
        m_estimate->setText(pending);
        return;
    }
    const auto cpu = cpuPlan->at(here.setup.batch, here.setup.seqLen, here.setup);
    // In the unit that suits it, as the GPU figure beside it (not 261900.0 MiB beside 268.36 GiB).
    QString text = tr("Memory estimate: %1 of tensors at the peak (during %2)")
                       .arg(bytesText(cpu.peakBytes), QString::fromStdString(cpu.peakPhase));
    if (m_targets && config->device != "cpu") {
        const GpuTarget& target = m_targets->target();
        const TargetPlan there = planOnTarget(*config, std::optional<GpuTarget>(target));
        const auto gpuPlan = planOf(there);
        if (!gpuPlan) {
            m_estimate->setText(text + "; " + pending.section(": ", 1, -1));
            return;
        }
        const auto gpu = gpuPlan->at(there.setup.batch, there.setup.seqLen, there.setup);
        const double use = static_cast<double>(gpu.peakBytes) / static_cast<double>(target.gpu.memoryBytes);
        const auto verdict = memoryVerdict(gpu.peakBytes, target.gpu.memoryBytes, there.precision.shortfall);
        if (verdict == MemoryVerdict::DoesNotRun) {
            // A precision the GPU lacks is preflight's error there, whatever the memory.
            text += tr("; on %1: %2 %3 (%4)")
                        .arg(QString::fromStdString(target.label()), QString::fromStdString(there.setup.precision),
                             QString::fromUtf8(verdictWords(verdict)), QString::fromStdString(there.precision.shortfall));
        } else {
            text += tr("; on %1 in %2, %3 of %4 (%5%), %6")
                        .arg(QString::fromStdString(target.label()), QString::fromStdString(there.setup.precision),
                             (gpu.lowerBound ? tr("at least ") : QString()) + bytesText(gpu.peakBytes), bytesText(target.gpu.memoryBytes))
                        .arg(100.0 * use, 0, 'f', 0)
                        .arg(QString::fromUtf8(verdictWords(verdict)));
        }
    }
    m_estimate->setText(text + ".");
}

DatasetBrowser* ExperimentPanel::openDatasetBrowser()
{
    const auto config = m_document->config();
    if (!config || config->model.type != "hf"
        || (config->data.source != "text" && config->data.source != "jsonl" && config->data.source != "chat")) {
        return nullptr;
    }
    auto* browser = new DatasetBrowser(*config, this);
    browser->setAttribute(Qt::WA_DeleteOnClose);
    browser->show();
    return browser;
}

} // namespace tb::ui
