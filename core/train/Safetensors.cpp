#include "train/Safetensors.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fcntl.h>
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

std::map<std::string, torch::Tensor> readSafetensors(const std::string& path)
{
    const std::string what = "safetensors file " + path;
    std::ifstream in(path, std::ios::binary);
    if (!in) throw InputError("cannot read " + what + " (does it exist, and may this user read it?)");
    std::error_code ec;
    const auto fileSize = static_cast<std::uint64_t>(std::filesystem::file_size(path, ec));
    std::uint8_t length[8];
    if (ec || fileSize < 8 || !in.read(reinterpret_cast<char*>(length), 8)) {
        throw InputError(what + " is too short to be safetensors");
    }
    std::uint64_t headerBytes = 0;
    for (int i = 7; i >= 0; --i) headerBytes = (headerBytes << 8) | length[i];
    if (headerBytes > kMaxHeaderBytes || headerBytes > fileSize - 8) {
        throw InputError(what + " is not safetensors (its header length " + std::to_string(headerBytes)
                         + " does not fit the file)");
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
    const std::uint64_t dataBytes = fileSize - 8 - headerBytes;
    std::map<std::string, torch::Tensor> tensors;
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
        std::vector<std::int64_t> shape;
        std::uint64_t count = 1;
        for (const auto& d : entry["shape"]) {
            if (!d.is_number_unsigned() && !(d.is_number_integer() && d.get<long long>() >= 0)) throw bad("has a bad shape");
            const auto n = d.get<std::uint64_t>();
            if (n > dataBytes || (n > 0 && count > dataBytes / n)) throw bad("is larger than the file");
            count *= n;
            shape.push_back(static_cast<std::int64_t>(n));
        }
        const auto& offsets = entry["data_offsets"];
        if (!offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned()) throw bad("has bad data_offsets");
        const auto begin = offsets[0].get<std::uint64_t>(), end = offsets[1].get<std::uint64_t>();
        if (begin > end || end > dataBytes || end - begin != count * dtype->bytes) {
            throw bad("has data_offsets [" + std::to_string(begin) + ", " + std::to_string(end)
                      + "] that do not match its shape or the file's " + std::to_string(dataBytes) + " data bytes");
        }
        auto t = torch::empty(shape, torch::TensorOptions().dtype(dtype->type));
        in.seekg(static_cast<std::streamoff>(8 + headerBytes + begin));
        if (!in.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(end - begin))) throw bad("is truncated");
        tensors.emplace(name, std::move(t));
    }
    return tensors;
}

} // namespace tb
