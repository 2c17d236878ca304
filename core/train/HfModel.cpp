#include "train/HfModel.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>

#include <sys/mman.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "common/Errors.h"
#include "train/Safetensors.h"

namespace tb {
namespace {

namespace fs = std::filesystem;

std::string shapeText(at::IntArrayRef sizes) { return c10::str(sizes); }

// The safetensors files of a folder, mapped, and which file holds each tensor.
struct FolderTensors {
    std::vector<std::unique_ptr<MappedSafetensors>> files;
    std::map<std::string, std::pair<torch::Tensor, std::string>> byName; // name -> (view, file name)
    std::map<std::string, const MappedSafetensors*> fileOf;              // name -> the mapped file
};

FolderTensors mapFolder(const std::string& folder, const std::function<std::string(const std::string&)>& canonical)
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
            out.byName.emplace(canonical(name), std::make_pair(view, shard));
            out.fileOf.emplace(canonical(name), out.files.back().get());
        }
    }
    for (const auto& [name, shard] : expected) {
        if (!out.byName.count(canonical(name))) {
            throw InputError("the index of " + folder + " puts tensor " + name + " in " + shard
                             + ", which does not hold it");
        }
    }
    return out;
}

// Asks for transparent huge pages under a large CPU tensor about to be filled
// for the first time. Filling 13.5 GB of fresh 4 KB pages took 3.3 million
// page faults and about 24 s of system time for a 7B folder; with 2 MB pages
// the faults are 512 times fewer. Only whole 2 MB pages inside the tensor are
// advised; where THP is off this does nothing.
void adviseHugePages(const torch::Tensor& t)
{
    constexpr std::uintptr_t kHuge = 2u << 20;
    const auto bytes = static_cast<std::uintptr_t>(t.numel()) * t.element_size();
    if (!t.device().is_cpu() || bytes < 2 * kHuge) return;
    const auto begin = reinterpret_cast<std::uintptr_t>(t.data_ptr());
    const auto first = (begin + kHuge - 1) & ~(kHuge - 1), last = (begin + bytes) & ~(kHuge - 1);
    if (last > first) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
}

