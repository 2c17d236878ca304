#include "Follow.h"

#include <algorithm>
#include <csignal>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <thread>
#include <vector>

#include "Command.h"
#include "Remote.h"
#include "remote/RemoteFollow.h"
#include "remote/StoreFollow.h"
#include "StoreAccess.h"
#include "common/Errors.h"
#include "store/RunStore.h"

namespace tb::cli {
namespace {

int exitCodeOf(const std::string& status)
{
    if (status == "finished") return kExitOk;
    if (status == "cancelled") return kExitCancelled;
    return kExitFailed;
}

// Prints follow records, as text or JSON lines.
class Printer {
public:
    explicit Printer(bool jsonl) : m_jsonl(jsonl) {}

    void handle(const remote::FollowRecord& r)
    {
        using Type = remote::FollowRecord::Type;
        if (m_jsonl) {
            std::cout << remote::followRecordToJson(r) << "\n" << std::flush;
            return;
        }
        switch (r.type) {
        case Type::Metric: {
            if (r.step != m_lineStep) flushLine();
            m_lineStep = r.step;
            char value[64];
            std::snprintf(value, sizeof value, "%.6g", r.value);
            m_line += "  " + r.key + " " + value;
            return;
        }
        case Type::Event:
            flushLine();
            std::cout << r.severity << ": " << r.kind << ": " << r.message << "\n";
            break;
        case Type::Status:
            flushLine();
            std::cout << "run " << r.run << " " << r.status << " (" << r.stepsDone << "/" << r.stepsTotal << " steps)\n";
            break;
        case Type::End:
            flushLine();
            std::cout << "run " << r.run << " " << r.status << ": " << r.stepsDone << "/" << r.stepsTotal << " steps";
            if (r.finalLoss) std::cout << ", loss " << *r.finalLoss;
            if (!r.message.empty()) std::cout << ": " << r.message;
            std::cout << "\n";
            break;
        }
        std::cout.flush();
    }
    // Text output prints a step's line once the next step begins, or now.
    void flushLine()
    {
        if (m_lineStep < 0) return;
        std::cout << "step " << m_lineStep << m_line << "\n";
        std::cout.flush();
        m_line.clear();
        m_lineStep = -1;
    }

private:
    bool m_jsonl;
    std::string m_line;
    int m_lineStep = -1;
};

} // namespace

int followLocal(const std::string& dbOption, std::int64_t runId, const FollowOptions& options)
{
    auto store = openExistingStore(dbOption);
    const auto first = store->run(runId);
    if (!first) {
        throw InputError("run " + std::to_string(runId) + " does not exist in " + store->path()
                         + "; 'trainbench-cli runs' lists the runs");
    }
    // A copy of a run that was running on a host changes only when fetched
    // again: following it here would wait for ever.
    if (first->origin.runId != 0 && first->status == RunStatus::Running) {
        const auto& o = first->origin;
        const std::string copy = "run " + std::to_string(runId) + " is a copy of run " + std::to_string(o.runId);
        if (o.label.empty() || o.label == "file") {
            throw InputError(copy + " of " + o.host + ", imported while it ran; it changes here only when imported again");
        }
        throw InputError(copy + " on " + o.label + ", fetched while it ran; follow it there: trainbench-cli follow "
                         + std::to_string(o.runId) + " --host " + o.label);
    }
    Printer printer(options.jsonl);
    remote::StoreFollowOptions o;
    o.fromStep = options.fromStep;
    o.eventsAfter = options.eventsAfter;
    o.pollMs = options.pollMs;
    const auto status = remote::followStore(
        *store, runId, o, [&](const remote::FollowRecord& r) { printer.handle(r); }, [&] { printer.flushLine(); });
    return exitCodeOf(status);
}

namespace {
remote::RemoteFollower* g_follower = nullptr;
extern "C" void onInterrupt(int)
{
    // Stop following, not the run: say so once the follow has returned.
    if (g_follower) g_follower->cancel();
}
} // namespace

int followRemote(const remote::Host& host, std::int64_t runId, const FollowOptions& options)
{
    Printer printer(options.jsonl);
    remote::RemoteFollowOptions o;
    o.fromStep = options.fromStep;
    o.eventsAfter = options.eventsAfter;
    o.giveUpAfterS = options.giveUpAfterS;
    remote::RemoteFollower follower(host, runId, o);
    bool lost = false;
    g_follower = &follower;
    struct sigaction action {};
    action.sa_handler = onInterrupt;
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, nullptr);
    const auto end = follower.run([&](const remote::FollowRecord& r) { printer.handle(r); },
                                  [&](remote::LinkState state, int down, const std::string& said) {
                                      printer.flushLine();
                                      if (state == remote::LinkState::Reconnecting) {
                                          std::cerr << "link to " << host.label() << " lost"
                                                    << (said.empty() ? "" : " (ssh said: " + said + ")")
                                                    << "; reconnecting (down for " << down << " s)\n";
                                      } else if (state == remote::LinkState::Lost) {
                                          lost = true;
                                          std::cerr << "link to " << host.label() << " lost for " << down
                                                    << " s; giving up\n";
                                      } else if (down > 0) {
                                          std::cerr << "link to " << host.label() << " back\n";
                                      }
                                  });
    g_follower = nullptr;
    printer.flushLine();
    if (end.empty() && lost) {
        std::cerr << "the run goes on on " << host.label() << ": 'trainbench-cli follow " << runId << " --host "
                  << host.label() << "' picks it up again\n";
        return kExitFailed;
    }
    if (end.empty()) {
        std::cerr << "stopped following run " << runId << "; it goes on on " << host.label() << " ('trainbench-cli follow "
                  << runId << " --host " << host.label() << "' picks it up again, 'trainbench-cli stop " << runId
                  << " --host " << host.label() << "' stops it)\n";
        return kExitCancelled;
    }
    return exitCodeOf(end);
}

} // namespace tb::cli
