#include "memory/Architectures.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/Errors.h"
#include "config/HfArchitecture.h"
#include "config/HfConfigObject.h"

namespace tb {

std::string bundledArchitecturesJson();

namespace {

using nlohmann::json;

std::string lower(std::string s)
{
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
    return s;
}

// A positive integer field: required when `fallback` is 0.
std::int64_t positive(const json& j, const char* key, const std::string& source, std::int64_t fallback = 0)
{
    const auto it = j.find(key);
    if (it == j.end() || it->is_null()) {
        if (fallback > 0) return fallback;
        throw InputError(source + ": \"" + key + "\" is missing; a config.json of a decoder-only model has it");
    }
    if (!it->is_number_integer() || it->get<std::int64_t>() <= 0) {
        throw InputError(source + ": \"" + key + "\" must be a positive integer, got " + it->dump());
    }
    return it->get<std::int64_t>();
}

bool flag(const json& j, const char* key, bool fallback, const std::string& source)
{
    const auto it = j.find(key);
    if (it == j.end() || it->is_null()) return fallback;
    if (!it->is_boolean()) throw InputError(source + ": \"" + key + "\" must be true or false, got " + it->dump());
    return it->get<bool>();
}

std::string text(const json& j, const char* key)
{
    const auto it = j.find(key);
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

} // namespace

ArchitectureSpec architectureFromHfConfig(const std::string& content, const std::string& source)
{
    const json j = hfConfigObject(content, source);

    ArchitectureSpec a;
    const auto type = text(j, "model_type");
    a.name = type.empty() ? "decoder" : type;
    // The size fields, under each family's names.
    struct Names {
        const char *vocab, *hidden, *layers, *heads, *intermediate, *positions;
    };
    // innerFactor: an absent intermediate size is that many times the hidden size (0: required).
    const auto sizes = [&](const Names& n, std::int64_t defaultPositions, std::int64_t innerFactor) {
        a.vocabSize = positive(j, n.vocab, source);
        a.hidden = positive(j, n.hidden, source);
        a.layers = positive(j, n.layers, source);
        a.heads = positive(j, n.heads, source);
        a.kvHeads = a.heads;
        a.intermediate = positive(j, n.intermediate, source, innerFactor * a.hidden);
        a.maxPositions = positive(j, n.positions, source, defaultPositions);
    };
    const Names hf{"vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                   "max_position_embeddings"};
    if (type == "gpt2") {
        a.family = "gpt";
        a.positional = "learned";
        sizes({"vocab_size", "n_embd", "n_layer", "n_head", "n_inner", "n_positions"}, 0, 4);
        a.tieEmbeddings = flag(j, "tie_word_embeddings", true, source);
        a.mlpModule = true;
        a.conv1d = true;
    } else if (type == "gpt_neox") {
        a.family = "gpt";
        a.positional = "rope";
        sizes(hf, 0, 0);
        a.tieEmbeddings = flag(j, "tie_word_embeddings", false, source);
        a.parallelResidual = flag(j, "use_parallel_residual", true, source);
        a.fp32Softmax = true;
        a.neoxLayer = true;
        a.mlpModule = true;
        // RoPE on the leading rotary_pct of each head, read as the trainer
        // reads it (one answer, and the same refusals).
        a.rotaryDims = hfArchitectureFromJson(content, source).rotaryDims;
        if (a.rotaryDims == 0) a.positional = "none";
    } else if (type == "gemma3_text") {
        throw InputError(source + ": Gemma 3's layout is not in the hand-written plan; a folder with this config.json "
                                  "is planned from its own step");
    } else {
        // Llama and its look-alikes (Mistral, Qwen2, ...): the field names Hugging
        // Face's LlamaConfig uses. The activation decides the block's flavour.
        const auto act = lower(text(j, "hidden_act"));
        if (!act.empty() && act != "silu" && act.rfind("gelu", 0) != 0) {
            throw InputError(source + ": hidden_act \"" + act
                             + "\" is not planned yet; silu (SwiGLU, RMSNorm) and gelu (LayerNorm) are");
        }
        a.family = act.rfind("gelu", 0) == 0 ? "gpt" : "llama";
        a.positional = "rope";
        sizes(hf, 2048, 0);
        a.kvHeads = positive(j, "num_key_value_heads", source, a.heads);
        a.tieEmbeddings = flag(j, "tie_word_embeddings", false, source);
        a.qkvBias = type == "qwen2" || flag(j, "attention_bias", false, source);
        if (type == "qwen3" || type == "phi3") {
            throw InputError(source + ": " + (type == "qwen3" ? "Qwen3's query and key norms are" : "Phi-3's fused projections are")
                             + " not in the hand-written plan; a folder with this config.json is planned from its own step");
        }
        // Mistral's window, read as the trainer reads it (absent: transformers' 4096).
        a.slidingWindow = hfSlidingWindow(content, source);
        if (a.family == "gpt" && a.kvHeads != a.heads) {
            throw InputError(source + ": grouped-query attention with a GELU MLP is not planned yet");
        }
    }
    if (a.hidden % a.heads != 0) {
        throw InputError(source + ": the hidden size " + std::to_string(a.hidden) + " is not a multiple of the "
                         + std::to_string(a.heads) + " attention heads");
    }
    if (a.heads % a.kvHeads != 0) {
        throw InputError(source + ": " + std::to_string(a.kvHeads) + " key/value heads do not divide "
                         + std::to_string(a.heads) + " attention heads");
    }
    if (const auto it = j.find("head_dim"); it != j.end() && it->is_number_integer()
        && it->get<std::int64_t>() != a.hidden / a.heads) {
        throw InputError(source + ": head_dim " + it->dump() + " differs from hidden_size / num_attention_heads ("
                         + std::to_string(a.hidden / a.heads) + "); such models are not planned yet");
    }
    return a;
}

ArchitectureSpec loadHfConfigFile(const std::string& path)
{
    std::ifstream in(path, std::ios::binary);
    if (!in) throw InputError(path + ": cannot read the file (does it exist?)");
    std::stringstream buffer;
    buffer << in.rdbuf();
    return architectureFromHfConfig(buffer.str(), path);
}

const std::vector<ArchitecturePreset>& bundledArchitectures()
{
    static const std::vector<ArchitecturePreset> presets = [] {
        std::vector<ArchitecturePreset> out;
        const auto all = json::parse(bundledArchitecturesJson());
        for (const auto& entry : all) {
            const auto& meta = entry.at("_trainbench");
            ArchitecturePreset p;
            p.id = meta.at("id").get<std::string>();
            p.title = meta.at("title").get<std::string>();
            p.source = meta.at("source").get<std::string>();
            p.arch = architectureFromHfConfig(entry.dump(), "resources/architectures/" + p.id + ".json");
            p.arch.name = p.title;
            p.arch.publishedParameters = meta.at("published_parameters").get<std::int64_t>();
            out.push_back(std::move(p));
        }
        // By family (the title's first word: GPT-2, Llama, Pythia, ...), then size.
        const auto family = [](const ArchitecturePreset& p) { return lower(p.title.substr(0, p.title.find(' '))); };
        std::sort(out.begin(), out.end(), [&](const auto& x, const auto& y) {
            const auto fx = family(x), fy = family(y);
            if (fx != fy) return fx < fy;
            return x.arch.publishedParameters < y.arch.publishedParameters;
        });
        return out;
    }();
    return presets;
}

const ArchitecturePreset& findArchitecture(const std::string& name)
{
    const auto wanted = lower(name);
    std::string names;
    for (const auto& p : bundledArchitectures()) {
        if (lower(p.id) == wanted || lower(p.title) == wanted) return p;
        names += (names.empty() ? "" : ", ") + p.id;
    }
    throw InputError("unknown preset \"" + name + "\"; the presets are: " + names
                     + " (or describe the model with --hf-config FILE)");
}

} // namespace tb
