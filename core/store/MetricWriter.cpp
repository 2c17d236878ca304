#include "store/MetricWriter.h"

namespace tb {

MetricWriter::MetricWriter(const std::string& dbPath, std::int64_t runId, std::chrono::milliseconds interval)
    : m_store(std::make_unique<RunStore>(dbPath)), m_runId(runId), m_interval(interval)
{
    m_thread = std::thread([this] { loop(); });
}

MetricWriter::~MetricWriter()
{
    {
        std::lock_guard<std::mutex> lock(m_mutex);
        m_stop = true;
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
    m_wake.notify_all();
    m_written.wait(lock, [&] { return m_writtenGeneration >= target || m_stop; });
}

std::string MetricWriter::error() const
{
    std::lock_guard<std::mutex> lock(m_mutex);
    return m_error;
}

void MetricWriter::writePending(std::unique_lock<std::mutex>& lock)
{
    auto metrics = std::move(m_metrics);
    auto events = std::move(m_events);
    m_metrics.clear();
    m_events.clear();
    const auto generation = m_queuedGeneration;
    const int steps = m_stepsDone;
    lock.unlock();
    std::string error;
    try {
        m_store->appendMetrics(metrics);
        for (const auto& e : events) m_store->addEvent(e);
        m_store->heartbeat(m_runId, steps);
    } catch (const std::exception& e) {
        error = e.what();
    }
    lock.lock();
    if (!error.empty() && m_error.empty()) m_error = error;
    m_writtenGeneration = generation;
    m_written.notify_all();
}

void MetricWriter::loop()
{
    std::unique_lock<std::mutex> lock(m_mutex);
    auto lastWrite = std::chrono::steady_clock::now();
    while (true) {
        // Wake every interval (batching), or at once for a flush or stop.
        m_wake.wait_for(lock, m_interval, [&] { return m_stop || m_flushRequested; });
        m_flushRequested = false;
        const bool pending = m_queuedGeneration != m_writtenGeneration;
        const auto now = std::chrono::steady_clock::now();
        // With nothing queued, only a heartbeat about once a second.
        if (pending || m_stop || now - lastWrite >= std::chrono::seconds(1)) {
            writePending(lock);
            lastWrite = now;
        }
        if (m_stop) return;
    }
}

} // namespace tb