bool endsWith(const std::string& s, const std::string& tail)
{
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// Buffers a Hub file may hold that the model computes itself: RoPE tables and
// the causal masks older GPT-2 and GPT-NeoX files stored.
bool ignoredTensor(const std::string& name, const ModelOptions& o)
{
    if (endsWith(name, "rotary_emb.inv_freq") || endsWith(name, ".attn.bias") || endsWith(name, ".attn.masked_bias")
        || endsWith(name, ".attention.bias") || endsWith(name, ".attention.masked_bias")) {
        return true;
    }
    return o.tieEmbeddings && (name == "lm_head.weight" || name == "embed_out.weight"); // tied: the embedding is the head
}

// The original GPT-2 files name tensors without the "transformer." prefix
// that GPT2LMHeadModel's own save adds ("h.0.attn.c_attn.weight").
std::string canonicalName(const std::string& name, const ModelOptions& o)
{
    if (o.type == "gpt2" && name.rfind("transformer.", 0) != 0 && name.rfind("lm_head.", 0) != 0) {
        return "transformer." + name;
    }
    return name;
}

// A tensor of a bitsandbytes folder, checked: its dtype and element count.
torch::Tensor storedPart(const FolderTensors& mapped, const std::string& name, at::ScalarType dtype, std::int64_t numel,
                         const std::string& folder)
{
    const auto it = mapped.byName.find(name);
    if (it == mapped.byName.end()) {
        throw InputError("the bitsandbytes folder " + folder + " lacks " + name + " (is a shard missing?)");
    }
    const auto& t = it->second.first;
    if (t.scalar_type() != dtype || t.numel() != numel) {
        throw InputError(it->second.second + " in " + folder + ": " + name + " is " + std::string(c10::toString(t.scalar_type()))
                         + " " + shapeText(t.sizes()) + ", where a weight of this layer's shape needs "
                         + std::string(c10::toString(dtype)) + " of " + std::to_string(numel) + " elements");
    }
    return t.clone(); // out of the mapping, which closes when the folder is read
}

// The layers a bitsandbytes folder stores quantized (quantization_config:
// transformers' layout, the keys of bitsandbytes' Linear4bit and
// Linear8bitLt), each read into its layer as stored: the folder's own maps
// and scales, never a table of ours. Returns the tensor names consumed.
std::set<std::string> loadStoredQuantized(CausalLmImpl& model, const FolderTensors& mapped, const std::string& folder)
{
    std::set<std::string> consumed;
    const auto ceilDiv = [](std::int64_t a, std::int64_t b) { return (a + b - 1) / b; };
    for (auto& [name, layer] : quantizableLinears(model)) {
        if (layer->quantized()) continue;
        const auto w = name + ".weight";
        const auto rows = layer->outFeatures(), cols = layer->inFeatures();
        const auto n = rows * cols;
        if (mapped.byName.count(w + ".quant_state.bitsandbytes__fp4")) {
            throw InputError("the folder " + folder + " stores " + w + " in bitsandbytes' fp4, which is not read (nf4 and 8-bit are)");
        }
        const auto stateName = w + ".quant_state.bitsandbytes__nf4";
        if (mapped.byName.count(stateName)) {
            const auto& packed = mapped.byName.at(stateName).first;
            if (packed.scalar_type() != at::kByte || packed.dim() != 1 || packed.numel() > 4096) {
                throw InputError(folder + ": " + stateName + " is not bitsandbytes' packed quantization state (bytes of JSON)");
            }
            const auto bytes = packed.contiguous();
            const std::string text(reinterpret_cast<const char*>(bytes.data_ptr<std::uint8_t>()), static_cast<std::size_t>(bytes.numel()));
            const auto state = nlohmann::json::parse(text, nullptr, false);
            const auto bad = [&](const std::string& why) {
                return InputError(folder + ": " + stateName + " " + why + " (" + text.substr(0, 200) + ")");
            };
            if (!state.is_object()) throw bad("is not a JSON object");
            const auto integer = [&](const char* key) {
                if (!state.contains(key) || !state[key].is_number_integer()) throw bad(std::string("has no integer \"") + key + "\"");
                return state[key].get<std::int64_t>();
            };
            if (!state.contains("quant_type") || state["quant_type"] != "nf4") throw bad("is not an nf4 state");
            if (state.contains("shape") && !state["shape"].is_null()
                && state["shape"] != nlohmann::json::array({rows, cols})) {
                throw bad("gives the shape " + state["shape"].dump() + "; this layer of config.json's model is ["
                          + std::to_string(rows) + ", " + std::to_string(cols) + "]");
            }
            QuantizedWeight q;
            q.format = QuantFormat::Nf4;
            q.rows = rows;
            q.cols = cols;
            q.blockSize = integer("blocksize");
            if (q.blockSize < 2 || q.blockSize > 65536 || q.blockSize % 2 != 0) throw bad("has a block size that is not an even number up to 65536");
            q.nested = state.contains("nested_offset") || mapped.byName.count(w + ".nested_absmax");
            const auto blocks = ceilDiv(n, q.blockSize);
            // The packed codes, in whatever dtype bnb_4bit_quant_storage gave them: bytes.
            const auto dataIt = mapped.byName.find(w);
            if (dataIt == mapped.byName.end()) throw InputError("the bitsandbytes folder " + folder + " lacks " + w);
            const auto data = dataIt->second.first.contiguous().view(-1).view(at::kByte);
            if (data.numel() != ceilDiv(n, 2)) {
                throw InputError(dataIt->second.second + " in " + folder + ": " + w + " holds " + std::to_string(data.numel())
                                 + " bytes of 4-bit codes; a [" + std::to_string(rows) + ", " + std::to_string(cols)
                                 + "] weight takes " + std::to_string(ceilDiv(n, 2)));
            }
            q.data = data.clone().view({-1, 1});
            q.quantMap = storedPart(mapped, w + ".quant_map", at::kFloat, 16, folder);
            q.absmax = storedPart(mapped, w + ".absmax", q.nested ? at::kByte : at::kFloat, blocks, folder);
            consumed.insert({w, stateName, w + ".quant_map", w + ".absmax"});
            if (q.nested) {
                q.nestedBlockSize = integer("nested_blocksize");
                if (q.nestedBlockSize < 1 || q.nestedBlockSize > 65536) throw bad("has a nested block size out of 1 to 65536");
                if (!state.contains("nested_offset") || !state["nested_offset"].is_number()) throw bad("has no number \"nested_offset\"");
                q.nestedOffset = state["nested_offset"].get<float>();
                if (!std::isfinite(q.nestedOffset)) throw bad("has a nested offset that is not finite");
                q.nestedAbsmax = storedPart(mapped, w + ".nested_absmax", at::kFloat, ceilDiv(blocks, q.nestedBlockSize), folder);
                q.nestedQuantMap = storedPart(mapped, w + ".nested_quant_map", at::kFloat, 256, folder);
                consumed.insert({w + ".nested_absmax", w + ".nested_quant_map"});
            }
            layer->setQuantizedBase(std::move(q));
            continue;
        }
        const auto scb = name + ".SCB";
        if (mapped.byName.count(scb)) {
            QuantizedWeight q;
            q.format = QuantFormat::Int8;
            q.rows = rows;
            q.cols = cols;
            if (!mapped.byName.count(w)) throw InputError("the bitsandbytes folder " + folder + " has " + scb + " but lacks " + w);
            const auto& stored = mapped.byName.at(w).first;
            if (stored.scalar_type() != at::kChar || stored.sizes() != at::IntArrayRef{rows, cols}) {
                throw InputError(mapped.byName.at(w).second + " in " + folder + ": the 8-bit " + w + " is "
                                 + std::string(c10::toString(stored.scalar_type())) + " " + shapeText(stored.sizes())
                                 + ", not Char [" + std::to_string(rows) + ", " + std::to_string(cols) + "]");
            }
            q.data = stored.clone();
            q.absmax = storedPart(mapped, scb, at::kFloat, rows, folder);
            consumed.insert({w, scb});
            const auto format = name + ".weight_format";
            if (const auto f = mapped.byName.find(format); f != mapped.byName.end()) {
                if (f->second.first.numel() != 1 || f->second.first.to(at::kLong).item<std::int64_t>() != 0) {
                    throw InputError(folder + ": " + format + " is not 0 (row-major): bitsandbytes' tiled 8-bit layouts "
                                     "are not read; save the folder with a current bitsandbytes");
                }
                consumed.insert(format);
            }
            layer->setQuantizedBase(std::move(q));
        }
    }
    return consumed;
}

} // namespace

