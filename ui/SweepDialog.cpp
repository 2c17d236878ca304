#include "SweepDialog.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <QComboBox>
#include <QDir>
#include <QDoubleSpinBox>
#include <QFileInfo>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLabel>
#include <QLineEdit>
#include <QProcess>
#include <QRegularExpression>
#include <QPushButton>
#include <QSpinBox>
#include <QSplitter>
#include <QTableWidget>
#include <QThread>
#include <QTimer>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>

#include "CliProgram.h"
#include "FileDialogs.h"
#include "QCustomPlotInclude.h"

namespace tb::ui {
namespace {

// A trial's values in the sweep's parameter order.
QJsonObject valuesOf(const SweepTrialRecord& t)
{
    return QJsonDocument::fromJson(QByteArray::fromStdString(t.valuesJson)).object();
}

QString valueText(const QJsonValue& v)
{
    if (v.isDouble()) return QString::number(v.toDouble(), 'g', 6);
    if (v.isString()) return v.toString();
    if (v.isBool()) return v.toBool() ? "true" : "false";
    if (v.isArray()) return QString::fromUtf8(QJsonDocument(v.toArray()).toJson(QJsonDocument::Compact));
    if (v.isObject()) return QString::fromUtf8(QJsonDocument(v.toObject()).toJson(QJsonDocument::Compact));
    return "null";
}

// An axis of the plots: numbers where every value is one, else categories.
struct Axis {
    QString name;
    bool numeric = true;
    bool logScale = false;
    double lo = 0, hi = 1;
    QStringList categories;
    double position(const QJsonValue& v) const
    {
        if (!numeric) return categories.indexOf(valueText(v));
        return logScale ? std::log10(v.toDouble()) : v.toDouble();
    }
    // 0..1 along the axis, for parallel coordinates.
    double unit(const QJsonValue& v) const
    {
        const double p = position(v);
        const double a = numeric ? (logScale ? std::log10(lo) : lo) : 0.0, b = numeric ? (logScale ? std::log10(hi) : hi)
                                                                                      : std::max<double>(categories.size() - 1, 1);
        return b > a ? (p - a) / (b - a) : 0.5;
    }
};

Axis axisOf(const QString& name, const std::vector<QJsonValue>& values)
{
    Axis a;
    a.name = name;
    for (const auto& v : values) a.numeric = a.numeric && v.isDouble();
    if (a.numeric) {
        a.lo = a.hi = values.empty() ? 0 : values.front().toDouble();
        for (const auto& v : values) a.lo = std::min(a.lo, v.toDouble()), a.hi = std::max(a.hi, v.toDouble());
        // A rate or any positive field spread over two decades or more is read in decades.
        a.logScale = a.lo > 0 && a.hi / a.lo >= 100;
    } else {
        for (const auto& v : values) {
            if (!a.categories.contains(valueText(v))) a.categories << valueText(v);
        }
    }
    return a;
}

} // namespace

SweepDialog::SweepDialog(const QString& databasePath, const QString& configPath, QWidget* parent)
    : QDialog(parent), m_db(databasePath), m_config(configPath)
{
    setWindowTitle(tr("Sweeps"));
    setObjectName("sweepDialog");
    auto* layout = new QVBoxLayout(this);

    auto* launch = new QGroupBox(tr("New sweep of %1").arg(configPath.isEmpty() ? tr("the experiment")
                                                                                : QFileInfo(configPath).fileName()),
                                 this);
    auto* form = new QFormLayout(launch);
    auto* fileRow = new QHBoxLayout;
    m_file = new QLineEdit(launch);
    m_file->setObjectName("sweepFile");
    m_file->setPlaceholderText(tr("a sweep file: method, metric, parameters (see docs/sweeps.md)"));
    auto* browse = new QPushButton(tr("&Browse…"), launch);
    connect(browse, &QPushButton::clicked, this, [this] {
        const QString path = openFileName(this, tr("Choose a sweep file"), QFileInfo(m_config).absolutePath(),
                                          tr("Sweep files (*.json);;All files (*)"));
        if (!path.isEmpty()) m_file->setText(path);
    });
    fileRow->addWidget(m_file, 1);
    fileRow->addWidget(browse);
    auto* fileLabel = new QLabel(tr("Sweep &file"), launch);
    fileLabel->setBuddy(m_file);
    form->addRow(fileLabel, fileRow);
    auto* optionsRow = new QHBoxLayout;
    m_budget = new QDoubleSpinBox(launch);
    m_budget->setObjectName("sweepBudget");
    m_budget->setRange(0, 4096);
    m_budget->setDecimals(2);
    m_budget->setSuffix(tr(" GiB"));
    m_budget->setSpecialValueText(tr("no budget"));
    m_budget->setToolTip(tr("Trials whose plan does not fit this memory are skipped with the reason (0: no budget; "
                            "preflight still checks this machine)"));
    m_parallel = new QSpinBox(launch);
    m_parallel->setObjectName("sweepParallel");
    m_parallel->setRange(1, std::max(1, QThread::idealThreadCount()));
    m_parallel->setToolTip(tr("Trials at a time on CPU cores (default 1); on a GPU they run one at a time"));
    m_start = new QPushButton(tr("&Start sweep"), launch);
    m_start->setObjectName("sweepStart");
    m_start->setEnabled(!configPath.isEmpty());
    connect(m_start, &QPushButton::clicked, this, [this] { startSweep(); });
    auto* budgetLabel = new QLabel(tr("B&udget"), launch);
    budgetLabel->setBuddy(m_budget);
    auto* parallelLabel = new QLabel(tr("Para&llel"), launch);
    parallelLabel->setBuddy(m_parallel);
    optionsRow->addWidget(budgetLabel);
    optionsRow->addWidget(m_budget);
    optionsRow->addWidget(parallelLabel);
    optionsRow->addWidget(m_parallel);
    optionsRow->addStretch();
    optionsRow->addWidget(m_start);
    form->addRow(QString(), optionsRow);
    layout->addWidget(launch);

    m_status = new QLabel(this);
    m_status->setObjectName("sweepStatus");
    m_status->setWordWrap(true);
    m_status->setTextInteractionFlags(Qt::TextSelectableByMouse);
    layout->addWidget(m_status);

    auto* pick = new QHBoxLayout;
    m_sweeps = new QComboBox(this);
    m_sweeps->setObjectName("sweepList");
    m_stop = new QPushButton(tr("Sto&p"), this);
    m_stop->setToolTip(tr("The running trials checkpoint and stop; Resume continues the sweep"));
    m_resume = new QPushButton(tr("&Resume"), this);
    m_resume->setToolTip(tr("Continue the sweep: finished trials are kept, interrupted ones continue from their checkpoint"));
    m_open = new QPushButton(tr("&Open run"), this);
    m_open->setToolTip(tr("Show the selected trial's run in History (or double-click the trial)"));
    auto* sweepLabel = new QLabel(tr("S&weep"), this);
    sweepLabel->setBuddy(m_sweeps);
    pick->addWidget(sweepLabel);
    pick->addWidget(m_sweeps, 1);
    pick->addWidget(m_stop);
    pick->addWidget(m_resume);
    pick->addWidget(m_open);
    layout->addLayout(pick);
    connect(m_sweeps, &QComboBox::currentIndexChanged, this, &SweepDialog::showSweep);
    connect(m_stop, &QPushButton::clicked, this, &SweepDialog::stopSweep);
    connect(m_resume, &QPushButton::clicked, this, &SweepDialog::resumeSweep);

    auto* splitter = new QSplitter(Qt::Vertical, this);
    m_table = new QTableWidget(splitter);
    m_table->setObjectName("sweepTrials");
    m_table->setEditTriggers(QAbstractItemView::NoEditTriggers);
    m_table->setSelectionBehavior(QAbstractItemView::SelectRows);
    m_table->setSelectionMode(QAbstractItemView::SingleSelection);
    m_table->verticalHeader()->hide();
    auto* plots = new QWidget(splitter);
    auto* plotLayout = new QHBoxLayout(plots);
    plotLayout->setContentsMargins(0, 0, 0, 0);
    auto* scatterBox = new QVBoxLayout;
    m_field = new QComboBox(plots);
    m_field->setObjectName("sweepField");
    m_field->setToolTip(tr("The varied field the scatter plot puts across"));
    connect(m_field, &QComboBox::currentIndexChanged, this, &SweepDialog::plotScatter);
    scatterBox->addWidget(m_field);
    m_scatter = new QCustomPlot(plots);
    m_scatter->setObjectName("sweepScatter");
    m_scatter->setMinimumHeight(220);
    scatterBox->addWidget(m_scatter, 1);
    plotLayout->addLayout(scatterBox, 1);
    m_coordinates = new QCustomPlot(plots);
    m_coordinates->setObjectName("sweepCoordinates");
    plotLayout->addWidget(m_coordinates, 1);
    splitter->addWidget(m_table);
    splitter->addWidget(plots);
    layout->addWidget(splitter, 1);

    const auto openSelected = [this] {
        const int row = m_table->currentRow();
        const int index = m_sweeps->currentIndex();
        if (row < 0 || index < 0 || index >= static_cast<int>(m_records.size())) return;
        const auto& t = m_records[static_cast<std::size_t>(index)].trials.at(static_cast<std::size_t>(row));
        if (!t.runId) {
            m_status->setText(tr("Trial %1 has no run: %2").arg(t.trial + 1).arg(QString::fromStdString(t.status)));
            return;
        }
        Q_EMIT openRunRequested(*t.runId);
    };
    connect(m_open, &QPushButton::clicked, this, openSelected);
    connect(m_table, &QTableWidget::cellDoubleClicked, this, openSelected);

    m_timer = new QTimer(this);
    m_timer->setInterval(2000);
    connect(m_timer, &QTimer::timeout, this, &SweepDialog::refresh);
    m_status->setText(configPath.isEmpty() ? tr("Save the experiment to sweep it; its sweeps are listed below.")
                                           : tr("Choose a sweep file and press Start sweep."));
    resize(1000, 720);
    refresh();
}

QString SweepDialog::statusText() const { return m_status->text(); }

QString SweepDialog::lockPath(std::int64_t sweepId) const
{
    return m_db + "-runs/sweep-" + QString::number(sweepId) + "/lock";
}

bool SweepDialog::sweepRunning(std::int64_t sweepId) const
{
    const QByteArray path = lockPath(sweepId).toLocal8Bit();
    const int fd = ::open(path.constData(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    // Any holder counts: a whole-sweep runner (exclusive) or one-trial runners (shared).
    const bool held = flock(fd, LOCK_EX | LOCK_NB) != 0;
    ::close(fd); // releases a lock taken just to look
    return held;
}

bool SweepDialog::launch(const QStringList& args, const QString& what)
{
    // `sweep ... --detach` stores the sweep, starts its runner in a session
    // of its own (it outlives the window) and answers once the runner holds
    // the sweep's lock; its answer or its refusal is shown here.
    auto* process = new QProcess(this);
    process->setProgram(cliProgram());
    process->setArguments(args + QStringList{"--detach"});
    process->setStandardInputFile(QProcess::nullDevice());
    connect(process, &QProcess::finished, this, [this, process, what](int code, QProcess::ExitStatus status) {
        process->deleteLater();
        const QString out = QString::fromUtf8(process->readAllStandardOutput());
        const QString err = QString::fromUtf8(process->readAllStandardError()).trimmed();
        if (status != QProcess::NormalExit || code != 0) {
            m_waitingFor.reset();
            m_status->setStyleSheet("color: #c0392b");
            m_status->setText(err.isEmpty() ? tr("Could not %1 (exit code %2).").arg(what).arg(code)
                                            : err.section("error: ", -1).trimmed());
            return;
        }
        const auto match = QRegularExpression("sweep ([0-9]+) started").match(out);
        if (match.hasMatch()) m_started = match.captured(1).toLongLong();
        m_answered.start();
        refresh();
    });
    connect(process, &QProcess::errorOccurred, this, [this, process](QProcess::ProcessError error) {
        if (error != QProcess::FailedToStart) return;
        m_waitingFor.reset();
        m_status->setText(tr("Cannot start %1: %2 (set TRAINBENCH_CLI to its path).").arg(process->program(), process->errorString()));
        process->deleteLater();
    });
    process->start();
    return true;
}

QString SweepDialog::startSweep()
{
    const QString file = m_file->text().trimmed();
    QString error;
    if (m_config.isEmpty()) error = tr("Save the experiment first: a sweep trains the saved config.");
    else if (file.isEmpty()) error = tr("Choose a sweep file first.");
    if (error.isEmpty()) {
        try {
            (void)sweepTrials(loadSweepFile(file.toStdString())); // the same checks the command makes, said here
        } catch (const std::exception& e) {
            error = QString::fromStdString(e.what());
        }
    }
    if (!error.isEmpty()) {
        m_status->setText(error);
        m_status->setStyleSheet("color: #c0392b");
        return error;
    }
    m_status->setStyleSheet(QString());
    QStringList args{"sweep", "--config", m_config, "--sweep", file, "--db", m_db};
    if (m_budget->value() > 0) {
        args << "--budget" << QString::number(static_cast<qint64>(m_budget->value() * 1024.0 * 1024.0 * 1024.0));
    }
    if (m_parallel->value() > 1) args << "--parallel" << QString::number(m_parallel->value());
    m_waitingFor = m_records.size();
    if (!launch(args, tr("start the sweep"))) {
        m_waitingFor.reset();
        return m_status->text();
    }
    // The command answers with the sweep's id; refresh then selects it.
    const QString message = tr("Starting the sweep of %1 with %2…").arg(QFileInfo(m_config).fileName(), QFileInfo(file).fileName());
    m_status->setText(message);
    m_timer->start();
    return message;
}

void SweepDialog::refresh()
{
    std::vector<SweepRecord> records;
    if (QFileInfo::exists(m_db)) {
        try {
            RunStore store(m_db.toStdString(), RunStore::Mode::ReadOnly);
            records = store.listSweeps();
        } catch (const std::exception& e) {
            m_status->setText(QString::fromStdString(e.what()));
            return;
        }
    }
    const std::int64_t selected =
        m_sweeps->currentIndex() >= 0 && m_sweeps->currentIndex() < static_cast<int>(m_records.size())
            ? m_records[static_cast<std::size_t>(m_sweeps->currentIndex())].id
            : 0;
    m_records = std::move(records);
    // Each sweep's lock is looked at once a refresh; the list, the buttons
    // and the status line read the answer.
    m_running.clear();
    for (const auto& r : m_records) m_running.push_back(sweepRunning(r.id));
    {
        const QSignalBlocker block(m_sweeps);
        m_sweeps->clear();
        for (std::size_t i = 0; i < m_records.size(); ++i) {
            const auto& r = m_records[i];
            const bool running = m_running[i];
            m_sweeps->addItem(tr("%1: %2 (%3 trials, %4)")
                                  .arg(r.id)
                                  .arg(QString::fromStdString(r.name))
                                  .arg(r.trials.size())
                                  .arg(running ? tr("running") : r.status == "finished" ? tr("finished") : tr("stopped")));
        }
        int index = 0;
        for (std::size_t i = 0; i < m_records.size(); ++i) {
            if (m_records[i].id == selected) index = static_cast<int>(i);
        }
        m_sweeps->setCurrentIndex(m_records.empty() ? -1 : index);
    }
    const bool anyRunning = std::find(m_running.begin(), m_running.end(), true) != m_running.end();
    const bool settling = m_answered.isValid() && m_answered.elapsed() < 30000;
    if ((anyRunning || settling) && !m_timer->isActive()) m_timer->start();
    if (!anyRunning && !m_waitingFor && !settling) m_timer->stop();
    if (m_waitingFor && m_started > 0) {
        // The sweep just started: select it, and say so.
        m_waitingFor.reset();
        const auto started = std::find_if(m_records.begin(), m_records.end(), [this](const SweepRecord& r) { return r.id == m_started; });
        m_started = 0;
        if (started == m_records.end()) return;
        selectSweep(started->id);
        const QString text = tr("Started sweep %1 (%2 trials); it goes on when this window closes.")
                                 .arg(started->id)
                                 .arg(started->trials.size());
        showSweep();
        m_status->setText(text + " " + m_status->text());
        Q_EMIT message(text);
        return;
    }
    showSweep();
}

void SweepDialog::selectSweep(std::int64_t sweepId)
{
    for (std::size_t i = 0; i < m_records.size(); ++i) {
        if (m_records[i].id == sweepId) m_sweeps->setCurrentIndex(static_cast<int>(i));
    }
}

void SweepDialog::showSweep()
{
    const int index = m_sweeps->currentIndex();
    const bool any = index >= 0 && index < static_cast<int>(m_records.size());
    m_stop->setEnabled(any && m_running[static_cast<std::size_t>(index)]);
    m_resume->setEnabled(any && !m_stop->isEnabled() && m_records[static_cast<std::size_t>(index)].status != "finished");
    m_open->setEnabled(any);
    m_spec.reset();
    m_best = -1;
    if (!any) {
        m_table->clear();
        m_table->setRowCount(0);
        m_table->setColumnCount(0);
        m_scatter->clearPlottables();
        m_scatter->replot();
        m_coordinates->clearPlottables();
        m_coordinates->replot();
        return;
    }
    const auto& r = m_records[static_cast<std::size_t>(index)];
    try {
        m_spec = parseSweep(r.specJson, "sweep " + std::to_string(r.id));
    } catch (const std::exception& e) {
        m_status->setText(QString::fromStdString(e.what()));
        return;
    }
    for (const auto& t : r.trials) {
        if (t.status != "finished" || !t.metric) continue;
        const auto& b = m_best < 0 ? t : r.trials[static_cast<std::size_t>(m_best)];
        if (m_best < 0 || (m_spec->maximize ? *t.metric > *b.metric : *t.metric < *b.metric)) m_best = t.trial;
    }
    QStringList headers{tr("Trial")};
    for (const auto& p : m_spec->parameters) headers << QString::fromStdString(p.path);
    headers << tr("Status") << tr("Run") << QString::fromStdString(m_spec->metric) << tr("Why");
    const int row = m_table->currentRow();
    m_table->clear();
    m_table->setColumnCount(static_cast<int>(headers.size()));
    m_table->setHorizontalHeaderLabels(headers);
    m_table->setRowCount(static_cast<int>(r.trials.size()));
    for (const auto& t : r.trials) {
        const auto values = valuesOf(t);
        const int n = t.trial;
        const bool best = n == m_best;
        int column = 0;
        const auto cell = [&](const QString& text) {
            auto* item = new QTableWidgetItem(text);
            if (best) {
                QFont font = item->font();
                font.setBold(true);
                item->setFont(font);
                item->setBackground(QColor(0xd5, 0xf5, 0xe3));
                item->setForeground(QColor(0x14, 0x5a, 0x32));
            }
            if (!t.reason.empty()) item->setToolTip(QString::fromStdString(t.reason));
            m_table->setItem(n, column++, item);
        };
        cell((best ? QStringLiteral("★ ") : QString()) + QString::number(n + 1));
        for (const auto& p : m_spec->parameters) cell(valueText(values.value(QString::fromStdString(p.path))));
        cell(QString::fromStdString(t.status));
        cell(t.runId ? QString::number(*t.runId) : QString());
        cell(t.metric ? QString::number(*t.metric, 'g', 5) : QString());
        cell(QString::fromStdString(t.reason));
    }
    m_table->resizeColumnsToContents();
    m_table->horizontalHeader()->setStretchLastSection(true);
    if (row >= 0 && row < m_table->rowCount()) m_table->selectRow(row);

    int done = 0, skipped = 0, stopped = 0;
    for (const auto& t : r.trials) {
        done += t.status == "finished" ? 1 : 0;
        skipped += t.status == "skipped" ? 1 : 0;
        stopped += t.status == "stopped" ? 1 : 0;
    }
    const bool running = m_running[static_cast<std::size_t>(index)];
    QString status = tr("Sweep %1, %2: %3 of %4 trials finished, %5 skipped, %6 stopped early; %7 %8.")
                         .arg(r.id)
                         .arg(running ? tr("running") : r.status == "finished" ? tr("finished") : tr("stopped (Resume continues it)"))
                         .arg(done)
                         .arg(r.trials.size())
                         .arg(skipped)
                         .arg(stopped)
                         .arg(m_spec->maximize ? tr("maximize") : tr("minimize"))
                         .arg(QString::fromStdString(m_spec->metric));
    if (m_best >= 0) status += tr(" Best: trial %1.").arg(m_best + 1);
    m_status->setStyleSheet(QString());
    m_status->setText(status);

    const QString field = m_field->currentText();
    {
        const QSignalBlocker block(m_field);
        m_field->clear();
        for (const auto& p : m_spec->parameters) m_field->addItem(QString::fromStdString(p.path));
        const int at = m_field->findText(field);
        m_field->setCurrentIndex(at >= 0 ? at : 0);
    }
    plotScatter();
    plotCoordinates();
}

void SweepDialog::plotScatter()
{
    m_scatter->clearPlottables();
    m_scatter->clearItems();
    const int index = m_sweeps->currentIndex();
    if (!m_spec || index < 0 || index >= static_cast<int>(m_records.size()) || m_field->currentIndex() < 0) {
        m_scatter->replot();
        return;
    }
    const auto& r = m_records[static_cast<std::size_t>(index)];
    const QString field = m_field->currentText();
    // The axis spans the trials that have a metric (the plotted ones).
    std::vector<QJsonValue> all;
    for (const auto& t : r.trials) {
        if (t.metric && std::isfinite(*t.metric)) all.push_back(valuesOf(t).value(field));
    }
    const Axis axis = axisOf(field, all);
    const auto series = [&](const QString& name, const QColor& colour, double size) {
        auto* g = m_scatter->addGraph();
        g->setName(name);
        g->setLineStyle(QCPGraph::lsNone);
        g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, colour, colour, size));
        return g;
    };
    auto* finished = series(tr("finished"), QColor(0x1f, 0x77, 0xb4), 8);
    auto* stopped = series(tr("stopped early"), QColor(0x99, 0x99, 0x99), 8);
    auto* best = series(tr("best"), QColor(0x1e, 0x84, 0x49), 13);
    double lo = 0, hi = 0;
    bool first = true;
    for (const auto& t : r.trials) {
        if (!t.metric || !std::isfinite(*t.metric)) continue;
        const double x = axis.position(valuesOf(t).value(field));
        auto* g = t.trial == m_best ? best : t.status == "stopped" ? stopped : finished;
        g->addData(x, *t.metric);
        lo = first ? *t.metric : std::min(lo, *t.metric);
        hi = first ? *t.metric : std::max(hi, *t.metric);
        first = false;
    }
    if (axis.numeric) {
        m_scatter->xAxis->setTicker(QSharedPointer<QCPAxisTicker>(new QCPAxisTicker));
        const double a = axis.logScale ? std::log10(axis.lo) : axis.lo, b = axis.logScale ? std::log10(axis.hi) : axis.hi;
        const double pad = b > a ? 0.08 * (b - a) : 1.0;
        m_scatter->xAxis->setRange(a - pad, b + pad);
        m_scatter->xAxis->setLabel(axis.logScale ? tr("%1 (log10)").arg(field) : field);
    } else {
        QSharedPointer<QCPAxisTickerText> ticker(new QCPAxisTickerText);
        for (int i = 0; i < axis.categories.size(); ++i) ticker->addTick(i, axis.categories[i]);
        m_scatter->xAxis->setTicker(ticker);
        m_scatter->xAxis->setRange(-0.5, axis.categories.size() - 0.5);
        m_scatter->xAxis->setLabel(field);
    }
    const double pad = hi > lo ? 0.08 * (hi - lo) : std::max(std::abs(hi) * 0.1, 0.1);
    m_scatter->yAxis->setRange(lo - pad, hi + pad);
    m_scatter->yAxis->setLabel(QString::fromStdString(m_spec->metric));
    m_scatter->legend->setVisible(true);
    m_scatter->replot();
}

void SweepDialog::plotCoordinates()
{
    m_coordinates->clearPlottables();
    m_coordinates->clearItems();
    const int index = m_sweeps->currentIndex();
    if (!m_spec || index < 0 || index >= static_cast<int>(m_records.size())) {
        m_coordinates->replot();
        return;
    }
    const auto& r = m_records[static_cast<std::size_t>(index)];
    // An axis per varied field, and the metric last.
    std::vector<Axis> axes;
    for (const auto& p : m_spec->parameters) {
        std::vector<QJsonValue> values;
        for (const auto& t : r.trials) {
            if (t.metric && std::isfinite(*t.metric)) values.push_back(valuesOf(t).value(QString::fromStdString(p.path)));
        }
        axes.push_back(axisOf(QString::fromStdString(p.path), values));
    }
    std::vector<QJsonValue> metrics;
    for (const auto& t : r.trials) {
        if (t.metric && std::isfinite(*t.metric)) metrics.emplace_back(*t.metric);
    }
    Axis metricAxis = axisOf(QString::fromStdString(m_spec->metric), metrics);
    metricAxis.logScale = false;
    axes.push_back(metricAxis);
    QSharedPointer<QCPAxisTickerText> ticker(new QCPAxisTickerText);
    for (std::size_t i = 0; i < axes.size(); ++i) {
        ticker->addTick(static_cast<double>(i), axes[i].name);
        // The ends of each axis, in its own units.
        for (const bool top : {false, true}) {
            auto* label = new QCPItemText(m_coordinates);
            label->position->setCoords(static_cast<double>(i), top ? 1.04 : -0.04);
            label->setText(axes[i].numeric ? QString::number(top ? axes[i].hi : axes[i].lo, 'g', 3)
                                           : (axes[i].categories.isEmpty() ? QString()
                                                                           : top ? axes[i].categories.last() : axes[i].categories.first()));
            label->setFont(QFont(font().family(), 8));
        }
    }
    for (const auto& t : r.trials) {
        if (!t.metric || !std::isfinite(*t.metric)) continue;
        const auto values = valuesOf(t);
        auto* g = m_coordinates->addGraph();
        QVector<double> xs, ys;
        for (std::size_t i = 0; i + 1 < axes.size(); ++i) {
            xs << static_cast<double>(i);
            ys << axes[i].unit(values.value(axes[i].name));
        }
        xs << static_cast<double>(axes.size() - 1);
        ys << axes.back().unit(QJsonValue(*t.metric));
        g->setData(xs, ys, true);
        const bool best = t.trial == m_best;
        QColor colour = best ? QColor(0x1e, 0x84, 0x49) : t.status == "stopped" ? QColor(0xbb, 0xbb, 0xbb) : QColor(0x1f, 0x77, 0xb4);
        g->setPen(QPen(colour, best ? 3.5 : 1.5));
        g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCircle, 5));
    }
    m_coordinates->xAxis->setTicker(ticker);
    m_coordinates->xAxis->setRange(-0.3, static_cast<double>(axes.size()) - 0.7);
    m_coordinates->yAxis->setRange(-0.1, 1.1);
    m_coordinates->yAxis->setTickLabels(false);
    m_coordinates->yAxis->setLabel(tr("each axis from its lowest to its highest"));
    m_coordinates->replot();
}

