#include "PlainText.h"
#include "HardwarePanel.h"
#include "Units.h"

#include <QComboBox>
#include <QFormLayout>
#include <QGridLayout>
#include <QGroupBox>
#include <QLabel>
#include <QProgressBar>
#include <QScrollArea>
#include <QSpinBox>
#include <QThread>
#include <QTimer>
#include <QVBoxLayout>

namespace tb::ui {
namespace {

// Polls NVML in its own thread; results cross to the GUI as queued signals of plain values.
class UsagePoller final : public QObject {
    Q_OBJECT

public:
    UsagePoller(std::shared_ptr<GpuDriver> driver, std::vector<int> indices)
        : m_driver(std::move(driver)), m_indices(std::move(indices))
    {
    }
    void start()
    {
        auto* timer = new QTimer(this);
        timer->setInterval(1000);
        connect(timer, &QTimer::timeout, this, &UsagePoller::poll);
        timer->start();
        poll();
    }

Q_SIGNALS:
    void usage(int index, qint64 freeBytes, qint64 usedBytes, int temperature, int utilization, double watts);

private:
    void poll()
    {
        for (int i : m_indices) {
            if (const auto u = m_driver->usage(i)) {
                Q_EMIT usage(i, u->freeBytes, u->usedBytes, u->temperatureC.value_or(-1),
                             u->utilizationPercent.value_or(-1), u->powerWatts.value_or(-1.0));
            }
        }
    }
    std::shared_ptr<GpuDriver> m_driver;
    std::vector<int> m_indices;
};


} // namespace

HardwarePanel::HardwarePanel(std::shared_ptr<GpuDriver> driver, const TorchCudaInfo& torch, QWidget* parent,
                             GpuTargetModel* targets)
    : QWidget(parent), m_driver(std::move(driver)), m_targets(targets ? targets : new GpuTargetModel(this))
{
    m_report = discoverGpus(*m_driver, torch);
    auto* content = new QWidget(this);
    auto* layout = new QVBoxLayout(content);

    auto* state = new QLabel(content);
    state->setWordWrap(true);
    state->setTextInteractionFlags(Qt::TextSelectableByMouse);
    state->setObjectName("gpuState");
    QString stateText = "<b>" + QString::fromStdString(m_report.summary).toHtmlEscaped() + "</b>";
    if (!m_report.fix.empty()) stateText += "<br>" + QString::fromStdString(m_report.fix).toHtmlEscaped();
    state->setText(stateText);
    layout->addWidget(state);
    std::vector<int> indices;
    for (const auto& d : m_report.devices) {
        layout->addWidget(deviceBox(d));
        indices.push_back(d.index);
    }

    auto* targetGroup = new QGroupBox(tr("Target GPU (for planning and preflight)"), content);
    m_targetLayout = new QVBoxLayout(targetGroup);
    auto* row = new QHBoxLayout;
    m_targetBox = new QComboBox(targetGroup);
    m_targetBox->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
    m_targetBox->setMinimumContentsLength(12);
    for (const auto& d : m_report.devices) {
        m_targetBox->addItem(tr("This machine: cuda:%1 %2").arg(d.index).arg(QString::fromStdString(d.name)),
                             QString("device:%1").arg(d.index));
    }
    for (const auto& g : GpuCatalogue::bundled().entries()) {
        m_targetBox->addItem(QString::fromStdString(g.name), QString::fromStdString("catalogue:" + g.id));
    }
    m_targetBox->setToolTip(tr("A detected device, or a GPU you will rent from the catalogue"));
    m_count = new QSpinBox(targetGroup);
    m_count->setRange(1, 16);
    m_count->setPrefix(tr("× "));
    m_count->setToolTip(tr("Number of GPUs (data parallel: each holds its own copy of the model)"));
    row->addWidget(m_targetBox, 1);
    row->addWidget(m_count);
    m_targetLayout->addLayout(row);
    m_targetDetails = new QLabel(targetGroup);
    m_targetDetails->setWordWrap(true);
    m_targetDetails->setMinimumWidth(200);
    m_targetLayout->addWidget(m_targetDetails);
    layout->addWidget(targetGroup);
    layout->addStretch(1);

    auto* scroll = new QScrollArea(this);
    scroll->setWidget(content);
    scroll->setWidgetResizable(true);
    scroll->setFrameShape(QFrame::NoFrame);
    scroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff); // wrap text to the dock's width instead
    auto* outer = new QVBoxLayout(this);
    outer->setContentsMargins(0, 0, 0, 0);
    outer->addWidget(scroll);

    connect(m_targetBox, &QComboBox::currentIndexChanged, this, &HardwarePanel::updateTarget);
    connect(m_count, &QSpinBox::valueChanged, this, &HardwarePanel::updateTarget);
    // Default target: the first detected device, else the T4 most free notebooks offer.
    if (m_report.devices.empty()) m_targetBox->setCurrentIndex(std::max(0, m_targetBox->findData("catalogue:t4")));
    updateTarget();

