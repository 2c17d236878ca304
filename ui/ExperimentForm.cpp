// The Experiment panel's form: one row per common config field, each with
// its editor, its validation message under it and a tooltip.
#include "ExperimentPanel.h"

#include <QCheckBox>
#include <QComboBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QScrollArea>
#include <QToolButton>
#include <QVBoxLayout>

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
                "(hf models); chat: one {\"messages\": [...]} conversation per line, rendered with the folder's chat "
                "template, the loss on the assistant's turns only; tokens: a file of token ids (uint16 or uint32) for an "
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
    addField(form, tr("Batch size"), "train.batch_size", Kind::Integer);
    addField(form, tr("Steps"), "train.steps", Kind::Integer);
    addField(form, tr("Learning rate"), "optim.lr", Kind::Number);
    addField(form, tr("Optimizer"), "optim.optimizer", Kind::Choice, {"adamw", "sgd"});
    addField(form, tr("Precision"), "train.precision", Kind::Choice, {"auto", "fp32", "fp16", "bf16", "bf16-pure"},
             tr("auto: fp32 on CPU; bf16 on GPUs with compute capability 8.0+, else fp16 with loss scaling; "
                "bf16-pure: weights, gradients and optimizer state in bf16"));
    addField(form, tr("Activation checkpointing"), "train.activation_checkpointing", Kind::Flag, {},
             tr("Recompute each block in backward: less memory, about a third more compute"));
    addField(form, tr("LoRA rank"), "lora.rank", Kind::Integer, {}, tr("0 = off; >0 trains only low-rank adapters"));
    auto placeholder = [&](const QString& path, const QString& text) {
        if (auto* edit = qobject_cast<QLineEdit*>(fieldEditor(path))) edit->setPlaceholderText(text);
    };
    placeholder("name", QString::fromStdString(d.name));
    placeholder("model.n_layer", QString::number(d.model.nLayer));
    placeholder("model.d_model", QString::number(d.model.dModel));
    placeholder("model.n_head", QString::number(d.model.nHead));
    placeholder("data.digits", QString::number(d.data.digits));
    placeholder("data.path", tr("bundled sample text"));
    placeholder("data.field", QString::fromStdString(d.data.field));
    placeholder("model.path", tr("only for model torchscript or hf"));
    placeholder("data.seq_len", tr("64 for text; fixed for addition"));
    placeholder("train.batch_size", QString::number(d.train.batchSize));
    placeholder("train.steps", QString::number(d.train.steps));
    placeholder("optim.lr", QString::number(d.optim.lr));
    placeholder("lora.rank", QString::number(d.lora.rank));

    auto* scroll = new QScrollArea(this);
    scroll->setWidget(formHost);
    scroll->setWidgetResizable(true);
    scroll->setFrameShape(QFrame::NoFrame);
    return scroll;
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
    if (!tip.isEmpty()) field.editor->setToolTip(tip);
    field.editor->setObjectName(path);
    form->addRow(label, row);
    m_fields.push_back(field);
}

} // namespace tb::ui
