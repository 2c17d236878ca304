#pragma once
// Batching writer: the training thread queues metrics and events (a mutex and
// a vector push, never a database call); a background thread writes them in
// one transaction every interval, with a heartbeat, so a hard kill loses at
// most the last interval of metrics. A batch that cannot be written (the
// database locked by another process, the disk full) is kept and retried with
// backoff; only a flush that still fails after `giveUpAfter` drops it, and
// then error() and lostValues() say what was lost.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "store/RunStore.h"

namespace tb {

class MetricWriter final {
public:
    MetricWriter(const std::string& dbPath, std::int64_t runId,
                 std::chrono::milliseconds interval = std::chrono::milliseconds(250),
                 std::chrono::milliseconds giveUpAfter = std::chrono::seconds(60));
    ~MetricWriter(); // writes what is queued, then stops
    MetricWriter(const MetricWriter&) = delete;
    MetricWriter& operator=(const MetricWriter&) = delete;

    void addMetric(int step, const std::string& key, double value);
    // The values of one step, queued together: they reach the database in
    // the same transaction, so a reader never sees half of a step.
    void addMetrics(int step, const std::vector<std::pair<std::string, double>>& values);
    void addEvent(const std::string& severity, const std::string& kind, const std::string& message);
    void setStepsDone(int steps);
    // Blocks until everything queued before the call is in the database, or
    // was given up after retrying for `giveUpAfter`.
    void flush();
    // Empty unless something was lost: how much, and the database's reason.
    std::string error() const;
    // Metric values and events given up so far.
    std::int64_t lostValues() const;

private:
    void loop();
    // Returns false when the batch failed and was put back for a retry.
    bool writePending(std::unique_lock<std::mutex>& lock);

    std::unique_ptr<RunStore> m_store;
    std::int64_t m_runId;
    std::chrono::milliseconds m_interval, m_giveUpAfter;
    std::chrono::steady_clock::time_point m_giveUpAt = std::chrono::steady_clock::time_point::max();
    mutable std::mutex m_mutex;
    std::condition_variable m_wake, m_written;
    std::vector<MetricPoint> m_metrics;
    std::vector<EventRecord> m_events;
    int m_stepsDone = 0;
    std::uint64_t m_queuedGeneration = 0, m_writtenGeneration = 0;
    bool m_stop = false;
    bool m_flushRequested = false;
    std::string m_error;
    std::int64_t m_lost = 0;
    std::thread m_thread;
};

} // namespace tb
