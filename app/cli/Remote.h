#pragma once
// What the commands that take --host share: the host they name, the remote
// trainbench-cli command line, and connection failures as InputErrors.

#include <string>
#include <vector>

#include "Command.h"
#include "remote/HostBook.h"
#include "remote/Ssh.h"

namespace tb::cli {

// The options --host, --remote-cli and --remote-db, for a command's option list.
std::vector<OptionSpec> hostOptions();
// The host --host names (a saved name or a destination), with --remote-cli and --remote-db applied.
remote::Host hostOf(const Args& args);
// The remote command line: the remote trainbench-cli, then `args`, then (for
// a command on the store) --db with the host's store when one is set.
std::string remoteCli(const remote::Host& host, const std::vector<std::string>& args, bool onStore = true);
// Runs a remote trainbench-cli command and returns what it printed; a
// connection failure is an InputError with its sentence.
remote::SshResult runRemote(const remote::Host& host, const std::vector<std::string>& args, const std::string& input = {},
                            bool onStore = true);
// Checks that the remote trainbench-cli runs and is this version; InputError
// naming both versions otherwise. Returns its --version line.
std::string checkRemoteVersion(const remote::Host& host, const remote::SshOptions& options = {},
                               std::string* sshStderr = nullptr);

} // namespace tb::cli
