#include "train/Safetensors.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "common/Errors.h"
#include "common/Files.h"

namespace tb {
namespace {

using nlohmann::json;

constexpr std::uint64_t kMaxHeaderBytes = 100ull << 20; // the reference implementation's own limit
constexpr std::size_t kMaxTensors = 1000000;

struct DtypeInfo {
    const char* name;
    at::ScalarType type;
    int bytes;
};
constexpr DtypeInfo kDtypes[] = {
    {"F64", at::kDouble, 8}, {"F32", at::kFloat, 4}, {"F16", at::kHalf, 2}, {"BF16", at::kBFloat16, 2},
    {"I64", at::kLong, 8},   {"I32", at::kInt, 4},   {"I16", at::kShort, 2}, {"I8", at::kChar, 1},
    {"U8", at::kByte, 1},    {"BOOL", at::kBool, 1},
};

const DtypeInfo* dtypeByName(const std::string& name)
{
    for (const auto& d : kDtypes) {
        if (name == d.name) return &d;
    }
    return nullptr;
}

const DtypeInfo* dtypeByType(at::ScalarType type)
{
    for (const auto& d : kDtypes) {
        if (type == d.type) return &d;
    }
    return nullptr;
}

std::string clipped(const std::string& text)
{
    return text.size() <= 80 ? text : text.substr(0, 77) + "...";
}

} // namespace

void writeSafetensors(const std::string& path, const std::map<std::string, torch::Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata)
{
    json header = json::object();
    if (!metadata.empty()) header["__metadata__"] = metadata;
    std::vector<torch::Tensor> ordered;
    std::uint64_t offset = 0;
    for (const auto& [name, tensor] : tensors) {
        auto t = tensor.detach().to(torch::kCPU).contiguous();
        const auto* dtype = dtypeByType(t.scalar_type());
        if (!dtype) throw InputError("cannot write tensor " + name + " to safetensors: unsupported dtype");
        const auto bytes = static_cast<std::uint64_t>(t.numel()) * dtype->bytes;
        header[name] = {{"dtype", dtype->name}, {"shape", t.sizes().vec()}, {"data_offsets", {offset, offset + bytes}}};
        offset += bytes;
        ordered.push_back(t);
    }
    std::string text = header.dump();
    while (text.size() % 8 != 0) text.push_back(' '); // keeps the data 8-byte aligned
    std::uint8_t length[8];
    for (int i = 0; i < 8; ++i) length[i] = static_cast<std::uint8_t>((static_cast<std::uint64_t>(text.size()) >> (8 * i)) & 0xff);
    const auto error = writeFileAtomicallyWith(path, [&](int fd) {
        int e = writeAll(fd, length, 8);
        if (!e) e = writeAll(fd, text.data(), text.size());
        for (const auto& t : ordered) {
            if (!e) e = writeAll(fd, t.data_ptr(), t.numel() * t.element_size());
        }
        return e;
    });
    if (!error.empty()) throw InputError(error + " (is the disk full, or the folder read-only?)");
}

namespace {

struct Entry {
    std::vector<std::int64_t> shape;
    at::ScalarType type;
    std::uint64_t begin = 0, end = 0; // within the data section
};

struct Header {
    std::uint64_t dataStart = 0; // 8 + header bytes
    std::map<std::string, Entry> entries;
};

// Reads and checks the header: every count and offset is bounded by the file's size.
Header readHeader(const std::string& path, std::ifstream& in)
{
    const std::string what = "safetensors file " + path;
    std::error_code ec;
    const auto fileSize = static_cast<std::uint64_t>(std::filesystem::file_size(path, ec));
    std::uint8_t length[8];
    if (ec || fileSize < 8 || !in.read(reinterpret_cast<char*>(length), 8)) {
        throw InputError(what + " is too short to be safetensors");
    }
    std::uint64_t headerBytes = 0;
    for (int i = 7; i >= 0; --i) headerBytes = (headerBytes << 8) | length[i];
    if (headerBytes > kMaxHeaderBytes || headerBytes > fileSize - 8) {
        throw InputError(what + " is not safetensors, or is truncated (its header length " + std::to_string(headerBytes)
                         + " does not fit the file's " + std::to_string(fileSize) + " bytes)");
    }
    std::string text(headerBytes, '\0');
    if (!in.read(text.data(), static_cast<std::streamsize>(headerBytes))) throw InputError(what + " is truncated");
    json header;
    try {
        // Bounded nesting: a header is two levels deep; refuse anything deeper.
        header = json::parse(text, [](int depth, json::parse_event_t, json&) {
            if (depth > 8) throw InputError("nested too deeply");
            return true;
        });
    } catch (const std::exception& e) {
        throw InputError(what + " has a damaged header (" + clipped(e.what()) + ")");
    }
    if (!header.is_object() || header.size() > kMaxTensors) throw InputError(what + " has a damaged header (not an object)");
    Header out;
    out.dataStart = 8 + headerBytes;
    const std::uint64_t dataBytes = fileSize - 8 - headerBytes;
    for (const auto& [name, entry] : header.items()) {
        if (name == "__metadata__") continue;
        const auto bad = [&](const std::string& why) {
            return InputError(what + ": tensor \"" + clipped(name) + "\" " + why);
        };
        if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") || !entry.contains("data_offsets")
            || !entry["dtype"].is_string() || !entry["shape"].is_array() || !entry["data_offsets"].is_array()
            || entry["data_offsets"].size() != 2) {
            throw bad("lacks dtype, shape or data_offsets");
        }
        const auto* dtype = dtypeByName(entry["dtype"].get<std::string>());
        if (!dtype) throw bad("has dtype " + clipped(entry["dtype"].get<std::string>()) + ", which Trainbench does not read");
        if (entry["shape"].size() > 16) throw bad("has more than 16 dimensions");
        Entry e;
        e.type = dtype->type;
        std::uint64_t count = 1;
        for (const auto& d : entry["shape"]) {
            if (!d.is_number_unsigned() && !(d.is_number_integer() && d.get<long long>() >= 0)) throw bad("has a bad shape");
            const auto n = d.get<std::uint64_t>();
            if (n > dataBytes || (n > 0 && count > dataBytes / n)) throw bad("is larger than the file (is it truncated?)");
            count *= n;
            e.shape.push_back(static_cast<std::int64_t>(n));
        }
        const auto& offsets = entry["data_offsets"];
        if (!offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned()) throw bad("has bad data_offsets");
        e.begin = offsets[0].get<std::uint64_t>();
        e.end = offsets[1].get<std::uint64_t>();
        if (e.begin > e.end || e.end - e.begin != count * dtype->bytes) {
            throw bad("has data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) + "] that do not match its "
                      + entry["dtype"].get<std::string>() + " shape " + entry["shape"].dump() + " ("
                      + std::to_string(count * dtype->bytes) + " bytes)");
        }
        if (e.end > dataBytes) {
            throw bad("has data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) + "] past the end of the file's "
                      + std::to_string(dataBytes) + " data bytes: the file is truncated or its header is wrong");
        }
        out.entries.emplace(name, std::move(e));
    }
    return out;
}

} // namespace

