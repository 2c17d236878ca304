#include "DatasetBrowser.h"

#include <QFileInfo>
#include <QHBoxLayout>
#include <QKeySequence>
#include <QLabel>
#include <QPointer>
#include <QProgressBar>
#include <QPushButton>
#include <QShortcut>
#include <QSpinBox>
#include <QTextBrowser>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>

#include <algorithm>

#include "MetricPlot.h"
#include "PlainText.h"
#include "QCustomPlotInclude.h"
#include "TokenHtml.h"
#include "common/Errors.h"
#include "text/Tokenizer.h"
#include "train/CorpusSetup.h"

namespace tb::ui {

namespace {
// Tokens shown of one example (each token is a coloured span; the count says the rest).
constexpr std::size_t kShownTokens = 2000;
} // namespace

DatasetBrowser::DatasetBrowser(const RunConfig& config, QWidget* parent) : QDialog(parent), m_config(config)
{
    setWindowTitle(tr("Data: %1").arg(config.data.path.empty() ? tr("the bundled sample text")
                                                               : QFileInfo(QString::fromStdString(config.data.path)).fileName()));
    resize(1000, 760);
    m_summary = plainLabel(this, tr("Tokenizing the data with the model folder's tokenizer…"));
    m_summary->setWordWrap(true);
    m_summary->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_progress = new QProgressBar(this);
    m_progress->setRange(0, 1000);
    m_progress->setFormat(tr("tokenizing: %p%"));
    m_cancelButton = new QPushButton(tr("&Cancel"), this);
    m_cancelButton->setToolTip(tr("Stop tokenizing; nothing is cached for a file not read to its end"));
    connect(m_cancelButton, &QPushButton::clicked, this, [this] { m_cancel->store(true); });
    auto* progressRow = new QHBoxLayout;
    progressRow->addWidget(m_progress, 1);
    progressRow->addWidget(m_cancelButton);

    m_plot = new QCustomPlot(this);
    m_plot->setObjectName("datasetHistogram");
    m_plot->setMinimumHeight(200);
    applyPlotPalette(m_plot);
    m_plot->xAxis->setLabel(tr("tokens in an example (with BOS and EOS as training sees them)"));
    m_plot->yAxis->setLabel(tr("examples"));
    useIntegerTicks(m_plot->yAxis);
    m_plot->hide();

    m_exampleHeader = plainLabel(this);
    m_exampleHeader->setWordWrap(true);
    m_text = new QTextBrowser(this);
    m_text->setObjectName("datasetExample");
    m_text->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
    m_text->setToolTip(tr("The example tokenized as training sees it: each token shaded in turn, special tokens in grey, "
                          "line breaks as ↵; in a chat the tokens the loss is on in green. A token's id is in its tooltip."));
    m_index = new QSpinBox(this);
    m_index->setPrefix(tr("example "));
    m_index->setRange(1, 1);
    m_index->setEnabled(false);
    m_previous = new QPushButton(tr("&Previous"), this);
    m_previous->setShortcut(QKeySequence(Qt::Key_PageUp));
    m_previous->setToolTip(tr("The example before (Page Up)"));
    m_next = new QPushButton(tr("&Next"), this);
    m_next->setShortcut(QKeySequence(Qt::Key_PageDown));
    m_next->setToolTip(tr("The example after (Page Down)"));
    m_longest = new QPushButton(tr("&Longest"), this);
    m_longest->setToolTip(tr("Show the longest example"));
    for (auto* b : {m_previous, m_next, m_longest}) b->setEnabled(false);
    connect(m_index, &QSpinBox::valueChanged, this, [this](int n) { showExample(n); });
    connect(m_previous, &QPushButton::clicked, this, [this] { showExample(example() - 1); });
    connect(m_next, &QPushButton::clicked, this, [this] { showExample(example() + 1); });
    connect(m_longest, &QPushButton::clicked, this, [this] {
        if (!m_stats || m_stats->lengths.empty()) return;
        const auto it = std::max_element(m_stats->lengths.begin(), m_stats->lengths.end());
        showExample(static_cast<int>(it - m_stats->lengths.begin()) + 1);
    });
    auto* pageRow = new QHBoxLayout;
    pageRow->addWidget(m_index);
    pageRow->addWidget(m_previous);
    pageRow->addWidget(m_next);
    pageRow->addWidget(m_longest);
    pageRow->addWidget(m_exampleHeader, 1);
    auto* close = new QPushButton(tr("Close"), this);
    connect(close, &QPushButton::clicked, this, &QDialog::reject);
    auto* closeRow = new QHBoxLayout;
    closeRow->addStretch(1);
    closeRow->addWidget(close);

    auto* layout = new QVBoxLayout(this);
    layout->addWidget(m_summary);
    layout->addLayout(progressRow);
    layout->addWidget(m_plot, 2);
    layout->addLayout(pageRow);
    layout->addWidget(m_text, 3);
    layout->addLayout(closeRow);

    connect(&m_watcher, &QFutureWatcher<Loaded>::finished, this, &DatasetBrowser::onLoaded);
    // Tokenized off the GUI thread; progress comes back queued, to a dialog that may be gone.
    QPointer<QProgressBar> bar = m_progress;
    m_watcher.setFuture(QtConcurrent::run([config, cancel = m_cancel, bar] {
        Loaded out;
        try {
            auto setup = corpusSetupFor(config, "");
            out.tokenizer = setup.tokenizer;
            out.cache = text::tokenizeCorpus(
                setup.spec, *setup.tokenizer, text::defaultTokenCacheRoot(),
                [bar](std::uint64_t done, std::uint64_t total) {
                    const int value = total ? static_cast<int>(done * 1000 / total) : 1000;
                    QMetaObject::invokeMethod(bar, [bar, value] { if (bar) bar->setValue(value); }, Qt::QueuedConnection);
                },
                cancel.get());
            out.stats = text::corpusStats(*out.cache);
            out.starts = text::readDocumentStarts(*out.cache);
        } catch (const std::exception& e) {
            out.cache.reset();
            out.error = cancel->load() ? QObject::tr("Cancelled: nothing was tokenized into the cache.") : QString::fromUtf8(e.what());
        }
        return out;
    }));
}

DatasetBrowser::~DatasetBrowser()
{
    m_cancel->store(true);
    m_watcher.waitForFinished();
}

void DatasetBrowser::onLoaded()
{
    Loaded r = m_watcher.result();
    m_loading = false;
    m_progress->hide();
    m_cancelButton->hide();
    if (!r.cache) {
        m_error = r.error;
        m_summary->setText(tr("No data to show: %1").arg(r.error));
        m_summary->setStyleSheet("color: #c0392b");
        Q_EMIT loaded();
        return;
    }
    m_cache = std::move(r.cache);
    m_stats = std::move(r.stats);
    m_starts = std::move(r.starts);
    m_tokenizer = std::move(r.tokenizer);
    m_summary->setText(summaryText());
    drawHistogram();
    const int count = static_cast<int>(std::min<std::uint64_t>(m_stats->documents, 2147483647ull));
    if (count > 0) {
        m_index->setRange(1, count);
        m_index->setSuffix(tr(" of %1").arg(count));
        m_index->setEnabled(true);
        m_longest->setEnabled(true);
        showExample(1);
    }
    Q_EMIT loaded();
}

QString DatasetBrowser::summaryText() const
{
    if (!m_stats) return m_summary->text();
    QStringList lines;
    for (const auto& line : text::describeCorpus(*m_stats, effectiveSeqLen(m_config), m_config.data.source == "chat")) {
        lines << QString::fromStdString(line);
    }
    if (m_cache) lines << tr("Token cache: %1 (%2)").arg(QString::fromStdString(m_cache->dir), m_cache->reused ? tr("reused") : tr("tokenized now"));
    return lines.join("\n");
}

void DatasetBrowser::drawHistogram()
{
    const auto& s = *m_stats;
    const auto width = std::max<std::uint64_t>(1, (s.longest() + 39) / 40);
    const auto bins = s.histogram(width);
    if (!m_bars) m_bars = new QCPBars(m_plot->xAxis, m_plot->yAxis);
    QVector<double> keys, values;
    double most = 1;
    for (std::size_t k = 0; k < bins.size(); ++k) {
        // Bin k holds the lengths k w to (k + 1) w - 1: centred on them, so
        // that a bin of one length stands on its number.
        keys << static_cast<double>(k * width) + static_cast<double>(width - 1) / 2.0;
        values << static_cast<double>(bins[k]);
        most = std::max(most, static_cast<double>(bins[k]));
    }
    m_bars->setData(keys, values);
    m_bars->setWidth(static_cast<double>(width) * 0.9);
    m_bars->setName(tr("examples per %1 tokens").arg(width));
    m_bars->setBrush(QColor("#60a5fa"));
    m_bars->setPen(Qt::NoPen);
    // The training window: an example longer than it (right of the line) is
    // trained on in pieces.
    const double window = effectiveSeqLen(m_config) + 1;
    auto* line = new QCPItemStraightLine(m_plot);
    line->point1->setCoords(window + 0.5, 0);
    line->point2->setCoords(window + 0.5, 1);
    line->setPen(QPen(QColor("#c0392b"), 2, Qt::DashLine));
    auto* label = new QCPItemText(m_plot);
    label->position->setCoords(window + 0.5, most * 1.05);
    label->setPositionAlignment(Qt::AlignLeft | Qt::AlignBottom);
    label->setText(tr(" training window: %1 tokens (longer examples to the right)").arg(window));
    label->setColor(QColor("#c0392b"));
    m_plot->xAxis->setRange(-0.5, std::max(static_cast<double>(bins.size() * width), window * 1.1));
    m_plot->yAxis->setRange(0, most * 1.2);
    m_plot->show();
    m_plot->replot();
}

int DatasetBrowser::example() const { return m_stats && m_stats->documents > 0 ? m_index->value() : 0; }

void DatasetBrowser::showExample(int n)
{
    if (!m_stats || m_stats->documents == 0) return;
    n = std::clamp(n, 1, m_index->maximum());
    if (m_index->value() != n) {
        m_index->setValue(n); // comes back here through valueChanged
        return;
    }
    m_previous->setEnabled(n > 1);
    m_next->setEnabled(n < m_index->maximum());
    try {
        const auto e = text::readCorpusExample(*m_cache, m_starts, static_cast<std::uint64_t>(n - 1), kShownTokens);
        const auto pieces = text::tokenPieces(*m_tokenizer, e.ids);
        m_shownText.clear();
        for (const auto& p : pieces) m_shownText += QString::fromStdString(p);
        QString header = tr("%1 tokens").arg(e.tokens);
        if (m_config.data.source == "chat") {
            const auto trained = std::count(e.mask.begin(), e.mask.end(), std::uint8_t(1));
            header += tr(", %1 of them the assistant's (green: the loss is on these)").arg(trained);
        }
        if (e.tokens > static_cast<std::uint64_t>(effectiveSeqLen(m_config)) + 1) {
            header += tr("; longer than the training window (%1): trained on in pieces").arg(effectiveSeqLen(m_config) + 1);
        }
        if (e.ids.size() < e.tokens) header += tr("; the first %1 shown").arg(e.ids.size());
        m_exampleHeader->setText(header);
        m_exampleHeader->setStyleSheet({});
        m_text->setHtml(tokensHtml(*m_tokenizer, e.ids, pieces, e.mask));
    } catch (const std::exception& e) {
        m_exampleHeader->setText(tr("Example %1 cannot be read: %2").arg(n).arg(QString::fromUtf8(e.what())));
        m_exampleHeader->setStyleSheet("color: #c0392b");
        m_text->clear();
        m_shownText.clear();
    }
}

QString DatasetBrowser::exampleHeader() const { return m_exampleHeader->text(); }

QString DatasetBrowser::exampleText() const { return m_shownText; }

} // namespace tb::ui
