#include "remote/SendData.h"

#include "common/ByteSize.h"
#include "common/Errors.h"
#include "common/Files.h"
#include "remote/Sha256.h"
#include "remote/Ssh.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <regex>
#include <system_error>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace fs = std::filesystem;

namespace tb::remote {
namespace {

void checkFields(const std::string& name, const std::string& sha256)
{
    if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos || name.find('\0') != std::string::npos) {
        throw InputError("receive-data: --name must be a plain file name, got \"" + name + "\"");
    }
    if (!std::regex_match(sha256, std::regex("[0-9a-f]{64}"))) {
        throw InputError("receive-data: --sha256 must be 64 lowercase hex digits, got \"" + sha256 + "\"");
    }
}

} // namespace

std::string dataFolderOf(const std::string& dbPath) { return dbPath + "-data"; }

std::string receivedDataPath(const std::string& folder, const std::string& name, const std::string& sha256, std::uint64_t size)
{
    checkFields(name, sha256);
    const auto path = fs::path(folder) / sha256 / name;
    std::error_code ec;
    if (fs::is_regular_file(path, ec) && fs::file_size(path, ec) == size && !ec) return fs::absolute(path).string();
    return {};
}

std::string receiveData(int fd, const std::string& folder, const std::string& name, const std::string& sha256,
                        std::uint64_t expectedSize)
{
    checkFields(name, sha256);
    const auto dir = fs::path(folder) / sha256;
    std::error_code ec;
    const bool dirExisted = fs::is_directory(dir, ec);
    fs::create_directories(dir, ec);
    if (ec) throw InputError("cannot create " + dir.string() + ": " + ec.message() + " (check the store folder's permissions)");
    const auto target = dir / name;
    // A name of its own (mkstemp: O_EXCL, random), so two receivers of the
    // same file, even on a shared filesystem, never write into one temporary.
    std::string partial = (dir / ".partial-XXXXXX").string();
    const int out = ::mkstemp(partial.data());
    if (out < 0) throw InputError("cannot write in " + dir.string() + ": " + std::strerror(errno));
    ::fchmod(out, 0644);
    auto fail = [&](const std::string& why) {
        ::close(out);
        fs::remove(partial, ec);
        if (!dirExisted) fs::remove(dir, ec); // only if empty
        throw InputError(why);
    };
    Sha256 sha;
    std::uint64_t received = 0;
    std::vector<char> buffer(1 << 20);
    for (;;) {
        const auto n = ::read(fd, buffer.data(), buffer.size());
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) fail(std::string("cannot read the data being sent: ") + std::strerror(errno));
        if (n == 0) break;
        received += static_cast<std::uint64_t>(n);
        if (received > expectedSize) {
            fail("more than the announced " + std::to_string(expectedSize)
                 + " bytes arrived (did the file change while it was sent?): run the command again");
        }
        sha.update(buffer.data(), static_cast<std::size_t>(n));
        if (const int error = writeAll(out, buffer.data(), static_cast<std::size_t>(n)); error != 0) {
            fail("cannot write in " + dir.string() + ": " + std::strerror(error) + " (free space where the store is)");
        }
    }
    if (received != expectedSize) {
        fail("only " + std::to_string(received) + " of " + std::to_string(expectedSize)
             + " bytes arrived (the link broke, or the file changed while it was sent): run the command again");
    }
    const auto got = sha.hex();
    if (got != sha256) {
        fail("the data arrived with sha256 " + got + ", not the " + sha256
             + " it was sent as (did the file change while it was sent?): run the command again");
    }
    if (::fsync(out) != 0) fail("cannot sync " + partial + ": " + std::strerror(errno));
    ::close(out);
    fs::rename(partial, target, ec);
    if (ec) {
        const auto why = ec.message();
        fs::remove(partial, ec);
        throw InputError("cannot move the received data to " + target.string() + ": " + why);
    }
    try {
        fsyncPath(dir.string(), true);
    } catch (const std::system_error&) {
        // The file is whole and in place; only its name may not survive a crash.
    }
    return fs::absolute(target).string();
}

SentData sendData(const Host& host, const std::string& localPath, const std::function<void(const std::string&)>& onStatus,
                  const std::function<void(int pid)>& onSshStart)
{
    std::error_code ec;
    if (!fs::is_regular_file(localPath, ec)) {
        throw InputError("--send-data: the data file " + localPath + " is not here (data.path names a file on this computer with --send-data)");
    }
    const auto name = fs::path(localPath).filename().string();
    if (onStatus) onStatus("checksumming " + localPath);
    FileDigest digest;
    try {
        digest = digestFile(localPath);
    } catch (const std::system_error& e) {
        throw InputError(std::string("--send-data: ") + e.what());
    }
    SentData sent;
    sent.sha256 = digest.sha256;
    sent.size = digest.size;
    const std::vector<std::string> args{"receive-data", "--name", name, "--sha256", digest.sha256, "--size", std::to_string(digest.size)};
    auto check = args;
    check.push_back("--check");
    const auto r = runCli(host, check);
    if (r.exitCode == 0 && r.out.rfind("have ", 0) == 0) {
        sent.remotePath = r.out.substr(5, r.out.find('\n') - 5);
        sent.alreadyThere = true;
        return sent;
    }
    if (r.exitCode != 0 || r.out.rfind("missing", 0) != 0) {
        throw InputError("--send-data: " + host.label() + " did not take the data file: " + r.out + sshMessages(r.err));
    }
    if (onStatus) onStatus("sending " + name + " (" + byteSizeText(static_cast<std::int64_t>(digest.size)) + ", sha256 " + digest.sha256.substr(0, 12) + "…) to " + host.label());
    struct File {
        int fd;
        ~File()
        {
            if (fd >= 0) ::close(fd);
        }
    } file{::open(localPath.c_str(), O_RDONLY | O_CLOEXEC)};
    if (file.fd < 0) throw InputError("--send-data: cannot open " + localPath + ": " + std::strerror(errno));
    const auto started = std::chrono::steady_clock::now();
    const auto put = runSshFrom(host, cliCommand(host, args), file.fd, {}, onSshStart);
    sent.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    if (const auto failure = connectionFailure(host, put); !failure.empty()) {
        throw InputError("sending " + localPath + " to " + host.label() + " was interrupted; nothing was kept there. " + failure);
    }
    if (put.exitCode != 0 || put.out.rfind("stored ", 0) != 0) {
        throw InputError("--send-data: sending " + localPath + " to " + host.label() + " failed: " + put.out + sshMessages(put.err));
    }
    sent.remotePath = put.out.substr(7, put.out.find('\n') - 7);
    return sent;
}

std::string describeSent(const Host& host, const std::string& localPath, const SentData& sent)
{
    if (sent.alreadyThere) {
        return "data: " + host.label() + " already has " + localPath + " (sha256 " + sent.sha256 + ") as " + sent.remotePath
             + "; not sent again";
    }
    char rate[64];
    std::snprintf(rate, sizeof rate, "%.1f s, %.1f MB/s", sent.seconds, sent.size / 1e6 / std::max(sent.seconds, 1e-3));
    return "data: sent " + localPath + " (" + std::to_string(sent.size) + " bytes, " + rate + ") to " + host.label() + " as "
         + sent.remotePath + "; sha256 " + sent.sha256 + " checked there";
}

std::string withDataPath(const std::string& configJson, const std::string& path)
{
    auto json = nlohmann::json::parse(configJson, nullptr, false, true);
    if (json.is_discarded() || !json.is_object()) throw InputError("--send-data: the config is not a JSON object");
    json["data"]["path"] = path;
    return json.dump(2);
}

} // namespace tb::remote
