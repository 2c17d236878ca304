#pragma once
// The Chat tab: a playground for a trained run or a Hugging Face model folder.
// The conversation goes through the model's chat template with a system
// prompt, the reply streams in as it is generated, and a second model can
// answer the same messages beside the first (the base and the fine-tune, or
// two runs). Stop ends the replies at once: the text so far is kept, and the
// threads finish the token in hand behind it. Models load and generate off the
// GUI thread (core/train ChatModel, as `trainbench-cli chat`).

#include <QWidget>

#include <array>
#include <memory>
#include <string>

#include "train/ModelTools.h"

class QCheckBox;
class QDoubleSpinBox;
class QLabel;
class QPlainTextEdit;
class QPushButton;
class QSpinBox;

namespace tb::ui {

// A model to talk to: a stored run's checkpoint, or a model folder.
struct ChatSource {
    QString label;      // as the chooser lists it
    qint64 runId = 0;   // a run's
    std::string configJson; // a run's stored config, read as it loads
    QString checkpoint; // a run's
    QString folder;     // a model folder's
    bool operator==(const ChatSource& o) const
    {
        return runId == o.runId && checkpoint == o.checkpoint && folder == o.folder;
    }
};

class ChatSide;

class ChatPanel final : public QWidget {
    Q_OBJECT

public:
    explicit ChatPanel(QWidget* parent = nullptr);
    ~ChatPanel() override;

    // The store whose runs (those with a checkpoint) the choosers list.
    void setDatabasePath(const QString& path);
    void refreshRuns();
    // Loads `source` into side 0 (left) or 1 (right, shown beside the first).
    void setSource(int side, const ChatSource& source);
    // Stored runs (one or two, with checkpoints) into the sides, in order;
    // returns why not (empty when loading).
    QString chatWithRuns(const QList<qint64>& runIds);
    // Side by side: the second model answers the same messages.
    void setCompare(bool on);
    bool comparing() const;

    void send();    // the message box's text, to every model shown
    void stop();    // the replies in progress end now
    void newChat(); // both conversations cleared (asks first when there is one)
    void setConfirmNewChat(bool ask) { m_confirmNewChat = ask; }

    GenerationSettings settings() const;
    bool busy() const;           // a reply in progress
    bool loading(int side) const; // a model still loading
    QString transcript(int side) const; // the conversation as plain text
    QString status(int side) const;     // what is loaded, or why not
    QString lastReply(int side) const;
    QPlainTextEdit* messageEdit() const { return m_message; }
    QPlainTextEdit* systemEdit() const { return m_system; }
    QPushButton* sendButton() const { return m_send; }
    QPushButton* stopButton() const { return m_stop; }
    QDoubleSpinBox* temperatureBox() const { return m_temperature; }
    QSpinBox* maxTokensBox() const { return m_maxTokens; }

Q_SIGNALS:
    // A reply is complete (or stopped): its side and text.
    void replied(int side, const QString& text);
    // What happened, for the status bar.
    void message(const QString& text);

protected:
    void showEvent(QShowEvent* event) override;
    bool eventFilter(QObject* watched, QEvent* event) override;

private:
    friend class ChatSide;
    void updateActions();
    std::array<ChatSide*, 2> m_sides{};
    QString m_dbPath;
    bool m_confirmNewChat = true;
    QPlainTextEdit* m_system;
    QPlainTextEdit* m_message;
    QSpinBox* m_maxTokens;
    QDoubleSpinBox* m_temperature;
    QDoubleSpinBox* m_topP;
    QSpinBox* m_topK;
    QDoubleSpinBox* m_repetition;
    QSpinBox* m_seed;
    QCheckBox* m_compare;
    QPushButton* m_send;
    QPushButton* m_stop;
    QPushButton* m_new;
    QLabel* m_hint;
};

} // namespace tb::ui