    if (!indices.empty()) {
        m_pollThread = new QThread(this);
        m_pollThread->setObjectName("nvml-poll");
        auto* poller = new UsagePoller(m_driver, indices);
        poller->moveToThread(m_pollThread);
        connect(m_pollThread, &QThread::started, poller, &UsagePoller::start);
        connect(m_pollThread, &QThread::finished, poller, &QObject::deleteLater);
        connect(poller, &UsagePoller::usage, this, &HardwarePanel::showUsage);
        m_pollThread->start();
    }
}

HardwarePanel::~HardwarePanel()
{
    if (m_pollThread) {
        m_pollThread->quit();
        m_pollThread->wait();
    }
}

QWidget* HardwarePanel::deviceBox(const DeviceInfo& d)
{
    auto* box = new QGroupBox(QString("cuda:%1  %2").arg(d.index).arg(QString::fromStdString(d.name)), this);
    auto* v = new QVBoxLayout(box);
    v->addWidget(new QLabel(tr("Compute capability %1 · %2 SMs · %3 total").arg(QString::fromStdString(d.cc.text())).arg(d.smCount).arg(gibText(d.totalBytes)), box));
    auto* bar = new QProgressBar(box);
    bar->setRange(0, 1000);
    bar->setFormat(tr("memory: waiting for NVML…"));
    bar->setValue(0);
    v->addWidget(bar);
    auto* sensors = plainLabel(box);
    v->addWidget(sensors);
    v->addWidget(capabilityGrid(d.cc));
    m_memoryBars.resize(std::max<std::size_t>(m_memoryBars.size(), d.index + 1), nullptr);
    m_sensorLabels.resize(std::max<std::size_t>(m_sensorLabels.size(), d.index + 1), nullptr);
    m_memoryBars[d.index] = bar;
    m_sensorLabels[d.index] = sensors;
    if (d.usage) {
        showUsage(d.index, d.usage->freeBytes, d.usage->usedBytes, d.usage->temperatureC.value_or(-1),
                  d.usage->utilizationPercent.value_or(-1), d.usage->powerWatts.value_or(-1));
    }
    return box;
}

QWidget* HardwarePanel::capabilityGrid(ComputeCapability cc)
{
    auto* grid = new QWidget(this);
    auto* g = new QGridLayout(grid);
    g->setContentsMargins(0, 4, 0, 0);
    int i = 0;
    for (const auto& a : capabilitiesOf(cc)) {
        // "bf16: no (compute capability 7.5 < 8.0)", a badge coloured by the answer.
        QString reason = QString::fromStdString(a.reason);
        reason.replace(" — ", " (");
        if (reason.contains('(')) reason += ")";
        auto* badge = plainLabel(grid, reason);
        badge->setObjectName("capability");
        badge->setToolTip(QString::fromStdString(a.title + ": " + a.meaning));
        badge->setStyleSheet(a.supported ? "QLabel { background: #1e8449; color: white; border-radius: 4px; padding: 2px 6px; }"
                                         : "QLabel { background: #7f8c8d; color: white; border-radius: 4px; padding: 2px 6px; }");
        badge->setWordWrap(true);
        g->addWidget(badge, i, 0);
        ++i;
    }
    return grid;
}

void HardwarePanel::showUsage(int index, qint64 freeBytes, qint64 usedBytes, int temperature, int utilization, double watts)
{
    if (index < 0 || index >= static_cast<int>(m_memoryBars.size()) || !m_memoryBars[index]) return;
    const qint64 total = freeBytes + usedBytes;
    m_memoryBars[index]->setValue(total > 0 ? static_cast<int>(1000 * usedBytes / total) : 0);
    m_memoryBars[index]->setFormat(tr("memory: %1 used of %2 (%3 free)").arg(gibText(usedBytes), gibText(total), gibText(freeBytes)));
    QStringList parts;
    if (temperature >= 0) parts << tr("%1 °C").arg(temperature);
    if (utilization >= 0) parts << tr("%1% busy").arg(utilization);
    if (watts >= 0) parts << tr("%1 W").arg(watts, 0, 'f', 0);
    m_sensorLabels[index]->setText(parts.join(" · "));
}