std::map<std::string, torch::Tensor> readSafetensors(const std::string& path)
{
    std::ifstream in(path, std::ios::binary);
    if (!in) throw InputError("cannot read safetensors file " + path + " (does it exist, and may this user read it?)");
    const auto header = readHeader(path, in);
    std::map<std::string, torch::Tensor> tensors;
    for (const auto& [name, e] : header.entries) {
        auto t = torch::empty(e.shape, torch::TensorOptions().dtype(e.type));
        in.seekg(static_cast<std::streamoff>(header.dataStart + e.begin));
        if (!in.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(e.end - e.begin))) {
            throw InputError("safetensors file " + path + ": tensor \"" + clipped(name) + "\" is truncated");
        }
        tensors.emplace(name, std::move(t));
    }
    return tensors;
}

MappedSafetensors::MappedSafetensors(const std::string& path) : m_path(path)
{
    std::ifstream in(path, std::ios::binary);
    if (!in) throw InputError("cannot read safetensors file " + path + " (does it exist, and may this user read it?)");
    const auto header = readHeader(path, in);
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw InputError("cannot open safetensors file " + path);
    struct stat st {};
    if (::fstat(fd, &st) != 0 || st.st_size <= 0) {
        ::close(fd);
        throw InputError("cannot read the size of safetensors file " + path);
    }
    m_bytes = static_cast<std::size_t>(st.st_size);
    // Read-only and shared: the pages are the page cache's, not this process's
    // anonymous memory; tensors are views that are only ever copied from.
    void* base = ::mmap(nullptr, m_bytes, PROT_READ, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
        ::close(fd);
        throw InputError("cannot map safetensors file " + path + " into memory");
    }
    // Kept open for copyInto's reads.
    m_fd = fd;
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    m_base = base;
    ::madvise(m_base, m_bytes, MADV_SEQUENTIAL);
    auto* data = static_cast<std::uint8_t*>(m_base) + header.dataStart;
    const auto changed = [&] {
        // The destructor does not run for a constructor that throws: unmap here.
        ::munmap(m_base, m_bytes);
        m_base = nullptr;
        ::close(m_fd);
        m_fd = -1;
        return InputError("safetensors file " + path + " changed while it was read");
    };
    if (header.dataStart > m_bytes) throw changed();
    try {
        for (const auto& [name, e] : header.entries) {
            if (header.dataStart + e.end > m_bytes) throw changed();
            m_tensors.emplace(name, torch::from_blob(data + e.begin, e.shape, torch::TensorOptions().dtype(e.type)));
        }
    } catch (const InputError&) {
        throw;
    } catch (...) {
        m_tensors.clear();
        ::munmap(m_base, m_bytes);
        ::close(m_fd);
        throw;
    }
}

