#include "train/ModelIo.h"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <set>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/Errors.h"
#include "config/HfArchitecture.h"
#include "train/Datasets.h"
#include "train/HfModel.h"
#include "train/ModelTools.h"
#include "train/Safetensors.h"
#include "train/TrainStep.h"

namespace tb {
namespace {

namespace fs = std::filesystem;

std::string shapeText(const torch::Tensor& t) { return c10::str(t.sizes()); }


void writeTextAtomically(const fs::path& path, const std::string& text)
{
    const auto partial = path.string() + ".partial";
    {
        std::ofstream out(partial, std::ios::binary | std::ios::trunc);
        out << text;
        out.flush();
        if (!out) {
            std::remove(partial.c_str());
            throw InputError("cannot write " + path.string() + " (is the folder writable and the disk not full?)");
        }
    }
    fs::rename(partial, path);
}

} // namespace

void validateGenerationSettings(const GenerationSettings& s, int minNewTokens)
{
    if (s.maxNewTokens < minNewTokens || s.maxNewTokens > 100000)
        throw InputError("max new tokens must be from " + std::to_string(minNewTokens) + " to 100000, got " + std::to_string(s.maxNewTokens));
    if (!(s.temperature >= 0.0) || s.temperature > 100.0)
        throw InputError("temperature must be from 0 (greedy) to 100, got " + std::to_string(s.temperature));
    if (!(s.topP > 0.0) || s.topP > 1.0) throw InputError("top-p must be above 0 and at most 1 (1: off), got " + std::to_string(s.topP));
    if (s.topK < 0) throw InputError("top-k must be 0 (off) or positive, got " + std::to_string(s.topK));
    if (!(s.repetitionPenalty > 0.0) || s.repetitionPenalty > 100.0)
        throw InputError("repetition penalty must be above 0 and at most 100 (1: off), got " + std::to_string(s.repetitionPenalty));
}

torch::Tensor nextTokenScores(torch::Tensor logits, const std::vector<std::int64_t>& previous, const GenerationSettings& s)
{
    logits = logits.to(torch::kFloat);
    if (s.repetitionPenalty != 1.0 && !previous.empty()) {
        // transformers' RepetitionPenaltyLogitsProcessor: each id seen once or more, once.
        const auto seen = torch::tensor(previous, torch::kLong).clamp(0, logits.size(0) - 1);
        const auto score = logits.index_select(0, seen);
        const auto penalised = torch::where(score < 0, score * s.repetitionPenalty, score / s.repetitionPenalty);
        logits = logits.scatter(0, seen, penalised);
    }
    if (s.temperature == 0.0) return logits; // greedy: the filters keep the most likely token
    logits = logits / s.temperature;
    if (s.topK > 0 && s.topK < logits.size(0)) {
        const auto kth = std::get<0>(logits.topk(s.topK)).min();
        logits = logits.masked_fill(logits < kth, -std::numeric_limits<float>::infinity());
    }
    if (s.topP < 1.0) {
        // The smallest set of the most likely tokens whose probability reaches
        // top-p: sorted ascending, a token goes while the probability up to
        // and including it is at most 1 - top-p; the most likely always stays.
        const auto [sorted, order] = logits.sort(0, false);
        auto drop = sorted.softmax(0).cumsum(0) <= (1.0 - s.topP);
        drop.index_put_({-1}, false);
        logits = logits.masked_fill(drop.scatter(0, order, drop), -std::numeric_limits<float>::infinity());
    }
    return logits;
}

std::int64_t pickNextToken(const torch::Tensor& logits, const std::vector<std::int64_t>& previous, const GenerationSettings& s,
                           at::Generator& gen)
{
    const auto scores = nextTokenScores(logits, previous, s);
    if (s.temperature == 0.0) return scores.argmax().item<std::int64_t>();
    return torch::multinomial(torch::softmax(scores, 0), 1, false, gen).item<std::int64_t>();
}

std::shared_ptr<CausalLmImpl> openTrainedModel(const RunConfig& config, const Dataset& data, const std::string& checkpoint)
{
    auto options = modelOptionsFor(config, data);
    options.activationCheckpointing = false;
    const auto weights = readModelWeights(checkpoint);
    std::shared_ptr<CausalLmImpl> model;
    {
        const WeightsFromFile fromFile(torch::kFloat); // every base weight comes from the checkpoint
        model = makeModel(options);
    }
    loadModelWeights(*model, weights, checkpoint);
    model->eval();
    return model;
}

std::map<std::string, torch::Tensor> readModelWeights(const std::string& path)
{
    std::error_code ec;
    if (fs::is_directory(path, ec)) {
        const auto file = fs::path(path) / "model.safetensors";
        if (!fs::exists(file, ec)) {
            const bool sharded = fs::exists(fs::path(path) / "model.safetensors.index.json", ec);
            throw InputError("folder " + path + " has no model.safetensors"
                             + std::string(sharded ? " (sharded checkpoints are not read yet; merge the shards into one file)"
                                                   : "; give a folder written by 'trainbench-cli export-model', a .safetensors file or a checkpoint"));
        }
        return readSafetensors(file.string());
    }
    if (!fs::exists(path, ec)) throw InputError("weights file not found: " + path);
    if (fs::path(path).extension() == ".safetensors") return readSafetensors(path);
    torch::serialize::InputArchive archive;
    try {
        archive.load_from(path, torch::Device(torch::kCPU));
    } catch (const c10::Error& e) {
        throw InputError("cannot read weights from " + path + " (" + firstLine(e.what_without_backtrace())
                         + "); give a Trainbench checkpoint (.pt), a .safetensors file or a folder with model.safetensors");
    }
    std::map<std::string, torch::Tensor> weights;
    for (const auto& key : archive.keys()) {
        if (key.rfind("model.", 0) != 0) continue;
        torch::Tensor t;
        archive.read(key, t);
        weights.emplace(key.substr(6), t);
    }
    if (weights.empty()) throw InputError(path + " holds no model weights; is it a Trainbench checkpoint?");
    return weights;
}

void loadModelWeights(CausalLmImpl& model, const std::map<std::string, torch::Tensor>& weights,
                      const std::string& source)
{
    torch::NoGradGuard noGrad;
    // A quantized base (a QLoRA run's checkpoint) takes its layers' weights' place.
    std::map<std::string, torch::Tensor> quantized;
    for (const auto& [name, t] : weights) {
        if (isQuantizedBaseName(name)) quantized.emplace(name, t);
    }
    try {
        loadQuantizedBase(model, quantized);
    } catch (const c10::Error& e) {
        throw InputError(source + ": its quantized base weights do not fit this model (" + e.msg().substr(0, 300) + ")");
    }
    if (!quantized.empty()) {
        std::set<std::string> layers;
        for (auto& [name, layer] : quantizableLinears(model)) {
            if (layer->quantized()) layers.insert(name);
        }
        for (const auto& [name, t] : quantized) {
            const auto layer = name.substr(0, name.rfind(".weight_"));
            if (!layers.count(layer)) {
                throw InputError(source + " holds quantized weights for " + layer.substr(0, 200)
                                 + ", which this model does not have, or without their quantization state");
            }
        }
    }
    const auto params = model.named_parameters();
    for (const auto& p : params) {
        const auto found = weights.find(p.key());
        if (found == weights.end()) {
            if (isAdapterName(p.key())) continue; // a fresh adapter on a trained base
            throw InputError(source + " has no tensor " + p.key() + " " + shapeText(p.value())
                             + ", which this model needs: it was saved from another architecture");
        }
        if (found->second.sizes() != p.value().sizes()) {
            throw InputError(source + " does not fit this model: " + p.key() + " has shape " + shapeText(found->second)
                             + " there and " + shapeText(p.value()) + " in the model this config builds");
        }
    }
    for (const auto& [name, tensor] : weights) {
        if (params.contains(name) || quantized.count(name)) continue;
        if (isAdapterName(name)) {
            throw InputError(source + " holds LoRA adapter " + name + ", which this model does not have: export it with "
                                      "'trainbench-cli export-model RUN --merge-lora', or use the same lora settings");
        }
        throw InputError(source + " has tensor " + name + " " + shapeText(tensor)
                         + ", which this model does not have: it was saved from another architecture");
    }
    for (auto& p : params) {
        const auto found = weights.find(p.key());
        if (found != weights.end()) p.value().copy_(found->second);
    }
}

std::map<std::string, torch::Tensor> modelTensors(CausalLmImpl& model, bool mergeLora)
{
    torch::NoGradGuard noGrad;
    std::map<std::string, torch::Tensor> out;
    for (const auto& p : model.named_parameters()) {
        if (mergeLora && isAdapterName(p.key())) continue;
        out[p.key()] = p.value().detach().to(torch::kCPU).clone();
    }
    // A quantized base leaves as the weights it holds, dequantized (in the layer's own layout).
    for (const auto& [name, linear] : quantizableLinears(model)) {
        if (!linear->quantized()) continue;
        out[name + ".weight"] = linear->baseWeight(torch::kFloat).cpu();
    }
    if (!mergeLora) return out;
    for (const auto& m : model.named_modules()) {
        const auto* linear = dynamic_cast<const LoraLinearImpl*>(m.value().get());
        if (!linear || !linear->hasAdapter()) continue;
        auto& weight = out.at(m.key() + ".weight");
        const auto delta = torch::matmul(linear->loraB.detach().cpu(), linear->loraA.detach().cpu()) * linear->adapterScale();
        weight += linear->transposedWeight() ? delta.t() : delta; // Conv1D stores [in, out]
    }
    return out;
}

SampleResult sampleFromCheckpoint(const RunConfig& config, const std::string& checkpointPath,
                                  const SampleRequest& request)
{
    validateGenerationSettings(request.generation);
    const auto data = makeDataset(config);
    const auto prompt = request.chat ? data->encodeChatPrompt(request.prompt) : data->encodePrompt(request.prompt);
    auto model = openTrainedModel(config, *data, checkpointPath);
    torch::NoGradGuard noGrad;
    auto gen = at::make_generator<at::CPUGeneratorImpl>(request.generation.seed);
    std::vector<std::int64_t> ids = prompt, generated;
    const auto maxLen = static_cast<std::size_t>(data->seqLen());
    for (int i = 0; i < request.generation.maxNewTokens; ++i) {
        const auto from = ids.size() > maxLen ? ids.size() - maxLen : 0;
        const auto window = torch::tensor(std::vector<std::int64_t>(ids.begin() + from, ids.end()), torch::kLong);
        const auto logits = model->forward(window.unsqueeze(0)).select(1, -1).squeeze(0).to(torch::kFloat);
        const std::int64_t next = pickNextToken(logits, ids, request.generation, gen);
        generated.push_back(next);
        ids.push_back(next);
        if (next == data->endToken() || (request.chat && data->endsTurn(next))) break;
    }
    // A chat reply is shown without the token that ended the turn.
    std::vector<std::int64_t> shown = generated;
    if (request.chat && !shown.empty() && data->endsTurn(shown.back())) shown.pop_back();
    return {data->promptAsShown(request.prompt, prompt), data->decodeContinuation(prompt, shown), generated};
}

std::vector<std::int64_t> folderEosTokens(const std::string& folder)
{
    for (const char* file : {"generation_config.json", "config.json"}) {
        std::ifstream in(fs::path(folder) / file, std::ios::binary);
        if (!in) continue;
        std::stringstream text;
        text << in.rdbuf();
        const auto j = nlohmann::json::parse(text.str(), nullptr, false);
        if (!j.is_object() || !j.contains("eos_token_id")) continue;
        const auto& e = j["eos_token_id"];
        std::vector<std::int64_t> ids;
        if (e.is_number_integer()) ids.push_back(e.get<std::int64_t>());
        if (e.is_array()) {
            for (const auto& v : e) {
                if (v.is_number_integer()) ids.push_back(v.get<std::int64_t>());
            }
        }
        return ids;
    }
    return {};
}

std::shared_ptr<CausalLmImpl> openFolderModel(const std::string& folder, const HfArchitecture& arch, const std::string& precision,
                                              const std::string& quantizeFormat, int maxLen)
{
    at::ScalarType dtype = torch::kFloat;
    if (precision == "bf16") dtype = torch::kBFloat16;
    else if (precision == "fp16") dtype = torch::kHalf;
    else if (precision != "fp32") throw InputError("precision must be fp32, bf16 or fp16, got \"" + precision.substr(0, 40) + "\"");
    QuantizeSpec quantize;
    try {
        quantize.format = quantFormatOf(quantizeFormat == "none" ? "" : quantizeFormat);
    } catch (const std::invalid_argument&) {
        throw InputError("--quantize must be nf4, int8 or none, got \"" + quantizeFormat.substr(0, 40) + "\"");
    }
    if (quantize.active() && !arch.quantization.empty() && arch.quantization != quantizeFormat) {
        throw InputError(folder + " is a bitsandbytes " + arch.quantization + " folder; it is read as stored: leave --quantize out");
    }
    auto options = modelSpecFromHf(arch, folder, std::max(maxLen, 1));
    std::shared_ptr<CausalLmImpl> model;
    {
        // Built in the compute dtype and filled from the mapped files: no fp32 copy of a bf16 model.
        const WeightsFromFile fromFile(dtype);
        model = makeModel(options);
    }
    loadHfFolderWeights(*model, folder, "config.json", quantize);
    if (dtype != torch::kFloat) model->to(dtype); // the norms' small fp32 weights
    model->eval();
    return model;
}

FolderSampleResult sampleFromFolder(const std::string& folder, const FolderSampleRequest& request)
{
    validateGenerationSettings(request.generation, 0);
    if (request.promptIds.empty()) throw InputError("the prompt is empty; give at least one token id");
    const auto started = std::chrono::steady_clock::now();
    const auto arch = readHfArchitecture(folder);
    for (std::size_t i = 0; i < request.promptIds.size(); ++i) {
        const auto id = request.promptIds[i];
        if (id < 0 || id >= arch.vocabSize) {
            throw InputError("prompt token " + std::to_string(i) + " is id " + std::to_string(id) + ", outside the model's vocabulary of "
                             + std::to_string(arch.vocabSize) + " (ids 0 to " + std::to_string(arch.vocabSize - 1) + ")");
        }
    }
    const auto total = static_cast<std::int64_t>(request.promptIds.size()) + request.generation.maxNewTokens;
    if (total > arch.maxPositions) {
        throw InputError("the prompt and --max-tokens make " + std::to_string(total) + " tokens, more than the model's "
                         + std::to_string(arch.maxPositions) + " positions (max_position_embeddings)");
    }
    const auto model = openFolderModel(folder, arch, request.precision, request.quantize, static_cast<int>(total));
    const auto eos = folderEosTokens(folder);
    torch::NoGradGuard noGrad;
    auto gen = at::make_generator<at::CPUGeneratorImpl>(request.generation.seed);
    FolderSampleResult result;
    result.architecture = arch.summary();
    const auto loaded = std::chrono::steady_clock::now();
    result.loadSeconds = std::chrono::duration<double>(loaded - started).count();
    std::vector<std::int64_t> ids = request.promptIds;
    const auto forward = [&] {
        return model->forward(torch::tensor(ids, torch::kLong).unsqueeze(0)).squeeze(0).to(torch::kFloat);
    };
    if (request.logits || request.generation.maxNewTokens == 0) {
        const auto all = forward().contiguous();
        const auto V = all.size(1);
        for (std::int64_t t = 0; t < all.size(0) && request.logits; ++t) {
            const float* row = all[t].data_ptr<float>();
            result.logits.emplace_back(row, row + V);
        }
    }
    for (int i = 0; i < request.generation.maxNewTokens; ++i) {
        const auto logits = forward().select(0, -1);
        if (i == 0 && request.probabilities) {
            const auto scores = nextTokenScores(logits, ids, request.generation);
            const auto probs = (request.generation.temperature == 0.0
                                    ? torch::zeros_like(scores).index_fill_(0, scores.argmax(), 1.0)
                                    : torch::softmax(scores, 0)).contiguous();
            result.probabilities.assign(probs.data_ptr<float>(), probs.data_ptr<float>() + probs.numel());
        }
        const std::int64_t next = pickNextToken(logits, ids, request.generation, gen);
        result.completionIds.push_back(next);
        ids.push_back(next);
        if (std::find(eos.begin(), eos.end(), next) != eos.end()) {
            result.stoppedAtEos = true;
            break;
        }
    }
    result.computeSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - loaded).count();
    return result;
}

