#include "remote/HostCheck.h"

#include <nlohmann/json.hpp>

#include "common/Errors.h"
#include "remote/Ssh.h"

namespace tb::remote {

HostCheck checkHost(const Host& host, bool acceptNewKey, const std::atomic<bool>* cancel)
{
    HostCheck check;
    SshOptions ssh;
    ssh.cancel = cancel;
    ssh.verbose = true; // stderr names the server's host key
    ssh.hostKeyChecking = acceptNewKey ? "accept-new" : "yes";
    std::string said;
    try {
        check.version = checkRemoteVersion(host, ssh, &said);
    } catch (const InputError& e) {
        check.hostKey = serverHostKey(said);
        const std::string message = e.what();
        if (!acceptNewKey && message.find("is not known yet") != std::string::npos && !check.hostKey.empty()) {
            check.unknownHostKey = true;
            return check;
        }
        if (!check.hostKey.empty() && message.find("host key") != std::string::npos) {
            throw InputError(message + "; the server's key is " + check.hostKey);
        }
        throw;
    }
    check.hostKey = serverHostKey(said);
    check.keyAccepted = said.find("Permanently added") != std::string::npos;
    SshOptions plain;
    plain.cancel = cancel;
    const auto devices = runCli(host, {"devices", "--json"}, {}, false, plain);
    const auto list = nlohmann::json::parse(devices.out, nullptr, false);
    if (devices.exitCode != 0 || !list.is_array()) {
        throw InputError("'trainbench-cli devices --json' failed on " + host.label() + ": " + sshMessages(devices.err));
    }
    for (const auto& d : list) {
        RemoteGpu gpu;
        gpu.index = d.value("index", static_cast<int>(check.gpus.size()));
        gpu.name = d.value("name", std::string("GPU"));
        gpu.memoryBytes = d.value("memory_bytes", std::int64_t{0});
        gpu.computeCapability = d.value("compute_capability", std::string());
        check.gpus.push_back(std::move(gpu));
    }
    if (check.gpus.empty()) check.gpuNote = sshMessages(devices.err);
    return check;
}

} // namespace tb::remote
