// trainbench-cli tag / note / rename / delete / compare: review and curate
// past runs. Every text a user gives reaches the store as a bound value.
#include <cstdio>
#include <filesystem>
#include <iostream>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "Command.h"
#include "StoreAccess.h"
#include "common/Errors.h"

namespace tb::cli {
namespace {

const OptionSpec kDb{"--db", true, "experiment database", "FILE"};

std::vector<std::string> positionals(const Args& args, std::size_t count, const char* command, const char* usage)
{
    if (args.positionals().size() != count) {
        throw InputError(std::string("'") + command + "' takes " + usage + " (see 'trainbench-cli runs' for the ids)");
    }
    return args.positionals();
}

int tag(const Args& args)
{
    const auto p = positionals(args, 2, "tag", "RUN_ID TAG");
    auto store = openExistingStoreForWriting(args.value("--db").value_or(""));
    const auto id = parseRunId(p[0]);
    if (args.flag("--remove")) store->removeTag(id, p[1]);
    else store->addTag(id, p[1]);
    const auto run = store->run(id);
    std::string tags;
    for (const auto& t : run->tags) tags += (tags.empty() ? "" : ", ") + t;
    std::printf("run %lld tags: %s\n", static_cast<long long>(id), tags.empty() ? "(none)" : tags.c_str());
    return kExitOk;
}

int note(const Args& args)
{
    const auto p = positionals(args, 2, "note", "RUN_ID TEXT (quote the text; \"\" clears the note)");
    auto store = openExistingStoreForWriting(args.value("--db").value_or(""));
    store->setNote(parseRunId(p[0]), p[1]);
    std::printf("run %s note %s\n", p[0].c_str(), p[1].empty() ? "cleared" : "saved");
    return kExitOk;
}

int rename(const Args& args)
{
    const auto p = positionals(args, 2, "rename", "RUN_ID NAME");
    auto store = openExistingStoreForWriting(args.value("--db").value_or(""));
    store->rename(parseRunId(p[0]), p[1]);
    std::printf("run %s renamed\n", p[0].c_str());
    return kExitOk;
}

int remove(const Args& args)
{
    const auto p = positionals(args, 1, "delete", "one RUN_ID");
    auto store = openExistingStoreForWriting(args.value("--db").value_or(""));
    const auto id = parseRunId(p[0]);
    const auto run = store->run(id);
    if (!run) {
        throw InputError("run " + p[0] + " does not exist in " + store->path() + "; 'trainbench-cli runs' lists the runs");
    }
    namespace fs = std::filesystem;
    const fs::path folder = store->runFolder(id);
    std::error_code ec;
    const bool haveFolder = fs::exists(folder, ec);
    const bool keep = args.flag("--keep-checkpoints");
    const std::string what = "run " + p[0] + " \"" + run->name + "\" (" + runStatusName(run->status) + ", "
        + std::to_string(run->stepsDone) + " steps) with its metrics and events"
        + (haveFolder && !keep ? " and its checkpoint folder " + folder.string() : "");
    if (!args.flag("--yes")) {
        if (!isatty(STDIN_FILENO)) throw InputError("'delete' removes " + what + "; pass --yes to confirm");
        std::cout << "Delete " << what << "? This cannot be undone. [y/N] " << std::flush;
        std::string answer;
        std::getline(std::cin, answer);
        if (answer != "y" && answer != "Y" && answer != "yes") {
            std::cout << "nothing deleted\n";
            return kExitOk;
        }
    }
    store->deleteRun(id);
    if (haveFolder && !keep) {
        fs::remove_all(folder, ec);
        if (ec) {
            std::cerr << "error: run " << p[0] << " was deleted, but its checkpoint folder " << folder.string()
                      << " could not be removed: " << ec.message() << "\n";
            return kExitFailed;
        }
    }
    std::printf("deleted %s\n", what.c_str());
    return kExitOk;
}

int compare(const Args& args)
{
    if (args.positionals().size() < 2) {
        throw InputError("'compare' needs two or more RUN_IDs (see 'trainbench-cli runs' for the ids)");
    }
    auto store = openExistingStore(args.value("--db").value_or(""));
    std::vector<RunRecord> runs;
    std::vector<std::string> configs;
    for (const auto& text : args.positionals()) {
        auto run = store->run(parseRunId(text));
        if (!run) throw InputError("run " + text + " does not exist in " + store->path() + "; 'trainbench-cli runs' lists the runs");
        configs.push_back(run->configJson);
        runs.push_back(std::move(*run));
    }
    // Only what differs between the runs (a field missing from one differs too).
    const auto differing = configDifferences(configs);
    const auto optional = [](const auto& v) { return v ? nlohmann::json(*v) : nlohmann::json(); };
    if (args.flag("--json")) {
        nlohmann::json out = {{"runs", nlohmann::json::array()}, {"differing_fields", nlohmann::json::array()}};
        for (const auto& r : runs) {
            const auto latest = store->latestMetrics(r.id);
            const auto rate = latest.find("tokens_per_s");
            out["runs"].push_back({{"id", r.id},
                                   {"name", r.name},
                                   {"status", runStatusName(r.status)},
                                   {"steps_done", r.stepsDone},
                                   {"final_loss", optional(r.finalLoss)},
                                   {"final_val_loss", optional(r.finalValLoss)},
                                   {"final_val_accuracy", optional(r.finalValAccuracy)},
                                   {"tokens_per_s", rate != latest.end() ? nlohmann::json(rate->second.value) : nlohmann::json()},
                                   {"estimated_peak_bytes", optional(r.estimatedPeakBytes)},
                                   {"measured_peak_bytes", optional(r.measuredPeakBytes)},
                                   {"tags", r.tags}});
        }
        for (const auto& d : differing) {
            nlohmann::json values = nlohmann::json::array();
            for (const auto& v : d.values) values.push_back(v.empty() ? nlohmann::json() : nlohmann::json::parse(v));
            out["differing_fields"].push_back({{"path", d.path}, {"values", values}});
        }
        std::cout << out.dump(2) << "\n";
        return kExitOk;
    }
    std::printf("%-34s", "");
    for (const auto& r : runs) std::printf(" %-18s", ("run " + std::to_string(r.id)).c_str());
    std::printf("\n%-34s", "name");
    for (const auto& r : runs) std::printf(" %-18s", r.name.substr(0, 18).c_str());
    std::printf("\n");
    if (differing.empty()) std::printf("(the configs are identical)\n");
    for (const auto& d : differing) {
        std::printf("%-34s", d.path.substr(0, 34).c_str());
        for (const auto& v : d.values) std::printf(" %-18s", v.empty() ? "-" : v.substr(0, 18).c_str());
        std::printf("\n");
    }
    const auto number = [](std::optional<double> v, const char* format) {
        char text[32] = "-";
        if (v) std::snprintf(text, sizeof text, format, *v);
        return std::string(text);
    };
    std::printf("%-34s", "-- status");
    for (const auto& r : runs) std::printf(" %-18s", runStatusName(r.status).c_str());
    std::printf("\n%-34s", "-- final loss");
    for (const auto& r : runs) std::printf(" %-18s", number(r.finalLoss, "%.4f").c_str());
    std::printf("\n%-34s", "-- final validation loss");
    for (const auto& r : runs) std::printf(" %-18s", number(r.finalValLoss, "%.4f").c_str());
    std::printf("\n%-34s", "-- measured peak MiB");
    for (const auto& r : runs) {
        std::optional<double> mib;
        if (r.measuredPeakBytes) mib = static_cast<double>(*r.measuredPeakBytes) / 1048576.0;
        std::printf(" %-18s", number(mib, "%.1f").c_str());
    }
    std::printf("\n");
    return kExitOk;
}

const CommandRegistration tagRegistration{Command{
    "tag", "Tag a run (--remove takes the tag off).", "RUN_ID TAG [--remove] [--db FILE]",
    {kDb, {"--remove", false, "remove the tag instead"}}, &tag, 2}};
const CommandRegistration noteRegistration{Command{
    "note", "Set a run's note (\"\" clears it).", "RUN_ID TEXT [--db FILE]", {kDb},
    &note, 2}};
const CommandRegistration renameRegistration{Command{
    "rename", "Rename a run.", "RUN_ID NAME [--db FILE]", {kDb}, &rename, 2}};
const CommandRegistration deleteRegistration{Command{
    "delete", "Delete a run, its metrics, events and checkpoints (asks first; --yes does not).",
    "RUN_ID [--yes] [--keep-checkpoints] [--db FILE]",
    {kDb, {"--yes", false, "do not ask"}, {"--keep-checkpoints", false, "leave the checkpoint folder on disk"}},
    &remove}};
const CommandRegistration compareRegistration{Command{
    "compare", "Compare runs: only the config fields that differ, then status, losses and peak memory.",
    "RUN_ID RUN_ID... [--json] [--db FILE]",
    {kDb, {"--json", false, "print JSON: runs (final metrics) and differing_fields (path, values)"}}, &compare, 1 << 16}};

} // namespace
} // namespace tb::cli