namespace {

constexpr std::int64_t kShardBytes = 5'000'000'000; // the Hub's shard size

// Writes the tensors as model.safetensors, or above kShardBytes as
// model-0000K-of-0000N.safetensors shards with model.safetensors.index.json.
std::string writeHfWeights(const std::map<std::string, torch::Tensor>& tensors, const fs::path& dir)
{
    std::vector<std::map<std::string, torch::Tensor>> shards(1);
    std::int64_t inShard = 0, total = 0;
    for (const auto& [name, t] : tensors) {
        const auto bytes = static_cast<std::int64_t>(t.numel() * t.element_size());
        if (inShard > 0 && inShard + bytes > kShardBytes) {
            shards.emplace_back();
            inShard = 0;
        }
        shards.back().emplace(name, t);
        inShard += bytes;
        total += bytes;
    }
    const std::map<std::string, std::string> meta{{"format", "pt"}, {"producer", "trainbench"}};
    if (shards.size() == 1) {
        const auto path = (dir / "model.safetensors").string();
        writeSafetensors(path, tensors, meta);
        return path;
    }
    nlohmann::json weightMap = nlohmann::json::object();
    char name[64];
    for (std::size_t i = 0; i < shards.size(); ++i) {
        std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", i + 1, shards.size());
        writeSafetensors((dir / name).string(), shards[i], meta);
        for (const auto& [tensor, t] : shards[i]) weightMap[tensor] = name;
    }
    const nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weightMap}};
    const auto path = (dir / "model.safetensors.index.json").string();
    writeTextAtomically(path, index.dump(2) + "\n");
    return path;
}

