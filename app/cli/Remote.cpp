#include "Remote.h"

#include "common/Errors.h"
#include "common/Version.h"

namespace tb::cli {

std::vector<OptionSpec> hostOptions()
{
    return {{"--host", true, "run it on a GPU server over ssh: a saved host ('trainbench-cli hosts') or USER@HOST[:PORT]", "H"},
            {"--remote-cli", true, "trainbench-cli's path on the host (default: as saved, else on its PATH)", "PATH"},
            {"--remote-db", true, "the store on the host (default: as saved, else its default store)", "FILE"}};
}

remote::Host hostOf(const Args& args)
{
    const auto name = args.value("--host");
    if (!name) throw InputError("no --host given");
    return remote::resolveHost(*name, args.value("--remote-cli").value_or(""), args.value("--remote-db").value_or(""),
                               remote::HostBook());
}

std::string remoteCli(const remote::Host& host, const std::vector<std::string>& args, bool onStore)
{
    std::vector<std::string> line{host.remoteCli};
    line.insert(line.end(), args.begin(), args.end());
    if (onStore && !host.remoteDb.empty()) {
        line.push_back("--db");
        line.push_back(host.remoteDb);
    }
    return remote::remoteCommand(line);
}

remote::SshResult runRemote(const remote::Host& host, const std::vector<std::string>& args, const std::string& input,
                            bool onStore)
{
    auto r = remote::runSsh(host, remoteCli(host, args, onStore), input);
    if (const auto failure = remote::connectionFailure(host, r); !failure.empty()) throw InputError(failure);
    return r;
}

std::string checkRemoteVersion(const remote::Host& host, const remote::SshOptions& options, std::string* sshStderr)
{
    const auto r = remote::runSsh(host, remote::remoteCommand({host.remoteCli, "--version"}), {}, options);
    if (sshStderr) *sshStderr = r.err;
    if (const auto failure = remote::connectionFailure(host, r); !failure.empty()) throw InputError(failure);
    std::string line = r.out.substr(0, r.out.find('\n'));
    const std::string prefix = "trainbench-cli ";
    if (r.exitCode != 0 || line.rfind(prefix, 0) != 0) {
        throw InputError("'" + host.remoteCli + " --version' on " + host.label() + " did not answer as trainbench-cli ("
                         + (line.empty() ? remote::sshMessages(r.err) : line)
                         + "): check the path given with --remote-cli");
    }
    const std::string theirs = line.substr(prefix.size(), line.find(' ', prefix.size()) - prefix.size());
    if (theirs != kAppVersion) {
        throw InputError(host.label() + " has trainbench-cli " + theirs + " and this is " + kAppVersion
                         + ": install the same version on both machines (runs, stores and configs must agree)");
    }
    return line;
}

} // namespace tb::cli
