// trainbench-cli hosts: the saved GPU servers of remote runs (add, list, test, remove).
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "Command.h"
#include "Remote.h"
#include "remote/HostCheck.h"
#include "common/Errors.h"

namespace tb::cli {
namespace {

std::vector<std::string> splitWords(const std::string& text)
{
    std::istringstream in(text);
    std::vector<std::string> words;
    for (std::string w; in >> w;) words.push_back(w);
    return words;
}

// Connects, checks the version and lists the GPUs there. With `acceptNew`, an
// unknown host key is recorded in known_hosts (and its fingerprint printed).
void testHost(const remote::Host& host, bool acceptNew)
{
    const auto check = remote::checkHost(host, acceptNew);
    if (check.unknownHostKey) {
        throw InputError("the host key of " + host.label() + " (" + host.destination + ") is not known yet: it is "
                         + check.hostKey + "; if that is the server's key, add the host with --accept-new-host-key "
                         "(or connect once with ssh)");
    }
    if (check.keyAccepted) std::cout << "host key " << check.hostKey << " accepted and saved in known_hosts\n";
    else if (!check.hostKey.empty()) std::cout << "host key " << check.hostKey << " (already known)\n";
    std::cout << host.label() << ": " << check.version << "\n";
    for (const auto& gpu : check.gpus) {
        const double gib = static_cast<double>(gpu.memoryBytes) / (1024.0 * 1024.0 * 1024.0);
        std::cout << "  gpu " << gpu.index << ": " << gpu.name << ", " << static_cast<int>(gib + 0.5) << " GiB"
                  << (gpu.computeCapability.empty() ? "" : ", compute capability " + gpu.computeCapability) << "\n";
    }
    if (check.gpus.empty()) std::cout << "  no GPU there: runs train on its CPU" << (check.gpuNote.empty() ? "" : " (" + check.gpuNote + ")") << "\n";
}

int hosts(const Args& args)
{
    const auto& p = args.positionals();
    const std::string sub = p.empty() ? "" : p[0];
    const auto need = [&](std::size_t n, const char* usage) {
        if (p.size() != n) throw InputError(std::string("usage: trainbench-cli hosts ") + usage);
    };
    remote::HostBook book;
    if (sub == "list") {
        need(1, "list [--json]");
        if (args.flag("--json")) {
            auto list = nlohmann::json::array();
            for (const auto& h : book.hosts()) {
                list.push_back({{"name", h.name}, {"destination", h.destination}, {"remote_cli", h.remoteCli},
                                {"remote_db", h.remoteDb}, {"ssh_options", h.sshOptions}});
            }
            std::cout << list.dump(2) << "\n";
            return kExitOk;
        }
        if (book.hosts().empty()) {
            std::cout << "no saved hosts (add one with 'trainbench-cli hosts add NAME USER@HOST'); list file: " << book.path() << "\n";
            return kExitOk;
        }
        for (const auto& h : book.hosts()) {
            std::cout << h.name << "  " << h.destination << "  cli " << h.remoteCli
                      << "  store " << (h.remoteDb.empty() ? std::string("(default)") : h.remoteDb) << "\n";
        }
        return kExitOk;
    }
    if (sub == "add") {
        need(3, "add NAME DEST [--remote-cli PATH] [--remote-db FILE] [--ssh-options \"ARGS\"] [--accept-new-host-key] [--replace]");
        remote::Host host;
        host.name = p[1];
        host.destination = p[2];
        remote::checkHostName(host.name);
        remote::sshDestination(host.destination);
        if (auto cli = args.value("--remote-cli")) host.remoteCli = *cli;
        if (auto db = args.value("--remote-db")) host.remoteDb = *db;
        if (auto o = args.value("--ssh-options")) host.sshOptions = splitWords(*o);
        if (book.find(host.name) && !args.flag("--replace")) {
            throw InputError("a host named \"" + host.name + "\" is already saved: choose another name, or add --replace");
        }
        testHost(host, args.flag("--accept-new-host-key"));
        book.add(host, args.flag("--replace"));
        book.save();
        std::cout << "saved host " << host.name << " in " << book.path() << "\n";
        return kExitOk;
    }
    if (sub == "test") {
        need(2, "test NAME");
        const auto host = book.find(p[1]);
        if (!host) {
            // A plain destination can be tested too.
            testHost(remote::resolveHost(p[1], args.value("--remote-cli").value_or(""),
                                         args.value("--remote-db").value_or(""), book), false);
            return kExitOk;
        }
        testHost(remote::resolveHost(p[1], args.value("--remote-cli").value_or(""), args.value("--remote-db").value_or(""), book),
                 false);
        return kExitOk;
    }
    if (sub == "remove") {
        need(2, "remove NAME");
        book.remove(p[1]);
        book.save();
        std::cout << "removed host " << p[1] << "\n";
        return kExitOk;
    }
    throw InputError(sub.empty() ? "'hosts' needs one of: add, list, test, remove"
                                 : "unknown 'hosts' action '" + sub + "': use add, list, test or remove");
}

const CommandRegistration hostsRegistration{Command{
    "hosts",
    "Save, test and remove the GPU servers remote runs go to (over ssh).",
    "add NAME DEST [--remote-cli PATH] [--remote-db FILE] [--ssh-options \"ARGS\"] [--accept-new-host-key] [--replace] | list [--json] | test NAME | remove NAME",
    {{"--remote-cli", true, "trainbench-cli's path on the host (default: trainbench-cli on its PATH)", "PATH"},
     {"--remote-db", true, "the store on the host (default: its default store)", "FILE"},
     {"--ssh-options", true, "extra ssh arguments for this host, e.g. \"-i KEY -o Port=2222\"", "\"ARGS\""},
     {"--accept-new-host-key", false, "add: record the host's key in known_hosts when it is not known yet"},
     {"--replace", false, "add: replace a saved host of the same name"},
     {"--json", false, "list: print JSON"}},
    &hosts,
    3}};

} // namespace
} // namespace tb::cli
