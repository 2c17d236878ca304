#include "DiagnosticsPanel.h"

#include "FileDialogs.h"
#include "GpuTargetModel.h"
#include "StepDeriver.h"

#include <QCheckBox>
#include <QComboBox>
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
#include <QShortcut>
#include <QSplitter>
#include <QStyle>
#include <QTabWidget>
#include <QTableWidget>
#include <QTextBrowser>
#include <QTreeWidget>
#include <QVBoxLayout>
#include <algorithm>
#include <QtConcurrent/QtConcurrentRun>

#include "ConfigDocument.h"
#include "PlainText.h"
#include "common/ByteSize.h"
#include "diagnose/ErrorExplainer.h"
#include "diagnose/Preflight.h"
#include "run/RunSession.h"

namespace tb::ui {

namespace {

enum Group { Planned, Launch, Failure, Explained };
constexpr int kGroupRole = Qt::UserRole;
constexpr int kIndexRole = Qt::UserRole + 1;
constexpr int kKindRole = Qt::UserRole + 2;

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
    // No translator is loaded, so %n's plural forms would read "1 error(s)".
    if (errors) parts << (errors == 1 ? QObject::tr("1 error") : QObject::tr("%1 errors").arg(errors));
    if (warnings) parts << (warnings == 1 ? QObject::tr("1 warning") : QObject::tr("%1 warnings").arg(warnings));
    return parts.join(", ");
}

} // namespace

DiagnosticsPanel::DiagnosticsPanel(ConfigDocument* document, QWidget* parent) : QWidget(parent), m_document(document)
{
    setAcceptDrops(true);
    m_summary = plainLabel(this);
    m_summary->setWordWrap(true);

    m_tree = new QTreeWidget(this);
    // One column: the title, with the kind in its tooltip and the details (a
    // kind column took the width the titles need). A title too long for the
    // column is elided; its tooltip has it whole.
    m_tree->setHeaderLabels({tr("Finding")});
    m_tree->setRootIsDecorated(true);
    m_tree->header()->setSectionResizeMode(0, QHeaderView::Stretch);
    m_tree->setMinimumWidth(240);
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
    m_explain->setToolTip(tr("Explain the pasted text (Ctrl+Return)"));
    // Ctrl+Return lives on the panel, not on the button: a button's shortcut is
    // replaced by its mnemonic (Alt+E) whenever its text is set again, which
    // happens after every explanation.
    for (const auto key : {Qt::Key_Return, Qt::Key_Enter}) {
        auto* shortcut = new QShortcut(QKeySequence(Qt::CTRL | key), this);
        shortcut->setContext(Qt::WidgetWithChildrenShortcut);
        connect(shortcut, &QShortcut::activated, m_explain, [this] {
            if (m_explain->isEnabled()) m_explain->click();
        });
    }
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
    pasteLayout->addWidget(m_paste, 1);
    auto* pasteRow = new QHBoxLayout;
    pasteRow->addWidget(m_openLog);
    pasteRow->addStretch(1);
    pasteRow->addWidget(m_explain);
    pasteLayout->addLayout(pasteRow);

    QWidget* auditBox = buildAuditTab();

    m_tools = new QTabWidget(this);
    m_tools->addTab(pasteBox, tr("Explain a failure"));
    m_tools->addTab(auditBox, tr("Device audit"));

    auto* right = new QSplitter(Qt::Vertical, this);
    right->addWidget(detailsBox);
    right->addWidget(m_tools);
    right->setStretchFactor(0, 3);
    right->setStretchFactor(1, 2);
    auto* split = new QSplitter(Qt::Horizontal, this);
    split->addWidget(m_tree);
    split->addWidget(right);
    split->setStretchFactor(0, 2);
    split->setStretchFactor(1, 3);
    split->setSizes({400, 600}); // the findings get 40% of the width from the start

    auto* layout = new QVBoxLayout(this);
    layout->addWidget(m_summary);
    layout->addWidget(split, 1);

    m_deriver = new StepDeriver(this); // until the window gives its own
    connect(m_deriver, &StepDeriver::changed, this, &DiagnosticsPanel::derivedChanged);
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
        const QString path = openFileName(this, tr("Explain a log file"));
        QString error;
        if (!path.isEmpty() && !explainFile(path, &error)) plainWarning(this, tr("Explain a log file"), error);
    });
    connect(&m_auditWatcher, &QFutureWatcher<AuditResult>::finished, this, &DiagnosticsPanel::onAudited);
    connect(m_auditButton, &QPushButton::clicked, this, [this] {
        const QVariant data = m_auditDevice->currentData();
        // A typed device has no data (or text that differs from the item's).
        const bool typed = m_auditDevice->currentIndex() < 0 || m_auditDevice->currentText() != m_auditDevice->itemText(m_auditDevice->currentIndex());
        runAudit(typed ? m_auditDevice->currentText().trimmed() : data.toString());
    });
    connect(m_onlyMisplaced, &QCheckBox::toggled, this, &DiagnosticsPanel::fillAuditTable);
    connect(m_auditTable, &QTableWidget::currentCellChanged, this, [this](int row) {
        // The selected tensor's whole cause in the details pane.
        if (row < 0 || !m_auditTable->item(row, 0)) return;
        const auto cell = [&](int c) { return m_auditTable->item(row, c)->text().toHtmlEscaped(); };
        m_apply->setEnabled(false);
        m_details->setHtml(QStringLiteral("<h3>%1</h3><p>%2, %3: on <b>%4</b>, expected on <b>%5</b>.</p><p>%6</p>")
                               .arg(cell(0), cell(1), cell(2), cell(3), cell(4), cell(5)));
    });
    connect(m_document, &ConfigDocument::changed, this, [this] {
        if (m_audit) m_auditSummary->setText(tr("The config changed since this audit; audit again."));
    });
    rebuild();
    schedulePreflight();
}

