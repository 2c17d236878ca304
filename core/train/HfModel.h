#pragma once
// Hugging Face model folders (model.type "hf"): the Llama family (Llama 2 and
// 3.x, TinyLlama, Mistral, Qwen2/2.5) built from config.json with the
// published parameter names, and the folder's safetensors weights (one file,
// or shards listed in model.safetensors.index.json) mapped and copied into it.

#include <string>

#include "config/HfArchitecture.h"
#include "train/Layers.h"

namespace tb {

// Copies the folder's weights into the model's base parameters, converting
// each tensor to the parameter's dtype as it is copied (the files are mapped,
// never read into a second copy). LoRA adapters the folder lacks keep their
// initialisation. Throws InputError with one sentence naming the file and what
// is wrong: a missing shard, an index naming a file that is not there, a
// damaged or truncated file, a tensor missing or of the wrong shape (both
// shapes), or a tensor this architecture does not have.
// With `quantize` active, each block's linear weight is quantized straight
// from its mapped file tensor (quantizableLinears): the host holds one layer
// unquantized at a time, never the model.
void loadHfFolderWeights(CausalLmImpl& model, const std::string& folder,
                         const std::string& describedBy = "config.json", const QuantizeSpec& quantize = {});

// train.init_from of an hf run, when it names a folder: another model folder
// of the same family and shapes (every tensor that does not fit is named), or
// a PEFT LoRA adapter folder (adapter_config.json, adapter_model.safetensors)
// trained on model.path. The adapter goes into this run's adapters when it
// has LoRA of the same rank and alpha, and is merged into the base weights
// when it has none. Returns false when the path is neither (a Trainbench
// checkpoint or safetensors file, which the caller reads).
bool loadHfInitFrom(CausalLmImpl& model, const std::string& path);

} // namespace tb
