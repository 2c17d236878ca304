// trainbench-cli export-run, import-run and fetch: one run copied between
// stores as a bundle (a file, or over ssh from a host), keeping its origin.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include <fcntl.h>
#include <unistd.h>

#include "Command.h"
#include "Remote.h"
#include "StoreAccess.h"
#include "common/Errors.h"
#include "common/Files.h"
#include "store/RunBundle.h"

namespace tb::cli {
namespace {

const OptionSpec kDb{"--db", true,
                     "experiment database (default: $TRAINBENCH_DB, else ~/.local/share/trainbench/experiments.db)", "FILE"};

// The checkpoint file that travels beside a bundle file.
std::string checkpointBeside(const std::string& bundlePath) { return bundlePath + ".checkpoint.pt"; }

void report(const ImportResult& result, const RunBundle& bundle, const std::string& from, const std::string& db)
{
    const std::string origin = from + " run " + std::to_string(bundle.origin.runId);
    switch (result.outcome) {
    case ImportOutcome::Added:
        std::cout << "copied " << origin << " (" << runStatusName(bundle.run.status) << ", " << bundle.metrics.size()
                  << " metric points) into " << db << " as run " << result.runId << "\n";
        break;
    case ImportOutcome::Updated:
        std::cout << "updated run " << result.runId << " in " << db << " with the newer state of " << origin << " ("
                  << runStatusName(bundle.run.status) << ", step " << bundle.run.stepsDone << ")\n";
        break;
    case ImportOutcome::Unchanged:
        std::cout << "run " << result.runId << " in " << db << " already holds " << origin << "; nothing new\n";
        break;
    }
}

int exportRunBundle(const Args& args)
{
    auto store = openExistingStore(args.value("--db").value_or(""));
    const auto bundle = bundleOf(*store, args.runId());
    const std::string text = bundleToJson(bundle);
    const auto output = args.value("--output").value_or("-");
    if (output == "-") {
        if (args.flag("--checkpoint")) throw InputError("--checkpoint needs --output FILE (the checkpoint goes beside it)");
        std::cout << text;
        return kExitOk;
    }
    refuseStoreOutput(*store, output);
    if (auto error = writeFileAtomically(output, text); !error.empty()) throw InputError(error);
    std::cout << "wrote run " << bundle.run.id << " (" << bundle.metrics.size() << " metric points, "
              << bundle.events.size() << " events) to " << output << "\n";
    if (args.flag("--checkpoint")) {
        if (!bundle.checkpoint) throw InputError("run " + std::to_string(bundle.run.id) + " has no checkpoint to export");
        std::filesystem::copy_file(bundle.checkpoint->path, checkpointBeside(output),
                                   std::filesystem::copy_options::overwrite_existing);
        std::cout << "wrote its checkpoint (step " << bundle.checkpoint->step << ") to " << checkpointBeside(output) << "\n";
    }
    return kExitOk;
}

int importRun(const Args& args)
{
    if (args.positionals().size() != 1) throw InputError("usage: trainbench-cli import-run FILE [--db FILE]");
    const std::string path = args.positionals()[0];
    std::ifstream in(path, std::ios::binary);
    if (!in) throw InputError("cannot read " + path + " (check the path and its permissions)");
    std::stringstream text;
    text << in.rdbuf();
    const auto bundle = bundleFromJson(text.str(), path);
    RunStore store(args.value("--db").value_or(RunStore::defaultPath()));
    std::string checkpoint;
    std::error_code ec;
    if (bundle.checkpoint && std::filesystem::exists(checkpointBeside(path), ec)) {
        // importRun moves it into the run's folder: give it a copy.
        checkpoint = store.path() + "-runs/import-" + std::to_string(getpid()) + ".pt";
        std::filesystem::create_directories(std::filesystem::path(checkpoint).parent_path(), ec);
        std::filesystem::copy_file(checkpointBeside(path), checkpoint, std::filesystem::copy_options::overwrite_existing);
    }
    const auto result = store.importRun(bundle, "file", checkpoint);
    if (!checkpoint.empty()) std::filesystem::remove(checkpoint, ec);
    report(result, bundle, bundle.origin.host, store.path());
    return kExitOk;
}

int fetch(const Args& args)
{
    const auto host = hostOf(args);
    const auto runId = args.runId();
    const auto r = remote::runCli(host, {"export-run", std::to_string(runId)});
    if (r.exitCode != 0) {
        throw InputError("on " + host.label() + ": " + remote::sshMessages(r.err));
    }
    const auto bundle = bundleFromJson(r.out, "what " + host.label() + " sent");
    RunStore store(args.value("--db").value_or(RunStore::defaultPath()));
    std::string checkpoint;
    if (args.flag("--checkpoint")) {
        if (!bundle.checkpoint) throw InputError("run " + std::to_string(runId) + " on " + host.label() + " has no checkpoint");
        checkpoint = store.path() + "-runs/fetch-" + std::to_string(getpid()) + ".pt";
        std::error_code ec;
        std::filesystem::create_directories(std::filesystem::path(checkpoint).parent_path(), ec);
        const int fd = ::open(checkpoint.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0) throw InputError("cannot create " + checkpoint);
        const auto copy = remote::runSshInto(host, remote::remoteCommand({"cat", "--", bundle.checkpoint->path}), fd);
        ::close(fd);
        const auto size = std::filesystem::file_size(checkpoint, ec);
        if (copy.exitCode != 0 || ec || static_cast<std::int64_t>(size) != bundle.checkpoint->bytes) {
            std::filesystem::remove(checkpoint, ec);
            const auto failure = remote::connectionFailure(host, copy);
            throw InputError("the checkpoint of run " + std::to_string(runId) + " did not arrive whole ("
                             + (failure.empty() ? remote::sshMessages(copy.err) : failure) + "); fetch it again");
        }
    }
    const auto result = store.importRun(bundle, host.label(), checkpoint);
    if (!checkpoint.empty()) {
        std::error_code ec;
        std::filesystem::remove(checkpoint, ec); // moved in, unless nothing was new
    }
    report(result, bundle, host.label(), store.path());
    return kExitOk;
}

std::vector<OptionSpec> fetchOptions()
{
    std::vector<OptionSpec> o{{"--db", true, "the local store to copy it into (default: the default store)", "FILE"},
                              {"--checkpoint", false, "also copy the run's latest checkpoint"}};
    for (auto& h : hostOptions()) o.push_back(std::move(h));
    return o;
}

const CommandRegistration exportRunRegistration{Command{
    "export-run",
    "Write a run (config, metrics, events, findings, origin) as one bundle file.",
    "RUN_ID [--db FILE] [--output FILE] [--checkpoint]",
    {kDb,
     {"--output", true, "the bundle file (default: stdout)", "FILE"},
     {"--checkpoint", false, "also copy its latest checkpoint beside the bundle (FILE.checkpoint.pt)"}},
    &exportRunBundle}};

const CommandRegistration importRunRegistration{Command{
    "import-run",
    "Add a run from a bundle file (export-run) to the store; importing it again adds nothing.",
    "FILE [--db FILE]",
    {kDb},
    &importRun,
    1}};

const CommandRegistration fetchRunRegistration{Command{
    "fetch",
    "Copy a run from a host into the local store, to compare it with local runs.",
    "RUN_ID --host H [--db FILE] [--checkpoint]",
    fetchOptions(),
    &fetch}};

} // namespace
} // namespace tb::cli
