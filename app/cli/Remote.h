#pragma once
// What the commands that take --host share: the options, and the host they name.

#include <vector>

#include "Command.h"
#include "remote/HostBook.h"
#include "remote/Ssh.h"

namespace tb::cli {

// The options --host, --remote-cli and --remote-db, for a command's option list.
std::vector<OptionSpec> hostOptions();
// The host --host names (a saved name or a destination), with --remote-cli and --remote-db applied.
remote::Host hostOf(const Args& args);

} // namespace tb::cli