void SweepDialog::stopSweep()
{
    const int index = m_sweeps->currentIndex();
    if (index < 0 || index >= static_cast<int>(m_records.size())) return;
    const auto id = m_records[static_cast<std::size_t>(index)].id;
    std::ifstream in(lockPath(id).toStdString());
    long pid = 0;
    std::string host;
    char here[256] = {0};
    gethostname(here, sizeof here - 1);
    // The pid is the runner's on the host it names (a store on a shared
    // folder can be another machine's).
    if (!(in >> pid >> host) || pid <= 0 || host != here || !sweepRunning(id) || kill(static_cast<pid_t>(pid), SIGINT) != 0) {
        m_status->setText(tr("Sweep %1 is not run by a process on this computer that the window can stop (a Slurm array's "
                             "tasks are stopped with scancel).")
                              .arg(id));
        return;
    }
    m_status->setText(tr("Stopping sweep %1: its running trials checkpoint and stop; Resume continues it.").arg(id));
    Q_EMIT message(m_status->text());
    QTimer::singleShot(1500, this, &SweepDialog::refresh);
}

void SweepDialog::resumeSweep()
{
    const int index = m_sweeps->currentIndex();
    if (index < 0 || index >= static_cast<int>(m_records.size())) return;
    const auto id = m_records[static_cast<std::size_t>(index)].id;
    QStringList args{"sweep", "--resume", QString::number(id), "--db", m_db};
    if (m_parallel->value() > 1) args << "--parallel" << QString::number(m_parallel->value());
    m_status->setStyleSheet(QString());
    m_status->setText(tr("Resuming sweep %1…").arg(id));
    launch(args, tr("resume the sweep"));
    m_timer->start();
}

} // namespace tb::ui
