#include "SampleBox.h"

#include <QApplication>
#include <QDoubleSpinBox>
#include <QHBoxLayout>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QPointer>
#include <QPushButton>
#include <QVBoxLayout>

#include <thread>

#include "train/ModelTools.h"

namespace tb::ui {

// One generation's thread; joined before the next one starts and on destruction.
struct SampleBox::Job {
    std::thread thread;
    ~Job()
    {
        if (thread.joinable()) thread.join();
    }
};

SampleBox::SampleBox(QWidget* parent) : QGroupBox(tr("Sample"), parent)
{
    m_prompt = new QLineEdit(this);
    m_prompt->setPlaceholderText(tr("prompt, e.g. 12+34= for the addition task"));
    m_temperature = new QDoubleSpinBox(this);
    m_temperature->setRange(0.0, 5.0);
    m_temperature->setSingleStep(0.1);
    m_temperature->setDecimals(2);
    m_temperature->setValue(0.0);
    m_temperature->setPrefix(tr("temperature "));
    m_temperature->setToolTip(tr("0 picks the most likely token each time (greedy)"));
    m_generate = new QPushButton(tr("Generate"), this);
    m_generate->setToolTip(tr("Generate from the run's latest checkpoint (Enter in the prompt)"));
    m_result = new QPlainTextEdit(this);
    m_result->setReadOnly(true);
    m_result->setWordWrapMode(QTextOption::WrapAtWordBoundaryOrAnywhere);
    m_result->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    m_result->setPlaceholderText(tr("the model's answer"));
    // Four lines tall, then it scrolls; its width is the box's, whatever the answer.
    m_result->setFixedHeight(m_result->fontMetrics().lineSpacing() * 4 + 2 * m_result->frameWidth() + 8);
    m_result->setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Fixed);
    auto* row = new QHBoxLayout;
    row->addWidget(m_prompt, 1);
    row->addWidget(m_temperature);
    row->addWidget(m_generate);
    auto* layout = new QVBoxLayout(this);
    layout->addLayout(row);
    layout->addWidget(m_result);
    connect(m_generate, &QPushButton::clicked, this, &SampleBox::generate);
    connect(m_prompt, &QLineEdit::returnPressed, this, &SampleBox::generate);
    setEnabled(false);
    setToolTip(tr("Finish or stop a run first: sampling uses its checkpoint"));
}

SampleBox::~SampleBox() = default; // Job's destructor joins a generation in flight

void SampleBox::setModel(const RunConfig& config, const QString& checkpoint, qint64 runId)
{
    if (runId != m_runId) {
        // Another run: the last sample belonged to the previous one.
        m_result->clear();
        ++m_generation;
        m_generate->setEnabled(true);
        if (config.data.source != m_config.data.source) m_prompt->clear();
    }
    m_runId = runId;
    m_config = config;
    m_checkpoint = checkpoint;
    setEnabled(!checkpoint.isEmpty());
    setTitle(checkpoint.isEmpty() ? tr("Sample") : tr("Sample from run %1").arg(runId));
    setToolTip(checkpoint.isEmpty() ? tr("This run has no checkpoint to sample from") : checkpoint);
    // A model of token ids (a Hugging Face folder trained on data.source "tokens") takes ids.
    m_prompt->setPlaceholderText(config.data.source == "chat"         ? tr("a user message; the reply follows the chat template")
                                 : config.data.source == "tokens"     ? tr("token ids, e.g. 1,15043,29892")
                                 : config.data.source == "addition" ? tr("prompt, e.g. 12+34= for the addition task")
                                                                    : tr("prompt text"));
    if (m_prompt->text().isEmpty() && config.data.source == "addition") {
        m_prompt->setText(QString("%1+%2=").arg(QString(config.data.digits, '1'), QString(config.data.digits, '2')));
    }
}

void SampleBox::generate()
{
    if (m_checkpoint.isEmpty() || !m_generate->isEnabled()) return;
    m_generate->setEnabled(false);
    m_result->setPlainText(tr("generating…"));
    SampleRequest request;
    request.prompt = m_prompt->text().toStdString();
    request.generation.temperature = m_temperature->value();
    request.generation.maxNewTokens = m_config.data.source == "addition" ? m_config.data.digits + 2 : 200;
    request.chat = m_config.data.source == "chat"; // a chat run answers the prompt as the user's message
    m_job.reset(); // joins the previous generation
    m_job = std::make_shared<Job>();
    QPointer<SampleBox> self(this);
    const quint64 generation = m_generation;
    m_job->thread = std::thread([self, generation, config = m_config, checkpoint = m_checkpoint.toStdString(), request] {
        QString text;
        bool error = false;
        try {
            const auto result = sampleFromCheckpoint(config, checkpoint, request);
            text = QString::fromStdString(request.chat ? "User: " + result.prompt + "\nAssistant: " + result.completion
                                                       : result.prompt + result.completion);
        } catch (const std::exception& e) {
            text = QString::fromUtf8(e.what());
            error = true;
        }
        // Back on the GUI thread; the box may be gone by then.
        QMetaObject::invokeMethod(qApp, [self, text, error, generation] {
            if (self && self->m_generation == generation) self->showResult(text, error);
        }, Qt::QueuedConnection);
    });
}

void SampleBox::showResult(const QString& text, bool error)
{
    m_generate->setEnabled(true);
    m_result->setPlainText(error ? tr("Cannot sample: %1").arg(text) : text);
    if (!error) Q_EMIT generated(text);
}

} // namespace tb::ui
