#pragma once
// A stored metric's name where the window shows it (an axis, a list): one
// table for the Run tab's lower plot and History's overlays.

#include <QCoreApplication>
#include <QString>

#include <map>

namespace tb::ui {

inline QString metricLabel(const QString& key)
{
    static const std::map<QString, const char*> names{
        {"loss", QT_TRANSLATE_NOOP("MetricNames", "training loss")},
        {"val_loss", QT_TRANSLATE_NOOP("MetricNames", "validation loss")},
        {"val_accuracy", QT_TRANSLATE_NOOP("MetricNames", "validation exact match")},
        {"lr", QT_TRANSLATE_NOOP("MetricNames", "learning rate")},
        {"grad_norm", QT_TRANSLATE_NOOP("MetricNames", "gradient norm")},
        {"tokens_per_s", QT_TRANSLATE_NOOP("MetricNames", "tokens/s")},
        {"step_ms", QT_TRANSLATE_NOOP("MetricNames", "step time (ms)")},
        {"mem_peak_bytes", QT_TRANSLATE_NOOP("MetricNames", "peak tensor memory (MiB)")},
        {"mem_current_bytes", QT_TRANSLATE_NOOP("MetricNames", "tensor memory (MiB)")},
        {"sys_cpu_percent", QT_TRANSLATE_NOOP("MetricNames", "CPU use (% of one core)")},
        {"sys_host_rss_bytes", QT_TRANSLATE_NOOP("MetricNames", "host memory of the run (MiB)")},
        {"sys_gpu_util_percent", QT_TRANSLATE_NOOP("MetricNames", "GPU utilisation (%)")},
        {"sys_gpu_mem_bytes", QT_TRANSLATE_NOOP("MetricNames", "GPU memory in use (MiB)")},
        {"sys_gpu_power_w", QT_TRANSLATE_NOOP("MetricNames", "GPU power (W)")},
    };
    const auto it = names.find(key);
    if (it != names.end()) return QCoreApplication::translate("MetricNames", it->second);
    return key.endsWith("_bytes") ? key + " (MiB)" : key; // any other key, as stored
}

} // namespace tb::ui
