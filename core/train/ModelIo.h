#pragma once
// Model weights in and out: Trainbench checkpoints, safetensors files and
// Hugging Face-style folders, matched to a model by name and shape.

#include <map>
#include <string>

#include "config/HfArchitecture.h"
#include "train/Layers.h"
#include "train/ModelTools.h"

namespace tb {

// The model weights of a Trainbench checkpoint (.pt), a .safetensors file, or
// a folder holding model.safetensors, on the CPU, by parameter name.
std::map<std::string, torch::Tensor> readModelWeights(const std::string& path);

// Copies weights into the model's parameters. Every base parameter must be
// present with its shape; LoRA adapters the source lacks keep their
// initialisation. Throws InputError naming the first tensor that does not fit
// and both shapes, or a tensor the model does not have.
void loadModelWeights(CausalLmImpl& model, const std::map<std::string, torch::Tensor>& weights,
                      const std::string& source);

// The model's parameters by name; with mergeLora the adapters are folded into
// their base weights and left out.
std::map<std::string, torch::Tensor> modelTensors(CausalLmImpl& model, bool mergeLora);

class Dataset;
// The model `config` describes with the weights of `checkpoint`, in eval mode
// on the CPU in fp32 (a QLoRA run's base as its checkpoint stores it).
std::shared_ptr<CausalLmImpl> openTrainedModel(const RunConfig& config, const Dataset& data, const std::string& checkpoint);

// eos_token_id of a Hugging Face folder's generation_config.json, else of its
// config.json: one id or a list (empty where neither names one).
std::vector<std::int64_t> folderEosTokens(const std::string& folder);

// A Hugging Face folder's model on the CPU, in eval mode: built in fp32, bf16
// or fp16 and filled from the folder's weights, its block linears quantized
// as they load where quantizeFormat (none | nf4 | int8) says so, for up to
// maxLen positions. Throws InputError for a bad precision or format.
std::shared_ptr<CausalLmImpl> openFolderModel(const std::string& folder, const HfArchitecture& arch, const std::string& precision,
                                              const std::string& quantizeFormat, int maxLen);

// The next token's scores from one position's logits, after the settings'
// repetition penalty over `previous` (every id so far), temperature, top-k and
// top-p: fp32, -inf where a filter took the token out. At temperature 0 only
// the penalty applies.
torch::Tensor nextTokenScores(torch::Tensor logits, const std::vector<std::int64_t>& previous, const GenerationSettings& settings);
// The most likely of those at temperature 0, else one drawn from their softmax.
std::int64_t pickNextToken(const torch::Tensor& logits, const std::vector<std::int64_t>& previous,
                           const GenerationSettings& settings, at::Generator& gen);

} // namespace tb
