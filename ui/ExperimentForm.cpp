// The Experiment panel's form: one row per common config field, each with
// its editor, its validation message under it and a tooltip.
#include "ExperimentPanel.h"

#include <QCheckBox>
#include <QComboBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLabel>
#include <QLineEdit>
#include <QScrollArea>
#include <QToolButton>
#include <QVBoxLayout>

#include "LearningRatePlot.h"
#include "PlainText.h"
#include "config/RunConfig.h"

namespace tb::ui {

QWidget* ExperimentPanel::buildForm()
{
    auto* formHost = new QWidget(this);
    auto* form = new QFormLayout(formHost);
    form->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);
    const RunConfig d; // defaults, shown as placeholders
    addField(form, tr("Name"), "name", Kind::Text);
    addField(form, tr("Device"), "device", Kind::Choice, {"auto", "cpu", "cuda", "cuda:0", "cuda:1"},
             tr("auto uses a CUDA GPU when LibTorch sees one, else the CPU"));
    addField(form, tr("Model"), "model.type", Kind::Choice, {"gpt", "llama", "torchscript", "hf"},
             tr("gpt or llama: built in, sized by the fields below; torchscript: your own scripted causal LM "
                "from the model file; hf: a Hugging Face model folder (File › Open model folder…)"));
    addField(form, tr("Model file or folder"), "model.path", Kind::Path, {},
             tr("torchscript: a module saved with torch.jit.save(torch.jit.script(model), path); forward "
                "takes token ids [batch, seq] and returns logits [batch, seq, vocab]. hf: the model folder "
                "(config.json and safetensors files)"));
    m_architecture = plainLabel(this);
    m_architecture->setObjectName("hfArchitecture");
    m_architecture->setWordWrap(true);
    m_architecture->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_architecture->setToolTip(tr("The folder's config.json: the architecture is the folder's and is not edited here"));
    form->addRow(tr("Architecture"), m_architecture);
    addField(form, tr("Layers"), "model.n_layer", Kind::Integer);
    addField(form, tr("Model width (d_model)"), "model.d_model", Kind::Integer);
    addField(form, tr("Attention heads"), "model.n_head", Kind::Integer);
    addField(form, tr("Positional encoding"), "model.positional_encoding", Kind::Choice,
             {"learned", "sinusoidal", "rope"});
    addField(form, tr("Dataset"), "data.source", Kind::Choice, {"addition", "text", "jsonl", "chat", "tokens"},
             tr("addition: synthetic a+b=c sums; text: a text file, documents separated by blank lines (byte-level "
                "for the built-in models, the folder's tokenizer for an hf model); jsonl: one JSON record per line "
                "(hf models); chat: one conversation per line ({\"messages\": [...]}, ShareGPT's \"conversations\" or "
                "Alpaca's \"instruction\"/\"input\"/\"output\"), rendered with the folder's chat template, the loss "
                "on the assistant's turns only; tokens: a file of token ids (uint16 or uint32) for an "
                "hf model"));
    addField(form, tr("Digits (addition)"), "data.digits", Kind::Integer);
    addField(form, tr("Data file"), "data.path", Kind::Path, {},
             tr("text: any text file, empty for the bundled sample text; jsonl: the records; tokens: the token id file"));
    addField(form, tr("JSONL text field"), "data.field", Kind::Text, {},
             tr("jsonl: the string field of each record that holds its text"));
    addField(form, tr("Skip bad lines"), "data.skip_bad_lines", Kind::Flag, {},
             tr("text and jsonl: skip lines that are not valid UTF-8 or JSON, or lack the field, and count them in "
                "the run's events, instead of stopping at the first"));
    addField(form, tr("Sequence length"), "data.seq_len", Kind::Integer);
    addField(form, tr("Batch size"), "train.batch_size", Kind::Integer, {}, tr("Sequences per micro-batch"));
    addField(form, tr("Gradient accumulation"), "train.grad_accum", Kind::Integer, {},
             tr("Micro-batches per optimizer step: the effective batch is the batch size times this, at the memory "
                "of one micro-batch"));
    addField(form, tr("Steps"), "train.steps", Kind::Integer, {}, tr("Optimizer steps of the run"));
    addField(form, tr("Evaluate every"), "train.eval_every", Kind::Integer, {},
             tr("Steps between validation passes; 0 = ten per run"));
    addField(form, tr("Checkpoint every"), "train.checkpoint_every", Kind::Integer, {},
             tr("Steps between checkpoints (a stopped run resumes from the last); 0 = at the end only"));
    addField(form, tr("Learning rate"), "optim.lr", Kind::Number, {}, tr("The peak rate, reached after the warmup"));
    addField(form, tr("Warmup steps"), "optim.warmup_steps", Kind::Integer, {},
             tr("Steps of linear warmup from 0 to the learning rate"));
    addField(form, tr("Schedule"), "optim.schedule", Kind::Choice, {"cosine", "linear", "constant"},
             tr("After the warmup: a half cosine or a straight line down to the minimum at the last step, or constant"));
    addField(form, tr("Minimum rate"), "optim.min_lr_ratio", Kind::Number, {},
             tr("cosine, linear: the last step's rate, as a fraction of the learning rate"));
    {
        auto* host = new QWidget(formHost);
        auto* v = new QVBoxLayout(host);
        v->setContentsMargins(0, 0, 0, 0);
        m_schedule = new LearningRatePlot(host);
        m_schedule->setObjectName("schedulePreview");
        m_scheduleSummary = plainLabel(host);
        m_scheduleSummary->setObjectName("scheduleSummary");
        m_scheduleSummary->setWordWrap(true);
        v->addWidget(m_schedule);
        v->addWidget(m_scheduleSummary);
        form->addRow(tr("Rate by step"), host);
    }
    addField(form, tr("Optimizer"), "optim.optimizer", Kind::Choice, {"adamw", "sgd"});
    addField(form, tr("Weight decay"), "optim.weight_decay", Kind::Number, {},
             tr("AdamW's decoupled weight decay (SGD: an L2 penalty) on the weight matrices; not on biases, norm "
                "gains or embedding tables (unless optim.decay_embeddings)"));
    addField(form, tr("Gradient clipping"), "optim.grad_clip", Kind::Number, {},
             tr("The largest gradient norm a step applies; 0 = off"));
    addField(form, tr("Precision"), "train.precision", Kind::Choice, {"auto", "fp32", "fp16", "bf16", "bf16-pure"},
             tr("auto: fp32 on CPU; bf16 on GPUs with compute capability 8.0+, else fp16 with loss scaling; "
                "bf16-pure: weights, gradients and optimizer state in bf16"));
    addField(form, tr("Activation checkpointing"), "train.activation_checkpointing", Kind::Flag, {},
             tr("Recompute each block in backward: less memory, about a third more compute"));
    addField(form, tr("LoRA rank"), "lora.rank", Kind::Integer, {}, tr("0 = off; >0 trains only low-rank adapters"));
    addField(form, tr("LoRA alpha"), "lora.alpha", Kind::Number, {}, tr("The adapters' output is scaled by alpha / rank"));
    addField(form, tr("LoRA dropout"), "lora.dropout", Kind::Number, {},
             tr("Dropout on each adapter's input while training (PEFT's lora_dropout), for example 0.05; default 0"));
    addField(form, tr("LoRA targets"), "lora.targets", Kind::List, {},
             tr("The projections that get adapters, separated by commas: attn and mlp (all of a block's), or "
                "the model's own names"));
    addField(form, tr("Quantized base"), "model.quantize", Kind::Choice, {"none", "nf4", "int8"},
             tr("QLoRA (llama and Hugging Face folders, with LoRA): the frozen base's linear layers stored in "
                "4-bit NormalFloat (nf4, about 0.52 bytes a weight) or 8 bits (int8), dequantized layer by layer "
                "as the step runs; a bitsandbytes folder sets it itself"));
    addField(form, tr("Double quantization"), "model.double_quant", Kind::Flag, {},
             tr("nf4: the blocks' scales stored in 8 bits too (about 0.37 bits a weight less)"));
    addField(form, tr("Base weights"), "train.weights_dtype", Kind::Choice, {"fp32", "bf16", "fp16"},
             tr("LoRA: the frozen base kept in bf16 or fp16, as PEFT loads a published model (half its "
                "memory, no casts of it kept for backward); the adapters train in fp32 under autocast, so "
                "the precision must be bf16, fp16 or auto on a GPU"));
    auto placeholder = [&](const QString& path, const QString& text) {
        if (auto* edit = qobject_cast<QLineEdit*>(fieldEditor(path))) edit->setPlaceholderText(text);
    };
    placeholder("name", QString::fromStdString(d.name));
    placeholder("data.path", tr("bundled sample text"));
    placeholder("data.field", QString::fromStdString(d.data.field));
    placeholder("model.path", tr("only for model torchscript or hf"));
    placeholder("data.seq_len", tr("64 for text; fixed for addition"));
    // Every other number and list shows its default, from the parser's.
    for (const auto& f : m_fields) {
        if (f.kind != Kind::Integer && f.kind != Kind::Number && f.kind != Kind::List) continue;
        if (auto* edit = qobject_cast<QLineEdit*>(f.editor); edit && edit->placeholderText().isEmpty())
            edit->setPlaceholderText(defaultText(f.path));
    }

