// Whether the process that owns a run is still there.
#include "store/RunLiveness.h"

#include "common/Files.h"

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <signal.h>
#include <unistd.h>

namespace tb::store_detail {

// Start time of a process in clock ticks since boot (field 22 of
// /proc/PID/stat): with the pid it identifies a process across pid reuse.
// Empty when the process does not exist or is a zombie.
std::string processStartTime(long pid)
{
    // readSmallFile: the process may exit while its stat is read.
    const std::string text = readSmallFile("/proc/" + std::to_string(pid) + "/stat");
    const std::string line = text.substr(0, text.find('\n'));
    if (line.empty()) return {};
    const auto close = line.rfind(')');
    if (close == std::string::npos) return {};
    std::istringstream fields(line.substr(close + 2));
    std::string field, state;
    fields >> state;
    if (state == "Z" || state == "X") return {};
    // After the state come fields 4..; the start time is field 22.
    for (int i = 4; i <= 22 && (fields >> field); ++i) {
    }
    return field;
}

// The PID namespace of this process ("pid:[4026531836]"); empty when /proc
// is not readable. Pids of two processes compare only within one namespace.
std::string pidNamespace()
{
    std::error_code ec;
    const auto target = std::filesystem::read_symlink("/proc/self/ns/pid", ec);
    return ec ? std::string() : target.string();
}

// Whether the process `pid` that started at `start` (clock ticks since boot)
// still runs. Unknown when pids cannot be compared from here: /proc hidden
// (hidepid) or unreadable, or the owner in another PID namespace.
Liveness processLiveness(long pid, const std::string& start, const std::string& ownerNamespace)
{
    const std::string ours = pidNamespace();
    if (pid <= 0 || ours.empty() || ownerNamespace != ours) return Liveness::Unknown;
    if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return Liveness::Dead;
    // The pid exists (or we may not signal it): compare its start time to
    // tell it from a later process that reused the pid.
    if (!std::ifstream("/proc/" + std::to_string(pid) + "/stat")) return Liveness::Unknown;
    const auto now = processStartTime(pid);
    if (now.empty()) return Liveness::Dead; // a zombie
    return now == start ? Liveness::Alive : Liveness::Dead;
}

std::string hostName()
{
    char name[256] = {};
    if (gethostname(name, sizeof(name) - 1) != 0) return "unknown";
    return name;
}

bool ownerGone(const RunOwner& owner, double now)
{
    Liveness live = Liveness::Unknown;
    if (owner.pid && owner.host == hostName()) {
        live = processLiveness(static_cast<long>(*owner.pid), owner.start.value_or(""), owner.pidns);
    }
    // In doubt (another machine, another PID namespace, /proc hidden): the
    // heartbeat's age decides.
    if (live == Liveness::Unknown) {
        return !(owner.heartbeatAt && now - *owner.heartbeatAt < RunStore::kHeartbeatTimeoutSeconds);
    }
    return live == Liveness::Dead;
}

std::string interruptedMessage(std::int64_t runId, const std::optional<std::int64_t>& pid)
{
    return "the process running it (pid " + (pid ? std::to_string(*pid) : std::string("unknown"))
        + ") stopped without finishing; resume it with 'trainbench-cli resume " + std::to_string(runId) + "'";
}

} // namespace tb::store_detail
