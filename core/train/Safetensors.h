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

} // namespace tb
