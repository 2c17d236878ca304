#include "store/MetricWriter.h"

namespace tb {

MetricWriter::MetricWriter(const std::string& dbPath, std::int64_t runId, std::chrono::milliseconds interval,
                           std::chrono::milliseconds giveUpAfter)
    : m_store(std::make_unique<RunStore>(dbPath)), m_runId(runId), m_interval(interval), m_giveUpAfter(giveUpAfter)
{
    m_thread = std::thread([this] { loop(); });
}

MetricWriter::~MetricWriter()
{
    {
        std::lock_guard<std::mutex> lock(m_mutex);
        m_stop = true;
        m_giveUpAt = std::min(m_giveUpAt, std::chrono::steady_clock::now() + m_giveUpAfter);
    }
    m_wake.notify_all();
    m_thread.join();
}

void MetricWriter::addMetric(int step, const std::string& key, double value)
{
    std::lock_guard<std::mutex> lock(m_mutex);
    m_metrics.push_back({m_runId, step, key, value, wallClockNow()});
    ++m_queuedGeneration;
}

void MetricWriter::addMetrics(int step, const std::vector<std::pair<std::string, double>>& values)
{
    const auto now = wallClockNow();
    std::lock_guard<std::mutex> lock(m_mutex);
    for (const auto& [key, value] : values) m_metrics.push_back({m_runId, step, key, value, now});
    ++m_queuedGeneration;
}

void MetricWriter::addEvent(const std::string& severity, const std::string& kind, const std::string& message)
{
    std::lock_guard<std::mutex> lock(m_mutex);
    m_events.push_back({m_runId, wallClockNow(), severity, kind, message});
    ++m_queuedGeneration;
}

void MetricWriter::setStepsDone(int steps)
{
    std::lock_guard<std::mutex> lock(m_mutex);
    m_stepsDone = steps;
}

void MetricWriter::flush()
{
    std::unique_lock<std::mutex> lock(m_mutex);
    const auto target = m_queuedGeneration;
    m_flushRequested = true;
    m_giveUpAt = std::min(m_giveUpAt, std::chrono::steady_clock::now() + m_giveUpAfter);
    m_wake.notify_all();
    m_written.wait(lock, [&] { return m_writtenGeneration >= target; });
    m_giveUpAt = std::chrono::steady_clock::time_point::max();
}

std::string MetricWriter::error() const
{
    std::lock_guard<std::mutex> lock(m_mutex);
    return m_error;
}

std::int64_t MetricWriter::lostValues() const
{
    std::lock_guard<std::mutex> lock(m_mutex);
    return m_lost;
}

bool MetricWriter::writePending(std::unique_lock<std::mutex>& lock)
{
    auto metrics = std::move(m_metrics);
    auto events = std::move(m_events);
    m_metrics.clear();
    m_events.clear();
    const auto generation = m_queuedGeneration;
    const int steps = m_stepsDone;
    lock.unlock();
    std::string failure;
    try {
        m_store->writeBatch(m_runId, metrics, events, steps);
    } catch (const std::exception& e) {
        failure = e.what();
    }
    lock.lock();
    if (failure.empty()) {
        m_writtenGeneration = generation;
        m_written.notify_all();
        return true;
    }
    if (std::chrono::steady_clock::now() >= m_giveUpAt) {
        // A flush (or the end of the run) waited long enough: drop this batch
        // and say so, rather than block the run forever.
        const auto lost = static_cast<std::int64_t>(metrics.size() + events.size());
        m_lost += lost;
        m_error = std::to_string(m_lost) + " metric values and events could not be stored (" + failure + ")";
        m_writtenGeneration = generation;
        m_written.notify_all();
        return true;
    }
    // Keep the batch, in order, ahead of what was queued meanwhile.
    metrics.insert(metrics.end(), m_metrics.begin(), m_metrics.end());
    events.insert(events.end(), m_events.begin(), m_events.end());
    m_metrics = std::move(metrics);
    m_events = std::move(events);
    return false;
}

void MetricWriter::loop()
{
    std::unique_lock<std::mutex> lock(m_mutex);
    auto lastWrite = std::chrono::steady_clock::now();
    auto wait = m_interval;
    while (true) {
        // Wake every interval (batching), or at once for a flush or stop;
        // after a failed write, back off (doubling, up to 4 s).
        m_wake.wait_for(lock, wait, [&] { return m_stop || m_flushRequested; });
        m_flushRequested = false;
        const bool pending = m_queuedGeneration != m_writtenGeneration;
        const auto now = std::chrono::steady_clock::now();
        // With nothing queued, only a heartbeat about once a second.
        if (pending || m_stop || now - lastWrite >= std::chrono::seconds(1)) {
            const bool ok = writePending(lock);
            lastWrite = now;
            wait = ok ? m_interval : std::min<std::chrono::milliseconds>(std::max(wait * 2, m_interval), std::chrono::seconds(4));
            if (!ok) {
                // Retry later even if a flush or stop is waiting.
                lock.unlock();
                std::this_thread::sleep_for(std::min<std::chrono::milliseconds>(wait, std::chrono::milliseconds(500)));
                lock.lock();
                continue;
            }
        }
        if (m_stop && m_queuedGeneration == m_writtenGeneration) return;
    }
}

} // namespace tb
