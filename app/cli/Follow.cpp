#include "Follow.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "Command.h"
#include "Remote.h"
#include "StoreAccess.h"
#include "common/Errors.h"
#include "store/RunStore.h"

namespace tb::cli {
namespace {

using nlohmann::json;

bool ended(RunStatus s) { return s != RunStatus::Running && s != RunStatus::Created; }

int exitCodeOf(const std::string& status)
{
    if (status == "finished") return kExitOk;
    if (status == "cancelled") return kExitCancelled;
    return kExitFailed;
}

// Prints what a follow receives, as text or JSON lines, each metric point at
// most once (per key, steps only go forward): a reconnect that replays a
// step prints nothing twice.
class Printer {
public:
    explicit Printer(bool jsonl) : m_jsonl(jsonl) {}

    // A record of the follow protocol (see followLocal); returns false for one it does not know.
    void handle(const json& r)
    {
        const std::string type = r.value("type", "");
        if (type == "metric") {
            const int step = r.at("step").get<int>();
            const std::string key = r.at("key").get<std::string>();
            auto last = m_lastStep.find(key);
            if (last != m_lastStep.end() && step <= last->second) return;
            m_lastStep[key] = step;
            m_maxStep = std::max(m_maxStep, step);
            if (m_jsonl) return print(r);
            if (step != m_lineStep) flushLine();
            m_lineStep = step;
            char value[64];
            std::snprintf(value, sizeof value, "%.6g", r.value("value", 0.0));
            m_line += "  " + key + " " + value;
        } else if (type == "event") {
            const auto id = r.value("id", std::int64_t{0});
            if (id <= m_lastEvent) return;
            m_lastEvent = id;
            if (m_jsonl) return print(r);
            flushLine();
            std::cout << r.value("severity", "info") << ": " << r.value("kind", "") << ": " << r.value("message", "") << "\n";
        } else if (type == "status") {
            const std::string status = r.value("status", "");
            if (status == m_status) return;
            m_status = status;
            if (m_jsonl) return print(r);
            flushLine();
            std::cout << "run " << r.value("run", 0) << " " << status << " (" << r.value("steps_done", 0) << "/"
                      << r.value("steps_total", 0) << " steps)\n";
        } else if (type == "end") {
            if (m_jsonl) return print(r);
            flushLine();
            std::cout << "run " << r.value("run", 0) << " " << r.value("status", "") << ": " << r.value("steps_done", 0)
                      << "/" << r.value("steps_total", 0) << " steps";
            if (r.contains("final_loss") && r["final_loss"].is_number()) std::cout << ", loss " << r["final_loss"].get<double>();
            const std::string message = r.value("message", "");
            if (!message.empty()) std::cout << ": " << message;
            std::cout << "\n";
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
    int maxStep() const { return m_maxStep; }
    std::int64_t lastEvent() const { return m_lastEvent; }

private:
    void print(const json& r) { std::cout << r.dump() << "\n" << std::flush; }
    bool m_jsonl;
    std::map<std::string, int> m_lastStep;
    int m_maxStep = -1;
    std::int64_t m_lastEvent = -1;
    std::string m_status;
    std::string m_line;
    int m_lineStep = -1;
};

json statusRecord(const RunRecord& r, const char* type)
{
    json j = {{"type", type}, {"run", r.id}, {"status", runStatusName(r.status)}, {"steps_done", r.stepsDone},
              {"steps_total", r.stepsTotal}};
    if (std::string(type) == "end") {
        j["message"] = r.message;
        if (r.finalLoss) j["final_loss"] = *r.finalLoss;
        if (r.finalValLoss) j["final_val_loss"] = *r.finalValLoss;
    }
    return j;
}

} // namespace

int followLocal(const std::string& dbOption, std::int64_t runId, const FollowOptions& options)
{
    auto store = openExistingStore(dbOption);
    if (!store->run(runId)) {
        throw InputError("run " + std::to_string(runId) + " does not exist in " + store->path()
                         + "; 'trainbench-cli runs' lists the runs");
    }
    Printer printer(options.jsonl);
    std::map<std::string, int> next; // per key, the first step not yet read
    std::int64_t lastEvent = options.eventsAfter;
    while (true) {
        // The status first: what was stored before it changed is read below.
        const auto run = store->run(runId);
        if (!run) throw InputError("run " + std::to_string(runId) + " was deleted while being followed");
        printer.handle(statusRecord(*run, "status"));
        std::vector<MetricPoint> fresh;
        for (const auto& [key, latest] : store->latestMetrics(runId)) {
            auto& from = next.try_emplace(key, options.fromStep).first->second;
            if (latest.step < from) continue;
            for (auto& p : store->metricsFrom(runId, key, from)) fresh.push_back(std::move(p));
            from = latest.step + 1;
        }
        std::sort(fresh.begin(), fresh.end(), [](const MetricPoint& a, const MetricPoint& b) {
            return std::tie(a.step, a.key) < std::tie(b.step, b.key);
        });
        for (const auto& p : fresh) {
            printer.handle({{"type", "metric"}, {"step", p.step}, {"key", p.key}, {"value", p.value}, {"time", p.wallTime}});
        }
        for (const auto& e : store->eventsAfter(runId, lastEvent)) {
            lastEvent = std::max(lastEvent, e.id);
            printer.handle({{"type", "event"}, {"id", e.id}, {"time", e.time}, {"severity", e.severity}, {"kind", e.kind},
                            {"message", e.message}});
        }
        if (ended(run->status)) {
            printer.handle(statusRecord(*run, "end"));
            return exitCodeOf(runStatusName(run->status));
        }
        printer.flushLine();
        std::this_thread::sleep_for(std::chrono::milliseconds(options.pollMs));
    }
}

int followRemote(const remote::Host& host, std::int64_t runId, const FollowOptions& options)
{
    Printer printer(options.jsonl);
    using Clock = std::chrono::steady_clock;
    auto downSince = Clock::time_point{};
    int backoffS = 1;
    bool connected = false; // a first connection that fails is an error, not a link to wait for
    while (true) {
        // From the highest step printed (not the next): a series whose point
        // of that step came later than another's is then still complete.
        const int from = std::max(options.fromStep, printer.maxStep());
        const std::int64_t eventsAfter = std::max(options.eventsAfter, printer.lastEvent());
        std::string endStatus;
        std::string remoteError;
        const auto r = remote::streamSsh(host,
            remoteCli(host, {"follow", std::to_string(runId), "--jsonl", "--from-step", std::to_string(from),
                             "--events-after", std::to_string(eventsAfter)}),
            [&](const std::string& line) {
                json j = json::parse(line, nullptr, false);
                if (j.is_discarded() || !j.is_object()) return;
                downSince = {};
                backoffS = 1;
                connected = true;
                printer.handle(j);
                if (j.value("type", "") == "end") endStatus = j.value("status", "failed");
            });
        if (!endStatus.empty()) return exitCodeOf(endStatus);
        const auto failure = remote::connectionFailure(host, r);
        if (!failure.empty() && (!connected || !remote::transientFailure(r))) throw InputError(failure);
        if (r.exitCode != 255) {
            // The remote follow itself refused (no such run, no store): its own message.
            const auto said = remote::sshMessages(r.err);
            throw InputError("on " + host.label() + ": " + (said.empty() ? "follow ended without a final status" : said));
        }
        printer.flushLine();
        const auto now = Clock::now();
        if (downSince == Clock::time_point{}) downSince = now;
        const double down = std::chrono::duration<double>(now - downSince).count();
        if (down >= options.giveUpAfterS) {
            std::cerr << "link to " << host.label() << " lost for " << static_cast<int>(down)
                      << " s; giving up (the run goes on there: 'trainbench-cli follow " << runId << " --host "
                      << host.label() << "' picks it up again)\n";
            return kExitFailed;
        }
        const auto said = remote::sshMessages(r.err);
        std::cerr << "link to " << host.label() << " lost" << (said.empty() ? "" : " (ssh said: " + said + ")")
                  << "; reconnecting in " << backoffS
                  << " s (down for " << static_cast<int>(down) << " s)\n";
        std::this_thread::sleep_for(std::chrono::seconds(backoffS));
        backoffS = std::min(backoffS * 2, 8);
    }
}

} // namespace tb::cli
