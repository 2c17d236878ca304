#include "ChatPanel.h"

#include <QApplication>
#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QKeyEvent>
#include <QLabel>
#include <QLocale>
#include <QPlainTextEdit>
#include <QPointer>
#include <QPushButton>
#include <QScrollBar>
#include <QSettings>
#include <QShortcut>
#include <QSpinBox>
#include <QSplitter>
#include <QTextBrowser>
#include <QVBoxLayout>

#include <algorithm>
#include <atomic>
#include <functional>
#include <thread>

#include "FileDialogs.h"
#include "PlainText.h"
#include "store/RunStore.h"

namespace tb::ui {
namespace {

// A stored run with a checkpoint, as the choosers list it.
ChatSource runSource(const RunRecord& r, const ArtifactRecord& checkpoint)
{
    ChatSource s;
    s.runId = r.id;
    s.label = ChatPanel::tr("Run %1 · %2").arg(r.id).arg(QString::fromStdString(r.name));
    s.checkpoint = QString::fromStdString(checkpoint.path);
    s.configJson = r.configJson;
    return s;
}

constexpr int kMaxRuns = 100;       // the newest runs with a checkpoint the chooser lists
constexpr int kRecentFolders = 8;   // model folders remembered between sessions
const char* kFoldersKey = "chat/recentFolders";

QString endNote(const ChatReply& reply, int window)
{
    const double rate = reply.seconds > 0 ? static_cast<double>(reply.ids.size()) / reply.seconds : 0.0;
    QString ended;
    switch (reply.end) {
    case ChatReply::End::EndOfTurn: ended = ChatPanel::tr("ended its turn"); break;
    case ChatReply::End::MaxTokens: ended = ChatPanel::tr("cut at the most new tokens"); break;
    case ChatReply::End::Stopped: ended = ChatPanel::tr("stopped"); break;
    }
    QString note = ChatPanel::tr("%1 tokens in %2 s (%3 tokens/s), %4")
                       .arg(reply.ids.size())
                       .arg(QLocale().toString(reply.seconds, 'f', 1), QLocale().toString(rate, 'f', 1), ended);
    if (reply.promptCut)
        note += ChatPanel::tr("; the conversation is longer than the model's window of %1 tokens: its beginning was not read")
                    .arg(QLocale().toString(window));
    return note;
}

QString html(const QString& text)
{
    return text.toHtmlEscaped().replace('\n', "<br>");
}

} // namespace

// One model's column: its chooser, what is loaded, and its conversation.
// Loading and replies run on threads chained one after another (a ChatModel
// answers one request at a time); each result carries the side's generation
// and is dropped when the side has moved on (another model, Stop, New chat).
class ChatSide final : public QWidget {
public:
    ChatSide(ChatPanel* panel, int index) : QWidget(panel), m_panel(panel), m_index(index)
    {
        m_chooser = new QComboBox(this);
        m_chooser->setMinimumContentsLength(24);
        m_chooser->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
        m_chooser->setToolTip(ChatPanel::tr("A run with a checkpoint, or a Hugging Face model folder with its tokenizer"));
        m_precision = new QComboBox(this);
        m_precision->addItems({"fp32", "bf16", "fp16"});
        m_precision->setToolTip(ChatPanel::tr("The dtype a model folder computes in (a run's model computes in fp32); "
                                              "bf16 halves a 7B model's 28 GB"));
        m_status = plainLabel(this, ChatPanel::tr("No model chosen"));
        m_status->setWordWrap(true);
        m_view = new QTextBrowser(this);
        m_view->setOpenLinks(false);
        m_view->setWordWrapMode(QTextOption::WrapAtWordBoundaryOrAnywhere); // a reply of ids is one long "word"
        m_view->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
        m_view->setPlaceholderText(ChatPanel::tr("The conversation appears here"));
        auto* row = new QHBoxLayout;
        row->addWidget(plainLabel(this, index == 0 ? ChatPanel::tr("Model") : ChatPanel::tr("Second model")));
        row->addWidget(m_chooser, 1);
        row->addWidget(m_precision);
        auto* layout = new QVBoxLayout(this);
        layout->setContentsMargins(0, 0, 0, 0);
        layout->addLayout(row);
        layout->addWidget(m_status);
        layout->addWidget(m_view, 1);
        // The newest text stays in view as it grows, unless the user has scrolled up to read.
        auto* bar = m_view->verticalScrollBar();
        QObject::connect(bar, &QScrollBar::valueChanged, this, [this, bar](int value) {
            if (!m_rendering) m_follow = value >= bar->maximum() - 4;
        });
        QObject::connect(bar, &QScrollBar::rangeChanged, this, [this, bar](int, int max) {
            if (m_follow) bar->setValue(max);
        });
        QObject::connect(m_chooser, &QComboBox::activated, this, [this](int i) { chosen(i); });
        QObject::connect(m_precision, &QComboBox::activated, this, [this] {
            if (!m_source.folder.isEmpty()) load(m_source);
        });
    }

