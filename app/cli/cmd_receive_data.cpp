// trainbench-cli receive-data: the receiving end of `train --host H
// --send-data`. Run over ssh by the sending trainbench-cli, it reads a data
// file from stdin into the store's data folder and checks its SHA-256.
#include <climits>
#include <iostream>

#include "Command.h"
#include "common/Errors.h"
#include "remote/SendData.h"
#include "store/RunStore.h"

#include <unistd.h>

namespace tb::cli {
namespace {

int receiveData(const Args& args)
{
    if (!args.positionals().empty()) throw InputError("'receive-data' takes no positional arguments, got \"" + args.positionals()[0] + "\"");
    const auto name = args.value("--name");
    const auto sha = args.value("--sha256");
    const auto size = args.integer("--size", 0, LLONG_MAX);
    if (!name || !sha || !size) throw InputError("'receive-data' needs --name, --sha256 and --size (it is run by 'train --send-data')");
    const std::string db = args.value("--db").value_or(RunStore::defaultPath());
    const auto folder = remote::dataFolderOf(db);
    const auto size64 = static_cast<std::uint64_t>(*size);
    if (args.flag("--check")) {
        const auto have = remote::receivedDataPath(folder, *name, *sha, size64);
        std::cout << (have.empty() ? "missing" : "have " + have) << "\n";
        return kExitOk;
    }
    std::cout << "stored " << remote::receiveData(STDIN_FILENO, folder, *name, *sha, size64) << "\n";
    return kExitOk;
}

const CommandRegistration receiveDataRegistration{Command{
    "receive-data",
    "Receive a data file sent by 'train --host H --send-data' (run over ssh; reads stdin).",
    "--name FILE --sha256 HEX --size BYTES [--check] [--db FILE]",
    {{"--db", true, "experiment database; the file goes to <database>-data/<sha256>/ (default: $TRAINBENCH_DB, else ~/.local/share/trainbench/experiments.db)", "FILE"},
     {"--name", true, "the file's name", "FILE"},
     {"--sha256", true, "the file's SHA-256, 64 hex digits", "HEX"},
     {"--size", true, "the file's size in bytes", "BYTES"},
     {"--check", false, "only say whether the file is already there (\"have PATH\" or \"missing\")"}},
    &receiveData}};

} // namespace
} // namespace tb::cli