void loadHfFolderWeights(CausalLmImpl& model, const std::string& folder, const std::string& describedBy,
                         const QuantizeSpec& quantize)
{
    const auto& o = model.options();
    const auto mapped = mapFolder(folder, [&](const std::string& name) { return canonicalName(name, o); });
    torch::NoGradGuard noGrad;
    // A bitsandbytes folder's quantized layers first: their weights leave the parameters.
    const auto stored = loadStoredQuantized(model, mapped, folder);
    if (!stored.empty()) {
        for (auto& [name, layer] : quantizableLinears(model)) {
            if (!layer->quantized()) {
                throw InputError("the bitsandbytes folder " + folder + " stores " + name + ".weight unquantized while "
                                 "others are quantized (llm_int8_skip_modules); Trainbench trains a quantized base "
                                 "with every block's linear layers quantized");
            }
        }
    }
    const auto params = model.named_parameters();
    // Every problem is found before anything is copied; the first is told in
    // full and the others are named, so one attempt shows all that differs.
    std::vector<std::string> problems, names;
    const auto problem = [&](const std::string& name, std::string text) {
        problems.push_back(std::move(text));
        names.push_back(name);
    };
    for (const auto& p : params) {
        const auto found = mapped.byName.find(p.key());
        if (found == mapped.byName.end()) {
            if (isAdapterName(p.key())) continue;
            problem(p.key(), "the model folder " + folder + " has no tensor " + p.key() + " " + shapeText(p.value().sizes())
                                 + ", which its config.json's " + o.hfFamily
                                 + " architecture needs (is a shard missing, or config.json from another model?)");
            continue;
        }
        const auto& t = found->second.first;
        if (t.sizes() != p.value().sizes()) {
            problem(p.key(), found->second.second + " in " + folder + ": tensor " + p.key() + " has shape "
                                 + shapeText(t.sizes()) + ", but " + describedBy + " describes " + shapeText(p.value().sizes()));
        } else if (!t.is_floating_point()) {
            problem(p.key(), found->second.second + " in " + folder + ": tensor " + p.key() + " is stored as "
                                 + std::string(c10::toString(t.scalar_type())) + ", not as floating point weights");
        }
    }
    for (const auto& [name, entry] : mapped.byName) {
        if (params.contains(name) || ignoredTensor(name, o) || stored.count(name)) continue;
        problem(name, entry.second + " in " + folder + " holds tensor " + name + " " + shapeText(entry.first.sizes())
                          + ", which a " + o.hfFamily + " model of this config.json does not have (is config.json "
                          "from another model?)");
    }
    if (!problems.empty()) {
        std::string text = problems.front();
        if (problems.size() > 1) {
            text += "; " + std::to_string(problems.size() - 1) + " more tensor" + (problems.size() > 2 ? "s" : "")
                + " do not fit:";
            for (std::size_t i = 1; i < names.size() && i <= 8; ++i) text += (i > 1 ? ", " : " ") + names[i];
            if (names.size() > 9) text += ", ...";
        }
        throw InputError(text);
    }
    // One tensor at a time: read straight from the file where the dtype is
    // the stored one, else converted to the parameter's dtype by copy_.
    // (Asking for the next tensor's pages with MADV_WILLNEED while one copies
    // made a cold 7B load slower here: 30-46 s against 14-20 s.) A folder
    // whose files and the model made from them would not both fit in memory
    // is read without keeping it in the page cache, quantized or not.
    std::uint64_t folderBytes = 0;
    for (const auto& f : mapped.files) folderBytes += f->bytes();
    const long pages = ::sysconf(_SC_PHYS_PAGES), pageSize = ::sysconf(_SC_PAGESIZE);
    const bool dropBehind = pages > 0 && pageSize > 0
                            && 2 * folderBytes > static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(pageSize);
    std::map<std::string, LoraLinearImpl*> quantizeAt; // weight name -> its layer
    if (quantize.active()) {
        for (auto& [name, linear] : quantizableLinears(model)) {
            if (!linear->quantized()) quantizeAt.emplace(name + ".weight", linear);
        }
    }
    for (auto& p : params) {
        const auto found = mapped.byName.find(p.key());
        if (found == mapped.byName.end()) continue;
        if (const auto layer = quantizeAt.find(p.key()); layer != quantizeAt.end()) {
            layer->second->quantizeBase(quantize, found->second.first);
            if (dropBehind) mapped.fileOf.at(p.key())->dropPages(found->second.first);
            continue;
        }
        adviseHugePages(p.value());
        mapped.fileOf.at(p.key())->copyInto(found->second.first, p.value(), dropBehind);
    }
}