    ~ChatSide() override
    {
        if (m_stop) m_stop->store(true);
        if (m_thread && m_thread->joinable()) m_thread->join(); // joins the chain before it
    }

    void setChoices(const std::vector<ChatSource>& runs, const QStringList& folders)
    {
        m_choices.clear();
        m_choices.push_back({}); // "Choose…"
        for (const auto& r : runs) m_choices.push_back(r);
        for (const auto& f : folders) {
            ChatSource s;
            s.folder = f;
            s.label = ChatPanel::tr("Folder %1").arg(f);
            m_choices.push_back(s);
        }
        const QSignalBlocker block(m_chooser);
        m_chooser->clear();
        int current = 0;
        for (std::size_t i = 0; i < m_choices.size(); ++i) {
            m_chooser->addItem(i == 0 ? ChatPanel::tr("Choose a run or a folder…") : m_choices[i].label);
            if (i > 0 && m_choices[i] == m_source) current = static_cast<int>(i);
        }
        m_chooser->addItem(ChatPanel::tr("Model folder…"));
        if (current == 0 && !m_source.label.isEmpty()) {
            // Chosen from History or a folder no longer listed: shown all the same.
            m_choices.push_back(m_source);
            m_chooser->insertItem(static_cast<int>(m_choices.size()) - 1, m_source.label);
            current = static_cast<int>(m_choices.size()) - 1;
        }
        m_chooser->setCurrentIndex(current);
    }

    void load(const ChatSource& source)
    {
        endReply(ChatPanel::tr("stopped: the model was changed"));
        m_source = source;
        m_model.reset();
        m_messages.clear();
        m_turns.clear();
        render();
        m_loading = true;
        m_precision->setEnabled(!source.folder.isEmpty());
        const QString precision = m_precision->currentText();
        m_status->setText(ChatPanel::tr("Loading %1…").arg(source.label));
        const quint64 generation = ++m_generation;
        QPointer<ChatSide> self(this);
        chain([self, generation, source, precision] {
            std::shared_ptr<ChatModel> model;
            QString error;
            try {
                model = source.folder.isEmpty()
                            ? ChatModel::fromRun(parseConfig(source.configJson, "run " + std::to_string(source.runId) + "'s stored config"),
                                                 source.checkpoint.toStdString(), "run " + std::to_string(source.runId))
                            : ChatModel::fromFolder(source.folder.toStdString(), precision.toStdString());
            } catch (const std::exception& e) {
                error = QString::fromUtf8(e.what());
            }
            QMetaObject::invokeMethod(qApp, [self, generation, model, error] {
                if (self && self->m_generation == generation) self->loaded(model, error);
            }, Qt::QueuedConnection);
        });
        if (m_chooser->currentIndex() <= 0 || m_choices[static_cast<std::size_t>(m_chooser->currentIndex())] != source) {
            setChoices(std::vector<ChatSource>(m_choices.begin() + 1, m_choices.end()), {}); // shows it
        }
        m_panel->updateActions();
    }

