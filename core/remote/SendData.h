#pragma once
// `train --host H --send-data`: a local data file copied into the host's
// store folder (<store>-data/<sha256>/<file name>), named and checked by its
// SHA-256. A file already there under the same checksum is not sent again;
// a copy whose bytes differ from what was sent is refused and removed.

#include <cstdint>
#include <functional>
#include <string>

#include "remote/HostBook.h"

namespace tb::remote {

// Where a store's received data files go: "<db>-data".
std::string dataFolderOf(const std::string& dbPath);

// Receiving side (trainbench-cli receive-data): reads `expectedSize` bytes
// from `fd` into folder/sha256/name through a temporary, hashing as they
// arrive. Returns the file's path; InputError when the name, checksum or size
// is malformed, when fewer or more bytes arrive, or when their checksum
// differs (the temporary is removed then; one left by a receiver that was
// killed stays as .partial-XXXXXX).
std::string receiveData(int fd, const std::string& folder, const std::string& name, const std::string& sha256,
                        std::uint64_t expectedSize);
// The path a file with this checksum and name has in `folder`, if it is there
// with that size; empty otherwise.
std::string receivedDataPath(const std::string& folder, const std::string& name, const std::string& sha256,
                             std::uint64_t size);

struct SentData {
    std::string remotePath;
    std::string sha256;
    std::uint64_t size = 0;
    bool alreadyThere = false; // the host had it: nothing was sent
    double seconds = 0;        // of sending
};

// Sending side: checksums `localPath`, asks the host whether it has it, sends
// it through ssh's stdin when not. `onStatus` gets a line before long work.
// InputError with one sentence for a missing local file, a connection
// failure or a refused copy.
// `onSshStart` gets the pid of the ssh client that sends the bytes (killing
// it stops the upload; the host then keeps nothing).
SentData sendData(const Host& host, const std::string& localPath, const std::function<void(const std::string&)>& onStatus = {},
                  const std::function<void(int pid)>& onSshStart = {});

// What the sender says it did, in one line ("data: sent ... as PATH; sha256
// ... checked there", or that the host already had it).
std::string describeSent(const Host& host, const std::string& localPath, const SentData& sent);

// The config JSON text with data.path set to `path` (the copy on the host).
// InputError if the text is not a JSON object.
std::string withDataPath(const std::string& configJson, const std::string& path);

} // namespace tb::remote
