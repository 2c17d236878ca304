#pragma once
// Model weights in and out: Trainbench checkpoints, safetensors files and
// Hugging Face-style folders, matched to a model by name and shape.

#include <map>
#include <string>

#include "train/Layers.h"

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

} // namespace tb
