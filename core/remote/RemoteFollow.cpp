#include "remote/RemoteFollow.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <thread>

#include <signal.h>

#include <nlohmann/json.hpp>

#include "common/Errors.h"
#include "remote/Ssh.h"

namespace tb::remote {
namespace {

using nlohmann::json;

const char* typeName(FollowRecord::Type t)
{
    switch (t) {
    case FollowRecord::Type::Metric: return "metric";
    case FollowRecord::Type::Event: return "event";
    case FollowRecord::Type::Status: return "status";
    case FollowRecord::Type::End: return "end";
    }
    return "metric";
}

} // namespace

std::string linkStateName(LinkState state)
{
    switch (state) {
    case LinkState::Connected: return "connected";
    case LinkState::Reconnecting: return "reconnecting";
    case LinkState::Lost: return "lost";
    }
    return "lost";
}

std::string followRecordToJson(const FollowRecord& r)
{
    json j = {{"type", typeName(r.type)}};
    switch (r.type) {
    case FollowRecord::Type::Metric:
        j["step"] = r.step;
        j["key"] = r.key;
        j["value"] = r.value; // NaN becomes null
        j["time"] = r.time;
        break;
    case FollowRecord::Type::Event:
        j["id"] = r.eventId;
        j["time"] = r.time;
        j["severity"] = r.severity;
        j["kind"] = r.kind;
        j["message"] = r.message;
        break;
    case FollowRecord::Type::End:
        j["message"] = r.message;
        if (r.finalLoss) j["final_loss"] = *r.finalLoss;
        if (r.finalValLoss) j["final_val_loss"] = *r.finalValLoss;
        [[fallthrough]];
    case FollowRecord::Type::Status:
        j["run"] = r.run;
        j["status"] = r.status;
        j["steps_done"] = r.stepsDone;
        j["steps_total"] = r.stepsTotal;
        break;
    }
    return j.dump();
}

std::optional<FollowRecord> followRecordFromJson(const std::string& line)
{
    const json j = json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("type") || !j["type"].is_string()) return std::nullopt;
    FollowRecord r;
    const std::string type = j["type"].get<std::string>();
    try {
        if (type == "metric") {
            r.type = FollowRecord::Type::Metric;
            r.step = j.at("step").get<int>();
            r.key = j.at("key").get<std::string>();
            r.value = j.at("value").is_number() ? j["value"].get<double>() : std::nan("");
            r.time = j.value("time", 0.0);
        } else if (type == "event") {
            r.type = FollowRecord::Type::Event;
            r.eventId = j.at("id").get<std::int64_t>();
            r.time = j.value("time", 0.0);
            r.severity = j.value("severity", "info");
            r.kind = j.value("kind", "");
            r.message = j.value("message", "");
        } else if (type == "status" || type == "end") {
            r.type = type == "end" ? FollowRecord::Type::End : FollowRecord::Type::Status;
            r.run = j.value("run", std::int64_t{0});
            r.status = j.at("status").get<std::string>();
            r.stepsDone = j.value("steps_done", 0);
            r.stepsTotal = j.value("steps_total", 0);
            r.message = j.value("message", "");
            if (j.contains("final_loss") && j["final_loss"].is_number()) r.finalLoss = j["final_loss"].get<double>();
            if (j.contains("final_val_loss") && j["final_val_loss"].is_number()) r.finalValLoss = j["final_val_loss"].get<double>();
        } else {
            return std::nullopt;
        }
    } catch (const json::exception&) {
        return std::nullopt;
    }
    return r;
}

RemoteFollower::RemoteFollower(Host host, std::int64_t runId, RemoteFollowOptions options)
    : m_host(std::move(host)), m_runId(runId), m_options(options)
{
}

void RemoteFollower::cancel()
{
    m_cancelled = true;
    if (const int pid = m_sshPid.load(); pid > 0) ::kill(pid, SIGTERM);
}

std::string RemoteFollower::run(const std::function<void(const FollowRecord&)>& onRecord,
                                const std::function<void(LinkState, int, const std::string&)>& onLink)
{
    using Clock = std::chrono::steady_clock;
    std::map<std::string, int> lastStep; // per series: steps only go forward
    std::int64_t lastEvent = m_options.eventsAfter;
    std::string lastStatus;
    auto downSince = Clock::time_point{};
    int backoffS = 0; // the first retry at once: a link cut once is often back already
    bool connected = false; // a first connection that fails is an error, not a link to wait for
    const auto setLink = [&](LinkState state, int down, const std::string& said) {
        if (onLink) onLink(state, down, said);
    };
    while (!m_cancelled) {
        // From the highest step handed on (not the next): a series whose point
        // of that step came later than another's is then still complete.
        const int from = std::max(m_options.fromStep, m_maxStep);
        std::string endStatus;
        bool announced = false;
        const auto r = streamSsh(m_host,
            cliCommand(m_host, {"follow", std::to_string(m_runId), "--jsonl", "--from-step", std::to_string(from),
                                "--events-after", std::to_string(lastEvent)}),
            [&](const std::string& line) {
                auto record = followRecordFromJson(line);
                if (!record) return;
                if (!announced) {
                    announced = true;
                    connected = true;
                    downSince = {};
                    backoffS = 0;
                    setLink(LinkState::Connected, 0, {});
                }
                switch (record->type) {
                case FollowRecord::Type::Metric: {
                    auto last = lastStep.find(record->key);
                    if (last != lastStep.end() && record->step <= last->second) return;
                    lastStep[record->key] = record->step;
                    m_maxStep = std::max(m_maxStep, record->step);
                    break;
                }
                case FollowRecord::Type::Event:
                    if (record->eventId <= lastEvent) return;
                    lastEvent = record->eventId;
                    break;
                case FollowRecord::Type::Status:
                    if (record->status == lastStatus) return;
                    lastStatus = record->status;
                    break;
                case FollowRecord::Type::End: endStatus = record->status; break;
                }
                onRecord(*record);
            },
            {}, [&](int pid) {
                m_sshPid = pid;
                if (m_cancelled) ::kill(pid, SIGTERM);
            });
        m_sshPid = 0;
        if (!endStatus.empty()) return endStatus;
        if (m_cancelled) break;
        const auto failure = connectionFailure(m_host, r);
        if (!failure.empty() && (!connected || !transientFailure(r))) throw InputError(failure);
        if (r.exitCode != 255) {
            // The remote follow itself refused (no such run, no store): its own message.
            const auto said = sshMessages(r.err);
            throw InputError("on " + m_host.label() + ": " + (said.empty() ? "follow ended without a final status" : said));
        }
        const auto now = Clock::now();
        if (downSince == Clock::time_point{}) downSince = now;
        const int down = static_cast<int>(std::chrono::duration<double>(now - downSince).count());
        if (down >= m_options.giveUpAfterS) {
            setLink(LinkState::Lost, down, sshMessages(r.err));
            return {};
        }
        setLink(LinkState::Reconnecting, down, sshMessages(r.err));
        // Sleep in slices, so cancel() is prompt.
        const auto wake = Clock::now() + std::chrono::seconds(backoffS);
        while (!m_cancelled && Clock::now() < wake) std::this_thread::sleep_for(std::chrono::milliseconds(50));
        backoffS = std::min(std::max(1, backoffS * 2), 8); // then 1, 2, 4, 8, 8... s
    }
    return {};
}

} // namespace tb::remote