    void send(const QString& text, const QString& system, const GenerationSettings& settings)
    {
        if (!m_model || m_replying) return;
        // Without a chat template each message is continued on its own.
        if (!m_model->hasChatTemplate()) m_messages.clear();
        m_messages.push_back({"user", text.toStdString()});
        m_turns.push_back({"user", text, {}});
        m_turns.push_back({"assistant", {}, ChatPanel::tr("generating…")});
        render();
        std::vector<ChatMessage> conversation;
        if (!system.isEmpty() && m_model->hasChatTemplate()) conversation.push_back({"system", system.toStdString()});
        conversation.insert(conversation.end(), m_messages.begin(), m_messages.end());
        m_replying = true;
        m_stop = std::make_shared<std::atomic<bool>>(false);
        const quint64 generation = ++m_generation;
        const int window = m_model->window();
        QPointer<ChatSide> self(this);
        chain([self, generation, window, model = m_model, conversation, settings, stop = m_stop] {
            ChatReply reply;
            QString error;
            try {
                reply = model->reply(conversation, settings, [&](const std::string& piece) {
                    QMetaObject::invokeMethod(qApp, [self, generation, piece = QString::fromStdString(piece)] {
                        if (self && self->m_generation == generation) self->grow(piece);
                    }, Qt::QueuedConnection);
                }, stop.get());
            } catch (const std::exception& e) {
                error = QString::fromUtf8(e.what());
            }
            QMetaObject::invokeMethod(qApp, [self, generation, reply, error, window] {
                if (self && self->m_generation == generation) self->finished(reply, error, window);
            }, Qt::QueuedConnection);
        });
        m_panel->updateActions();
    }

    // Ends a reply in progress now, keeping what has come; the thread stops after its token.
    void endReply(const QString& note)
    {
        if (!m_replying) return;
        if (m_stop) m_stop->store(true);
        ++m_generation;
        m_replying = false;
        m_turns.back().note = note;
        m_messages.push_back({"assistant", m_turns.back().text.toStdString()});
        render();
        Q_EMIT m_panel->replied(m_index, m_turns.back().text);
    }

    void clear()
    {
        endReply(ChatPanel::tr("stopped"));
        m_messages.clear();
        m_turns.clear();
        render();
    }

    bool ready() const { return m_model && !m_loading; }
    bool loading() const { return m_loading; }
    bool replying() const { return m_replying; }
    bool hasTemplate() const { return m_model && m_model->hasChatTemplate(); }
    bool hasConversation() const { return !m_turns.empty(); }
    QString status() const { return m_status->text(); }
    QString lastReply() const
    {
        for (auto it = m_turns.rbegin(); it != m_turns.rend(); ++it)
            if (it->role == "assistant") return it->text;
        return {};
    }
    QString transcript() const
    {
        QString out;
        for (const auto& t : m_turns) {
            out += (t.role == "user" ? ChatPanel::tr("You: ") : ChatPanel::tr("Model: ")) + t.text;
            if (!t.note.isEmpty()) out += " [" + t.note + "]";
            out += "\n";
        }
        return out;
    }

private:
    struct Turn {
        QString role, text, note;
    };

    // Runs `work` on a thread of its own after the one before it has finished.
    void chain(std::function<void()> work)
    {
        auto previous = m_thread;
        m_thread = std::make_shared<std::thread>([previous, work = std::move(work)] {
            if (previous && previous->joinable()) previous->join();
            work();
        });
    }

    void chosen(int index)
    {
        if (index == m_chooser->count() - 1) {
            const QString dir = existingDirectory(this, ChatPanel::tr("Choose a Hugging Face model folder"));
            if (dir.isEmpty()) {
                setChoices(std::vector<ChatSource>(m_choices.begin() + 1, m_choices.end()), {});
                return;
            }
            QSettings settings;
            QStringList recent = settings.value(kFoldersKey).toStringList();
            recent.removeAll(dir);
            recent.prepend(dir);
            while (recent.size() > kRecentFolders) recent.removeLast();
            settings.setValue(kFoldersKey, recent);
            ChatSource s;
            s.folder = dir;
            s.label = ChatPanel::tr("Folder %1").arg(dir);
            load(s);
            m_panel->refreshRuns();
            return;
        }
        if (index <= 0 || index >= static_cast<int>(m_choices.size())) return;
        load(m_choices[static_cast<std::size_t>(index)]);
    }