QWidget* DiagnosticsPanel::buildAuditTab()
{
    // The device audit: every tensor a step touches, against the run's device.
    m_auditDevice = new QComboBox(this);
    m_auditDevice->setEditable(true);
    m_auditDevice->addItem(tr("the config's device"), QString());
    m_auditDevice->addItem(QStringLiteral("cuda:0"), QStringLiteral("cuda:0"));
    m_auditDevice->addItem(QStringLiteral("cpu"), QStringLiteral("cpu"));
    m_auditDevice->setToolTip(tr("The device the run will train on. A GPU this machine lacks is judged: parameters "
                                 "and buffers follow the model there, anything else stays where it is."));
    m_auditButton = new QPushButton(tr("A&udit"), this);
    m_auditButton->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_A));
    m_auditButton->setToolTip(tr("Build the model the config describes and check every tensor (Ctrl+Shift+A)"));
    m_onlyMisplaced = new QCheckBox(tr("Only &misplaced"), this);
    m_onlyMisplaced->setChecked(true);
    m_auditSummary = plainLabel(this, tr("Audit the model for the device it will train on: parameters, buffers, a "
                                         "TorchScript model's tensor attributes and the optimizer state."));
    m_auditSummary->setWordWrap(true);
    m_auditTable = new QTableWidget(0, 6, this);
    m_auditTable->setHorizontalHeaderLabels({tr("Tensor"), tr("Kind"), tr("Dtype"), tr("Device"), tr("Expected"),
                                             tr("Likely cause")});
    m_auditTable->setEditTriggers(QAbstractItemView::NoEditTriggers);
    m_auditTable->setSelectionBehavior(QAbstractItemView::SelectRows);
    m_auditTable->verticalHeader()->setVisible(false);
    m_auditTable->horizontalHeader()->setStretchLastSection(true);
    m_auditTable->setWordWrap(false);
    m_auditTable->setTextElideMode(Qt::ElideRight);
    m_auditTable->setAccessibleName(tr("Device audit"));
    auto* auditBox = new QWidget(this);
    auto* auditLayout = new QVBoxLayout(auditBox);
    auditLayout->setContentsMargins(0, 0, 0, 0);
    auto* auditRow = new QHBoxLayout;
    auditRow->addWidget(plainLabel(this, tr("Device:")));
    auditRow->addWidget(m_auditDevice);
    auditRow->addWidget(m_auditButton);
    auditRow->addStretch(1);
    auditRow->addWidget(m_onlyMisplaced);
    auditLayout->addLayout(auditRow);
    auditLayout->addWidget(m_auditSummary);
    auditLayout->addWidget(m_auditTable, 1);
    return auditBox;
}

