// trainbench-cli: the headless front end over the same core as the GUI.
#include <algorithm>
#include <cstdio>
#include <iostream>

#include "Command.h"
#include "common/Errors.h"
#include "common/Version.h"
#include "config/RunConfig.h"
#include "train/Trainer.h"

namespace {

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
    if (args.empty()) {
        printHelp();
        return kExitBadInput;
    }
    const std::string name = args[0];
    if (name == "--help" || name == "-h" || name == "help") {
        printHelp();
        return kExitOk;
    }
    if (name == "--version" || name == "version") {
        std::cout << "trainbench-cli " << tb::kAppVersion << " (LibTorch " << tb::torchVersion() << ")\n";
        return kExitOk;
    }
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
