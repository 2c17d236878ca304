// trainbench-cli follow: stream a run's metrics, events and status as they are stored.
#include "Command.h"
#include "Follow.h"
#include "Remote.h"
#include "common/Errors.h"

namespace tb::cli {
namespace {

int follow(const Args& args)
{
    FollowOptions options;
    options.jsonl = args.flag("--jsonl");
    if (auto from = args.integer("--from-step", 0, 1000000000)) options.fromStep = static_cast<int>(*from);
    if (auto after = args.integer("--events-after", -1, (1LL << 62))) options.eventsAfter = *after;
    if (auto give = args.integer("--give-up-after", 1, 86400)) options.giveUpAfterS = static_cast<int>(*give);
    const auto runId = args.runId();
    if (args.value("--host")) {
        if (args.value("--db")) throw InputError("--db names a local store; with --host use --remote-db");
        return followRemote(hostOf(args), runId, options);
    }
    return followLocal(args.value("--db").value_or(""), runId, options);
}

std::vector<OptionSpec> followOptions()
{
    std::vector<OptionSpec> o{
        {"--db", true, "experiment database (default: $TRAINBENCH_DB, else ~/.local/share/trainbench/experiments.db)", "FILE"},
        {"--from-step", true, "print metrics from this step on (default: all)", "N"},
        {"--jsonl", false, "one JSON object per line: metric (step, key, value), event, status, and a final end"},
        {"--events-after", true, "print only events stored after this event id (reconnects use it)", "ID"},
        {"--give-up-after", true, "with --host: stop reconnecting after the link is down this long (default 600)", "S"}};
    for (auto& h : hostOptions()) o.push_back(std::move(h));
    return o;
}

const CommandRegistration followRegistration{Command{
    "follow",
    "Stream a run's metrics, events and status until it ends (here or on a host).",
    "RUN_ID [--db FILE | --host H] [--from-step N] [--jsonl]",
    followOptions(),
    &follow}};

} // namespace
} // namespace tb::cli
