#include "common/Percent.h"
#include "FileDialogs.h"
#include "PlainText.h"
#include "HistoryPanel.h"
#include "ExportModelDialog.h"
#include "MetricNames.h"
#include "MetricPlot.h"
#include "QCustomPlotInclude.h"

#include <QBuffer>
#include <QCheckBox>
#include <QComboBox>
#include <QCoreApplication>
#include <QDateTime>
#include <QFile>
#include <QFileInfo>
#include <QDir>
#include <QTextDocument>
#include <QFileDialog>
#include <QFormLayout>
#include <QFutureWatcher>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLabel>
#include <QScrollBar>
#include <QSettings>
#include <QMenu>
#include <QLineEdit>
#include <QPainter>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSaveFile>
#include <QSlider>
#include <QSortFilterProxyModel>
#include <QSplitter>
#include <QTabWidget>
#include <QTableView>
#include <QTableWidget>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrent>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <set>

#include "common/Errors.h"
#include "config/RunConfig.h"
#include "run/RunSession.h"
#include "memory/Estimator.h"
#include "store/Sqlite.h"

namespace tb::ui {
namespace {

// A stable colour per run id (golden-ratio hues): the same run keeps its
// colour whatever else is selected.
QColor runColor(std::int64_t id)
{
    const double hue = std::fmod(static_cast<double>(id) * 0.618033988749895, 1.0);
    return QColor::fromHsvF(static_cast<float>(hue), 0.75f, 0.80f);
}

} // namespace

// ---- HistoryPanel ----

HistoryPanel::HistoryPanel(QWidget* parent) : QWidget(parent)
{
    m_model = new RunTableModel(this);
    m_proxy = new QSortFilterProxyModel(this);
    m_proxy->setSourceModel(m_model);
    m_proxy->setSortRole(RunTableModel::kSortRole);

    m_filter = new QLineEdit(this);
    m_filter->setObjectName("historyFilter");
    m_filter->setClearButtonEnabled(true);
    m_filter->setPlaceholderText(tr("Filter: words, status=failed, tag:baseline, train.batch_size>=16, loss<2.5 … (Enter)"));
    m_filter->setToolTip(tr("Conditions separated by spaces must all hold. Fields: id, name, status, device, precision, "
                            "steps, loss, val_loss, note, tag:NAME, or any config path such as model.type or "
                            "train.batch_size; operators = != < <= > >=; \"quotes\" group words."));
    auto* refreshButton = new QPushButton(tr("Refresh"), this);
    refreshButton->setShortcut(QKeySequence::Refresh);
    m_count = plainLabel(this);
    m_message = plainLabel(this);
    m_message->setStyleSheet("color: #c0392b");
    m_message->setWordWrap(true);
    m_message->hide();
    auto* top = new QHBoxLayout;
    top->addWidget(m_filter, 1);
    top->addWidget(refreshButton);
    top->addWidget(m_count);

    m_table = new QTableView(this);
    m_table->setObjectName("historyTable");
    m_table->setModel(m_proxy);
    m_table->setSortingEnabled(true);
    m_table->sortByColumn(RunTableModel::Id, Qt::DescendingOrder);
    m_table->setSelectionBehavior(QAbstractItemView::SelectRows);
    m_table->setSelectionMode(QAbstractItemView::ExtendedSelection);
    m_table->verticalHeader()->hide();
    m_table->verticalHeader()->setDefaultSectionSize(m_table->fontMetrics().height() + 6);
    m_table->horizontalHeader()->setStretchLastSection(true);
    m_table->setAlternatingRowColors(true);
    m_table->setWordWrap(false);
    setUpColumns();

    QWidget* plots = buildOverlays();

    // Config diff.
    m_diff = new QTableWidget(this);
    m_diff->setObjectName("historyDiff");
    m_diff->setEditTriggers(QAbstractItemView::NoEditTriggers);
    m_diff->horizontalHeader()->setStretchLastSection(true);
    m_diff->verticalHeader()->hide();

    QWidget* details = buildDetails();

    m_tabs = new QTabWidget(this);
    m_tabs->addTab(plots, tr("Curves"));
    m_tabs->addTab(m_diff, tr("Config diff"));
    m_tabs->addTab(details, tr("Details"));

    auto* split = new QSplitter(Qt::Vertical, this);
    split->addWidget(m_table);
    split->addWidget(m_tabs);
    split->setStretchFactor(0, 2);
    split->setStretchFactor(1, 3);
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(4, 4, 4, 4);
    layout->addLayout(top);
    layout->addWidget(m_message);
    layout->addWidget(split, 1);

    connect(m_filter, &QLineEdit::returnPressed, this, [this] { refresh(); });
    connect(refreshButton, &QPushButton::clicked, this, [this] { refresh(); });
    connect(m_table->selectionModel(), &QItemSelectionModel::selectionChanged, this, &HistoryPanel::selectionChanged);
    // The config columns chosen in an earlier session (fields this version still has).
    std::vector<std::string> saved;
    const auto& fields = configFieldPaths();
    for (const QString& p : QSettings().value("history/configColumns").toStringList()) {
        if (std::find(fields.begin(), fields.end(), p.toStdString()) != fields.end()) saved.push_back(p.toStdString());
    }
    m_model->setConfigColumns(saved);
    connect(m_byTime, &QCheckBox::toggled, this, &HistoryPanel::showOverlay);
    connect(m_logY, &QCheckBox::toggled, this, [this](bool log) { m_lossPlot->setLogScale(log); });
    connect(m_lineage, &QCheckBox::toggled, this, &HistoryPanel::showOverlay);
    connect(m_smoothing, &QSlider::valueChanged, this, &HistoryPanel::showOverlay);
    connect(m_metric, &QComboBox::currentIndexChanged, this, [this] {
        if (!m_fillingMetrics) showOverlay();
    });
    connect(m_resume, &QPushButton::clicked, this, [this] {
        if (const auto* r = currentRun()) Q_EMIT resumeRequested(r->id);
    });
    connect(m_attach, &QPushButton::clicked, this, [this] {
        if (const auto* r = currentRun(); r && r->origin.runId != 0) {
            Q_EMIT attachRequested(QString::fromStdString(r->origin.label), r->origin.runId);
        }
    });
    connect(m_exportConfig, &QPushButton::clicked, this, [this] {
        const auto* r = currentRun();
        if (!r) return;
        const QString path = saveFileName(this, tr("Export config"), QString::fromStdString(r->name) + ".json",
                                          tr("Configs (*.json)"));
        if (!path.isEmpty()) exportConfigAndReport(path);
    });
    connect(m_exportModel, &QPushButton::clicked, this, [this] { openExportModel(); });
    connect(m_chat, &QPushButton::clicked, this, [this] {
        QList<qint64> ids;
        for (const auto id : selectedRunIds()) ids.append(id);
        Q_EMIT chatRequested(ids);
    });
    connect(m_report, &QPushButton::clicked, this, [this] {
        const auto ids = selectedRunIds();
        if (ids.empty()) return;
        const QString path = saveFileName(this, tr("Report"), ids.size() == 1 ? QString("run-%1.html").arg(ids.front())
                                                                              : QString("runs-%1.html").arg(ids.size()),
                                          tr("HTML (*.html)"));
        if (path.isEmpty()) return;
        QString error;
        if (!writeReport(path, &error)) {
            plainWarning(this, tr("Report"), error);
            return;
        }
        Q_EMIT exported(tr("Wrote the report of %n run(s) to %1", nullptr, static_cast<int>(ids.size())).arg(path));
    });
    connect(m_save, &QPushButton::clicked, this, [this] { saveDetails(m_name->text(), m_tags->text(), m_note->toPlainText()); });
    connect(m_delete, &QPushButton::clicked, this, &HistoryPanel::askDelete);
    connect(m_export, &QPushButton::clicked, this, &HistoryPanel::askExport);
    connect(m_open, &QPushButton::clicked, this, [this] {
        if (const auto* r = currentRun()) {
            Q_EMIT openConfigRequested(QString::fromStdString(r->configJson), QString::fromStdString(r->name));
        }
    });
    selectionChanged();
}

QWidget* HistoryPanel::buildOverlays()
{
    m_lossPlot = new OverlayPlot(tr("loss"), this);
    m_memoryPlot = new OverlayPlot(tr("peak tensor memory (MiB)"), this);
    m_memoryPlot->setZeroBased(true);
    m_metric = new QComboBox(this);
    m_metric->setAccessibleName(tr("Metric"));
    m_metric->setToolTip(tr("The metric the right-hand plot overlays: any the selected runs store (learning rate, "
                            "gradient norm, tokens/s, step time, validation loss, memory, …)"));
    m_metric->setSizeAdjustPolicy(QComboBox::AdjustToContents);
    m_byTime = new QCheckBox(tr("by elapsed time"), this);
    m_logY = new QCheckBox(tr("log scale"), this);
    m_lineage = new QCheckBox(tr("follow lineage"), this);
    m_lineage->setToolTip(tr("Also draw the runs each selected run started from (train.init_from), back to the first"));
    m_smoothing = new QSlider(Qt::Horizontal, this);
    m_smoothing->setRange(0, 99);
    m_smoothing->setValue(0);
    m_smoothing->setMaximumWidth(140);
    m_smoothing->setToolTip(tr("Smoothing of the loss curves (exponential moving average)"));
    auto* plots = new QWidget(this);
    auto* plotLayout = new QVBoxLayout(plots);
    plotLayout->setContentsMargins(0, 0, 0, 0);
    auto* plotOptions = new QHBoxLayout;
    plotOptions->addWidget(new QLabel(tr("Selected runs:"), this));
    plotOptions->addWidget(m_byTime);
    plotOptions->addWidget(m_logY);
    plotOptions->addWidget(m_lineage);
    plotOptions->addWidget(new QLabel(tr("smoothing"), this));
    plotOptions->addWidget(m_smoothing);
    plotOptions->addWidget(new QLabel(tr("right: "), this));
    plotOptions->addWidget(m_metric);
    plotOptions->addStretch(1);
    plotOptions->addWidget(new QLabel(tr("click a legend entry to hide its curve"), this));
    plotLayout->addLayout(plotOptions);
    auto* plotSplit = new QSplitter(Qt::Horizontal, plots);
    plotSplit->addWidget(m_lossPlot);
    plotSplit->addWidget(m_memoryPlot);
    plotLayout->addWidget(plotSplit, 1);
    return plots;
}

QWidget* HistoryPanel::buildDetails()
{
    auto* details = new QWidget(this);
    auto* form = new QFormLayout(details);
    m_name = new QLineEdit(details);
    m_tags = new QLineEdit(details);
    m_tags->setPlaceholderText(tr("comma-separated, e.g. baseline, lr-sweep"));
    m_note = new QPlainTextEdit(details);
    m_note->setPlaceholderText(tr("What this run was for, what you learned"));
    m_save = new QPushButton(tr("&Save name, tags and note"), details);
    form->addRow(tr("Name"), m_name);
    form->addRow(tr("Tags"), m_tags);
    form->addRow(tr("Note"), m_note);
    auto* actions = new QHBoxLayout;
    m_open = new QPushButton(tr("&Open in editor"), details);
    m_open->setToolTip(tr("Load this run's config into the Experiment panel as a new config"));
    m_export = new QPushButton(tr("E&xport CSV…"), details);
    m_export->setToolTip(tr("The selected runs' metrics, one row per (run, step, key)"));
    m_delete = new QPushButton(tr("&Delete…"), details);
    m_resume = new QPushButton(tr("&Resume"), details);
    m_resume->setToolTip(tr("Continue a cancelled or interrupted run from its last checkpoint"));
    m_attach = new QPushButton(tr("&Attach"), details);
    m_attach->setToolTip(tr("Watch a run that runs on a host live again, in the Run tab"));
    m_exportConfig = new QPushButton(tr("Export &config…"), details);
    m_exportModel = new QPushButton(tr("Export &model…"), details);
    m_chat = new QPushButton(tr("Cha&t"), details);
    m_report = new QPushButton(tr("Re&port…"), details);
    m_report->setToolTip(tr("The selected runs as one HTML file to send: their plots, how their configs differ, "
                            "notes and final metrics"));
    actions->addWidget(m_save);
    actions->addWidget(m_open);
    actions->addWidget(m_resume);
    actions->addWidget(m_attach);
    actions->addWidget(m_export);
    actions->addWidget(m_exportConfig);
    actions->addWidget(m_exportModel);
    actions->addWidget(m_chat);
    actions->addWidget(m_report);
    actions->addStretch(1);
    actions->addWidget(m_delete);
    form->addRow(actions);
    return details;
}

void HistoryPanel::setDatabasePath(const QString& path)
{
    m_dbPath = path;
    refresh();
}

bool HistoryPanel::setFilter(const QString& filter)
{
    m_filter->setText(filter);
    return refresh();
}

bool HistoryPanel::refresh()
{
    const auto keep = selectedRunIds();
    std::vector<RunRecord> runs;
    try {
        if (!m_dbPath.isEmpty() && std::filesystem::exists(m_dbPath.toStdString())) {
            RunStore store(m_dbPath.toStdString(), RunStore::Mode::ReadOnly);
            runs = store.listRuns(m_filter->text().toStdString());
        }
    } catch (const std::exception& e) {
        m_message->setText(QString::fromStdString(e.what()));
        m_message->show();
        return false;
    }
    m_message->hide();
    // A run left "running" by a killed process already reads "interrupted":
    // the store judges the owner's liveness for read-only views too.
    const int total = static_cast<int>(runs.size());
    m_model->setRuns(std::move(runs));
    m_table->resizeColumnsToContents(); // the rows shown so far (at most one fetch batch)
    m_count->setText(m_filter->text().trimmed().isEmpty() ? tr("%n run(s)", nullptr, total) : tr("%n match(es)", nullptr, total));
    selectRuns(keep);
    return true;
}

void HistoryPanel::selectRuns(const std::vector<std::int64_t>& ids)
{
    QItemSelection selection;
    for (const auto id : ids) {
        const int row = m_model->rowOf(id);
        if (row < 0) continue;
        while (row >= m_model->rowCount()) m_model->fetchMore({}); // bring it into the table
        const auto index = m_proxy->mapFromSource(m_model->index(row, 0));
        selection.select(index, index.siblingAtColumn(RunTableModel::kColumns - 1));
    }
    // One update below, not one from the selection signal and one from here.
    m_selecting = true;
    m_table->selectionModel()->select(selection, QItemSelectionModel::ClearAndSelect);
    m_selecting = false;
    if (!selection.isEmpty()) m_table->scrollTo(selection.indexes().front());
    selectionChanged();
}

std::vector<std::int64_t> HistoryPanel::selectedRunIds() const
{
    std::vector<std::int64_t> ids;
    for (const auto& index : m_table->selectionModel()->selectedRows()) {
        ids.push_back(m_model->run(m_proxy->mapToSource(index).row()).id);
    }
    std::sort(ids.begin(), ids.end());
    return ids;
}

void HistoryPanel::selectionChanged()
{
    if (m_selecting) return;
    // Edits left in the form belong to the run it showed: save them, rather
    // than lose them to the next run's details.
    if (m_detailsRunId != 0 && m_name->isEnabled()
        && (m_name->isModified() || m_tags->isModified() || m_note->document()->isModified())) {
        saveDetailsOf(m_detailsRunId, m_name->text(), m_tags->text(), m_note->toPlainText());
    }
    const auto ids = selectedRunIds();
    m_save->setEnabled(ids.size() == 1);
    m_open->setEnabled(ids.size() == 1);
    m_delete->setEnabled(!ids.empty());
    m_export->setEnabled(!ids.empty());
    m_report->setEnabled(!ids.empty());
    m_exportConfig->setEnabled(ids.size() == 1);
    // One read of the store for the buttons that ask it (resume, export model, chat).
    std::unique_ptr<RunStore> store;
    QString storeError;
    const auto openStore = [&]() -> RunStore* {
        if (!store && storeError.isEmpty()) {
            try {
                store = std::make_unique<RunStore>(m_dbPath.toStdString(), RunStore::Mode::ReadOnly);
            } catch (const std::exception& e) {
                storeError = QString::fromUtf8(e.what());
            }
        }
        return store.get();
    };
    // Why a run has no model to use (export, chat), or empty.
    const auto noCheckpoint = [&](qint64 id) -> QString {
        auto* s = openStore();
        if (!s) return storeError;
        return s->latestCheckpoint(id) ? QString() : tr("run %1 has no checkpoint yet (one is saved when it ends or is stopped)").arg(id);
    };
    // Resume: what `trainbench-cli resume` would refuse, the button says why.
    QString refusal;
    if (const auto* r = currentRun(); !r) {
        refusal = tr("select one run");
    } else if (r->status == RunStatus::Running) {
        refusal = tr("run %1 is already running").arg(r->id);
    } else if (auto* s = openStore(); !s) {
        refusal = storeError;
    } else {
        try {
            refusal = QString::fromStdString(resumeRefusal(*s, r->id));
        } catch (const std::exception& e) {
            refusal = QString::fromUtf8(e.what());
        }
    }
    m_resume->setEnabled(refusal.isEmpty());
    m_resume->setToolTip(refusal.isEmpty() ? tr("Continue this run from its last checkpoint")
                                           : tr("Cannot resume: %1").arg(refusal));
    // Export model: a run with a checkpoint (the latest is written).
    const auto* current = currentRun();
    const QString noModel = current ? noCheckpoint(current->id) : tr("select one run");
    m_exportModel->setEnabled(noModel.isEmpty());
    m_exportModel->setToolTip(noModel.isEmpty() ? tr("Write this run's model as a folder other tools load: the adapter "
                                                     "(PEFT), the merged model or the weights")
                                                : tr("Cannot export the model: %1").arg(noModel));
    // Chat: one or two runs with checkpoints (two: side by side).
    QString noChat = ids.empty() || ids.size() > 2 ? tr("select one run, or two to compare") : QString();
    for (std::size_t i = 0; noChat.isEmpty() && i < ids.size() && ids.size() <= 2; ++i) noChat = noCheckpoint(ids[i]);
    m_chat->setEnabled(noChat.isEmpty());
    m_chat->setToolTip(noChat.isEmpty() ? tr("Talk to this run's model in the Chat tab (two selected runs: side by side)")
                                        : tr("Cannot chat: %1").arg(noChat));
    // Attach: a copy of a run still running on a host (as last heard).
    m_attach->setEnabled(current && current->origin.runId != 0 && current->status == RunStatus::Running
                         && current->origin.label != "file");
    showOverlay();
    showDiff();
    showDetails();
}

namespace {

} // namespace

void HistoryPanel::showOverlay()
{
    std::vector<OverlayPlot::Series> losses, memory;
    std::set<std::string> keys;
    auto ids = selectedRunIds();
    if (!ids.empty() && ids.size() <= 64) {
        try {
            RunStore store(m_dbPath.toStdString(), RunStore::Mode::ReadOnly);
            if (m_lineage->isChecked()) {
                // Each run's ancestors through init_from, oldest first, once each.
                std::set<std::int64_t> seen(ids.begin(), ids.end());
                std::vector<std::int64_t> withAncestors;
                for (const auto id : ids) {
                    std::vector<std::int64_t> chain{id};
                    for (auto run = std::optional<RunRecord>(*m_model->find(id));
                         run && run->parentRunId && !seen.count(*run->parentRunId) && chain.size() < 64;
                         run = store.run(*run->parentRunId)) {
                        seen.insert(*run->parentRunId);
                        chain.push_back(*run->parentRunId);
                    }
                    withAncestors.insert(withAncestors.end(), chain.rbegin(), chain.rend());
                }
                ids = withAncestors;
            }
            const bool byTime = m_byTime->isChecked();
            const double smoothing = m_smoothing->value() / 100.0;
            const std::string metric = m_metric->currentIndex() >= 0 ? m_metric->currentData().toString().toStdString()
                                                                     : std::string("mem_peak_bytes");
            for (const auto id : ids) {
                // Listed runs come from the model; ancestors outside the filter from the store.
                const RunRecord* listed = m_model->find(id);
                const auto stored = listed ? std::nullopt : store.run(id);
                const RunRecord* run = listed ? listed : stored ? &*stored : nullptr;
                if (!run) continue;
                const QString label = QString("%1 %2").arg(id).arg(QString::fromStdString(run->name).left(24));
                for (const auto& [key, _] : store.latestMetrics(id)) keys.insert(key);
                // The run's first step's time: the loss and its validation points on one clock.
                double t0 = 0;
                for (auto [key, out] : {std::pair{std::string("loss"), &losses}, std::pair{std::string("val_loss"), &losses},
                                        std::pair{metric, &memory}}) {
                    const auto points = store.metricSeries(id, key, 2000);
                    if (points.empty()) continue;
                    const bool validation = key == "val_loss" && out == &losses;
                    const bool bytes = key.size() > 6 && key.compare(key.size() - 6, 6, "_bytes") == 0;
                    if (key == "loss" || t0 == 0) t0 = points.front().wallTime;
                    OverlayPlot::Series s{validation ? label + tr(" (validation)") : label, runColor(id), {}, {}, validation};
                    double ema = points.front().value;
                    for (const auto& p : points) {
                        ema = smoothing * ema + (1.0 - smoothing) * p.value;
                        s.x.push_back(byTime ? p.wallTime - t0 : p.step);
                        // Smoothed like TensorBoard's scalars; memory and validation points as measured.
                        s.y.push_back(bytes ? p.value / 1048576.0 : !validation && smoothing > 0 ? ema : p.value);
                    }
                    out->push_back(std::move(s));
                }
            }
        } catch (const std::exception& e) {
            m_message->setText(QString::fromStdString(e.what()));
            m_message->show();
        }
    }
    const QString x = m_byTime->isChecked() ? tr("seconds since the run's first step") : tr("step");
    m_lossPlot->setSeries(losses, x);
    // The metrics the selected runs store, the chosen one kept where it still is.
    const QString chosen = m_metric->currentIndex() >= 0 ? m_metric->currentData().toString() : QString("mem_peak_bytes");
    keys.erase("loss");
    m_fillingMetrics = true;
    m_metric->clear();
    for (const auto& key : keys) m_metric->addItem(metricLabel(QString::fromStdString(key)), QString::fromStdString(key));
    int at = m_metric->findData(chosen);
    if (at < 0) at = m_metric->findData(QString("mem_peak_bytes"));
    m_metric->setCurrentIndex(at >= 0 ? at : (m_metric->count() > 0 ? 0 : -1));
    m_fillingMetrics = false;
    if (m_metric->currentIndex() >= 0 && m_metric->currentData().toString() != chosen && !keys.empty()) {
        showOverlay(); // the chosen metric is not stored by these runs: draw the one shown
        return;
    }
    m_memoryPlot->yAxis->setLabel(m_metric->currentIndex() >= 0 ? m_metric->currentText() : tr("peak tensor memory (MiB)"));
    m_memoryPlot->setSeries(memory, x);
}

bool HistoryPanel::selectMetric(const QString& key)
{
    const int at = m_metric->findData(key);
    if (at < 0) return false;
    m_metric->setCurrentIndex(at);
    return true;
}

void HistoryPanel::setFollowLineage(bool follow) { m_lineage->setChecked(follow); }

void HistoryPanel::setSmoothing(double factor) { m_smoothing->setValue(static_cast<int>(std::lround(factor * 100))); }

const RunRecord* HistoryPanel::currentRun() const
{
    const auto ids = selectedRunIds();
    return ids.size() == 1 ? m_model->find(ids.front()) : nullptr;
}

bool HistoryPanel::exportConfig(const QString& path, QString* error) const
{
    const auto* r = currentRun();
    if (!r) {
        if (error) *error = tr("Select one run.");
        return false;
    }
    const auto json = QJsonDocument::fromJson(QByteArray::fromStdString(r->configJson));
    QSaveFile file(path);
    if (json.isNull() || !file.open(QIODevice::WriteOnly)) {
        if (error) *error = json.isNull() ? tr("Run %1's stored config is not valid JSON.").arg(r->id)
                                          : tr("Cannot write %1: %2").arg(path, file.errorString());
        return false;
    }
    file.write(json.toJson(QJsonDocument::Indented));
    if (!file.commit()) {
        if (error) *error = tr("Cannot write %1: %2").arg(path, file.errorString());
        return false;
    }
    return true;
}

void HistoryPanel::showDiff()
{
    const auto ids = selectedRunIds();
    m_diff->clear();
    m_diff->setRowCount(0);
    m_diff->setColumnCount(0);
    if (ids.size() < 2) {
        m_diff->setColumnCount(1);
        m_diff->setHorizontalHeaderLabels({tr("Select two or more runs to see how their configs differ")});
        return;
    }
    std::vector<std::string> configs;
    QStringList headers{tr("field")};
    for (const auto id : ids) {
        if (const auto* r = m_model->find(id)) {
            configs.push_back(r->configJson);
            headers << QString("%1 %2").arg(id).arg(QString::fromStdString(r->name).left(20));
        }
    }
    std::vector<ConfigDifference> differing;
    try {
        differing = configDifferences(configs);
    } catch (const std::exception& e) {
        m_message->setText(QString::fromStdString(e.what()));
        m_message->show();
    }
    m_diff->setColumnCount(static_cast<int>(headers.size()));
    m_diff->setHorizontalHeaderLabels(headers);
    m_diff->setRowCount(differing.empty() ? 1 : static_cast<int>(differing.size()));
    if (differing.empty()) {
        m_diff->setItem(0, 0, new QTableWidgetItem(tr("(the configs are identical)")));
        return;
    }
    const QBrush highlight(QColor(255, 213, 79, 90));
    for (int row = 0; row < static_cast<int>(differing.size()); ++row) {
        const auto& d = differing[static_cast<std::size_t>(row)];
        m_diff->setItem(row, 0, new QTableWidgetItem(QString::fromStdString(d.path)));
        for (std::size_t c = 0; c < d.values.size(); ++c) {
            auto* item = new QTableWidgetItem(d.values[c].empty() ? QString("—") : QString::fromStdString(d.values[c]));
            if (d.values[c] != d.values.front()) item->setBackground(highlight);
            m_diff->setItem(row, static_cast<int>(c) + 1, item);
        }
    }
    m_diff->resizeColumnsToContents();
}

void HistoryPanel::showDetails()
{
    const RunRecord* current = currentRun();
    m_name->setEnabled(current);
    m_tags->setEnabled(current);
    m_note->setEnabled(current);
    m_name->setText(current ? QString::fromStdString(current->name) : QString());
    QStringList tags;
    if (current) {
        for (const auto& t : current->tags) tags << QString::fromStdString(t);
    }
    m_tags->setText(tags.join(", "));
    m_note->setPlainText(current ? QString::fromStdString(current->note) : QString());
    m_detailsRunId = current ? current->id : 0;
    m_name->setModified(false);
    m_tags->setModified(false);
    m_note->document()->setModified(false);
}

void HistoryPanel::runEdit(std::function<void(RunStore&)> edit)
{
    // A run in progress may hold the write lock for a moment: never wait for
    // it on the GUI thread.
    const std::string path = m_dbPath.toStdString();
    auto* watcher = new QFutureWatcher<QString>(this);
    connect(watcher, &QFutureWatcher<QString>::finished, this, [this, watcher] {
        const QString message = watcher->result();
        watcher->deleteLater();
        refresh();
        if (!message.isEmpty()) {
            m_message->setText(message);
            m_message->show();
        }
        Q_EMIT edited(message);
    });
    watcher->setFuture(QtConcurrent::run([path, edit]() -> QString {
        try {
            RunStore store(path);
            edit(store);
            return {};
        } catch (const std::exception& e) {
            return QString::fromStdString(e.what());
        }
    }));
}

void HistoryPanel::saveDetails(const QString& name, const QString& tags, const QString& note)
{
    const auto ids = selectedRunIds();
    if (ids.size() == 1) saveDetailsOf(ids.front(), name, tags, note);
}

void HistoryPanel::saveDetailsOf(qint64 runId, const QString& name, const QString& tags, const QString& note)
{
    const std::int64_t id = runId;
    if (id == m_detailsRunId) {
        // Saved: the form holds no unsaved edit any more.
        m_name->setModified(false);
        m_tags->setModified(false);
        m_note->document()->setModified(false);
    }
    std::vector<std::string> wanted;
    for (const QString& t : tags.split(',', Qt::SkipEmptyParts)) {
        if (!t.trimmed().isEmpty()) wanted.push_back(t.trimmed().toStdString());
    }
    runEdit([id, name = name.trimmed().toStdString(), wanted, note = note.toStdString()](RunStore& store) {
        const auto run = store.run(id);
        if (!run) throw InputError("run " + std::to_string(id) + " no longer exists");
        // Check every value before the first write: all or nothing.
        for (const auto& t : wanted) {
            if (t.size() > 64 || t.find_first_of(" \"") != std::string::npos) {
                throw InputError("tag \"" + t.substr(0, 64) + "\": at most 64 characters, no spaces or quotes");
            }
        }
        Transaction tx(store.database());
        if (name != run->name) store.rename(id, name);
        for (const auto& t : run->tags) {
            if (std::find(wanted.begin(), wanted.end(), t) == wanted.end()) store.removeTag(id, t);
        }
        for (const auto& t : wanted) store.addTag(id, t);
        if (note != run->note) store.setNote(id, note);
        tx.commit();
    });
}

void HistoryPanel::deleteSelected(bool checkpoints)
{
    const auto ids = selectedRunIds();
    runEdit([ids, checkpoints](RunStore& store) {
        for (const auto id : ids) {
            store.deleteRun(id);
            if (checkpoints) {
                std::error_code ec;
                std::filesystem::remove_all(store.runFolder(id), ec);
            }
        }
    });
}

void HistoryPanel::askDelete()
{
    const auto ids = selectedRunIds();
    if (ids.empty()) return;
    QMessageBox box(QMessageBox::Warning, tr("Delete runs"),
                    tr("Delete %n run(s) with their metrics and events? This cannot be undone.", nullptr,
                       static_cast<int>(ids.size())),
                    QMessageBox::Cancel, this);
    box.setTextFormat(Qt::PlainText);
    auto* withCheckpoints = box.addButton(tr("Delete with checkpoints"), QMessageBox::DestructiveRole);
    auto* keepCheckpoints = box.addButton(tr("Delete, keep checkpoints"), QMessageBox::DestructiveRole);
    box.setDefaultButton(QMessageBox::Cancel);
    box.exec();
    if (box.clickedButton() == withCheckpoints) deleteSelected(true);
    else if (box.clickedButton() == keepCheckpoints) deleteSelected(false);
}

bool HistoryPanel::exportCsv(const QString& path, QString* error, qint64* rows) const
{
    qint64 written = 0;
    QSaveFile file(path); // written to a temporary file, then renamed
    if (!file.open(QIODevice::WriteOnly | QIODevice::Text)) {
        if (error) *error = tr("Cannot write %1: %2").arg(path, file.errorString());
        return false;
    }
    try {
        RunStore store(m_dbPath.toStdString(), RunStore::Mode::ReadOnly);
        file.write("run,step,key,value,wall_time\n");
        for (const auto id : selectedRunIds()) {
            for (const auto& p : store.metrics(id)) {
                file.write(QString("%1,%2,%3,%4,%5\n").arg(p.runId).arg(p.step).arg(QString::fromStdString(p.key))
                               .arg(p.value, 0, 'g', 17).arg(p.wallTime, 0, 'f', 3).toUtf8());
                ++written;
            }
        }
    } catch (const std::exception& e) {
        file.cancelWriting();
        if (error) *error = QString::fromStdString(e.what());
        return false;
    }
    if (!file.commit()) {
        if (error) *error = tr("Cannot write %1: %2").arg(path, file.errorString());
        return false;
    }
    if (rows) *rows = written;
    return true;
}

bool HistoryPanel::exportCsvAndReport(const QString& path)
{
    QString error;
    qint64 rows = 0;
    const auto runs = selectedRunIds().size();
    if (!exportCsv(path, &error, &rows)) {
        plainWarning(this, tr("Export metrics"), error);
        return false;
    }
    Q_EMIT exported(tr("Exported %1 metric %2 of %3 %4 to %5")
                        .arg(rows)
                        .arg(rows == 1 ? tr("row") : tr("rows"))
                        .arg(runs)
                        .arg(runs == 1 ? tr("run") : tr("runs"))
                        .arg(QDir::toNativeSeparators(path)));
    return true;
}

bool HistoryPanel::exportConfigAndReport(const QString& path)
{
    QString error;
    const auto* r = currentRun();
    if (!exportConfig(path, &error)) {
        plainWarning(this, tr("Export config"), error);
        return false;
    }
    Q_EMIT exported(tr("Exported run %1's config to %2").arg(r ? r->id : 0).arg(QDir::toNativeSeparators(path)));
    return true;
}

void HistoryPanel::askExport()
{
    const QString path = saveFileName(this, tr("Export metrics"), "runs.csv", tr("CSV (*.csv)"));
    if (path.isEmpty()) return;
    const QString db = QFileInfo(m_dbPath).absoluteFilePath();
    if (QFileInfo(path).absoluteFilePath() == db || QFileInfo(path).absoluteFilePath().startsWith(db + "-")) {
        plainWarning(this, tr("Export metrics"), tr("%1 is the experiment database or one of its files; choose another file.").arg(path));
        return;
    }
    exportCsvAndReport(path);
}

ExportModelDialog* HistoryPanel::openExportModel()
{
    const auto* r = currentRun();
    if (!r) return nullptr;
    // Next to the database, in exports/ (the dialog changes it at will).
    const QString base = QFileInfo(m_dbPath).absolutePath() + "/exports";
    auto* dialog = new ExportModelDialog(m_dbPath, r->id, QString::fromStdString(r->name), QString::fromStdString(r->configJson),
                                         base, this);
    dialog->setAttribute(Qt::WA_DeleteOnClose);
    connect(dialog, &ExportModelDialog::exported, this, &HistoryPanel::exported);
    dialog->show();
    return dialog;
}

namespace {

// A plot as a PNG data URI: the report carries its pictures.
QString plotImage(QCustomPlot* plot)
{
    QByteArray png;
    QBuffer buffer(&png);
    buffer.open(QIODevice::WriteOnly);
    plot->toPixmap(900, 420).save(&buffer, "PNG");
    return "data:image/png;base64," + QString::fromLatin1(png.toBase64());
}

QString cell(const std::optional<double>& v, int decimals = 4) { return v ? QString::number(*v, 'f', decimals) : QString("—"); }

} // namespace

bool HistoryPanel::writeReport(const QString& path, QString* error) const
{
    const auto ids = selectedRunIds();
    if (ids.empty()) {
        if (error) *error = tr("Select the runs to report.");
        return false;
    }
    const auto esc = [](const std::string& s) { return QString::fromStdString(s).toHtmlEscaped(); };
    QString html;
    html += "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>"
        + tr("Trainbench report: %n run(s)", nullptr, static_cast<int>(ids.size())).toHtmlEscaped() + "</title><style>"
        "body{font-family:sans-serif;margin:2em;color:#222}table{border-collapse:collapse;margin:1em 0}"
        "td,th{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top}th{background:#f3f4f6}"
        "td.num{text-align:right;font-variant-numeric:tabular-nums}.differs{background:#fff3c4}img{max-width:100%}"
        "</style></head><body>\n";
    html += "<h1>" + tr("Trainbench report: %n run(s)", nullptr, static_cast<int>(ids.size())).toHtmlEscaped() + "</h1>\n";
    html += "<p>" + tr("Written %1.").arg(QDateTime::currentDateTime().toString(Qt::ISODate)).toHtmlEscaped() + "</p>\n";
    // The runs and their final metrics.
    html += "<h2>" + tr("Runs").toHtmlEscaped() + "</h2>\n<table><tr>";
    for (const QString& h : {tr("ID"), tr("Name"), tr("Status"), tr("Steps"), tr("Final loss"), tr("Validation loss"),
                             tr("Best validation"), tr("Tokens/s"), tr("Peak memory (MiB)"), tr("Estimated (MiB)"),
                             tr("Device"), tr("Precision"), tr("Tags")}) {
        html += "<th>" + h.toHtmlEscaped() + "</th>";
    }
    html += "</tr>\n";
    const auto mib = [](const std::optional<std::int64_t>& b) {
        return b ? QString::number(static_cast<double>(*b) / 1048576.0, 'f', 1) : QString("—");
    };
    QString notes;
    for (const auto id : ids) {
        const RunRecord* r = m_model->find(id);
        if (!r) continue;
        QStringList tags;
        for (const auto& t : r->tags) tags << QString::fromStdString(t);
        html += QString("<tr><td class=num>%1</td><td>%2</td><td>%3</td><td class=num>%4/%5</td><td class=num>%6</td>"
                        "<td class=num>%7</td><td class=num>%8</td><td class=num>%9</td><td class=num>%10</td>"
                        "<td class=num>%11</td><td>%12</td><td>%13</td><td>%14</td></tr>\n")
                    .arg(id)
                    .arg(esc(r->name), esc(runStatusName(r->status)))
                    .arg(r->stepsDone)
                    .arg(r->stepsTotal)
                    .arg(cell(r->finalLoss), cell(r->finalValLoss), cell(r->bestValLoss), cell(r->tokensPerSecond, 0),
                         mib(r->measuredPeakBytes), mib(r->estimatedPeakBytes), esc(r->device), esc(r->precision),
                         tags.join(", ").toHtmlEscaped());
        if (!r->note.empty()) {
            notes += "<h3>" + QString("%1 %2").arg(id).arg(esc(r->name)) + "</h3><p style=\"white-space:pre-wrap\">"
                + esc(r->note) + "</p>\n";
        }
    }
    html += "</table>\n";
    // The plots as the History tab shows them (selection, smoothing, metric).
    html += "<h2>" + tr("Curves").toHtmlEscaped() + "</h2>\n";
    html += "<p><img alt=\"" + tr("loss").toHtmlEscaped() + "\" src=\"" + plotImage(m_lossPlot) + "\"></p>\n";
    html += "<p><img alt=\"" + m_memoryPlot->yAxis->label().toHtmlEscaped() + "\" src=\"" + plotImage(m_memoryPlot) + "\"></p>\n";
    // How the configs differ: the Config diff tab's table.
    html += "<h2>" + tr("Config differences").toHtmlEscaped() + "</h2>\n<table><tr>";
    for (int c = 0; c < m_diff->columnCount(); ++c) {
        const auto* h = m_diff->horizontalHeaderItem(c);
        html += "<th>" + (h ? h->text().toHtmlEscaped() : QString()) + "</th>";
    }
    html += "</tr>\n";
    for (int row = 0; row < m_diff->rowCount(); ++row) {
        html += "<tr>";
        for (int c = 0; c < m_diff->columnCount(); ++c) {
            const auto* item = m_diff->item(row, c);
            const bool differs = item && item->background().style() != Qt::NoBrush;
            html += QString("<td%1>").arg(differs ? " class=differs" : "") + (item ? item->text().toHtmlEscaped() : QString()) + "</td>";
        }
        html += "</tr>\n";
    }
    html += "</table>\n";
    if (!notes.isEmpty()) html += "<h2>" + tr("Notes").toHtmlEscaped() + "</h2>\n" + notes;
    html += "</body></html>\n";
    QSaveFile file(path);
    if (!file.open(QIODevice::WriteOnly) || file.write(html.toUtf8()) < 0 || !file.commit()) {
        if (error) *error = tr("Cannot write %1: %2").arg(path, file.errorString());
        return false;
    }
    return true;
}

} // namespace tb::ui