// config.json's torch_dtype: what the weights are written in (the first
// weight's dtype; a bitsandbytes folder's unquantized ones are bf16).
std::string torchDtypeName(const std::map<std::string, torch::Tensor>& tensors, const QuantizeSpec& bitsandbytes)
{
    if (bitsandbytes.active()) return "bfloat16";
    const auto dtype = tensors.empty() ? torch::kFloat : tensors.begin()->second.scalar_type();
    return dtype == torch::kBFloat16 ? "bfloat16" : dtype == torch::kHalf ? "float16" : "float32";
}

// transformers' quantization_config of a bitsandbytes folder (its keys, sorted, as BitsAndBytesConfig writes them).
nlohmann::json bitsandbytesConfig(const QuantizeSpec& spec)
{
    const bool four = spec.format == QuantFormat::Nf4;
    return {{"_load_in_4bit", four},
            {"_load_in_8bit", !four},
            {"bnb_4bit_compute_dtype", "bfloat16"},
            {"bnb_4bit_quant_storage", "uint8"},
            {"bnb_4bit_quant_type", four ? "nf4" : "fp4"},
            {"bnb_4bit_use_double_quant", four && spec.doubleQuant},
            {"llm_int8_enable_fp32_cpu_offload", false},
            {"llm_int8_has_fp16_weight", false},
            {"llm_int8_skip_modules", nullptr},
            {"llm_int8_threshold", 6.0},
            {"load_in_4bit", four},
            {"load_in_8bit", !four},
            {"quant_method", "bitsandbytes"}};
}

