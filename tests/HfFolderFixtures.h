// A Hugging Face model folder for tests, written without Python.
#pragma once

#include <cstdint>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "config/HfArchitecture.h"
#include "train/HfModel.h"
#include "train/Safetensors.h"
#include "train/TrainStep.h"

// Writes config.json (configJson as given), random weights in the trainer's
// names (model.safetensors), and train.bin: 6000 uint16 token ids from 3 up,
// below `vocab`, to train on with data.source "tokens".
inline void writeHfFolder(const std::string& folder, const std::string& configJson, int vocab)
{
    std::ofstream(folder + "/config.json") << configJson;
    const auto arch = tb::readHfArchitecture(folder);
    auto model = tb::makeModel(tb::modelSpecFromHf(arch, folder, static_cast<int>(arch.maxPositions)));
    std::map<std::string, torch::Tensor> weights;
    for (const auto& p : model->named_parameters()) weights[p.key()] = p.value().detach();
    tb::writeSafetensors(folder + "/model.safetensors", weights);
    std::vector<std::uint16_t> ids(6000);
    for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::uint16_t>(3 + (i * 7) % (vocab - 3));
    std::ofstream(folder + "/train.bin", std::ios::binary)
        .write(reinterpret_cast<const char*>(ids.data()), static_cast<std::streamsize>(ids.size() * 2));
}

// The Mistral folder the sliding-window tests train: 2 layers of width 64, 4
// heads over 2 key/value heads, each query seeing the `window` most recent
// positions, itself included.
inline void writeMistralFolder(const std::string& folder, int window)
{
    writeHfFolder(folder,
                  R"({"model_type": "mistral", "vocab_size": 64, "hidden_size": 64, "intermediate_size": 96,
                      "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                      "max_position_embeddings": 512, "hidden_act": "silu", "tie_word_embeddings": false,
                      "sliding_window": )" + std::to_string(window) + "}",
                  64);
}
