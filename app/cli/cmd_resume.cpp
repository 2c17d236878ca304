// trainbench-cli resume: continue a cancelled or interrupted run from its last checkpoint.
#include "Command.h"
#include "Progress.h"

namespace tb::cli {
namespace {

int resume(const Args& args)
{
    SessionOptions options;
    options.dbPath = args.value("--db").value_or("");
    auto session = RunSession::resume(args.runId(), options);
    return runWithProgress(*session, args.flag("--quiet"));
}

const CommandRegistration registration{Command{
    "resume",
    "Continue a cancelled or interrupted run from its last checkpoint.",
    "RUN_ID [--db FILE]",
    {{"--db", true, "experiment database", "FILE"}, {"--quiet", false, "print only the final summary"}},
    &resume}};

} // namespace
} // namespace tb::cli
