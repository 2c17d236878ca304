#pragma once
// Durable file writes: replace a whole file through a temporary that is
// fsynced and renamed, so a crash or a full disk leaves either the old file or
// the new one, never half of one. Used for checkpoints, safetensors and exports.
// And readSmallFile, for /proc files that can vanish while they are read.

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>

#include <fcntl.h>
#include <unistd.h>

namespace tb {

// The whole of a small file such as /proc/PID/stat, or "" when it cannot be
// opened or read. A process's /proc files fail with ESRCH when it exits
// between open and read, and libstdc++'s filebuf then throws
// ("basic_filebuf::underflow error reading the file: No such process")
// whatever the stream's exception mask; read(2) just returns the error.
inline std::string readSmallFile(const std::string& path)
{
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return {};
    std::string text;
    char buffer[4096];
    for (;;) {
        const auto n = ::read(fd, buffer, sizeof buffer);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) text.clear();
        if (n <= 0) break;
        text.append(buffer, static_cast<std::size_t>(n));
    }
    ::close(fd);
    return text;
}

// Throws std::system_error naming the path.
inline void fsyncPath(const std::string& path, bool directory)
{
    const int fd = ::open(path.c_str(), directory ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
    if (fd < 0) throw std::system_error(errno, std::generic_category(), "cannot open " + path);
    const int rc = ::fsync(fd);
    const int error = errno;
    ::close(fd);
    if (rc != 0) throw std::system_error(error, std::generic_category(), "cannot sync " + path);
}

// Writes all `size` bytes to `fd`, retrying short writes and EINTR. Returns 0
// or the errno of the failure (ENOSPC for a write that made no progress).
inline int writeAll(int fd, const void* data, std::size_t size)
{
    const char* p = static_cast<const char*>(data);
    while (size > 0) {
        const auto n = ::write(fd, p, size);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return n < 0 ? errno : ENOSPC;
        p += n;
        size -= static_cast<std::size_t>(n);
    }
    return 0;
}

// Writes `path` through `path.partial`: `fill(fd)` writes the content and
// returns 0 or an errno; then the file is fsynced, renamed over `path`, and
// the folder fsynced. Returns an empty string, or why it failed: then the
// partial file is gone and `path` is as it was. An exception from `fill`
// removes the partial file and propagates.
template <typename Fill>
std::string writeFileAtomicallyWith(const std::string& path, Fill&& fill)
{
    const std::string partial = path + ".partial";
    const int fd = ::open(partial.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return "cannot create " + partial + ": " + std::strerror(errno);
    int error = 0;
    try {
        error = fill(fd);
    } catch (...) {
        ::close(fd);
        std::remove(partial.c_str());
        throw;
    }
    if (!error && ::fsync(fd) != 0) error = errno;
    if (::close(fd) != 0 && !error) error = errno;
    if (!error && std::rename(partial.c_str(), path.c_str()) != 0) error = errno;
    if (error) {
        std::remove(partial.c_str());
        return "cannot write " + path + ": " + std::strerror(error);
    }
    try {
        fsyncPath(std::filesystem::absolute(path).parent_path().string(), true);
    } catch (const std::exception&) {
        // The file is complete and renamed; only the folder entry's durability is unknown.
    }
    return {};
}

inline std::string writeFileAtomically(const std::string& path, const std::string& content)
{
    return writeFileAtomicallyWith(path, [&](int fd) { return writeAll(fd, content.data(), content.size()); });
}

} // namespace tb