    void loaded(const std::shared_ptr<ChatModel>& model, const QString& error)
    {
        m_loading = false;
        m_model = model;
        m_status->setText(model ? QString::fromStdString(model->describe()) : ChatPanel::tr("Cannot load %1: %2").arg(m_source.label, error));
        Q_EMIT m_panel->message(model ? ChatPanel::tr("Loaded %1").arg(m_source.label) : ChatPanel::tr("Cannot load %1").arg(m_source.label));
        m_panel->updateActions();
    }

    void grow(const QString& piece)
    {
        if (!m_replying || m_turns.empty()) return;
        m_turns.back().text += piece;
        render();
    }

    void finished(const ChatReply& reply, const QString& error, int window)
    {
        m_replying = false;
        if (!error.isEmpty()) {
            // The message is taken back: the conversation stays one the template accepts.
            m_messages.pop_back();
            m_turns.back().note = ChatPanel::tr("no reply: %1").arg(error);
        } else {
            m_turns.back().text = QString::fromStdString(reply.text);
            m_turns.back().note = endNote(reply, window);
            m_messages.push_back({"assistant", reply.text});
        }
        render();
        m_panel->updateActions();
        Q_EMIT m_panel->replied(m_index, m_turns.back().text);
    }

    void render()
    {
        QString out;
        for (const auto& t : m_turns) {
            const bool user = t.role == "user";
            out += QString("<table width=\"100%\" cellpadding=\"6\" style=\"margin-bottom:6px\"><tr><td bgcolor=\"%1\">")
                       .arg(user ? "#e8eef7" : "#f4f4f4");
            out += "<b>" + (user ? ChatPanel::tr("You") : ChatPanel::tr("Model")) + "</b><br>" + html(t.text);
            if (!t.note.isEmpty()) out += "<br><span style=\"color:#666666\"><small>" + html(t.note) + "</small></span>";
            out += "</td></tr></table>";
        }
        auto* bar = m_view->verticalScrollBar();
        const int at = bar->value();
        m_rendering = true;
        m_view->setHtml(out);
        bar->setValue(m_follow ? bar->maximum() : at);
        m_rendering = false;
    }

