#pragma once

#include <cstdint>
#include <functional>

#include "run/RunSession.h"

namespace tb::cli {

// Runs a session with a progress line at most once a second; SIGINT/SIGTERM
// finish the current step, checkpoint and end the run "cancelled".
// Returns the exit status for the outcome.
// `onStarted` gets the run's id once it trains.
int runWithProgress(RunSession& session, bool quiet, const std::function<void(std::int64_t runId)>& onStarted = {});
// An `onStarted` for --run-id-file: writes the id to `file` atomically (a
// requeued Slurm job resumes that run; the window follows it). Empty for "".
std::function<void(std::int64_t runId)> runIdWriter(const std::string& file);

} // namespace tb::cli
