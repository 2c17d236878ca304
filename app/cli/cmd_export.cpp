// trainbench-cli export: a run's metrics in long format (run, step, key, value, wall_time).
#include <cstdio>
#include <sstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "Command.h"
#include "StoreAccess.h"
#include "common/Errors.h"
#include "common/Files.h"

namespace tb::cli {
namespace {

int exportMetrics(const Args& args)
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
    const auto output = args.value("--output");
    if (output) {
        if (output->empty()) throw InputError("--output needs a file name");
        refuseStoreOutput(*store, *output);
    }
    const auto points = store->metrics(id);
    std::ostringstream text;
    std::ostream* out = output ? static_cast<std::ostream*>(&text) : &std::cout;
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
    if (output) {
        // Through a temporary file and a rename: an existing file is replaced
        // whole or left as it was.
        if (const auto error = writeFileAtomically(*output, text.str()); !error.empty()) {
            throw InputError(error + " (check the folder exists and is writable)");
        }
        return kExitOk;
    }
    return out->good() ? kExitOk : kExitFailed;
}

const CommandRegistration exportRegistration{Command{
    "export",
    "Export a run's metrics in long format (run, step, key, value, wall_time).",
    "RUN_ID [--db FILE] [--format csv|json] [--output FILE]",
    {{"--db", true, "experiment database", "FILE"},
     {"--format", true, "csv (default) or json", "FORMAT"},
     {"--output", true, "write to a file instead of standard output", "FILE"}},
    &exportMetrics}};

} // namespace
} // namespace tb::cli
