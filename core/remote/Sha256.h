#pragma once
// SHA-256 (FIPS 180-4), for the checksums of data files sent to a host:
// the sender names the file by it, the receiver recomputes it as the bytes
// arrive and refuses a copy that differs.

#include <array>
#include <cstdint>
#include <string>

namespace tb::remote {

class Sha256 {
public:
    Sha256();
    void update(const void* data, std::size_t size);
    // The digest as 64 lowercase hex digits; the object is spent afterwards.
    std::string hex();

private:
    void block(const unsigned char* p);
    std::array<std::uint32_t, 8> m_h;
    std::array<unsigned char, 64> m_buffer{};
    std::size_t m_buffered = 0;
    std::uint64_t m_bytes = 0;
};

// The checksum and size of a file; std::system_error naming it when it
// cannot be read.
struct FileDigest {
    std::string sha256;
    std::uint64_t size = 0;
};
FileDigest digestFile(const std::string& path);

} // namespace tb::remote
