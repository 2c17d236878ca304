#pragma once

#include "run/RunSession.h"

namespace tb::cli {

// Runs a session with a progress line at most once a second; SIGINT/SIGTERM
// finish the current step, checkpoint and end the run "cancelled".
// Returns the exit status for the outcome.
int runWithProgress(RunSession& session, bool quiet);

} // namespace tb::cli
