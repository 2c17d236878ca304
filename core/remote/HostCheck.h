#pragma once
// Testing a host: ssh reaches it, its trainbench-cli is this version, and
// which GPUs it has. Shared by 'trainbench-cli hosts' and the Hosts dialog.

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "remote/HostBook.h"

namespace tb::remote {

struct RemoteGpu {
    int index = 0;
    std::string name;
    std::int64_t memoryBytes = 0;
    std::string computeCapability; // "7.5"
};

struct HostCheck {
    // The host's key is not in known_hosts yet: show hostKey to the user, and
    // check again with acceptNewKey once they accept it. Nothing else was checked.
    bool unknownHostKey = false;
    std::string hostKey;      // "ED25519 SHA256:..."
    bool keyAccepted = false; // this check recorded it in known_hosts
    std::string version;      // trainbench-cli's --version line there
    std::vector<RemoteGpu> gpus;
    std::string gpuNote;      // what 'devices' said when it found no usable GPU
};

// InputError with one sentence for every other failure (key changed, login
// refused, no route, trainbench-cli missing or of another version).
// cancel: set from another thread to stop (the ssh in flight is killed; it
// throws InputError "connecting to HOST was cancelled").
HostCheck checkHost(const Host& host, bool acceptNewKey, const std::atomic<bool>* cancel = nullptr);

} // namespace tb::remote
