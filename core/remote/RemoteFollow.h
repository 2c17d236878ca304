#pragma once
// Following a run on a host: the remote trainbench-cli's 'follow --jsonl'
// stream over one long-lived ssh connection (nothing crosses the link while
// the run is quiet but ssh's keep-alive), reconnecting with backoff after a
// dropped link and resuming where it left off: every metric point and event
// is handed on exactly once. The CLI prints it; the GUI plots it.

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "remote/HostBook.h"

namespace tb::remote {

// One record of 'trainbench-cli follow --jsonl'.
struct FollowRecord {
    enum class Type { Metric, Event, Status, End };
    Type type = Type::Metric;
    std::int64_t run = 0;
    int step = 0;                  // Metric
    std::string key;               // Metric
    double value = 0;              // Metric
    double time = 0;               // Metric, Event: when it was recorded (seconds since the epoch)
    std::int64_t eventId = 0;      // Event: its row in the store, in order
    std::string severity, kind;    // Event
    std::string message;           // Event, End
    std::string status;            // Status, End: the run's status name
    int stepsDone = 0, stepsTotal = 0; // Status, End
    std::optional<double> finalLoss, finalValLoss; // End
};
std::string followRecordToJson(const FollowRecord& record);
// nullopt for a line that is not a follow record.
std::optional<FollowRecord> followRecordFromJson(const std::string& line);

enum class LinkState { Connected, Reconnecting, Lost };
std::string linkStateName(LinkState state);

struct RemoteFollowOptions {
    int fromStep = 0;
    std::int64_t eventsAfter = -1;
    int giveUpAfterS = 600; // a link down this long ends the follow (LinkState::Lost)
};

class RemoteFollower final {
public:
    RemoteFollower(Host host, std::int64_t runId, RemoteFollowOptions options = {});
    // Follows until the run ends (returns its status name: finished, failed,
    // cancelled, interrupted), the link stays down past giveUpAfterS or
    // cancel() is called (returns ""). `onRecord` gets each record once;
    // `onLink` each change of the link, with how long it has been down and
    // what ssh said. InputError when the first connection fails or a
    // failure cannot pass by itself (host key, login, no such run).
    std::string run(const std::function<void(const FollowRecord&)>& onRecord,
                    const std::function<void(LinkState, int downSeconds, const std::string& said)>& onLink = {});
    // Thread-safe: ends run() soon (the ssh client is stopped).
    void cancel();
    int lastStep() const { return m_maxStep; }

private:
    Host m_host;
    std::int64_t m_runId;
    RemoteFollowOptions m_options;
    std::atomic<bool> m_cancelled{false};
    std::atomic<int> m_sshPid{0};
    int m_maxStep = -1;
};

} // namespace tb::remote
