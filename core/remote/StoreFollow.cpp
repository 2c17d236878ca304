#include "remote/StoreFollow.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <thread>
#include <tuple>
#include <vector>

#include "common/Errors.h"
#include "store/RunStore.h"

namespace tb::remote {
namespace {

bool ended(RunStatus s) { return s != RunStatus::Running && s != RunStatus::Created; }

FollowRecord statusRecord(const RunRecord& r, bool end)
{
    FollowRecord f;
    f.type = end ? FollowRecord::Type::End : FollowRecord::Type::Status;
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

std::string followStore(RunStore& store, std::int64_t runId, const StoreFollowOptions& options,
                        const std::function<void(const FollowRecord&)>& onRecord, const std::function<void()>& afterPoll,
                        const std::atomic<bool>* stop)
{
    std::map<std::string, int> next; // per key, the first step not yet read
    std::int64_t lastEvent = options.eventsAfter;
    std::string lastStatus;
    bool first = true;
    while (true) {
        // The status first: what was stored before it changed is read below.
        const auto run = store.run(runId);
        if (!run) {
            throw InputError(first ? "run " + std::to_string(runId) + " does not exist in " + store.path()
                                         + "; 'trainbench-cli runs' lists the runs"
                                   : "run " + std::to_string(runId) + " was deleted while being followed");
        }
        first = false;
        if (const auto status = runStatusName(run->status); status != lastStatus) {
            lastStatus = status;
            onRecord(statusRecord(*run, false));
        }
        std::vector<MetricPoint> fresh;
        for (const auto& [key, latest] : store.latestMetrics(runId)) {
            auto& from = next.try_emplace(key, options.fromStep).first->second;
            if (latest.step < from) continue;
            // Only up to the step latestMetrics saw (one snapshot, and a run
            // commits each step's values together): a point committed since
            // is read with the rest of its step next time, never twice and
            // never without the other values of its step.
            for (auto& p : store.metricsFrom(runId, key, from)) {
                if (p.step <= latest.step) fresh.push_back(std::move(p));
            }
            from = latest.step + 1;
        }
        std::sort(fresh.begin(), fresh.end(), [](const MetricPoint& a, const MetricPoint& b) {
            return std::tie(a.step, a.key) < std::tie(b.step, b.key);
        });
        for (const auto& p : fresh) {
            FollowRecord m;
            m.step = p.step;
            m.key = p.key;
            m.value = p.value;
            m.time = p.wallTime;
            onRecord(m);
        }
        for (const auto& e : store.eventsAfter(runId, lastEvent)) {
            lastEvent = std::max(lastEvent, e.id);
            FollowRecord r;
            r.type = FollowRecord::Type::Event;
            r.eventId = e.id;
            r.time = e.time;
            r.severity = e.severity;
            r.kind = e.kind;
            r.message = e.message;
            onRecord(r);
        }
        if (ended(run->status)) {
            onRecord(statusRecord(*run, true));
            return runStatusName(run->status);
        }
        if (afterPoll) afterPoll();
        // Sleep in short slices so a stop is seen soon.
        for (int slept = 0; slept < options.pollMs; slept += 50) {
            if (stop && stop->load()) return {};
            std::this_thread::sleep_for(std::chrono::milliseconds(std::min(50, options.pollMs - slept)));
        }
        if (stop && stop->load()) return {};
    }
}

} // namespace tb::remote