void HardwarePanel::updateTarget()
{
    const QString data = m_targetBox->currentData().toString();
    GpuTarget t;
    t.count = m_count->value();
    if (data.startsWith("remote:")) {
        // "remote:HOST:INDEX": what the host reported, with the catalogue's figures when it knows the card.
        const QString host = data.section(':', 1, -2);
        const int index = data.section(':', -1).toInt();
        for (const auto& g : m_remoteGpus[host]) {
            if (g.index != index) continue;
            try {
                t.gpu = GpuCatalogue::bundled().resolve(g.name).gpu;
            } catch (const std::exception&) {
                t.gpu = {};
            }
            t.gpu.id = "remote";
            t.gpu.name = g.name;
            if (auto cc = ComputeCapability::parse(g.computeCapability)) t.gpu.cc = *cc;
            t.gpu.memoryBytes = g.memoryBytes;
            t.gpu.memoryGib = static_cast<double>(g.memoryBytes) / 1073741824.0;
            t.gpu.source = "reported by " + host.toStdString() + " (Run > Hosts > Test connection)";
        }
    } else if (data.startsWith("device:")) {
        const int index = data.mid(7).toInt();
        for (const auto& d : m_report.devices) {
            if (d.index != index) continue;
            t.gpu.id = "device";
            t.gpu.name = d.name;
            t.gpu.cc = d.cc;
            t.gpu.memoryBytes = d.totalBytes;
            t.gpu.memoryGib = d.totalBytes / 1073741824.0;
            t.gpu.source = "detected on this machine";
        }
    } else {
        const std::string id = data.mid(10).toStdString();
        for (const auto& g : GpuCatalogue::bundled().entries()) {
            if (g.id == id) t.gpu = g;
        }
    }
    QString details = tr("%1 GiB per GPU as PyTorch reports it · compute capability %2")
                          .arg(t.gpu.memoryGib, 0, 'f', 2).arg(QString::fromStdString(t.gpu.cc.text()));
    if (t.gpu.bandwidthGbs > 0) {
        details += tr(" · %1 GB/s · fp32 %2 / fp16 %3 / bf16 %4 TFLOP/s")
                       .arg(t.gpu.bandwidthGbs).arg(t.gpu.fp32Tflops).arg(t.gpu.fp16Tflops).arg(t.gpu.bf16Tflops);
    }
    const PrecisionDecision p = decidePrecision("auto", t.gpu.cc);
    details += "<br>" + tr("Precision auto: <b>%1</b> — %2").arg(QString::fromStdString(p.precision),
                                                                  QString::fromStdString(p.reason).toHtmlEscaped());
    if (!t.gpu.source.empty()) details += "<br><i>" + QString::fromStdString(t.gpu.source).toHtmlEscaped() + "</i>";
    m_targetDetails->setText(details);
    if (m_targetCapabilities) {
        m_targetLayout->removeWidget(m_targetCapabilities);
        delete m_targetCapabilities;
    }
    m_targetCapabilities = capabilityGrid(t.gpu.cc);
    m_targetLayout->addWidget(m_targetCapabilities);
    m_targets->setTarget(t);
}

void HardwarePanel::setRemoteGpus(const QString& host, const std::vector<tb::remote::RemoteGpu>& gpus)
{
    const QString prefix = "remote:" + host + ":";
    const QString current = m_targetBox->currentData().toString();
    for (int i = m_targetBox->count() - 1; i >= 0; --i) {
        if (m_targetBox->itemData(i).toString().startsWith(prefix)) m_targetBox->removeItem(i);
    }
    m_remoteGpus[host] = gpus;
    // After this machine's devices, before the catalogue.
    int at = 0;
    while (at < m_targetBox->count() && !m_targetBox->itemData(at).toString().startsWith("catalogue:")) ++at;
    for (const auto& g : gpus) {
        m_targetBox->insertItem(at++, tr("On %1: cuda:%2 %3").arg(host).arg(g.index).arg(QString::fromStdString(g.name)),
                                prefix + QString::number(g.index));
    }
    const int keep = m_targetBox->findData(current);
    if (keep >= 0) m_targetBox->setCurrentIndex(keep);
    updateTarget();
}

bool HardwarePanel::selectTarget(const QString& text, QString* error)
{
    for (int i = 0; i < m_targetBox->count(); ++i) {
        if (m_targetBox->itemText(i).compare(text, Qt::CaseInsensitive) == 0) {
            m_count->setValue(1);
            m_targetBox->setCurrentIndex(i);
            return true;
        }
    }
    try {
        const GpuTarget t = GpuCatalogue::bundled().resolve(text.toStdString());
        const int i = m_targetBox->findData(QString::fromStdString("catalogue:" + t.gpu.id));
        m_targetBox->setCurrentIndex(i);
        m_count->setValue(t.count);
        return true;
    } catch (const std::exception& e) {
        if (error) *error = QString::fromStdString(e.what());
        return false;
    }
}

QStringList HardwarePanel::capabilityTexts() const
{
    QStringList texts;
    for (auto* label : findChildren<QLabel*>("capability")) texts << label->text();
    return texts;
}

} // namespace tb::ui

#include "HardwarePanel.moc"
