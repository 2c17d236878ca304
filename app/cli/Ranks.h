#pragma once
// Data-parallel runs from the CLI: 'train --nproc N' starts N processes of
// this binary, one per rank, and waits for them; a process started as a rank
// other than 0 (by --nproc, torchrun or srun) trains without a store.
#include <string>
#include <vector>

#include "config/RunConfig.h"
#include "dist/DistLaunch.h"

namespace tb::cli {

struct RankLaunch {
    int processes = 2;
    std::string configPath;             // each rank reads it
    std::vector<std::string> trainArgs; // the rest of 'train''s arguments, passed to every rank
    bool threadsGiven = false;          // --threads: otherwise the cores are split between the ranks
    int timeoutSeconds = 300;           // train.dist_timeout_s
};

// Starts the ranks on 127.0.0.1 (MASTER_PORT from the environment, else a
// free port), streams rank 0's output, and waits. When a rank ends badly the
// others get train.dist_timeout_s (plus a margin) to end on their own, then
// are killed: no process is left behind. Returns rank 0's exit status.
int launchRanks(const RankLaunch& launch);

// Training as a rank other than 0: no store, no checkpoints; output goes to
// rank-K.log in the run's folder once rank 0 has named it. Test hooks:
// TRAINBENCH_TEST_INJECT_INF=STEP:RANK (fp16 loss scaling forced on).
int trainAsRank(RunConfig config, const DistLaunch& launch, bool measureMemory, bool bare);

// The fp16 test hook above, for rank 0's session too.
struct InjectHook {
    bool active = false;
    int step = 0;
    int rank = -1;
};
InjectHook injectHookFromEnvironment();

} // namespace tb::cli
