#include "DiagnosticsPanel.h"

#include <QDragEnterEvent>
#include <QEventLoop>
#include <QFile>
#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QJsonArray>
#include <QJsonDocument>
#include <QLabel>
#include <QMimeData>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSplitter>
#include <QStyle>
#include <QTextBrowser>
#include <QTreeWidget>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>

#include "ConfigDocument.h"
#include "PlainText.h"
#include "diagnose/ErrorExplainer.h"
#include "diagnose/Preflight.h"
#include "run/RunSession.h"

namespace tb::ui {

namespace {

enum Group { Planned, Launch, Failure, Explained };
constexpr int kGroupRole = Qt::UserRole;
constexpr int kIndexRole = Qt::UserRole + 1;

QIcon severityIcon(const QWidget* w, Severity s)
{
    switch (s) {
    case Severity::Error: return w->style()->standardIcon(QStyle::SP_MessageBoxCritical);
    case Severity::Warning: return w->style()->standardIcon(QStyle::SP_MessageBoxWarning);
    case Severity::Info: return w->style()->standardIcon(QStyle::SP_MessageBoxInformation);
    }
    return {};
}

QString esc(const std::string& s) { return QString::fromStdString(s).toHtmlEscaped(); }

int levelOf(const std::vector<Finding>& findings)
{
    int level = 0;
    for (const auto& f : findings) {
        if (f.severity == Severity::Error) level = 2;
        else if (f.severity == Severity::Warning) level = std::max(level, 1);
    }
    return level;
}

QString countText(const std::vector<Finding>& findings)
{
    int errors = 0, warnings = 0;
    for (const auto& f : findings) {
        errors += f.severity == Severity::Error;
        warnings += f.severity == Severity::Warning;
    }
    if (errors == 0 && warnings == 0) return QObject::tr("no problems");
    QStringList parts;
    if (errors) parts << QObject::tr("%n error(s)", nullptr, errors);
    if (warnings) parts << QObject::tr("%n warning(s)", nullptr, warnings);
    return parts.join(", ");
}

} // namespace

DiagnosticsPanel::DiagnosticsPanel(ConfigDocument* document, QWidget* parent) : QWidget(parent), m_document(document)
{
    setAcceptDrops(true);
    m_summary = plainLabel(this);
    m_summary->setWordWrap(true);

    m_tree = new QTreeWidget(this);
    m_tree->setHeaderLabels({tr("Finding"), tr("Kind")});
    m_tree->setRootIsDecorated(true);
    m_tree->header()->setSectionResizeMode(0, QHeaderView::Stretch);
    m_tree->header()->setSectionResizeMode(1, QHeaderView::ResizeToContents);
    m_tree->header()->setStretchLastSection(false);
    m_tree->setAccessibleName(tr("Findings"));

    m_details = new QTextBrowser(this);
    m_details->setOpenLinks(false);
    m_apply = new QPushButton(tr("&Apply fix"), this);
    m_apply->setEnabled(false);
    m_apply->setToolTip(tr("Edit the config as the selected finding's automatic fix says (Ctrl+Z in the JSON editor undoes it)"));

    m_paste = new QPlainTextEdit(this);
    m_paste->setPlaceholderText(tr("Paste an error message, a traceback or a training log here, or drop a log file "
                                   "on this panel, then press Explain (Ctrl+Return)."));
    m_paste->setLineWrapMode(QPlainTextEdit::NoWrap);
    m_explain = new QPushButton(tr("&Explain"), this);
    m_explain->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_Return));
    m_openLog = new QPushButton(tr("Open &log…"), this);

    auto* detailsBox = new QWidget(this);
    auto* detailsLayout = new QVBoxLayout(detailsBox);
    detailsLayout->setContentsMargins(0, 0, 0, 0);
    detailsLayout->addWidget(m_details, 1);
    auto* applyRow = new QHBoxLayout;
    applyRow->addStretch(1);
    applyRow->addWidget(m_apply);
    detailsLayout->addLayout(applyRow);

    auto* pasteBox = new QWidget(this);
    auto* pasteLayout = new QVBoxLayout(pasteBox);
    pasteLayout->setContentsMargins(0, 0, 0, 0);
    pasteLayout->addWidget(plainLabel(this, tr("Explain a failure")));
    pasteLayout->addWidget(m_paste, 1);
    auto* pasteRow = new QHBoxLayout;
    pasteRow->addWidget(m_openLog);
    pasteRow->addStretch(1);
    pasteRow->addWidget(m_explain);
    pasteLayout->addLayout(pasteRow);

    auto* right = new QSplitter(Qt::Vertical, this);
    right->addWidget(detailsBox);
    right->addWidget(pasteBox);
    right->setStretchFactor(0, 3);
    right->setStretchFactor(1, 2);
    auto* split = new QSplitter(Qt::Horizontal, this);
    split->addWidget(m_tree);
    split->addWidget(right);
    split->setStretchFactor(0, 1);
    split->setStretchFactor(1, 1);

    auto* layout = new QVBoxLayout(this);
    layout->addWidget(m_summary);
    layout->addWidget(split, 1);

    m_debounce.setSingleShot(true);
    m_debounce.setInterval(250);
    connect(&m_debounce, &QTimer::timeout, this, &DiagnosticsPanel::startPreflight);
    connect(&m_watcher, &QFutureWatcher<Result>::finished, this, &DiagnosticsPanel::onPreflightDone);
    connect(&m_explainWatcher, &QFutureWatcher<std::vector<Finding>>::finished, this, &DiagnosticsPanel::onExplained);
    connect(m_document, &ConfigDocument::changed, this, &DiagnosticsPanel::schedulePreflight);
    connect(m_tree, &QTreeWidget::currentItemChanged, this, &DiagnosticsPanel::showSelected);
    connect(m_apply, &QPushButton::clicked, this, &DiagnosticsPanel::applySelectedFix);
    connect(m_explain, &QPushButton::clicked, this, [this] { explainText(m_paste->toPlainText(), tr("pasted text")); });
    connect(m_openLog, &QPushButton::clicked, this, [this] {
        const QString path = QFileDialog::getOpenFileName(this, tr("Explain a log file"));
        QString error;
        if (!path.isEmpty() && !explainFile(path, &error)) plainWarning(this, tr("Explain a log file"), error);
    });
    rebuild();
    schedulePreflight();
}