namespace {

nlohmann::json readSmallJson(const fs::path& path)
{
    std::error_code ec;
    const auto size = fs::file_size(path, ec);
    if (ec) throw InputError("cannot read " + path.string());
    if (size > (16u << 20)) throw InputError(path.string() + " is larger than 16 MB; it is not an adapter configuration");
    std::ifstream in(path, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    try {
        auto j = nlohmann::json::parse(text.str());
        if (!j.is_object()) throw InputError(path.string() + " is not a JSON object");
        return j;
    } catch (const nlohmann::json::exception& e) {
        throw InputError(path.string() + " is not valid JSON (" + std::string(e.what()).substr(0, 200) + ")");
    }
}

// A PEFT LoRA adapter folder on top of the model's base weights.
void loadPeftAdapter(CausalLmImpl& model, const std::string& folder)
{
    const auto& o = model.options();
    const auto configPath = fs::path(folder) / "adapter_config.json";
    const auto j = readSmallJson(configPath);
    const std::string where = configPath.string();
    const auto type = j.contains("peft_type") && j["peft_type"].is_string() ? j["peft_type"].get<std::string>() : "";
    if (type != "LORA") {
        throw InputError(where + ": peft_type \"" + type.substr(0, 40) + "\" is not LORA; train.init_from loads LoRA adapters");
    }
    if (!j.contains("r") || !j["r"].is_number_integer() || j["r"].get<std::int64_t>() <= 0 || j["r"].get<std::int64_t>() > 65536) {
        throw InputError(where + ": \"r\" must be a positive integer (the adapter's rank)");
    }
    const auto rank = j["r"].get<std::int64_t>();
    const double alpha = j.contains("lora_alpha") && j["lora_alpha"].is_number() ? j["lora_alpha"].get<double>() : 8.0;
    for (const char* key : {"use_dora", "use_rslora"}) {
        if (j.contains(key) && j[key].is_boolean() && j[key].get<bool>()) {
            throw InputError(where + ": " + key + " is true; Trainbench loads plain LoRA adapters (W + alpha/r B A)");
        }
    }
    for (const char* key : {"rank_pattern", "alpha_pattern"}) {
        if (j.contains(key) && j[key].is_object() && !j[key].empty()) {
            throw InputError(where + ": " + key + " gives some modules another rank or alpha; Trainbench loads adapters "
                             "of one rank and alpha");
        }
    }
    if (j.contains("bias") && j["bias"].is_string() && j["bias"].get<std::string>() != "none") {
        throw InputError(where + ": bias \"" + j["bias"].get<std::string>().substr(0, 40)
                         + "\" trains biases too; Trainbench loads adapters with bias \"none\"");
    }
    const auto weightsPath = fs::path(folder) / "adapter_model.safetensors";
    std::error_code ec;
    if (!fs::exists(weightsPath, ec)) {
        throw InputError("the adapter folder " + folder + " has no adapter_model.safetensors"
                         + std::string(fs::exists(fs::path(folder) / "adapter_model.bin", ec)
                                           ? " (adapter_model.bin is a pickle, which Trainbench does not read; save with "
                                             "safe_serialization)"
                                           : ""));
    }
    const MappedSafetensors file(weightsPath.string());
    // PEFT's names: base_model.model.<module>.lora_A.weight -> <module>.lora_A.
    const std::string prefix = "base_model.model.";
    std::map<std::string, torch::Tensor> adapters;
    for (const auto& [name, view] : file.tensors()) {
        if (name.size() > 512) throw InputError(weightsPath.string() + " holds a tensor name of more than 512 characters");
        std::string inner;
        for (const char* part : {".lora_A.weight", ".lora_B.weight"}) {
            if (name.rfind(prefix, 0) == 0 && endsWith(name, part)) {
                inner = canonicalName(name.substr(prefix.size(), name.size() - prefix.size() - 7), o);
            }
        }
        if (inner.empty()) {
            throw InputError(weightsPath.string() + " holds " + name.substr(0, 200) + ", which is not a PEFT LoRA tensor "
                             "(base_model.model.<module>.lora_A.weight or .lora_B.weight)");
        }
        adapters.emplace(inner, view);
    }
    if (adapters.empty()) throw InputError(weightsPath.string() + " holds no LoRA tensors");
    torch::NoGradGuard noGrad;
    const auto params = model.named_parameters();
    if (o.loraRank > 0) {
        // Into this run's own adapters: the same rank, scale and modules.
        if (rank != o.loraRank || std::abs(alpha - o.loraAlpha) > 1e-9 * std::max(1.0, std::abs(alpha))) {
            throw InputError(where + " has r " + std::to_string(rank) + " and lora_alpha " + c10::str(alpha) + ", this run's lora has rank "
                             + std::to_string(o.loraRank) + " and alpha " + c10::str(o.loraAlpha)
                             + ": set lora.rank and lora.alpha to the adapter's");
        }
        // A projection this run adapts and the file does not keeps its fresh
        // adapter (B = 0: no change), as PEFT loads it: GPT-2's target_modules
        // say "c_proj" for both the attention's and the MLP's.
        for (const auto& [name, t] : adapters) {
            if (!params.contains(name)) {
                throw InputError(weightsPath.string() + " adapts " + name.substr(0, name.rfind('.'))
                                 + ", which this run's lora.targets do not name: add its projection to lora.targets");
            }
            if (t.sizes() != params[name].sizes()) {
                throw InputError(weightsPath.string() + ": " + name + " has shape " + shapeText(t.sizes()) + ", this run's "
                                 + shapeText(params[name].sizes()) + " (an adapter of another model?)");
            }
        }
        for (const auto& [name, t] : adapters) params[name].copy_(t);
        return;
    }
    // Without LoRA in this run: fold each adapter into its base weight, W + alpha/r B A.
    const auto modules = model.named_modules();
    std::map<std::string, const LoraLinearImpl*> linears;
    for (const auto& m : modules) {
        if (const auto* l = dynamic_cast<const LoraLinearImpl*>(m.value().get())) linears[m.key()] = l;
    }
    for (const auto& [name, a] : adapters) {
        if (!endsWith(name, ".lora_A")) continue;
        const auto module = name.substr(0, name.size() - 7);
        const auto b = adapters.find(module + ".lora_B");
        const auto linear = linears.find(module);
        if (b == adapters.end()) throw InputError(weightsPath.string() + " has " + name + " without its lora_B");
        if (linear == linears.end()) {
            throw InputError(weightsPath.string() + " adapts " + module + ", which this " + o.hfFamily + " model does not have");
        }
        auto weight = linear->second->weight;
        const auto out = linear->second->outFeatures(), in = linear->second->inFeatures();
        if (a.dim() != 2 || b->second.dim() != 2 || a.size(0) != rank || a.size(1) != in || b->second.size(0) != out
            || b->second.size(1) != rank) {
            throw InputError(weightsPath.string() + ": the adapter of " + module + " has lora_A " + shapeText(a.sizes())
                             + " and lora_B " + shapeText(b->second.sizes()) + ", which do not fit its weight "
                             + shapeText(weight.sizes()) + " at r " + std::to_string(rank));
        }
        auto delta = torch::matmul(b->second.to(torch::kFloat), a.to(torch::kFloat)) * (alpha / static_cast<double>(rank));
        if (linear->second->transposedWeight()) delta = delta.t(); // Conv1D stores [in, out]
        weight.add_(delta.to(weight.scalar_type()));
    }
}

} // namespace

bool loadHfInitFrom(CausalLmImpl& model, const std::string& path)
{
    std::error_code ec;
    if (!fs::is_directory(path, ec)) return false;
    if (fs::exists(fs::path(path) / "adapter_config.json", ec)) {
        loadPeftAdapter(model, path);
        return true;
    }
    if (!fs::exists(fs::path(path) / "config.json", ec)) return false;
    const auto arch = readHfArchitecture(path);
    const auto& o = model.options();
    if (!arch.quantization.empty()) {
        throw InputError("train.init_from: " + path + " is a bitsandbytes " + arch.quantization + " folder; a quantized "
                         "base is trained as model.path (its quantization then applies to the run)");
    }
    if (arch.modelType != o.hfFamily) {
        throw InputError("train.init_from: " + path + " holds a " + arch.modelType + " model and model.path a " + o.hfFamily
                         + " model; give a folder of the same family and sizes");
    }
    try {
        loadHfFolderWeights(model, path, "model.path's config.json");
    } catch (const InputError& e) {
        throw InputError("train.init_from: " + std::string(e.what()));
    }
    return true;
}

} // namespace tb
