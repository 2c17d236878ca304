#pragma once
// The safetensors format, read and written here: an 8-byte little-endian
// header length, a JSON header {name: {dtype, shape, data_offsets}, "__metadata__": {...}},
// then the raw tensor bytes. Reading bounds every count and offset.

#include <map>
#include <string>

#include <torch/torch.h>

namespace tb {

// Writes tensors (converted to contiguous CPU) to `path` through a temporary
// file that is fsynced and renamed. Throws InputError when it cannot write.
void writeSafetensors(const std::string& path, const std::map<std::string, torch::Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Reads every tensor of a safetensors file onto the CPU. Throws InputError
// with one sentence for a file that is not safetensors or is damaged.
std::map<std::string, torch::Tensor> readSafetensors(const std::string& path);

// A safetensors file mapped read-only into memory: its tensors are views of
// the mapping (no copy, and no anonymous memory: the pages belong to the page
// cache), valid while this object lives. Only ever copy from them. The header
// is checked as readSafetensors checks it.
class MappedSafetensors {
public:
    explicit MappedSafetensors(const std::string& path);
    ~MappedSafetensors();
    MappedSafetensors(const MappedSafetensors&) = delete;
    MappedSafetensors& operator=(const MappedSafetensors&) = delete;

    const std::string& path() const { return m_path; }
    std::size_t bytes() const { return m_bytes; }
    const std::map<std::string, torch::Tensor>& tensors() const { return m_tensors; }
    // Copies `view` (one of tensors()) into `dst`, a CPU tensor of its shape.
    // Where dst is contiguous and of the stored dtype (and the view a whole
    // stored tensor), the bytes are read from the file straight into it
    // (pread, as `cat` reads): no page of the
    // mapping is touched, so loading runs at the disk's pace without a page
    // fault per 4 KB of the file. Otherwise copy_ converts from the mapping.
    // With dropBehind the page cache is told to drop what was read (for a
    // model too large for it and the page cache both: a 7B folder on 24 GB
    // loaded in 8-10 s against 19-20 s, since the model's huge pages need not
    // be compacted out of a full cache). Throws InputError when the file
    // cannot be read (e.g. truncated since it was mapped).
    void copyInto(const torch::Tensor& view, const torch::Tensor& dst, bool dropBehind = false) const;
    // Tells the kernel that `view` (one of tensors()) has been read for the
    // last time: its pages leave this mapping and the page cache (what a
    // quantized load reads through the mapping, as copyInto's dropBehind
    // does for what it reads with pread).
    void dropPages(const torch::Tensor& view) const;

private:
    std::string m_path;
    int m_fd = -1;
    void* m_base = nullptr;
    std::size_t m_bytes = 0;
    std::map<std::string, torch::Tensor> m_tensors;
};

} // namespace tb
