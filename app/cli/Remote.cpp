#include "Remote.h"

#include "common/Errors.h"

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

} // namespace tb::cli
