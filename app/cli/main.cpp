// trainbench-cli: the headless front end over the same core as the GUI.
#include <algorithm>
#include <cstdio>
#include <iostream>

#include "Command.h"
#include "common/Errors.h"
#include "common/Version.h"
#include "config/RunConfig.h"

#ifdef TB_CLI_FRONT
#include <unistd.h>

#include <cerrno>
#include <cstring>
#else
#include "train/Trainer.h"
#endif

namespace {

#ifdef TB_CLI_FRONT
// The front (app/CMakeLists.txt says why there are two programs): a command
// this program lacks, and --help and --version, are trainbench-cli-torch's.
// Replaces this process with it; returns only when it cannot be run.
int runInTorchProgram(char** argv)
{
    // Run from the build tree: the build tree's; installed: relative to this program's folder.
    char self[4096] = {0};
    const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    const std::string exe = n > 0 ? std::string(self, static_cast<std::size_t>(n)) : std::string();
    const std::string path = exe == TB_CLI_FRONT_BUILD_PATH || exe.empty()
                                 ? std::string(TB_CLI_TORCH_BUILD_PATH)
                                 : exe.substr(0, exe.rfind('/') + 1) + TB_CLI_TORCH_FROM_BIN;
    const char* command = argv[1] ? argv[1] : "--help";
    if (access(path.c_str(), X_OK) != 0) {
        std::cerr << "trainbench-cli: failed: '" << command << "' is run by trainbench-cli-torch, which is not at "
                  << path << "; reinstall Trainbench\n";
        return tb::cli::kExitFailed;
    }
    std::cout.flush();
    execv(path.c_str(), argv);
    std::cerr << "trainbench-cli: failed: cannot run " << path << " for '" << command << "': " << std::strerror(errno) << "\n";
    return tb::cli::kExitFailed;
}
#endif

void printHelp()
{
    std::cout << "usage: trainbench-cli COMMAND [options]\n\n"
                 "Train, resume and review Trainbench experiments without the GUI.\n\ncommands:\n";
    // Summaries in one column, two spaces after the longest name.
    std::size_t width = 0;
    for (const auto& c : tb::cli::commands()) width = std::max(width, c.name.size());
    for (const auto& c : tb::cli::commands()) {
        std::string name = "  " + c.name;
        name.resize(width + 4, ' ');
        std::cout << name << c.summary << "\n";
    }
    std::cout << "\n'trainbench-cli COMMAND --help' describes one command.\n"
                 "Exit status: 0 finished, 1 failed, 2 bad input, 130 cancelled.\n";
}

} // namespace

int main(int argc, char** argv)
{
    using namespace tb::cli;
    std::vector<std::string> args(argv + 1, argv + argc);
#ifdef TB_CLI_FRONT
    {
        const auto& here = commands();
        if (args.empty() || std::none_of(here.begin(), here.end(), [&](const Command& c) { return c.name == args[0]; }))
            return runInTorchProgram(argv);
    }
#endif
    if (args.empty()) {
        printHelp();
        return kExitBadInput;
    }
    const std::string name = args[0];
    if (name == "--help" || name == "-h" || name == "help") {
        printHelp();
        return kExitOk;
    }
#ifndef TB_CLI_FRONT
    if (name == "--version" || name == "version") {
        std::cout << "trainbench-cli " << tb::kAppVersion << " (LibTorch " << tb::torchVersion() << ")\n";
        return kExitOk;
    }
#endif
    const auto& all = commands();
    const auto command = std::find_if(all.begin(), all.end(), [&](const Command& c) { return c.name == name; });
    try {
        if (command == all.end()) {
            std::vector<std::string> names;
            for (const auto& c : all) names.push_back(c.name);
            std::string message = "unknown command '" + name + "'";
            if (const auto guess = tb::closestName(name, names); !guess.empty()) message += "; did you mean '" + guess + "'?";
            throw tb::InputError(message + " (see trainbench-cli --help)");
        }
        const Args parsed(name, command->options, {args.begin() + 1, args.end()});
        if (parsed.helpRequested()) {
            std::cout << helpText(*command);
            return kExitOk;
        }
        // A command takes the run id its usage names, and nothing else.
        const std::size_t allowed = command->positionals >= 0 ? static_cast<std::size_t>(command->positionals)
                                    : command->usage.rfind("RUN_ID", 0) == 0 ? 1 : 0;
        if (parsed.positionals().size() > allowed && name != "train") {
            throw tb::InputError("unexpected argument \"" + parsed.positionals()[allowed] + "\" for '" + name
                                 + "' (usage: trainbench-cli " + name + " " + command->usage + ")");
        }
        return command->run(parsed);
    } catch (const tb::InputError& e) {
        std::cerr << "trainbench-cli: error: " << e.what() << "\n";
        return kExitBadInput;
    } catch (const std::exception& e) {
        std::cerr << "trainbench-cli: failed: " << e.what() << "\n";
        return kExitFailed;
    }
}