// The model's tensors in bitsandbytes' layout, as transformers saves a
// quantized model: each block linear's (merged) weight quantized again in the
// run's format under Linear4bit's keys (weight, weight.absmax,
// weight.quant_map, weight.nested_absmax, weight.nested_quant_map, and the
// state as JSON bytes in weight.quant_state.bitsandbytes__nf4) or
// Linear8bitLt's (weight, SCB, weight_format); a Conv1D's as [out, in], as
// transformers stores it; everything else in bf16.
std::map<std::string, torch::Tensor> bitsandbytesTensors(CausalLmImpl& model, const std::map<std::string, torch::Tensor>& tensors,
                                                         const QuantizeSpec& spec)
{
    std::map<std::string, torch::Tensor> out;
    std::set<std::string> quantizedNames;
    for (auto& [name, layer] : quantizableLinears(model)) {
        const auto w = name + ".weight";
        auto weight = tensors.at(w);
        if (layer->transposedWeight()) weight = weight.t();
        const auto q = quantizeWeight(weight.contiguous(), spec);
        quantizedNames.insert(w);
        if (spec.format == QuantFormat::Int8) {
            out[w] = q.data;
            out[name + ".SCB"] = q.absmax;
            out[name + ".weight_format"] = torch::tensor(0, torch::kByte); // row-major
            continue;
        }
        nlohmann::json state = {{"quant_type", "nf4"}, {"blocksize", q.blockSize}, {"dtype", "bfloat16"}, {"shape", {q.rows, q.cols}}};
        out[w] = q.data;
        out[w + ".absmax"] = q.absmax;
        out[w + ".quant_map"] = q.quantMap;
        if (q.nested) {
            out[w + ".nested_absmax"] = q.nestedAbsmax;
            out[w + ".nested_quant_map"] = q.nestedQuantMap;
            state["nested_blocksize"] = q.nestedBlockSize;
            state["nested_dtype"] = "float32";
            state["nested_offset"] = static_cast<double>(q.nestedOffset);
        }
        const auto text = state.dump();
        out[w + ".quant_state.bitsandbytes__nf4"] =
            torch::from_blob(const_cast<char*>(text.data()), {static_cast<std::int64_t>(text.size())}, torch::kByte).clone();
    }
    for (const auto& [name, t] : tensors) {
        if (!quantizedNames.count(name)) out[name] = t.to(torch::kBFloat16);
    }
    return out;
}

