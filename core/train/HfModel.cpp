#include "train/HfModel.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/Errors.h"
#include "train/Safetensors.h"

namespace tb {
namespace {

namespace fs = std::filesystem;

std::string shapeText(at::IntArrayRef sizes) { return c10::str(sizes); }

bool isAdapter(const std::string& name) { return name.find("lora_") != std::string::npos; }

// The safetensors files of a folder, mapped, and which file holds each tensor.
struct FolderTensors {
    std::vector<std::unique_ptr<MappedSafetensors>> files;
    std::map<std::string, std::pair<torch::Tensor, std::string>> byName; // name -> (view, file name)
};

FolderTensors mapFolder(const std::string& folder)
{
    FolderTensors out;
    const auto single = fs::path(folder) / "model.safetensors";
    const auto index = fs::path(folder) / "model.safetensors.index.json";
    std::error_code ec;
    std::vector<std::string> shards;
    std::map<std::string, std::string> expected; // tensor -> shard, from the index
    if (fs::exists(index, ec)) {
        std::ifstream in(index, std::ios::binary);
        std::stringstream text;
        text << in.rdbuf();
        nlohmann::json j;
        try {
            j = nlohmann::json::parse(text.str());
        } catch (const nlohmann::json::exception& e) {
            throw InputError(index.string() + " is not valid JSON (" + std::string(e.what()) + ")");
        }
        if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object() || j["weight_map"].empty()) {
            throw InputError(index.string() + " has no \"weight_map\" object naming the shard of each tensor");
        }
        for (const auto& [name, file] : j["weight_map"].items()) {
            if (!file.is_string()) throw InputError(index.string() + ": the shard of " + name + " is not a file name");
            const auto shard = file.get<std::string>();
            if (shard.empty() || shard.find('/') != std::string::npos || shard == "." || shard == "..") {
                throw InputError(index.string() + ": the shard \"" + shard + "\" of " + name
                                 + " is not a plain file name in the folder");
            }
            expected[name] = shard;
            if (std::find(shards.begin(), shards.end(), shard) == shards.end()) shards.push_back(shard);
        }
        for (const auto& shard : shards) {
            if (!fs::exists(fs::path(folder) / shard, ec)) {
                throw InputError(index.string() + " names the shard " + shard + ", which is not in " + folder
                                 + " (is the download incomplete?)");
            }
        }
    } else if (fs::exists(single, ec)) {
        shards.push_back("model.safetensors");
    } else {
        throw InputError("the model folder " + folder + " has neither model.safetensors nor "
                         "model.safetensors.index.json (the weights are missing; .bin files are not read)");
    }
    for (const auto& shard : shards) {
        out.files.push_back(std::make_unique<MappedSafetensors>((fs::path(folder) / shard).string()));
        for (const auto& [name, view] : out.files.back()->tensors()) {
            const auto it = expected.find(name);
            if (!expected.empty() && (it == expected.end() || it->second != shard)) continue; // the index decides
            out.byName.emplace(name, std::make_pair(view, shard));
        }
    }
    for (const auto& [name, shard] : expected) {
        if (!out.byName.count(name)) {
            throw InputError("the index of " + folder + " puts tensor " + name + " in " + shard
                             + ", which does not hold it");
        }
    }
    return out;
}

// Tensors a Hub file may hold that the model computes itself.
bool ignoredTensor(const std::string& name, const ModelOptions& o)
{
    if (name.size() > 19 && name.compare(name.size() - 19, 19, "rotary_emb.inv_freq") == 0) return true;
    return o.tieEmbeddings && name == "lm_head.weight"; // tied: the embedding is the head
}

} // namespace

ModelOptions hfModelOptions(const HfArchitecture& a, const std::string& folder, int maxLen)
{
    ModelOptions o;
    o.type = "llama";
    o.hfFamily = a.modelType;
    o.scriptPath = folder;
    o.vocabSize = static_cast<int>(a.vocabSize);
    o.maxLen = maxLen;
    o.nLayer = static_cast<int>(a.layers);
    o.dModel = static_cast<int>(a.hiddenSize);
    o.nHead = static_cast<int>(a.heads);
    o.nKvHead = static_cast<int>(a.kvHeads);
    o.dFf = static_cast<int>(a.intermediateSize);
    o.headDimOverride = a.headDim * a.heads == a.hiddenSize ? 0 : static_cast<int>(a.headDim);
    o.positionalEncoding = "rope";
    o.ropeTheta = a.ropeTheta;
    o.rmsNormEps = a.rmsNormEps;
    o.tieEmbeddings = a.tieEmbeddings;
    o.qkvBias = a.qkvBias;
    o.outputBias = a.outputBias;
    o.mlpBias = a.mlpBias;
    o.slidingWindow = static_cast<int>(std::min<std::int64_t>(a.slidingWindow, 1 << 30));
    if (a.ropeScalingType == "llama3") {
        o.ropeFactor = a.ropeFactor;
        o.ropeLowFreqFactor = a.ropeLowFreqFactor;
        o.ropeHighFreqFactor = a.ropeHighFreqFactor;
        o.ropeOriginalMaxPositions = static_cast<int>(a.ropeOriginalMaxPositions);
    }
    return o;
}

void loadHfFolderWeights(CausalLmImpl& model, const std::string& folder)
{
    const auto mapped = mapFolder(folder);
    const auto& o = model.options();
    torch::NoGradGuard noGrad;
    const auto params = model.named_parameters();
    for (const auto& p : params) {
        const auto found = mapped.byName.find(p.key());
        if (found == mapped.byName.end()) {
            if (isAdapter(p.key())) continue;
            throw InputError("the model folder " + folder + " has no tensor " + p.key() + " "
                             + shapeText(p.value().sizes()) + ", which its config.json's " + o.hfFamily
                             + " architecture needs (is a shard missing, or config.json from another model?)");
        }
        const auto& t = found->second.first;
        if (t.sizes() != p.value().sizes()) {
            throw InputError(found->second.second + " in " + folder + ": tensor " + p.key() + " has shape "
                             + shapeText(t.sizes()) + ", but config.json describes " + shapeText(p.value().sizes()));
        }
        if (!t.is_floating_point()) {
            throw InputError(found->second.second + " in " + folder + ": tensor " + p.key() + " is stored as "
                             + std::string(c10::toString(t.scalar_type())) + ", not as floating point weights");
        }
    }
    for (const auto& [name, entry] : mapped.byName) {
        if (params.contains(name) || ignoredTensor(name, o)) continue;
        throw InputError(entry.second + " in " + folder + " holds tensor " + name + " " + shapeText(entry.first.sizes())
                         + ", which a " + o.hfFamily + " model of this config.json does not have (is config.json "
                         "from another model?)");
    }
    // One tensor at a time, converted to the parameter's dtype by copy_.
    for (auto& p : params) {
        const auto found = mapped.byName.find(p.key());
        if (found != mapped.byName.end()) p.value().copy_(found->second.first);
    }
}

} // namespace tb