DiagnosticsPanel::~DiagnosticsPanel()
{
    m_watcher.waitForFinished();
    m_explainWatcher.waitForFinished();
}

void DiagnosticsPanel::setTarget(const GpuTarget& target)
{
    m_target = target;
    m_hasTarget = true;
    schedulePreflight();
}

void DiagnosticsPanel::schedulePreflight() { m_debounce.start(); }

void DiagnosticsPanel::startPreflight()
{
    if (m_checking) {
        m_pending = true; // one more pass once this one is done
        return;
    }
    m_checking = true;
    const std::optional<RunConfig> config = m_document->config();
    const std::vector<ConfigIssue> issues = m_document->issues();
    const std::optional<GpuTarget> target = m_hasTarget ? std::optional<GpuTarget>(m_target) : std::nullopt;
    m_watcher.setFuture(QtConcurrent::run([config, issues, target, local = m_local] {
        Result r;
        // The driver and LibTorch are asked once, not on every edit.
        r.local = local ? *local : localMachine();
        if (!config) {
            r.planned = issues.empty() ? std::vector<Finding>{} : configIssueFindings(issues);
            r.launch = r.planned;
            return r;
        }
        if (target) {
            PreflightTarget t;
            t.gpu = target;
            r.planned = runPreflight(*config, t);
        }
        r.launch = launchPreflight(*config, r.local);
        return r;
    }));
}

void DiagnosticsPanel::onPreflightDone()
{
    m_checking = false;
    Result r = m_watcher.result();
    m_local = r.local;
    m_planned = std::move(r.planned);
    m_launch = std::move(r.launch);
    rebuild();
    const int level = levelOf(m_launch);
    QString text = tr("Preflight: %1").arg(countText(m_launch));
    for (const auto& f : m_launch) {
        if (f.severity == Severity::Error || (level == 1 && f.severity == Severity::Warning)) {
            text += QStringLiteral(" — ") + QString::fromStdString(f.title);
            break;
        }
    }
    Q_EMIT launchVerdictChanged(text, level);
    if (m_pending) {
        m_pending = false;
        startPreflight();
    }
}

void DiagnosticsPanel::waitForPreflight()
{
    while (m_debounce.isActive() || m_checking || m_pending) {
        QEventLoop loop;
        QTimer::singleShot(10, &loop, &QEventLoop::quit);
        loop.exec();
    }
}