MappedSafetensors::~MappedSafetensors()
{
    m_tensors.clear();
    if (m_base) ::munmap(m_base, m_bytes);
    if (m_fd >= 0) ::close(m_fd);
}

void MappedSafetensors::copyInto(const torch::Tensor& view, const torch::Tensor& dst, bool dropBehind) const
{
    const auto bytes = static_cast<std::size_t>(view.numel()) * view.element_size();
    const auto start = static_cast<const std::uint8_t*>(view.data_ptr()) - static_cast<const std::uint8_t*>(m_base);
    // Straight from the file only for a whole stored tensor of this mapping.
    const bool direct = m_fd >= 0 && view.is_contiguous() && start >= 0
                        && static_cast<std::size_t>(start) + bytes <= m_bytes && dst.device().is_cpu()
                        && dst.is_contiguous() && dst.scalar_type() == view.scalar_type() && dst.sizes() == view.sizes();
    if (!direct) {
        dst.copy_(view);
        return;
    }
    auto* out = static_cast<char*>(dst.data_ptr());
    constexpr std::size_t kChunk = 64u << 20;
    for (std::size_t done = 0; done < bytes;) {
        const auto n = ::pread(m_fd, out + done, std::min(bytes - done, kChunk), static_cast<off_t>(start + done));
        const int error = errno;
        if (n < 0 && error == EINTR) continue;
        if (n <= 0) {
            const std::string why = n == 0 ? "it ends there: was it truncated while loading?" : std::strerror(error);
            throw InputError("safetensors file " + m_path + " could not be read at byte " + std::to_string(start + done)
                             + " (" + why + ")");
        }
        if (dropBehind) ::posix_fadvise(m_fd, static_cast<off_t>(start + done), n, POSIX_FADV_DONTNEED);
        done += static_cast<std::size_t>(n);
    }
}

void MappedSafetensors::dropPages(const torch::Tensor& view) const
{
    if (!m_base || m_fd < 0) return;
    const auto begin = static_cast<const std::uint8_t*>(view.data_ptr()) - static_cast<const std::uint8_t*>(m_base);
    const auto bytes = static_cast<std::size_t>(view.numel()) * view.element_size();
    if (begin < 0 || static_cast<std::size_t>(begin) + bytes > m_bytes) return;
    // Whole pages only: the first and last may hold a neighbour's bytes.
    const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    const std::size_t first = (static_cast<std::size_t>(begin) + page - 1) / page * page;
    const std::size_t last = (static_cast<std::size_t>(begin) + bytes) / page * page;
    if (last <= first) return;
    // Unmapped from this process first: the page cache keeps pages that a
    // mapping still holds.
    ::madvise(static_cast<std::uint8_t*>(m_base) + first, last - first, MADV_DONTNEED);
    ::posix_fadvise(m_fd, static_cast<off_t>(first), static_cast<off_t>(last - first), POSIX_FADV_DONTNEED);
}

} // namespace tb