// The files of a model folder besides its weights that an export carries over.
constexpr const char* kFolderFiles[] = {"generation_config.json", "tokenizer.json", "tokenizer_config.json",
                                        "tokenizer.model", "special_tokens_map.json", "vocab.json", "merges.txt",
                                        "added_tokens.json"};

ExportedModel exportHfFolder(const RunConfig& config, CausalLmImpl& model, const std::map<std::string, torch::Tensor>& tensors,
                             const std::string& outputDir, ExportedModel result, const QuantizeSpec& bitsandbytes)
{
    const fs::path source = resolvedModelPath(config), dir = outputDir;
    std::error_code ec;
    for (const char* file : kFolderFiles) {
        if (fs::exists(source / file, ec)) fs::copy_file(source / file, dir / file, fs::copy_options::overwrite_existing, ec);
        if (ec) throw InputError("cannot copy " + (source / file).string() + " to " + outputDir + ": " + ec.message());
    }
    std::ifstream in(source / "config.json", std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    auto hfConfig = nlohmann::json::parse(text.str(), nullptr, false);
    if (!hfConfig.is_object()) throw InputError("cannot read " + (source / "config.json").string() + " to export the run");
    const bool adapterOnly = config.lora.rank > 0 && !result.mergedLora;
    if (!adapterOnly) {
        // What the weights are written in; a bitsandbytes folder says how it is quantized, a plain one nothing.
        hfConfig["torch_dtype"] = torchDtypeName(tensors, bitsandbytes);
        hfConfig.erase("quantization_config");
        if (bitsandbytes.active()) hfConfig["quantization_config"] = bitsandbytesConfig(bitsandbytes);
        result.configPath = (dir / "config.json").string();
        writeTextAtomically(result.configPath, hfConfig.dump(2) + "\n");
        result.weightsPath = writeHfWeights(tensors, dir);
        result.format = "hf";
        return result;
    }
    // A PEFT adapter folder: the adapters under PEFT's names, on top of the source folder.
    std::map<std::string, torch::Tensor> adapters;
    std::set<std::string> targets;
    for (const auto& [name, t] : tensors) {
        for (const char* part : {".lora_A", ".lora_B"}) {
            const auto at = name.rfind(part);
            if (at == std::string::npos || at + std::strlen(part) != name.size()) continue;
            adapters["base_model.model." + name + ".weight"] = t;
            const auto module = name.substr(0, at);
            targets.insert(module.substr(module.rfind('.') + 1));
        }
    }
    const nlohmann::json adapterConfig = {
        {"peft_type", "LORA"},
        {"task_type", "CAUSAL_LM"},
        {"base_model_name_or_path", source.string()},
        {"r", config.lora.rank},
        {"lora_alpha", config.lora.alpha},
        {"lora_dropout", config.lora.dropout},
        {"target_modules", std::vector<std::string>(targets.begin(), targets.end())},
        {"bias", "none"},
        {"fan_in_fan_out", model.options().type == "gpt2"}, // GPT-2's Conv1D stores [in, out]
        {"inference_mode", true},
    };
    result.configPath = (dir / "adapter_config.json").string();
    writeTextAtomically(result.configPath, adapterConfig.dump(2) + "\n");
    result.weightsPath = (dir / "adapter_model.safetensors").string();
    writeSafetensors(result.weightsPath, adapters, {{"format", "pt"}, {"producer", "trainbench"}});
    result.tensors = static_cast<std::int64_t>(adapters.size());
    result.parameters = 0;
    for (const auto& [name, t] : adapters) result.parameters += t.numel();
    result.format = "peft";
    return result;
}

} // namespace

