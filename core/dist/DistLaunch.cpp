#include "dist/DistLaunch.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "common/Errors.h"

namespace tb {
namespace {

std::optional<long long> parseInteger(const char* text)
{
    if (!text || !*text) return std::nullopt;
    errno = 0;
    char* end = nullptr;
    const long long v = std::strtoll(text, &end, 10);
    if (errno != 0 || *end != '\0') return std::nullopt;
    return v;
}

} // namespace

std::string DistLaunch::describe() const
{
    return "rank " + std::to_string(rank) + " of " + std::to_string(worldSize) + " (" + launcher + ", " + masterAddr + ":"
        + std::to_string(masterPort) + ")";
}

int slurmPortForJob(long long jobId)
{
    // Above the ephemeral range Linux hands out by default (32768-60999) is
    // too little room; below it, 15000 ports starting at 15000 are rarely taken.
    return 15000 + static_cast<int>(jobId % 15000);
}

std::string firstSlurmHost(const std::string& nodeList)
{
    if (nodeList.find_first_of("[,") == std::string::npos) return nodeList;
    // scontrol knows every form of Slurm's host lists; a regex would not.
    std::string command = "scontrol show hostnames '";
    for (char c : nodeList) {
        if (c == '\'') throw InputError("SLURM_JOB_NODELIST \"" + nodeList + "\" is not a Slurm host list");
        command += c;
    }
    command += "' 2>/dev/null";
    FILE* pipe = popen(command.c_str(), "r");
    if (!pipe) throw InputError("cannot run scontrol to expand SLURM_JOB_NODELIST \"" + nodeList + "\"");
    char line[512] = {0};
    const bool got = std::fgets(line, sizeof line, pipe) != nullptr;
    pclose(pipe);
    std::string host = got ? std::string(line) : std::string();
    while (!host.empty() && (host.back() == '\n' || host.back() == '\r' || host.back() == ' ')) host.pop_back();
    if (host.empty()) {
        throw InputError("SLURM_JOB_NODELIST is \"" + nodeList
                         + "\" and 'scontrol show hostnames' did not expand it: set MASTER_ADDR to the first node's address");
    }
    return host;
}

std::optional<DistLaunch> distLaunchFromEnvironment(const std::function<const char*(const char*)>& getIn,
                                                    const std::function<std::string(const std::string&)>& hostnamesIn)
{
    const auto get = getIn ? getIn : [](const char* name) -> const char* { return std::getenv(name); };
    const auto hostnamesOf = hostnamesIn ? hostnamesIn : firstSlurmHost;
    const auto set = [&](const char* name) {
        const char* v = get(name);
        return v && *v;
    };
    // An integer variable, checked; `fallback` names Slurm's equivalent.
    const auto integer = [&](const char* name, const char* fallback, long long low, long long high) -> std::optional<long long> {
        const char* used = set(name) ? name : (fallback && set(fallback) ? fallback : nullptr);
        if (!used) return std::nullopt;
        const auto v = parseInteger(get(used));
        if (!v || *v < low || *v > high) {
            throw InputError(std::string(used) + " is \"" + get(used) + "\": it must be a whole number from "
                             + std::to_string(low) + " to " + std::to_string(high));
        }
        return v;
    };

    // srun sets SLURM_STEP_NUM_TASKS for the tasks of a step; the batch
    // script itself (one process) has only the allocation's SLURM_NTASKS.
    const bool underTorchrun = set("TORCHELASTIC_RUN_ID") || set("TORCHELASTIC_RESTART_COUNT") || set("GROUP_RANK");
    const bool underSrun = set("SLURM_PROCID") && set("SLURM_STEP_NUM_TASKS");
    if (!set("WORLD_SIZE") && !underSrun) {
        if (set("RANK") || set("MASTER_PORT") || set("LOCAL_RANK")) {
            // Half a launch environment: say what is missing rather than train alone.
            if (set("RANK")) {
                throw InputError(std::string("RANK is \"") + get("RANK")
                                 + "\" but WORLD_SIZE is not set: set both (and MASTER_ADDR, MASTER_PORT), or unset RANK to train in one process");
            }
        }
        return std::nullopt;
    }
    DistLaunch d;
    d.launcher = set("TRAINBENCH_NPROC") ? "trainbench-cli --nproc" : underTorchrun ? "torchrun" : underSrun && !set("WORLD_SIZE") ? "srun" : "the environment";
    const auto world = integer("WORLD_SIZE", "SLURM_STEP_NUM_TASKS", 1, 65536);
    d.worldSize = static_cast<int>(*world);
    const auto rank = integer("RANK", "SLURM_PROCID", 0, 65535);
    if (!rank) {
        if (d.worldSize == 1) return std::nullopt;
        throw InputError("WORLD_SIZE is " + std::to_string(d.worldSize) + " but RANK is not set: every process needs its RANK (0 to "
                         + std::to_string(d.worldSize - 1) + ")");
    }
    d.rank = static_cast<int>(*rank);
    if (d.rank >= d.worldSize) {
        throw InputError("RANK is " + std::to_string(d.rank) + " but WORLD_SIZE is " + std::to_string(d.worldSize)
                         + ": ranks go from 0 to WORLD_SIZE - 1; start exactly WORLD_SIZE processes");
    }
    d.localRank = static_cast<int>(integer("LOCAL_RANK", "SLURM_LOCALID", 0, 65535).value_or(d.rank));
    if (set("LOCAL_WORLD_SIZE")) {
        d.localWorldSize = static_cast<int>(*integer("LOCAL_WORLD_SIZE", nullptr, 1, 65536));
    } else if (set("SLURM_STEP_TASKS_PER_NODE")) {
        // "4" or "4(x2)" or "3,2": the first node's count is this node's only
        // when they are all equal; take the leading number as a hint.
        d.localWorldSize = std::max(0, std::atoi(get("SLURM_STEP_TASKS_PER_NODE")));
    }
    if (d.worldSize == 1) return std::nullopt;

    if (set("MASTER_ADDR")) {
        d.masterAddr = get("MASTER_ADDR");
    } else if (set("SLURM_JOB_NODELIST") || set("SLURM_NODELIST")) {
        d.masterAddr = hostnamesOf(get(set("SLURM_JOB_NODELIST") ? "SLURM_JOB_NODELIST" : "SLURM_NODELIST"));
    } else {
        throw InputError("WORLD_SIZE is " + std::to_string(d.worldSize)
                         + " but MASTER_ADDR is not set: set it to rank 0's address (127.0.0.1 on one machine)");
    }
    if (const auto port = integer("MASTER_PORT", nullptr, 1, 65535)) {
        d.masterPort = static_cast<int>(*port);
    } else if (const auto job = integer("SLURM_JOB_ID", nullptr, 0, (1LL << 62))) {
        d.masterPort = slurmPortForJob(*job);
    } else {
        throw InputError("WORLD_SIZE is " + std::to_string(d.worldSize) + " but MASTER_PORT is not set: set it to a free port on "
                         + d.masterAddr);
    }
    if (set("TORCHELASTIC_USE_AGENT_STORE")) {
        const std::string v = get("TORCHELASTIC_USE_AGENT_STORE");
        d.agentStore = v == "True" || v == "true" || v == "1";
    }
    if (d.agentStore) {
        d.storePrefix = "/worker/attempt_" + std::to_string(integer("TORCHELASTIC_RESTART_COUNT", nullptr, 0, 1 << 30).value_or(0));
    }
    if (set("GLOO_SOCKET_IFNAME")) d.socketInterface = get("GLOO_SOCKET_IFNAME");
    return d;
}

} // namespace tb
