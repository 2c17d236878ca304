#pragma once
// Browse data…: a config's text, jsonl or chat data as a run will train on it.
// The file is tokenized with the model folder's tokenizer off the GUI thread
// (with progress and Cancel; into the token cache, so a file already
// tokenized opens at once), then the dialog shows the number of examples
// and tokens, a histogram of their lengths with the training window marked,
// how many are longer than the window and how many rows were dropped, and
// pages through the examples with the tokens the loss is on in green. The
// numbers are `trainbench-cli data`'s (text/CorpusStats.h).

#include <QDialog>
#include <QFutureWatcher>

#include <atomic>
#include <memory>
#include <optional>
#include <vector>

#include "config/RunConfig.h"
#include "text/Corpus.h"
#include "text/CorpusStats.h"

class QCPBars;
class QCustomPlot;
class QLabel;
class QProgressBar;
class QPushButton;
class QSpinBox;
class QTextBrowser;

namespace tb::text {
class Tokenizer;
}

namespace tb::ui {

class DatasetBrowser final : public QDialog {
    Q_OBJECT

public:
    explicit DatasetBrowser(const RunConfig& config, QWidget* parent = nullptr);
    ~DatasetBrowser() override; // cancels a tokenization in progress

    bool loading() const { return m_loading; }
    // After loading: the corpus's numbers, or why there are none.
    const std::optional<text::CorpusStats>& stats() const { return m_stats; }
    QString errorText() const { return m_error; }
    QString summaryText() const;
    QString exampleHeader() const;
    QString exampleText() const; // the shown tokens' text
    int example() const;         // from 1; 0 before loading
    void showExample(int example);
    QCustomPlot* histogramPlot() const { return m_plot; }
    QProgressBar* progressBar() const { return m_progress; }
    QPushButton* nextButton() const { return m_next; }
    QPushButton* cancelButton() const { return m_cancelButton; }

Q_SIGNALS:
    void loaded(); // done, failed or cancelled

private:
    struct Loaded {
        std::optional<text::CorpusCache> cache;
        text::CorpusStats stats;
        std::vector<std::uint64_t> starts;
        std::shared_ptr<const text::Tokenizer> tokenizer;
        QString error;
    };
    void onLoaded();
    void drawHistogram();

    RunConfig m_config;
    QFutureWatcher<Loaded> m_watcher;
    std::shared_ptr<std::atomic<bool>> m_cancel = std::make_shared<std::atomic<bool>>(false);
    bool m_loading = true;
    std::optional<text::CorpusStats> m_stats;
    std::optional<text::CorpusCache> m_cache;
    std::vector<std::uint64_t> m_starts;
    std::shared_ptr<const text::Tokenizer> m_tokenizer;
    QString m_error;
    QString m_shownText;

    QLabel* m_summary;
    QProgressBar* m_progress;
    QPushButton* m_cancelButton;
    QCustomPlot* m_plot;
    QCPBars* m_bars = nullptr;
    QLabel* m_exampleHeader;
    QTextBrowser* m_text;
    QSpinBox* m_index;
    QPushButton* m_previous;
    QPushButton* m_next;
    QPushButton* m_longest;
};

} // namespace tb::ui
