// The Run tab's widgets and its two worker threads (local training, runs on
// a host); what they do is in RunPanel.cpp.
#include "RunPanel.h"

#include <QCheckBox>
#include <QComboBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QMessageBox>
#include <QPlainTextEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QSlider>
#include <QSplitter>
#include <QTextDocument>
#include <QThread>
#include <QVBoxLayout>

#include "LossPlot.h"
#include "MetricPlot.h"
#include "PlainText.h"
#include "SampleBox.h"

namespace tb::ui {

void RunPanel::buildControls(QVBoxLayout* layout)
{
    m_start = new QPushButton(tr("Start"), this);
    m_start->setToolTip(tr("Start training with this config (Ctrl+R)"));
    m_stop = new QPushButton(tr("Stop"), this);
    m_stop->setToolTip(tr("Stop after the current step and save a checkpoint (Ctrl+.)"));
    m_stop->setEnabled(false);
    m_hostBox = new QComboBox(this);
    m_hostBox->setToolTip(tr("Where Start trains: this computer, or a GPU server saved in Run ▸ Hosts… (over ssh; "
                             "data and model paths in the config then name files there)"));
    m_hostBox->setSizeAdjustPolicy(QComboBox::AdjustToContents);
    m_sendData = new QCheckBox(tr("send data"), this);
    m_sendData->setToolTip(tr("Copy the config's data file from this computer to the host before training there "
                              "(checked by SHA-256; not sent again while the host has it)"));
    m_sendData->setVisible(false);
    connect(m_hostBox, &QComboBox::currentIndexChanged, this, [this] { updateStartButton(); });
    // The reason and the status keep their space whether or not they have
    // text, so the plots do not shrink when "Cannot start" or the end-of-run
    // summary appears: one line for the reason (the whole text in its
    // tooltip), two for the status.
    m_reason = plainLabel(this);
    m_reason->setWordWrap(false);
    m_reason->setStyleSheet("color: #c0392b");
    QSizePolicy keep = m_reason->sizePolicy();
    keep.setRetainSizeWhenHidden(true);
    keep.setHorizontalPolicy(QSizePolicy::Ignored); // a long reason is clipped, not widening the window
    m_reason->setSizePolicy(keep);
    m_preflight = plainLabel(this, tr("Preflight: checking…"));
    m_preflight->setToolTip(tr("Preflight for a launch on this machine; the Diagnostics tab (Ctrl+4) lists the findings"));
    m_progress = new QProgressBar(this);
    m_progress->setFormat(tr("no run"));
    m_progress->setValue(0);
    m_loss = new QLabel(tr("loss –"), this);
    m_rate = new QLabel(tr("– tokens/s"), this);
    m_time = new QLabel(tr("elapsed – · ETA –"), this);
    m_status = plainLabel(this);
    m_status->setWordWrap(true);
    m_status->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_status->setFixedHeight(2 * m_status->fontMetrics().lineSpacing() + 4);
    m_status->setAlignment(Qt::AlignLeft | Qt::AlignTop);

    auto* buttons = new QHBoxLayout;
    buttons->addWidget(m_start);
    buttons->addWidget(m_stop);
    buttons->addWidget(new QLabel(tr("on"), this));
    buttons->addWidget(m_hostBox);
    buttons->addWidget(m_sendData);
    buttons->addWidget(m_preflight);
    buttons->addWidget(m_progress, 1);
    auto* stats = new QHBoxLayout;
    for (QLabel* l : {m_loss, m_rate, m_time}) {
        QFont f = l->font();
        f.setPointSizeF(f.pointSizeF() * 1.1);
        l->setFont(f);
        stats->addWidget(l);
        stats->addSpacing(16);
    }
    stats->addStretch(1);

    layout->addLayout(buttons);
    layout->addWidget(m_reason);
    layout->addLayout(stats);
    layout->addWidget(m_status);
}

QWidget* RunPanel::buildPlots()
{
    m_lossPlot = new LossPlot(this);
    m_memoryPlot = new MemoryPlot(this);
    m_scalarPlot = new ScalarPlot(this);
    m_scalarPlot->hide();
    // One step axis: the plots span the same steps (validation at step 0 included).
    m_lossPlot->shareKeyRangeWith(m_memoryPlot);
    m_lossPlot->shareKeyRangeWith(m_scalarPlot);
    m_lowerPlot = new QComboBox(this);
    m_lowerPlot->setAccessibleName(tr("Lower plot"));
    m_lowerPlot->setToolTip(tr("What the lower plot shows: tensor memory with the planner's estimate, or another "
                               "scalar the run records each step"));
    m_lowerPlot->addItem(tr("tensor memory"), -1);
    for (int m = 0; m < ScalarPlot::kMetrics; ++m) m_lowerPlot->addItem(ScalarPlot::label(static_cast<ScalarPlot::Metric>(m)), m);
    connect(m_lowerPlot, &QComboBox::currentIndexChanged, this, [this] {
        const int metric = m_lowerPlot->currentData().toInt();
        m_memoryPlot->setVisible(metric < 0);
        m_scalarPlot->setVisible(metric >= 0);
        if (metric >= 0) m_scalarPlot->setShown(static_cast<ScalarPlot::Metric>(metric));
    });
    m_smoothing = new QSlider(Qt::Horizontal, this);
    m_smoothing->setRange(0, 99);
    m_smoothing->setValue(90);
    m_smoothing->setMaximumWidth(160);
    m_smoothing->setToolTip(tr("Exponential smoothing of the training loss"));
    m_logScale = new QCheckBox(tr("log scale"), this);
    auto* plotControls = new QHBoxLayout;
    plotControls->addWidget(new QLabel(tr("Smoothing"), this));
    plotControls->addWidget(m_smoothing);
    plotControls->addSpacing(12);
    plotControls->addWidget(m_logScale);
    plotControls->addSpacing(12);
    plotControls->addWidget(new QLabel(tr("below:"), this));
    plotControls->addWidget(m_lowerPlot);
    plotControls->addStretch(1);
    plotControls->addWidget(new QLabel(tr("drag to pan · wheel to zoom · double-click to fit · right-click to export"), this));

    m_log = new QPlainTextEdit(this);
    m_log->setObjectName("eventLog");
    m_log->setReadOnly(true);
    m_log->setMaximumBlockCount(5000);
    m_log->setPlaceholderText(tr("Run events (started, checkpoints, warnings, errors) appear here."));
    // Eight lines at least (it was four, too few to read a failure's events).
    m_log->setMinimumHeight(8 * m_log->fontMetrics().lineSpacing() + 2 * m_log->frameWidth()
                            + static_cast<int>(2 * m_log->document()->documentMargin()));

    auto* plots = new QWidget(this);
    auto* plotLayout = new QVBoxLayout(plots);
    plotLayout->setContentsMargins(0, 0, 0, 0);
    plotLayout->addLayout(plotControls);
    plotLayout->addWidget(m_lossPlot, 3);
    plotLayout->addWidget(m_memoryPlot, 2);
    plotLayout->addWidget(m_scalarPlot, 2);
    // The events and the Sample box side by side under the plots: stacked,
    // they left the two plots about 100 px each in a 1280x720 window.
    m_sample = new SampleBox(this);
    auto* bottom = new QWidget(this);
    auto* bottomLayout = new QHBoxLayout(bottom);
    bottomLayout->setContentsMargins(0, 0, 0, 0);
    bottomLayout->addWidget(m_log, 3);
    bottomLayout->addWidget(m_sample, 2);
    auto* splitter = new QSplitter(Qt::Vertical, this);
    splitter->addWidget(plots);
    splitter->addWidget(bottom);
    splitter->setStretchFactor(0, 4);
    splitter->setStretchFactor(1, 1);
    return splitter;
}

void RunPanel::startWorkers()
{
    // Worker-object pattern: no parent, moved to its own thread, deleted with it.
    m_thread = new QThread(this);
    m_thread->setObjectName("training");
    m_worker = new TrainingWorker;
    m_worker->moveToThread(m_thread);
    connect(m_thread, &QThread::finished, m_worker, &QObject::deleteLater);
    connect(m_worker, &TrainingWorker::started, this, &RunPanel::onStarted);
    connect(m_worker, &TrainingWorker::finished, this, &RunPanel::onFinished);
    connect(m_worker, &TrainingWorker::refused, this, &RunPanel::onRefused);
    connect(m_worker, &TrainingWorker::refusedByPreflight, this, &RunPanel::onRefusedByPreflight);
    m_askOverride = [this](const QString& findings) {
        return QMessageBox::warning(this, tr("Preflight found errors"),
                                    tr("Preflight expects this run to fail:\n\n%1\n\nLaunch anyway? The override is "
                                       "recorded with the run.").arg(findings),
                                    QMessageBox::Yes | QMessageBox::Cancel, QMessageBox::Cancel)
            == QMessageBox::Yes;
    };
    // Repaint at most ~30 times a second, whatever the step rate.
    m_drainTimer.setSingleShot(true);
    m_drainTimer.setInterval(33);
    connect(&m_drainTimer, &QTimer::timeout, this, &RunPanel::drainProgress);
    connect(m_worker, &TrainingWorker::progressAvailable, this, [this] {
        if (!m_drainTimer.isActive()) m_drainTimer.start();
    });
    m_thread->start();

    // Runs on a host: launched, followed and stopped over ssh from their own thread.
    m_remoteThread = new QThread(this);
    m_remoteThread->setObjectName("remote");
    m_remote = new RemoteRunWorker;
    m_remote->moveToThread(m_remoteThread);
    connect(m_remoteThread, &QThread::finished, m_remote, &QObject::deleteLater);
    connect(m_remote, &RemoteRunWorker::started, this, &RunPanel::onRemoteStarted);
    connect(m_remote, &RemoteRunWorker::finished, this, &RunPanel::onFinished);
    connect(m_remote, &RemoteRunWorker::refused, this, &RunPanel::onRefused);
    connect(m_remote, &RemoteRunWorker::linkChanged, this, &RunPanel::onLink);
    connect(m_remote, &RemoteRunWorker::progressAvailable, this, [this] {
        if (!m_drainTimer.isActive()) m_drainTimer.start();
    });
    m_remoteThread->start();
}

} // namespace tb::ui
