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
    // The command every rank runs: 'train --config FILE ...' or 'resume RUN ...'.
    std::vector<std::string> args;
    int timeoutSeconds = 300; // train.dist_timeout_s
};

// Starts the ranks on 127.0.0.1 (MASTER_PORT from the environment, else a
// free port), streams rank 0's output, and waits. When a rank ends badly the
// others get train.dist_timeout_s (plus a margin) to end on their own, then
// are killed: no process is left behind. Returns rank 0's exit status.
int launchRanks(const RankLaunch& launch);

// Training as a rank other than 0: no store, no checkpoints; output goes to
// rank-K.log in the run's folder once rank 0 has named it. `resumeFrom`:
// the checkpoint rank 0 resumes from. Test hook:
// TRAINBENCH_TEST_INJECT_INF=STEP:RANK (fp16 loss scaling forced on).
struct RankOptions {
    bool measureMemory = true;
    bool bare = false;
    bool overlap = true;
    std::string resumeFrom;
};
int trainAsRank(RunConfig config, const DistLaunch& launch, const RankOptions& options);

// The fp16 test hook above, for rank 0's session too.
struct InjectHook {
    bool active = false;
    int step = 0;
    int rank = -1;
};
InjectHook injectHookFromEnvironment();

} // namespace tb::cli