    auto* scroll = new QScrollArea(this);
    scroll->setWidget(formHost);
    scroll->setWidgetResizable(true);
    scroll->setFrameShape(QFrame::NoFrame);
    return scroll;
}

QString ExperimentPanel::defaultText(const QString& path)
{
    static const QJsonObject defaults =
        QJsonDocument::fromJson(QByteArray::fromStdString(configToJson(RunConfig{}))).object();
    QJsonValue v = defaults;
    for (const auto& part : path.split('.')) v = v.toObject().value(part);
    // Fields a config's JSON carries only when set (a quantized base).
    if (v.isUndefined() && path == "model.quantize") return QString::fromStdString(RunConfig{}.model.quantize);
    if (v.isUndefined() && path == "model.double_quant") return RunConfig{}.model.doubleQuant ? "true" : "false";
    if (v.isUndefined() && path == "train.weights_dtype") return QString::fromStdString(RunConfig{}.train.weightsDtype);
    return fieldText(v);
}

void ExperimentPanel::addField(QFormLayout* form, const QString& label, const QString& path, Kind kind,
                               const QStringList& choices, const QString& tip)
{
    Field field{path, kind};
    QWidget* row = new QWidget(this);
    auto* rowLayout = new QVBoxLayout(row);
    rowLayout->setContentsMargins(0, 0, 0, 0);
    rowLayout->setSpacing(1);
    const int index = static_cast<int>(m_fields.size());
    auto edited = [this, index] {
        if (!m_updating) fieldEdited(m_fields[index]);
    };
    switch (kind) {
    case Kind::Choice: {
        auto* combo = new QComboBox(row);
        combo->addItems(choices);
        combo->setEditable(path == "device");
        connect(combo, &QComboBox::currentTextChanged, this, edited);
        field.editor = combo;
        break;
    }
    case Kind::Flag: {
        auto* box = new QCheckBox(row);
        connect(box, &QCheckBox::toggled, this, edited);
        field.editor = box;
        break;
    }
    case Kind::Path: {
        auto* host = new QWidget(row);
        auto* h = new QHBoxLayout(host);
        h->setContentsMargins(0, 0, 0, 0);
        auto* edit = new QLineEdit(host);
        auto* browse = new QToolButton(host);
        browse->setText(tr("…"));
        browse->setToolTip(path == "model.path" ? tr("Choose a TorchScript model") : tr("Choose a text file"));
        h->addWidget(edit, 1);
        h->addWidget(browse);
        connect(edit, &QLineEdit::textEdited, this, edited);
        connect(browse, &QToolButton::clicked, this, [this, path] { browseFile(path); });
        field.editor = edit;
        rowLayout->addWidget(host);
        break;
    }
    default: {
        auto* edit = new QLineEdit(row);
        connect(edit, &QLineEdit::textEdited, this, edited);
        field.editor = edit;
        break;
    }
    }
    if (kind != Kind::Path) rowLayout->addWidget(field.editor);
    field.message = plainLabel(row);
    field.message->setWordWrap(true);
    field.message->setStyleSheet("color: #c0392b");
    field.message->hide();
    rowLayout->addWidget(field.message);
    // Each tooltip ends with the default (the parser's), where one means something.
    static const QStringList noDefault{"name", "model.path", "data.path", "data.seq_len"};
    const QString byDefault = noDefault.contains(path) ? QString() : defaultText(path);
    const QString shownDefault = byDefault.isEmpty() ? QString() : tr("Default: %1").arg(byDefault);
    if (!tip.isEmpty() || !shownDefault.isEmpty())
        field.editor->setToolTip(tip.isEmpty() ? shownDefault : shownDefault.isEmpty() ? tip : tip + "\n" + shownDefault);
    field.editor->setObjectName(path);
    form->addRow(label, row);
    m_fields.push_back(field);
}

} // namespace tb::ui