void DiagnosticsPanel::runAudit(const QString& device)
{
    if (m_auditing) return;
    const std::optional<RunConfig> config = m_document->config();
    if (!config) {
        m_auditSummary->setText(tr("The config is not valid yet; the Findings list says what to correct."));
        return;
    }
    // The box shows the device audited, whoever asked.
    const int known = device.isEmpty() ? 0 : m_auditDevice->findData(device);
    if (known >= 0) m_auditDevice->setCurrentIndex(known);
    else m_auditDevice->setEditText(device);
    m_auditing = true;
    m_auditButton->setEnabled(false);
    m_auditSummary->setText(tr("Building the model and auditing…"));
    m_auditWatcher.setFuture(QtConcurrent::run([config, device = device.toStdString()] {
        AuditResult r;
        try {
            r.report = auditDevices(*config, device);
        } catch (const std::exception& e) {
            r.error = QString::fromStdString(e.what());
        }
        return r;
    }));
}

void DiagnosticsPanel::onAudited()
{
    m_auditing = false;
    m_auditButton->setEnabled(true);
    const AuditResult r = m_auditWatcher.result();
    if (!r.report) {
        m_audit.reset();
        m_auditTable->setRowCount(0);
        m_auditSummary->setText(tr("The audit could not run: %1").arg(r.error));
        return;
    }
    m_audit = r.report;
    const auto& a = *m_audit;
    const QString target = QString::fromStdString(a.target);
    QString text = a.flagged() == 0
        ? tr("%1: all %n tensor(s) on %2.", nullptr, static_cast<int>(a.tensors.size())).arg(QString::fromStdString(a.model), target)
        : tr("%1: %2 of %3 tensors will not be on %4.")
              .arg(QString::fromStdString(a.model))
              .arg(a.flagged())
              .arg(a.tensors.size())
              .arg(target);
    text += ' ';
    text += a.moved ? tr("The model was moved to %1 and checked there.").arg(target)
                    : tr("%1 is not on this machine: judged as the trainer will move the model.").arg(target);
    m_auditSummary->setText(text);
    fillAuditTable();
}

void DiagnosticsPanel::fillAuditTable()
{
    m_auditTable->setRowCount(0);
    if (!m_audit) return;
    const bool only = m_onlyMisplaced->isChecked();
    const QIcon wrong = style()->standardIcon(QStyle::SP_MessageBoxWarning);
    for (const auto& e : m_audit->tensors) {
        if (only && e.ok) continue;
        const int row = m_auditTable->rowCount();
        m_auditTable->insertRow(row);
        const QStringList cells{QString::fromStdString(e.path), QString::fromStdString(e.kind), QString::fromStdString(e.dtype),
                                QString::fromStdString(e.device), QString::fromStdString(e.expectedDevice),
                                e.ok ? tr("ok") : QString::fromStdString(e.cause)};
        for (int c = 0; c < cells.size(); ++c) {
            auto* item = new QTableWidgetItem(cells[c]);
            if (c == 5 && !e.ok) item->setToolTip(cells[c]);
            if (c == 0 && !e.ok) item->setIcon(wrong);
            m_auditTable->setItem(row, c, item);
        }
    }
    // The cause takes what is left, elided; its tooltip has it whole.
    for (int c = 0; c < 5; ++c) m_auditTable->resizeColumnToContents(c);
}

