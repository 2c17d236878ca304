// trainbench-cli runs: list the stored runs.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <optional>

#include <nlohmann/json.hpp>

#include "common/Percent.h"
#include "Command.h"
#include "StoreAccess.h"

namespace tb::cli {
namespace {

std::string formatTime(double epochSeconds)
{
    const auto t = static_cast<std::time_t>(epochSeconds);
    char text[32];
    std::strftime(text, sizeof text, "%Y-%m-%d %H:%M", std::localtime(&t));
    return text;
}

int runs(const Args& args)
{
    auto store = openExistingStore(args.value("--db").value_or(""));
    const auto all = store->listRuns(args.value("--filter").value_or(""));
    if (args.flag("--json")) {
        auto list = nlohmann::json::array();
        for (const auto& r : all) {
            nlohmann::json j = {{"id", r.id},
                                {"name", r.name},
                                {"status", runStatusName(r.status)},
                                {"steps_done", r.stepsDone},
                                {"steps_total", r.stepsTotal},
                                {"device", r.device},
                                {"world_size", r.worldSize()},
                                {"precision", r.precision},
                                {"created_at", r.createdAt},
                                {"message", r.message},
                                {"note", r.note},
                                {"tags", r.tags}};
            j["final_loss"] = r.finalLoss ? nlohmann::json(*r.finalLoss) : nlohmann::json();
            j["final_val_loss"] = r.finalValLoss ? nlohmann::json(*r.finalValLoss) : nlohmann::json();
            j["final_val_accuracy"] = r.finalValAccuracy ? nlohmann::json(*r.finalValAccuracy) : nlohmann::json();
            // The memory planner's estimate at launch beside the measured peak (tensor bytes).
            j["estimated_peak_bytes"] = r.estimatedPeakBytes ? nlohmann::json(*r.estimatedPeakBytes) : nlohmann::json();
            j["measured_peak_bytes"] = r.measuredPeakBytes ? nlohmann::json(*r.measuredPeakBytes) : nlohmann::json();
            j["estimate_error"] = r.estimateError() ? nlohmann::json(*r.estimateError()) : nlohmann::json();
            // A run copied from another store (fetch, import-run): where it came from.
            if (r.origin.runId != 0) {
                j["origin"] = {{"host", r.origin.host}, {"store", r.origin.store}, {"run_id", r.origin.runId},
                               {"via", r.origin.label}};
            }
            list.push_back(j);
        }
        std::cout << list.dump(2) << "\n";
        return kExitOk;
    }
    if (all.empty()) {
        if (args.value("--filter")) std::cout << "no run in " << store->path() << " matches the filter\n";
        else std::cout << "no runs yet in " << store->path() << "\n";
        return kExitOk;
    }
    // The NAME column is as wide as the longest name, in characters (a name
    // was cut at 24 bytes, inside a UTF-8 character too).
    const auto width = [](const std::string& text) {
        return static_cast<std::size_t>(std::count_if(text.begin(), text.end(), [](char c) { return (c & 0xC0) != 0x80; }));
    };
    std::size_t nameWidth = 4;
    for (const auto& r : all) nameWidth = std::max(nameWidth, width(r.name));
    const auto padded = [&](const std::string& text) { return text + std::string(nameWidth - width(text), ' '); };
    std::printf("%-5s %s %-11s %-13s %-10s %-10s %-7s %-25s %s\n", "ID", padded("NAME").c_str(), "STATUS", "STEPS", "LOSS",
                "VAL_LOSS", "DEVICE", "PEAK MiB (EST/MEAS/ERR)", "CREATED");
    for (const auto& r : all) {
        const std::string steps = std::to_string(r.stepsDone) + "/" + std::to_string(r.stepsTotal);
        char loss[16] = "-", val[16] = "-";
        if (r.finalLoss) std::snprintf(loss, sizeof loss, "%.4f", *r.finalLoss);
        if (r.finalValLoss) std::snprintf(val, sizeof val, "%.4f", *r.finalValLoss);
        char memory[48] = "-";
        const auto mib = [](std::optional<std::int64_t> b) { return b ? static_cast<double>(*b) / 1048576.0 : -1.0; };
        if (const auto error = r.estimateError()) {
            std::snprintf(memory, sizeof memory, "%.1f/%.1f/%s", mib(r.estimatedPeakBytes), mib(r.measuredPeakBytes),
                          signedPercentText(*error).c_str());
        } else if (r.estimatedPeakBytes) {
            std::snprintf(memory, sizeof memory, "%.1f/-", mib(r.estimatedPeakBytes));
        }
        // A data-parallel run: its device and how many processes, "cpu x2".
        const std::string device = r.worldSize() > 1 ? r.device + " x" + std::to_string(r.worldSize()) : r.device;
        std::string created = formatTime(r.createdAt);
        if (r.origin.runId != 0) created += "  (from " + r.origin.label + ", run " + std::to_string(r.origin.runId) + ")";
        std::printf("%-5lld %s %-11s %-13s %-10s %-10s %-7s %-25s %s\n", static_cast<long long>(r.id),
                    padded(r.name).c_str(), runStatusName(r.status).c_str(), steps.c_str(), loss, val,
                    device.c_str(), memory, created.c_str());
    }
    return kExitOk;
}

const CommandRegistration runsRegistration{Command{
    "runs",
    "List stored runs: id, name, status, steps done, final loss, estimated vs measured peak memory.",
    "[--filter EXPR] [--db FILE] [--json]",
    {{"--db", true, "experiment database", "FILE"},
     {"--filter", true,
      "only runs matching all of: status=failed, tag:NAME, a config path with = != < <= > >= "
      "(train.batch_size>=16), loss<2.5, or words in the name or note",
      "EXPR"},
     {"--json", false, "print a JSON array instead of a table"}},
    &runs}};

} // namespace
} // namespace tb::cli