    ChatPanel* m_panel;
    int m_index;
    QComboBox* m_chooser;
    QComboBox* m_precision;
    QLabel* m_status;
    QTextBrowser* m_view;
    std::vector<ChatSource> m_choices;
    ChatSource m_source;
    std::shared_ptr<ChatModel> m_model;
    std::vector<ChatMessage> m_messages; // what the model reads (user and assistant turns)
    std::vector<Turn> m_turns;           // what is shown
    bool m_loading = false, m_replying = false;
    bool m_follow = true, m_rendering = false; // the view keeps to the newest text
    quint64 m_generation = 0;
    std::shared_ptr<std::atomic<bool>> m_stop;
    std::shared_ptr<std::thread> m_thread; // the latest job; it joins the one before it
};

ChatPanel::ChatPanel(QWidget* parent) : QWidget(parent)
{
    m_system = new QPlainTextEdit(this);
    m_system->setPlaceholderText(tr("System prompt (optional), e.g. You are a helpful assistant."));
    m_system->setFixedHeight(m_system->fontMetrics().lineSpacing() * 3 + 12);
    m_system->setToolTip(tr("Sent before the conversation as the system message, through the model's chat template"));
    const auto defaults = chatDefaults();
    const auto spin = [this](int lo, int hi, int value, const QString& tip) {
        auto* box = new QSpinBox(this);
        box->setRange(lo, hi);
        box->setValue(value);
        box->setToolTip(tip);
        return box;
    };
    const auto real = [this](double lo, double hi, double step, double value, const QString& tip) {
        auto* box = new QDoubleSpinBox(this);
        box->setRange(lo, hi);
        box->setSingleStep(step);
        box->setValue(value);
        box->setToolTip(tip);
        return box;
    };
    m_maxTokens = spin(1, 100000, defaults.maxNewTokens, tr("The most tokens a reply has (default %1)").arg(defaults.maxNewTokens));
    m_temperature = real(0.0, 5.0, 0.1, defaults.temperature,
                         tr("0 picks the most likely token each time (greedy); higher is more varied (default %1)").arg(defaults.temperature));
    m_topP = real(0.01, 1.0, 0.05, defaults.topP,
                  tr("Sample from the most likely tokens whose probabilities add up to this (default 1: all)"));
    m_topK = spin(0, 100000, defaults.topK, tr("Sample from this many most likely tokens only (default off)"));
    m_topK->setSpecialValueText(tr("off"));
    m_repetition = real(0.5, 3.0, 0.05, defaults.repetitionPenalty,
                        tr("Above 1 makes tokens already in the conversation less likely (default 1: off)"));
    m_seed = spin(0, 1 << 30, static_cast<int>(defaults.seed),
                  tr("The random seed of each reply (default %1): the same settings and conversation give the same reply").arg(defaults.seed));
    auto* settingsBox = new QGroupBox(tr("Generation"), this);
    auto* form = new QFormLayout(settingsBox);
    form->addRow(tr("System prompt"), m_system);
    auto* numbers = new QHBoxLayout;
    const auto add = [&](const QString& label, QWidget* w) {
        numbers->addWidget(plainLabel(settingsBox, label));
        numbers->addWidget(w);
    };
    add(tr("Max new tokens"), m_maxTokens);
    add(tr("Temperature"), m_temperature);
    add(tr("Top-p"), m_topP);
    add(tr("Top-k"), m_topK);
    add(tr("Repetition penalty"), m_repetition);
    add(tr("Seed"), m_seed);
    numbers->addStretch(1);
    form->addRow(numbers);

    m_sides[0] = new ChatSide(this, 0);
    m_sides[1] = new ChatSide(this, 1);
    auto* split = new QSplitter(Qt::Horizontal, this);
    split->addWidget(m_sides[0]);
    split->addWidget(m_sides[1]);
    split->setChildrenCollapsible(false);
    m_sides[1]->hide();

    m_message = new QPlainTextEdit(this);
    m_message->setPlaceholderText(tr("Message (Enter sends, Shift+Enter starts a new line)"));
    m_message->setFixedHeight(m_message->fontMetrics().lineSpacing() * 3 + 12);
    m_message->installEventFilter(this);
    m_send = new QPushButton(tr("&Send"), this);
    m_send->setToolTip(tr("Send the message to the model (Enter or Ctrl+Enter)"));
    m_stop = new QPushButton(tr("S&top"), this);
    m_stop->setToolTip(tr("End the replies now, keeping what has come (Esc)"));
    m_new = new QPushButton(tr("&New chat"), this);
    m_new->setToolTip(tr("Clear the conversations, keeping the models and settings (Ctrl+L)"));
    m_compare = new QCheckBox(tr("Side &by side"), this);
    m_compare->setToolTip(tr("A second model answers the same messages beside the first: the base and the fine-tune, or two runs"));
    m_hint = plainLabel(this);
    m_hint->setWordWrap(true);
    auto* buttons = new QVBoxLayout;
    buttons->addWidget(m_send);
    buttons->addWidget(m_stop);
    buttons->addWidget(m_new);
    auto* bottom = new QHBoxLayout;
    bottom->addWidget(m_message, 1);
    bottom->addLayout(buttons);
    auto* top = new QHBoxLayout;
    top->addWidget(m_compare);
    top->addWidget(m_hint, 1);

    auto* layout = new QVBoxLayout(this);
    layout->addWidget(settingsBox);
    layout->addLayout(top);
    layout->addWidget(split, 1);
    layout->addLayout(bottom);

    connect(m_send, &QPushButton::clicked, this, &ChatPanel::send);
    connect(m_stop, &QPushButton::clicked, this, &ChatPanel::stop);
    connect(m_new, &QPushButton::clicked, this, &ChatPanel::newChat);
    connect(m_compare, &QCheckBox::toggled, this, &ChatPanel::setCompare);
    auto* esc = new QShortcut(QKeySequence(Qt::Key_Escape), this, this, &ChatPanel::stop);
    esc->setContext(Qt::WidgetWithChildrenShortcut);
    auto* sendKey = new QShortcut(QKeySequence(Qt::CTRL | Qt::Key_Return), this, this, &ChatPanel::send);
    sendKey->setContext(Qt::WidgetWithChildrenShortcut);
    auto* clearKey = new QShortcut(QKeySequence(Qt::CTRL | Qt::Key_L), this, this, &ChatPanel::newChat);
    clearKey->setContext(Qt::WidgetWithChildrenShortcut);
    refreshRuns();
    updateActions();
}

ChatPanel::~ChatPanel() = default; // each side stops its reply and joins its threads

void ChatPanel::setDatabasePath(const QString& path)
{
    m_dbPath = path;
    if (isVisible()) refreshRuns(); // else when the tab is shown
}

void ChatPanel::refreshRuns()
{
    std::vector<ChatSource> runs;
    if (!m_dbPath.isEmpty()) {
        try {
            RunStore store(m_dbPath.toStdString(), RunStore::Mode::ReadOnly);
            auto records = store.listRuns();
            std::sort(records.begin(), records.end(), [](const RunRecord& a, const RunRecord& b) { return a.id > b.id; });
            for (const auto& r : records) {
                if (static_cast<int>(runs.size()) >= kMaxRuns) break;
                if (const auto checkpoint = store.latestCheckpoint(r.id)) runs.push_back(runSource(r, *checkpoint));
            }
        } catch (const std::exception&) {
            // No store yet: only folders.
        }
    }
    const QStringList folders = QSettings().value(kFoldersKey).toStringList();
    for (auto* side : m_sides) side->setChoices(runs, folders);
}

QString ChatPanel::chatWithRuns(const QList<qint64>& runIds)
{
    if (runIds.isEmpty() || runIds.size() > 2) return tr("select one run, or two to compare");
    std::vector<ChatSource> sources;
    try {
        RunStore store(m_dbPath.toStdString(), RunStore::Mode::ReadOnly);
        for (const auto id : runIds) {
            const auto record = store.run(id);
            if (!record) return tr("run %1 is not in the store").arg(id);
            const auto checkpoint = store.latestCheckpoint(id);
            if (!checkpoint) return tr("run %1 has no checkpoint yet (one is saved when it ends or is stopped)").arg(id);
            sources.push_back(runSource(*record, *checkpoint));
        }
    } catch (const std::exception& e) {
        return QString::fromUtf8(e.what());
    }
    setCompare(sources.size() == 2);
    for (std::size_t i = 0; i < sources.size(); ++i) m_sides[i]->load(sources[i]);
    return {};
}

void ChatPanel::setSource(int side, const ChatSource& source)
{
    if (side < 0 || side > 1) return;
    if (side == 1) setCompare(true);
    m_sides[static_cast<std::size_t>(side)]->load(source);
}

void ChatPanel::setCompare(bool on)
{
    if (m_compare->isChecked() != on) {
        const QSignalBlocker block(m_compare);
        m_compare->setChecked(on);
    }
    if (!on) m_sides[1]->endReply(tr("stopped"));
    m_sides[1]->setVisible(on);
    updateActions();
}

bool ChatPanel::comparing() const { return m_compare->isChecked(); }

GenerationSettings ChatPanel::settings() const
{
    GenerationSettings s;
    s.maxNewTokens = m_maxTokens->value();
    s.temperature = m_temperature->value();
    s.topP = m_topP->value();
    s.topK = m_topK->value();
    s.repetitionPenalty = m_repetition->value();
    s.seed = static_cast<std::uint64_t>(m_seed->value());
    return s;
}

void ChatPanel::send()
{
    if (!m_send->isEnabled()) return;
    const QString text = m_message->toPlainText().trimmed();
    if (text.isEmpty()) {
        m_hint->setText(tr("Write a message first"));
        return;
    }
    const auto s = settings();
    const QString system = m_system->toPlainText().trimmed();
    m_sides[0]->send(text, system, s);
    if (comparing()) m_sides[1]->send(text, system, s);
    m_message->clear();
    Q_EMIT message(tr("Sent; Esc stops the reply"));
}

void ChatPanel::stop()
{
    if (!busy()) return;
    for (auto* side : m_sides) side->endReply(tr("stopped"));
    Q_EMIT message(tr("Stopped the reply"));
    updateActions();
}

void ChatPanel::newChat()
{
    if (!m_sides[0]->hasConversation() && !m_sides[1]->hasConversation()) return;
    if (m_confirmNewChat
        && plainMessage(this, QMessageBox::Question, tr("New chat"), tr("Clear the conversation? The models and settings stay."),
                        QMessageBox::Yes | QMessageBox::Cancel, QMessageBox::Cancel)
               != QMessageBox::Yes)
        return;
    for (auto* side : m_sides) side->clear();
    Q_EMIT message(tr("Cleared the conversation"));
    updateActions();
}

bool ChatPanel::busy() const { return m_sides[0]->replying() || m_sides[1]->replying(); }
bool ChatPanel::loading(int side) const { return side >= 0 && side <= 1 && m_sides[static_cast<std::size_t>(side)]->loading(); }
QString ChatPanel::transcript(int side) const { return side >= 0 && side <= 1 ? m_sides[static_cast<std::size_t>(side)]->transcript() : QString(); }
QString ChatPanel::status(int side) const { return side >= 0 && side <= 1 ? m_sides[static_cast<std::size_t>(side)]->status() : QString(); }
QString ChatPanel::lastReply(int side) const { return side >= 0 && side <= 1 ? m_sides[static_cast<std::size_t>(side)]->lastReply() : QString(); }

void ChatPanel::updateActions()
{
    const bool compare = comparing();
    const bool ready = m_sides[0]->ready() && (!compare || m_sides[1]->ready());
    const bool replying = busy();
    m_send->setEnabled(ready && !replying);
    m_stop->setEnabled(replying);
    m_new->setEnabled(!replying);
    const bool anyTemplate = m_sides[0]->hasTemplate() || (compare && m_sides[1]->hasTemplate());
    m_system->setEnabled(anyTemplate || !m_sides[0]->ready());
    QString hint;
    if (replying) hint = tr("Replying… Esc stops");
    else if (m_sides[0]->loading() || (compare && m_sides[1]->loading())) hint = tr("Loading the model…");
    else if (!m_sides[0]->ready()) hint = tr("Choose a model: a run with a checkpoint (History's Chat button sends one here) or a model folder");
    else if (compare && !m_sides[1]->ready()) hint = tr("Choose the second model, or turn side by side off");
    else if (!anyTemplate) hint = tr("No chat template: each message is continued as text, and the system prompt is not used");
    m_hint->setText(hint);
}

void ChatPanel::showEvent(QShowEvent* event)
{
    refreshRuns(); // runs finished since
    QWidget::showEvent(event);
}

bool ChatPanel::eventFilter(QObject* watched, QEvent* event)
{
    if (watched == m_message && event->type() == QEvent::KeyPress) {
        const auto* key = static_cast<QKeyEvent*>(event);
        if ((key->key() == Qt::Key_Return || key->key() == Qt::Key_Enter) && !(key->modifiers() & Qt::ShiftModifier)) {
            send();
            return true;
        }
    }
    return QWidget::eventFilter(watched, event);
}

} // namespace tb::ui