void DiagnosticsPanel::waitForAudit()
{
    while (m_auditing) {
        QEventLoop loop;
        QTimer::singleShot(10, &loop, &QEventLoop::quit);
        loop.exec();
    }
}

DiagnosticsPanel::~DiagnosticsPanel()
{
    // A deriver the window shares may outlive the panel: its signals must not reach it.
    if (m_deriver) m_deriver->disconnect(this);
    m_watcher.waitForFinished();
    m_explainWatcher.waitForFinished();
    m_auditWatcher.waitForFinished();
}

void DiagnosticsPanel::setTargetModel(GpuTargetModel* targets)
{
    m_targets = targets;
    connect(targets, &GpuTargetModel::changed, this, &DiagnosticsPanel::schedulePreflight);
    schedulePreflight();
}

void DiagnosticsPanel::schedulePreflight() { m_debounce.start(); }

void DiagnosticsPanel::setStepDeriver(StepDeriver* deriver)
{
    if (m_deriver) m_deriver->disconnect(this);
    m_deriver = deriver;
    connect(m_deriver, &StepDeriver::changed, this, &DiagnosticsPanel::derivedChanged);
    schedulePreflight();
}

void DiagnosticsPanel::derivedChanged()
{
    if (m_awaited.empty()) return;
    // A plan preflight waited for is in (or could not be derived): check again.
    const bool settled = std::any_of(m_awaited.begin(), m_awaited.end(), [this](const std::string& key) {
        return m_deriver->plan(key) || !m_deriver->error(key).isEmpty();
    });
    if (settled) {
        m_awaited.clear();
        schedulePreflight();
    } else {
        showDeriving();
    }
}

void DiagnosticsPanel::showDeriving()
{
    QString text = tr("Preflight checks the config against the target GPU (%1) and this machine as you edit it. "
                      "Select a finding for its cause and fix.")
                       .arg(m_targets ? QString::fromStdString(m_targets->target().label()) : tr("none chosen"));
    if (!m_awaited.empty()) {
        const bool tracing = m_deriver->running() && std::find(m_awaited.begin(), m_awaited.end(), m_deriver->runningKey()) != m_awaited.end();
        text += QStringLiteral("\n")
            + tr("Deriving a plan from the model's own training step on this CPU (mixed precision, LoRA, a "
                 "quantized base, or the NF4 alternative of a LoRA run): %1…")
                  .arg(tracing && !m_deriver->progress().isEmpty() ? m_deriver->progress() : tr("waiting"));
    }
    m_summary->setText(text);
}

void DiagnosticsPanel::waitForDerivedPreflight()
{
    do {
        waitForPreflight();
        while (!m_awaited.empty()) {
            QEventLoop loop;
            QTimer::singleShot(10, &loop, &QEventLoop::quit);
            loop.exec();
        }
    } while (m_debounce.isActive() || m_checking || m_pending);
}