void DiagnosticsPanel::waitForExplanation()
{
    while (m_explaining) {
        QEventLoop loop;
        QTimer::singleShot(10, &loop, &QEventLoop::quit);
        loop.exec();
    }
}

void DiagnosticsPanel::showFailure(qint64 runId, const std::vector<Finding>& findings)
{
    m_failureRun = runId;
    m_failure = findings;
    rebuild();
    if (!m_failure.empty()) selectKind(QString::fromStdString(m_failure.front().kind));
}

void DiagnosticsPanel::explainText(const QString& text, const QString& source)
{
    m_explainWatcher.waitForFinished(); // one explanation at a time; the newest wins
    m_explainedSource = source;
    m_explaining = true;
    m_explain->setEnabled(false);
    m_explain->setText(tr("Explaining…"));
    m_explainWatcher.setFuture(
        QtConcurrent::run([text = text.toStdString()] { return ErrorExplainer::bundled().explain(text); }));
}

void DiagnosticsPanel::onExplained()
{
    m_explaining = false;
    m_explained = m_explainWatcher.result();
    m_explain->setEnabled(true);
    m_explain->setText(tr("&Explain"));
    rebuild();
    // Select the primary finding of the explained group.
    for (int i = 0; i < m_tree->topLevelItemCount(); ++i) {
        auto* group = m_tree->topLevelItem(i);
        if (group->data(0, kGroupRole).toInt() == Explained && group->childCount() > 0) {
            m_tree->setCurrentItem(group->child(0));
        }
    }
}

bool DiagnosticsPanel::explainFile(const QString& path, QString* error)
{
    QString text;
    try {
        // A long log: its end holds the failure.
        text = QString::fromStdString(readTextTail(QFile::encodeName(path).toStdString()));
    } catch (const std::exception& e) {
        if (error) *error = QString::fromStdString(e.what());
        return false;
    }
    m_paste->setPlainText(text.size() > 200000 ? text.right(200000) : text);
    explainText(text, QFileInfo(path).fileName());
    return true;
}

void DiagnosticsPanel::rebuild()
{
    const Finding* previous = selectedFinding();
    const std::string previousKind = previous ? previous->kind : std::string();
    m_tree->clear();
    const auto addGroup = [&](Group group, const QString& title, const std::vector<Finding>& findings) {
        auto* top = new QTreeWidgetItem(m_tree, {title + QStringLiteral(" — ") + countText(findings)});
        top->setData(0, kGroupRole, group);
        top->setData(0, kIndexRole, -1);
        top->setFirstColumnSpanned(false);
        QFont bold = top->font(0);
        bold.setBold(true);
        top->setFont(0, bold);
        for (std::size_t i = 0; i < findings.size(); ++i) {
            const auto& f = findings[i];
            auto* item = new QTreeWidgetItem(top, {QString::fromStdString(f.title), QString::fromStdString(f.kind)});
            item->setIcon(0, severityIcon(this, f.severity));
            item->setToolTip(0, QString::fromStdString(f.cause));
            item->setData(0, kGroupRole, group);
            item->setData(0, kIndexRole, static_cast<int>(i));
        }
        top->setExpanded(true);
    };
    if (m_hasTarget) addGroup(Planned, tr("Preflight for %1").arg(QString::fromStdString(m_target.label())), m_planned);
    addGroup(Launch, tr("Preflight for a launch on this machine"), m_launch);
    if (m_failureRun > 0) addGroup(Failure, tr("Run %1 failed").arg(m_failureRun), m_failure);
    if (!m_explainedSource.isEmpty()) addGroup(Explained, tr("Explained: %1").arg(m_explainedSource), m_explained);
    m_summary->setText(tr("Preflight checks the config against the target GPU (%1) and this machine as you edit it. "
                          "Select a finding for its cause and fix.")
                           .arg(m_hasTarget ? QString::fromStdString(m_target.label()) : tr("none chosen")));
    if (!previousKind.empty()) selectKind(QString::fromStdString(previousKind));
    showSelected();
}

