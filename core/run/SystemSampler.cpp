#include "run/SystemSampler.h"

#include <sys/resource.h>
#include <unistd.h>

#include <fstream>

#include "gpu/Discovery.h"

namespace tb {
namespace {

double processCpuSeconds()
{
    rusage u{};
    if (::getrusage(RUSAGE_SELF, &u) != 0) return 0;
    return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

std::int64_t residentBytes()
{
    std::ifstream statm("/proc/self/statm");
    std::int64_t size = 0, resident = 0;
    if (!(statm >> size >> resident)) return -1;
    return resident * static_cast<std::int64_t>(::sysconf(_SC_PAGESIZE));
}

} // namespace

SystemSampler::SystemSampler(int cudaIndex, std::chrono::milliseconds every)
    : m_cudaIndex(cudaIndex), m_every(every), m_last(std::chrono::steady_clock::now()), m_lastCpuSeconds(processCpuSeconds())
{
}

SystemSampler::~SystemSampler() = default;

std::vector<std::pair<std::string, double>> SystemSampler::sampleIfDue()
{
    const auto now = std::chrono::steady_clock::now();
    if (m_sampled && now - m_last < m_every) return {};
    std::vector<std::pair<std::string, double>> out;
    const double wall = std::chrono::duration<double>(now - m_last).count();
    const double cpu = processCpuSeconds();
    if (wall > 0) out.emplace_back(kCpuPercent, 100.0 * (cpu - m_lastCpuSeconds) / wall);
    if (const auto rss = residentBytes(); rss >= 0) out.emplace_back(kHostRssBytes, static_cast<double>(rss));
    if (m_cudaIndex >= 0) {
        if (!m_driver) m_driver = makeNvidiaDriver();
        if (m_driver && m_driver->loaded()) {
            if (const auto usage = m_driver->usage(m_cudaIndex)) {
                out.emplace_back(kGpuMemBytes, static_cast<double>(usage->usedBytes));
                if (usage->utilizationPercent) out.emplace_back(kGpuUtilPercent, *usage->utilizationPercent);
                if (usage->powerWatts) out.emplace_back(kGpuPowerWatts, *usage->powerWatts);
            }
        }
    }
    m_last = now;
    m_lastCpuSeconds = cpu;
    m_sampled = true;
    return out;
}

} // namespace tb