void DiagnosticsPanel::startPreflight()
{
    if (m_checking) {
        m_pending = true; // one more pass once this one is done
        return;
    }
    m_checking = true;
    const std::optional<RunConfig> config = m_document->config();
    const std::vector<ConfigIssue> issues = m_document->issues();
    const std::optional<GpuTarget> target = m_targets ? std::optional<GpuTarget>(m_targets->target()) : std::nullopt;
    m_watcher.setFuture(QtConcurrent::run([config, issues, target, local = m_local, plans = m_deriver->plans()] {
        Result r;
        // The driver and LibTorch are asked once, not on every edit.
        r.local = local ? *local : localMachine();
        if (!config) {
            r.planned = issues.empty() ? std::vector<Finding>{} : configIssueFindings(issues);
            r.launch = r.planned;
            return r;
        }
        // Plans derived from a config's own step come from the deriver (a
        // process of its own, seconds): those it lacks are asked for, and
        // preflight runs again when they are in.
        const auto fromDeriver = [&plans, &r](const RunConfig& traced) -> std::shared_ptr<const DerivedStep> {
            auto standalone = StepDeriver::standalone(traced);
            auto key = StepDeriver::keyFor(standalone);
            const auto it = plans.find(key);
            if (it != plans.end()) return it->second;
            if (std::none_of(r.wanted.begin(), r.wanted.end(), [&](const auto& w) { return w.second == key; })) {
                r.wanted.emplace_back(std::move(standalone), std::move(key));
            }
            return nullptr;
        };
        if (target) {
            PreflightTarget t;
            t.gpu = target;
            t.model = inspectModelFile(*config); // cached while the model file is unchanged
            t.derivePlan = fromDeriver;
            r.planned = runPreflight(*config, t);
        }
        r.launch = launchPreflight(*config, r.local, fromDeriver);
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
    m_awaited.clear();
    bool arrived = false; // a plan this pass lacked came in while it ran: check again with it
    for (auto& [traced, key] : r.wanted) {
        if (m_deriver->plan(key)) {
            arrived = true;
            continue;
        }
        if (!m_deriver->error(key).isEmpty()) continue; // failed: not again
        m_awaited.push_back(key);
        m_deriver->derive(traced);
    }
    if (arrived) m_pending = true;
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
    // With the open config, an out-of-memory explanation gains the batch the
    // planner says fits in the memory the message reports (as `explain --config`).
    m_explainWatcher.setFuture(QtConcurrent::run([text = text.toStdString(), config = m_document->config()] {
        return config ? explainFailure(text, &*config, "cuda") : ErrorExplainer::bundled().explain(text);
    }));
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
        const QString text = title + QStringLiteral(" — ") + countText(findings);
        auto* top = new QTreeWidgetItem(m_tree, {text});
        top->setToolTip(0, text);
        top->setData(0, kGroupRole, group);
        top->setData(0, kIndexRole, -1);
        top->setFirstColumnSpanned(false);
        QFont bold = top->font(0);
        bold.setBold(true);
        top->setFont(0, bold);
        for (std::size_t i = 0; i < findings.size(); ++i) {
            const auto& f = findings[i];
            auto* item = new QTreeWidgetItem(top, {QString::fromStdString(f.title)});
            item->setIcon(0, severityIcon(this, f.severity));
            item->setToolTip(0, QString::fromStdString(f.title + "\n" + f.kind + ": " + f.cause));
            item->setData(0, kGroupRole, group);
            item->setData(0, kIndexRole, static_cast<int>(i));
            item->setData(0, kKindRole, QString::fromStdString(f.kind));
        }
        top->setExpanded(true);
    };
    if (m_targets) addGroup(Planned, tr("Preflight for %1").arg(QString::fromStdString(m_targets->target().label())), m_planned);
    addGroup(Launch, tr("Launch on this machine"), m_launch);
    if (m_failureRun > 0) addGroup(Failure, tr("Run %1 failed").arg(m_failureRun), m_failure);
    if (!m_explainedSource.isEmpty()) addGroup(Explained, tr("Explained: %1").arg(m_explainedSource), m_explained);
    showDeriving();
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
            if (group->child(j)->data(0, kKindRole).toString() == kind) {
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
            // In the unit that suits the size: 4.19 MiB free is not "0.00 GiB".
            if (QString::fromStdString(k).endsWith("_bytes")) {
                value = QLocale().toString(static_cast<qlonglong>(v))
                        + tr(" bytes (%1)").arg(QString::fromStdString(byteSizeText(static_cast<std::int64_t>(v))));
            }
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
