#pragma once
// Liveness of a run's owner (internal to core/store). A run being trained
// records its process (pid, start time, host, PID namespace) and a heartbeat;
// every reader of the store (runs, export, compare, follow, History) and the
// reconciliation that writes "interrupted" judge it with ownerGone().

#include <cstdint>
#include <optional>
#include <string>

#include "store/RunStore.h"

namespace tb::store_detail {

enum class Liveness { Alive, Dead, Unknown };

struct RunOwner {
    std::optional<std::int64_t> pid;
    std::optional<std::string> start, host;
    std::string pidns;
    std::optional<double> heartbeatAt;
};

// Start time of a process in clock ticks since boot; empty when the process
// does not exist or is a zombie.
std::string processStartTime(long pid);
// The PID namespace of this process; empty when /proc is not readable.
std::string pidNamespace();
std::string hostName();
// Whether the process `pid` that started at `start` still runs; Unknown when
// pids cannot be compared from here.
Liveness processLiveness(long pid, const std::string& start, const std::string& ownerNamespace);
// Whether a run's owner is gone: by pid and start time where pids compare
// (this host, this PID namespace, /proc readable), else by the heartbeat,
// older than RunStore::kHeartbeatTimeoutSeconds.
bool ownerGone(const RunOwner& owner, double now);
// The message of a run found interrupted.
std::string interruptedMessage(std::int64_t runId, const std::optional<std::int64_t>& pid);

} // namespace tb::store_detail