const Finding* DiagnosticsPanel::selectedFinding() const
{
    const auto* item = m_tree->currentItem();
    if (!item) return nullptr;
    const int index = item->data(0, kIndexRole).toInt();
    if (index < 0) return nullptr;
    const std::vector<Finding>* list = nullptr;
    switch (item->data(0, kGroupRole).toInt()) {
    case Planned: list = &m_planned; break;
    case Launch: list = &m_launch; break;
    case Failure: list = &m_failure; break;
    default: list = &m_explained; break;
    }
    return static_cast<std::size_t>(index) < list->size() ? &(*list)[static_cast<std::size_t>(index)] : nullptr;
}

bool DiagnosticsPanel::selectKind(const QString& kind)
{
    for (int i = 0; i < m_tree->topLevelItemCount(); ++i) {
        auto* group = m_tree->topLevelItem(i);
        for (int j = 0; j < group->childCount(); ++j) {
            if (group->child(j)->text(1) == kind) {
                m_tree->setCurrentItem(group->child(j));
                return true;
            }
        }
    }
    return false;
}

void DiagnosticsPanel::showSelected()
{
    const Finding* f = selectedFinding();
    m_apply->setEnabled(f && !f->autoFix.empty());
    m_apply->setText(f && !f->autoFix.empty() ? tr("&Apply fix: %1").arg(QString::fromStdString(f->autoFixLabel))
                                              : tr("&Apply fix"));
    if (!f) {
        m_details->setHtml(tr("<p>Select a finding to see its cause and fix.</p>"));
        return;
    }
    QString html = QStringLiteral("<h3>%1</h3>").arg(esc(f->title));
    html += tr("<p><b>Severity:</b> %1 &nbsp; <b>Kind:</b> %2</p>").arg(severityName(f->severity), esc(f->kind));
    html += tr("<p><b>Cause.</b> %1</p>").arg(esc(f->cause));
    html += tr("<p><b>Fix.</b> %1</p>").arg(esc(f->fix));
    if (!f->autoFix.empty()) {
        QStringList changes;
        for (const auto& c : f->autoFix) changes << esc(c.path + " = " + c.valueJson);
        html += tr("<p><b>Automatic fix:</b> %1</p>").arg(changes.join(", "));
    }
    if (!f->text.empty() || !f->numbers.empty()) {
        html += tr("<p><b>Details</b></p><ul>");
        for (const auto& [k, v] : f->text) html += QStringLiteral("<li>%1: %2</li>").arg(esc(k), esc(v));
        for (const auto& [k, v] : f->numbers) {
            QString value = QString::number(v, 'f', v == static_cast<double>(static_cast<long long>(v)) ? 0 : 3);
            if (QString::fromStdString(k).endsWith("_bytes")) value += tr(" bytes (%1 GiB)").arg(v / 1073741824.0, 0, 'f', 2);
            html += QStringLiteral("<li>%1: %2</li>").arg(esc(k), value);
        }
        html += QStringLiteral("</ul>");
    }
    if (const auto* kind = ErrorExplainer::bundled().kind(f->kind)) {
        html += tr("<hr><p><b>What %1 means.</b> %2</p><p><b>Usual cause.</b> %3</p><p><b>Usual fix.</b> %4</p>")
                    .arg(esc(kind->kind), esc(kind->meaning), esc(kind->cause), esc(kind->fix));
    }
    m_details->setHtml(html);
}

void DiagnosticsPanel::applySelectedFix()
{
    const Finding* f = selectedFinding();
    if (!f || f->autoFix.empty()) return;
    std::vector<std::pair<QString, QJsonValue>> values;
    for (const auto& c : f->autoFix) {
        const auto doc = QJsonDocument::fromJson(QByteArray::fromStdString("[" + c.valueJson + "]"));
        values.emplace_back(QString::fromStdString(c.path), doc.array().at(0));
    }
    m_document->setValues(values);
}

void DiagnosticsPanel::dragEnterEvent(QDragEnterEvent* event)
{
    if (event->mimeData()->hasUrls() || event->mimeData()->hasText()) event->acceptProposedAction();
}

void DiagnosticsPanel::dropEvent(QDropEvent* event)
{
    const QMimeData* mime = event->mimeData();
    if (mime->hasUrls() && mime->urls().front().isLocalFile()) {
        QString error;
        if (!explainFile(mime->urls().front().toLocalFile(), &error)) plainWarning(this, tr("Explain a log file"), error);
    } else if (mime->hasText()) {
        m_paste->setPlainText(mime->text());
        explainText(mime->text(), tr("dropped text"));
    }
    event->acceptProposedAction();
}

} // namespace tb::ui
