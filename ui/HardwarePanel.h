#pragma once
// What the GPU can do: devices detected here (live memory bars, NVML polled
// about once a second off the GUI thread), capability answers with their
// reasons, a plain statement when no GPU is usable, and the Target GPU
// selector (a detected device, or a catalogue entry x count) that planning
// and preflight use.

#include <QWidget>

#include <memory>

#include <map>
#include <vector>

#include "gpu/Catalogue.h"
#include "GpuTargetModel.h"
#include "gpu/Discovery.h"
#include "remote/HostCheck.h"

class QComboBox;
class QLabel;
class QProgressBar;
class QSpinBox;
class QThread;
class QVBoxLayout;

namespace tb::ui {

class HardwarePanel final : public QWidget {
    Q_OBJECT

public:
    // `targets`: where the chosen target goes (the window's one model); a
    // model of its own when none is given.
    HardwarePanel(std::shared_ptr<GpuDriver> driver, const TorchCudaInfo& torch, QWidget* parent = nullptr,
                  GpuTargetModel* targets = nullptr);
    ~HardwarePanel() override;

    const GpuReport& report() const { return m_report; }
    // The current target: a catalogue GPU and count, or a detected device
    // described in catalogue terms.
    const GpuTarget& target() const { return m_targets->target(); }
    GpuTargetModel* targets() const { return m_targets; }
    // Selects a target by name ("2xT4", "A100", a detected device's name).
    bool selectTarget(const QString& text, QString* error = nullptr);
    // The GPUs a host reported (Run > Hosts > Test): targets "On HOST: cuda:N NAME",
    // so planning and preflight plan against the real remote card.
    void setRemoteGpus(const QString& host, const std::vector<tb::remote::RemoteGpu>& gpus);
    // All visible capability lines, for tests and screen readers.
    QStringList capabilityTexts() const;

private:
    QWidget* deviceBox(const DeviceInfo& device);
    QWidget* capabilityGrid(ComputeCapability cc);
    void updateTarget();
    void showUsage(int index, qint64 freeBytes, qint64 usedBytes, int temperature, int utilization, double watts);

    std::shared_ptr<GpuDriver> m_driver;
    GpuReport m_report;
    GpuTargetModel* m_targets;
    QComboBox* m_targetBox;
    QSpinBox* m_count;
    QLabel* m_targetDetails;
    QWidget* m_targetCapabilities = nullptr;
    QVBoxLayout* m_targetLayout;
    std::vector<QProgressBar*> m_memoryBars;
    std::vector<QLabel*> m_sensorLabels;
    QThread* m_pollThread = nullptr;
    std::map<QString, std::vector<tb::remote::RemoteGpu>> m_remoteGpus;
};

} // namespace tb::ui