ExportedModel exportModel(const RunConfig& config, const std::string& checkpointPath, const std::string& outputDir,
                          bool mergeLora, bool quantized)
{
    QuantizeSpec bitsandbytes;
    if (quantized) {
        if (config.model.quantize == "none") {
            throw InputError("--quantized writes a QLoRA run's model as a bitsandbytes folder, and this run's base is not "
                             "quantized (model.quantize \"none\"): export it without --quantized");
        }
        bitsandbytes = {quantFormatOf(config.model.quantize), config.model.doubleQuant};
        mergeLora = true; // one model: the adapters folded in, then quantized again
    }
    const auto data = makeDataset(config);
    auto model = openTrainedModel(config, *data, checkpointPath);
    std::error_code ec;
    fs::create_directories(outputDir, ec);
    if (!fs::is_directory(outputDir, ec)) throw InputError("cannot create the output folder " + outputDir);
    ExportedModel result;
    result.mergedLora = mergeLora && config.lora.rank > 0;
    auto tensors = modelTensors(*model, mergeLora);
    result.tensors = static_cast<std::int64_t>(tensors.size());
    for (const auto& [name, t] : tensors) result.parameters += t.numel();
    if (bitsandbytes.active()) {
        tensors = bitsandbytesTensors(*model, tensors, bitsandbytes);
        result.quantized = true;
    } else if (config.model.quantize != "none" && result.mergedLora) {
        // A QLoRA run's merged model in bf16: its base was 4 or 8 bits, and fp32 would double a 7B folder to 28 GB.
        for (auto& [name, t] : tensors) t = t.to(torch::kBFloat16);
    } else if (config.lora.rank > 0 && config.train.weightsDtype != "fp32") {
        // A base kept in half precision leaves in it (its values are that
        // dtype's; merged, the adapters' product is rounded into it); adapters apart stay fp32.
        const auto half = config.train.weightsDtype == "bf16" ? torch::kBFloat16 : torch::kHalf;
        for (auto& [name, t] : tensors) {
            if (t.is_floating_point() && (result.mergedLora || !isAdapterName(name))) t = t.to(half);
        }
    }
    if (config.model.type == "hf") return exportHfFolder(config, *model, tensors, outputDir, result, bitsandbytes);
    result.weightsPath = (fs::path(outputDir) / "model.safetensors").string();
    writeSafetensors(result.weightsPath, tensors, {{"format", "pt"}, {"producer", "trainbench"}});
    if (config.model.type == "llama") {
        const auto o = modelOptionsFor(config, *data);
        nlohmann::json hf = {
            {"architectures", {"LlamaForCausalLM"}},
            {"model_type", "llama"},
            {"hidden_size", o.dModel},
            {"intermediate_size", o.dFf},
            {"num_hidden_layers", o.nLayer},
            {"num_attention_heads", o.nHead},
            {"num_key_value_heads", o.kvHeads()},
            {"head_dim", o.headDim()},
            {"vocab_size", o.vocabSize},
            {"max_position_embeddings", o.maxLen},
            {"rms_norm_eps", o.rmsNormEps},
            {"rope_theta", o.ropeTheta},
            {"tie_word_embeddings", o.tieEmbeddings},
            {"hidden_act", "silu"},
            {"attention_bias", false},
            {"mlp_bias", false},
            {"attention_dropout", o.dropout},
            {"initializer_range", 0.02},
            {"torch_dtype", torchDtypeName(tensors, bitsandbytes)},
        };
        if (bitsandbytes.active()) hf["quantization_config"] = bitsandbytesConfig(bitsandbytes);
        result.configPath = (fs::path(outputDir) / "config.json").string();
        writeTextAtomically(result.configPath, hf.dump(2) + "\n");
    }
    return result;
}

} // namespace tb
