// trainbench-cli export: a run's metrics in long format (run, step, key, value, wall_time).
#include <cstdio>
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "Command.h"
#include "StoreAccess.h"
#include "common/Errors.h"

namespace tb::cli {
namespace {

int exportRun(const Args& args)
{
    const auto id = args.runId();
    const std::string format = args.value("--format").value_or("csv");
    if (format != "csv" && format != "json") {
        throw InputError("--format must be csv or json, got \"" + format + "\"");
    }
    auto store = openExistingStore(args.value("--db").value_or(""));
    if (!store->run(id)) {
        throw InputError("run " + std::to_string(id) + " does not exist in " + store->path()
                         + "; 'trainbench-cli runs' lists the runs");
    }
    const auto points = store->metrics(id);
    std::ofstream file;
    std::ostream* out = &std::cout;
    if (auto path = args.value("--output")) {
        file.open(*path, std::ios::binary | std::ios::trunc);
        if (!file) throw InputError("cannot write " + *path + " (check the folder exists and is writable)");
        out = &file;
    }
    if (format == "csv") {
        *out << "run,step,key,value,wall_time\n";
        char line[160];
        for (const auto& p : points) {
            std::snprintf(line, sizeof line, "%lld,%d,%s,%.9g,%.3f\n", static_cast<long long>(p.runId), p.step,
                          p.key.c_str(), p.value, p.wallTime);
            *out << line;
        }
    } else {
        auto list = nlohmann::json::array();
        for (const auto& p : points) {
            list.push_back({{"run", p.runId}, {"step", p.step}, {"key", p.key}, {"value", p.value},
                            {"wall_time", p.wallTime}});
        }
        *out << list.dump(1) << "\n";
    }
    return out->good() ? kExitOk : kExitFailed;
}

const CommandRegistration registration{Command{
    "export",
    "Export a run's metrics in long format (run, step, key, value, wall_time).",
    "RUN_ID [--db FILE] [--format csv|json] [--output FILE]",
    {{"--db", true, "experiment database", "FILE"},
     {"--format", true, "csv (default) or json", "FORMAT"},
     {"--output", true, "write to a file instead of standard output", "FILE"}},
    &exportRun}};

} // namespace
} // namespace tb::cli
