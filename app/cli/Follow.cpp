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
#include "StoreAccess.h"
#include "common/Errors.h"
#include "store/RunStore.h"

namespace tb::cli {
namespace {

bool ended(RunStatus s) { return s != RunStatus::Running && s != RunStatus::Created; }

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

remote::FollowRecord statusRecord(const RunRecord& r, bool end)
{
    remote::FollowRecord f;
    f.type = end ? remote::FollowRecord::Type::End : remote::FollowRecord::Type::Status;
    f.run = r.id;
    f.status = runStatusName(r.status);
    f.stepsDone = r.stepsDone;
    f.stepsTotal = r.stepsTotal;
    if (end) {
        f.message = r.message;
        f.finalLoss = r.finalLoss;
        f.finalValLoss = r.finalValLoss;
    }
    return f;
}

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
    std::map<std::string, int> next; // per key, the first step not yet read
    std::int64_t lastEvent = options.eventsAfter;
    std::string lastStatus;
    while (true) {
        // The status first: what was stored before it changed is read below.
        const auto run = store->run(runId);
        if (!run) throw InputError("run " + std::to_string(runId) + " was deleted while being followed");
        if (const auto status = runStatusName(run->status); status != lastStatus) {
            lastStatus = status;
            printer.handle(statusRecord(*run, false));
        }
        std::vector<MetricPoint> fresh;
        for (const auto& [key, latest] : store->latestMetrics(runId)) {
            auto& from = next.try_emplace(key, options.fromStep).first->second;
            if (latest.step < from) continue;
            // Only up to the step latestMetrics saw (one snapshot, and a run
            // commits each step's values together): a point committed since
            // is read with the rest of its step next time, never twice and
            // never without the other values of its step.
            for (auto& p : store->metricsFrom(runId, key, from)) {
                if (p.step <= latest.step) fresh.push_back(std::move(p));
            }
            from = latest.step + 1;
        }
        std::sort(fresh.begin(), fresh.end(), [](const MetricPoint& a, const MetricPoint& b) {
            return std::tie(a.step, a.key) < std::tie(b.step, b.key);
        });
        for (const auto& p : fresh) {
            remote::FollowRecord m;
            m.step = p.step;
            m.key = p.key;
            m.value = p.value;
            m.time = p.wallTime;
            printer.handle(m);
        }
        for (const auto& e : store->eventsAfter(runId, lastEvent)) {
            lastEvent = std::max(lastEvent, e.id);
            remote::FollowRecord r;
            r.type = remote::FollowRecord::Type::Event;
            r.eventId = e.id;
            r.time = e.time;
            r.severity = e.severity;
            r.kind = e.kind;
            r.message = e.message;
            printer.handle(r);
        }
        if (ended(run->status)) {
            printer.handle(statusRecord(*run, true));
            return exitCodeOf(runStatusName(run->status));
        }
        printer.flushLine();
        std::this_thread::sleep_for(std::chrono::milliseconds(options.pollMs));
    }
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
