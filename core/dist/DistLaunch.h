#pragma once
// How this process takes part in a data-parallel run, read from the
// environment its launcher set: trainbench-cli train --nproc, torchrun, or
// srun. Plain data, no LibTorch: the CLI reads it before anything is built.
#include <functional>
#include <optional>
#include <string>

namespace tb {

struct DistLaunch {
    int rank = 0;
    int localRank = 0;
    int localWorldSize = 0; // ranks on this machine (LOCAL_WORLD_SIZE; 0: unknown)
    int worldSize = 1;
    std::string masterAddr;
    int masterPort = 0;
    // Under torchrun's agent store (TORCHELASTIC_USE_AGENT_STORE=True) every
    // rank connects as a client, with keys under this prefix.
    bool agentStore = false;
    std::string storePrefix;
    std::string launcher;        // "trainbench-cli --nproc", "torchrun", "srun"
    std::string socketInterface; // GLOO_SOCKET_IFNAME, when set
    int timeoutSeconds = 300;    // train.dist_timeout_s
    bool active() const { return worldSize > 1; }
    // "rank 1 of 2 (torchrun, 127.0.0.1:29500)"
    std::string describe() const;
};

// The launch this environment describes, or nothing for a plain single
// process. `get` reads a variable (nullptr when unset); `hostnamesOf` expands
// a Slurm node list (by default with `scontrol show hostnames`). Throws
// InputError naming the variable and its value when they are malformed or
// disagree (RANK at or above WORLD_SIZE, a port out of range, ...).
std::optional<DistLaunch> distLaunchFromEnvironment(
    const std::function<const char*(const char*)>& get = nullptr,
    const std::function<std::string(const std::string&)>& hostnamesOf = nullptr);

// The first host of a Slurm node list, expanded by `scontrol show hostnames`.
std::string firstSlurmHost(const std::string& nodeList);

// The port a Slurm job's ranks meet on when MASTER_PORT is not set: derived
// from the job id, so every task of the job computes the same one.
int slurmPortForJob(long long jobId);

} // namespace tb
