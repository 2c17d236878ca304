#pragma once
// Architectures the planner can plan for besides the built-in models: any
// decoder-only transformer described by a Hugging Face config.json (GPT-2,
// GPT-NeoX/Pythia, Llama, Mistral, Qwen2 and look-alikes), and the bundled
// presets in resources/architectures/ (published config.json values plus the
// published parameter count).

#include <memory>
#include <string>
#include <vector>

#include "config/ModelSpec.h"
#include "config/RunConfig.h"
#include "memory/Estimator.h"

namespace tb {

struct ArchitecturePreset {
    std::string id;    // "pythia-2.8b"
    std::string title; // "Pythia 2.8B"
    std::string source;
    std::string configJson; // the published config.json's values
    ModelSpec model; // the config.json as the trainer reads it (the parameter count's source)
    ArchitectureSpec arch;
};

// Reads a config.json as the trainer reads a folder's (config/HfArchitecture.h,
// its planning mode: what does not change the memory is not refused, and
// other model types are read as look-alikes). Throws InputError naming the
// file and the missing or wrong field.
ModelSpec modelFromHfConfig(const std::string& json, const std::string& source);
// The same as ArchitectureSpec describes it (from the model read, or the
// text: a preset's name, sizes and context); throws where it cannot
// describe the layout (memory/Estimator.h architectureGap).
ArchitectureSpec architectureFromHfConfig(const std::string& json, const std::string& source);
ArchitectureSpec architectureFromHfModel(const ModelSpec& model, const std::string& source);
// A config.json's text. Throws InputError naming the file when it cannot be read.
std::string readHfConfigText(const std::string& path);
ArchitectureSpec loadHfConfigFile(const std::string& path);

// A published model (a preset's or a config.json's values) as an experiment
// whose step can be traced: a scratch folder holding the config.json (the
// recorder builds the model at its probe widths; no weights are read) and a
// token file for the config's validation (the probes draw their own ids);
// 512 tokens (at most its positions), batch 1, fp32, LoRA on attention when
// a rank is set. The folder is removed when the last copy of `folder` goes.
struct PublishedExperiment {
    RunConfig config;
    ModelSpec model;
    std::shared_ptr<const std::string> folder;
};
PublishedExperiment publishedExperiment(const std::string& json, const std::string& source);
// A published model is fine-tuned with its frozen base loaded in half
// precision, as PEFT loads it: LoRA under mixed precision (bf16, fp16) keeps
// the base in the autocast dtype (train.weights_dtype). Call it once the
// precision is settled.
void loadBaseAsPublished(RunConfig& config);

// The bundled presets, sorted by id.
const std::vector<ArchitecturePreset>& bundledArchitectures();
// By id or title, case-insensitively. Throws InputError listing the presets.
const ArchitecturePreset& findArchitecture(const std::string& name);

} // namespace tb
