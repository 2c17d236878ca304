#include "config/HfArchitecture.h"
#include "config/HfConfigObject.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/Errors.h"

namespace tb {
namespace {

// JSON from a file, shown in a message: at most 120 characters of it.
std::string shown(const nlohmann::json& v)
{
    auto text = v.dump();
    return text.size() > 120 ? text.substr(0, 117) + "..." : text;
}

using nlohmann::json;

struct Defaults {
    std::int64_t vocab, hidden, intermediate, layers, heads, kvHeads, positions, slidingWindow;
    double ropeTheta;
    std::int64_t headDim = 0; // 0: hidden / heads
};

// transformers' own config defaults (LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config, Phi3Config,
// Gemma3TextConfig),
// used where a config.json leaves a field out, as transformers does. kvHeads 0:
// the number of attention heads.
Defaults defaultsFor(const std::string& type)
{
    if (type == "mistral") return {32000, 4096, 14336, 32, 32, 8, 4096 * 32, 4096, 10000.0};
    if (type == "qwen2") return {151936, 4096, 22016, 32, 32, 32, 32768, 0, 10000.0};
    if (type == "qwen3") return {151936, 4096, 22016, 32, 32, 32, 32768, 0, 10000.0, 128};
    if (type == "phi3") return {32064, 3072, 8192, 32, 32, 0, 4096, 0, 10000.0};
    if (type == "gemma3_text") return {262208, 2304, 9216, 26, 8, 4, 131072, 4096, 1000000.0, 256};
    return {32000, 4096, 11008, 32, 32, 0, 2048, 0, 10000.0};
}

class Reader {
public:
    Reader(const json& j, std::string source) : m_j(j), m_source(std::move(source)) {}

    [[noreturn]] void fail(const std::string& key, const std::string& why) const
    {
        throw InputError(m_source + ": \"" + key + "\" " + why);
    }
    const json* find(const std::string& key) const
    {
        const auto it = m_j.find(key);
        return it == m_j.end() || it->is_null() ? nullptr : &*it;
    }
    std::int64_t positive(const std::string& key, std::int64_t fallback) const
    {
        const auto* v = find(key);
        if (!v) return fallback;
        if (!v->is_number_integer() || v->get<std::int64_t>() <= 0 || v->get<std::int64_t>() > (1LL << 40)) {
            fail(key, "must be a positive integer, got " + shown(*v));
        }
        return v->get<std::int64_t>();
    }
    double number(const std::string& key, double fallback, double low, double high) const
    {
        const auto* v = find(key);
        if (!v) return fallback;
        if (!v->is_number() || !(v->get<double>() > low && v->get<double>() <= high)) {
            fail(key, "must be a number above " + json(low).dump() + ", got " + shown(*v));
        }
        return v->get<double>();
    }
    bool flag(const std::string& key, bool fallback) const
    {
        const auto* v = find(key);
        if (!v) return fallback;
        if (!v->is_boolean()) fail(key, "must be true or false, got " + shown(*v));
        return v->get<bool>();
    }
    std::string text(const std::string& key) const
    {
        const auto* v = find(key);
        if (!v) return {};
        if (!v->is_string()) fail(key, "must be a string, got " + shown(*v));
        return v->get<std::string>();
    }

private:
    const json& m_j;
    std::string m_source;
};

// GELU flavours: the exact erf form, or the tanh approximation under its names.
bool geluIsTanh(const std::string& act, const std::string& source, const std::string& key)
{
    if (act == "gelu") return false;
    if (act == "gelu_new" || act == "gelu_pytorch_tanh" || act == "gelu_fast") return true;
    throw InputError(source + ": " + key + " \"" + act + "\" is not implemented (gelu, gelu_new, gelu_pytorch_tanh "
                     "and gelu_fast are)");
}

std::string familyList();

// Gemma 3's own fields (Gemma3TextConfig): which layers slide (layer_types,
// else every sliding_window_pattern-th layer is full), their RoPE base, the
// query scale.
void gemmaLayout(HfArchitecture& a, const json& j, const Reader& r)
{
    a.gemma = true;
    a.geluTanh = true;
    a.queryPreAttnScalar = r.number("query_pre_attn_scalar", 256.0, 1e-6, 1e9);
    a.localRopeTheta = r.number("rope_local_base_freq", 10000.0, 1.0, 1e12);
    a.slidingLayers.assign(static_cast<std::size_t>(a.layers), false);
    if (const auto* types = r.find("layer_types")) {
        if (!types->is_array() || types->size() != static_cast<std::size_t>(a.layers))
            r.fail("layer_types", "must list one type per layer (" + std::to_string(a.layers) + "), got " + shown(*types));
        for (std::size_t i = 0; i < types->size(); ++i) {
            const auto& t = (*types)[i];
            if (!t.is_string() || (t != "sliding_attention" && t != "full_attention"))
                r.fail("layer_types", "holds " + shown(t) + "; each is \"sliding_attention\" or \"full_attention\"");
            a.slidingLayers[i] = t == "sliding_attention";
        }
    } else {
        const auto pattern = r.positive("sliding_window_pattern", 6);
        for (std::int64_t i = 0; i < a.layers; ++i) a.slidingLayers[static_cast<std::size_t>(i)] = (i + 1) % pattern != 0;
    }
    (void)j;
}

HfArchitecture gptFamily(HfArchitecture a, const json& j, const Reader& r, bool plan)
{
    const auto& source = a.source;
    // Planning: any activation of the MLP has the GELU's shapes.
    const auto tanh = [&](const std::string& act, const char* key) { return plan ? false : geluIsTanh(act, source, key); };
    if (a.modelType == "gpt2") {
        // GPT2Config's defaults; Conv1D weights stored [in, out], fused c_attn.
        a.vocabSize = r.positive("vocab_size", 50257);
        a.hiddenSize = r.positive("n_embd", 768);
        a.layers = r.positive("n_layer", 12);
        a.heads = r.positive("n_head", 12);
        a.intermediateSize = r.positive("n_inner", 4 * a.hiddenSize);
        a.maxPositions = r.positive("n_positions", 1024);
        a.layerNormEps = r.number("layer_norm_epsilon", 1e-5, 0.0, 0.1);
        const auto act = r.text("activation_function");
        a.geluTanh = tanh(act.empty() ? "gelu_new" : act, "activation_function");
        a.tieEmbeddings = r.flag("tie_word_embeddings", true);
        a.learnedPositions = true;
        a.qkvBias = a.outputBias = a.mlpBias = true;
        if (!plan && r.flag("scale_attn_by_inverse_layer_idx", false)) {
            throw InputError(source + ": scale_attn_by_inverse_layer_idx true is not implemented for gpt2");
        }
        if (!plan && r.flag("add_cross_attention", false)) throw InputError(source + ": add_cross_attention is not a decoder-only model");
        if (!plan && !r.flag("scale_attn_weights", true)) throw InputError(source + ": scale_attn_weights false is not implemented for gpt2");
    } else {
        // GPTNeoXConfig's defaults; fused query_key_value interleaved per head.
        a.vocabSize = r.positive("vocab_size", 50432);
        a.hiddenSize = r.positive("hidden_size", 6144);
        a.layers = r.positive("num_hidden_layers", 44);
        a.heads = r.positive("num_attention_heads", 64);
        a.intermediateSize = r.positive("intermediate_size", 24576);
        a.maxPositions = r.positive("max_position_embeddings", 2048);
        a.layerNormEps = r.number("layer_norm_eps", 1e-5, 0.0, 0.1);
        const auto act = r.text("hidden_act");
        a.geluTanh = tanh(act.empty() ? "gelu" : act, "hidden_act");
        a.tieEmbeddings = r.flag("tie_word_embeddings", false);
        a.parallelResidual = r.flag("use_parallel_residual", true);
        const bool bias = r.flag("attention_bias", true);
        a.qkvBias = a.outputBias = bias;
        a.mlpBias = true;
        a.ropeTheta = r.find("rope_theta") ? r.number("rope_theta", 10000.0, 1.0, 1e12)
                                           : r.number("rotary_emb_base", 10000.0, 1.0, 1e12);
        // rotary_pct, or the same fraction under the name later transformers versions write.
        const double pct = r.find("partial_rotary_factor") ? r.number("partial_rotary_factor", 0.25, 0.0, 1.0)
                                                           : r.number("rotary_pct", 0.25, 0.0, 1.0);
        if (a.hiddenSize % a.heads != 0) {
            throw InputError(source + ": hidden_size " + std::to_string(a.hiddenSize) + " is not a multiple of "
                             + std::to_string(a.heads) + " heads");
        }
        a.rotaryDims = static_cast<std::int64_t>(static_cast<double>(a.hiddenSize / a.heads) * pct);
        if (a.rotaryDims % 2 != 0) throw InputError(source + ": rotary_pct gives an odd number of rotated dimensions");
        if (const auto* s = r.find("rope_scaling"); s && !plan) {
            throw InputError(source + ": rope_scaling " + shown(*s) + " is not implemented for gpt_neox");
        }
    }
    a.kvHeads = a.heads;
    if (a.hiddenSize % a.heads != 0) {
        throw InputError(source + ": the hidden size " + std::to_string(a.hiddenSize) + " is not a multiple of "
                         + std::to_string(a.heads) + " heads");
    }
    a.headDim = a.hiddenSize / a.heads;
    a.torchDtype = r.text("torch_dtype");
    (void)j;
    return a;
}

// The sliding_window of Mistral, Phi-3 and Gemma 3 (its sliding layers'):
// absent, transformers' default (Mistral and Gemma 3 4096, Phi-3 none); null,
// none. Other families have none.
std::int64_t familyWindow(const json& j, const Reader& r)
{
    const auto type = r.text("model_type");
    if (type != "mistral" && type != "phi3" && type != "gemma3_text") return 0;
    const auto* w = r.find("sliding_window");
    return !j.contains("sliding_window") ? defaultsFor(type).slidingWindow : w ? r.positive("sliding_window", 0) : 0;
}

std::string familyList()
{
    std::string out;
    for (const auto& f : hfFamilies()) out += (out.empty() ? "" : ", ") + f;
    return out;
}

} // namespace

json hfConfigObject(const std::string& content, const std::string& source)
{
    json j;
    try {
        j = json::parse(content);
    } catch (const json::exception& e) {
        throw InputError(source + " is not valid JSON (" + std::string(e.what()) + ")");
    }
    if (!j.is_object()) throw InputError(source + " must hold one JSON object, as a Hugging Face config.json does");
    return j;
}

const std::vector<std::string>& hfFamilies()
{
    static const std::vector<std::string> families{"llama", "mistral", "qwen2", "qwen3", "phi3", "gemma3_text", "gpt2", "gpt_neox"};
    return families;
}

std::int64_t hfSlidingWindow(const std::string& content, const std::string& source)
{
    const json j = hfConfigObject(content, source);
    const Reader r(j, source);
    return familyWindow(j, r);
}

// quantization_config: what transformers writes for a folder saved with
// bitsandbytes. Other methods and bitsandbytes' fp4 are refused by name.
void readQuantization(HfArchitecture& a, const json& j, const std::string& source)
{
    const auto it = j.find("quantization_config");
    if (it == j.end() || it->is_null()) return;
    if (!it->is_object()) throw InputError(source + ": \"quantization_config\" must be an object, got " + shown(*it));
    const auto& q = *it;
    const auto text = [&](const char* key) {
        const auto f = q.find(key);
        return f != q.end() && f->is_string() ? f->get<std::string>() : std::string();
    };
    const auto flag = [&](const char* key) {
        const auto f = q.find(key);
        return f != q.end() && f->is_boolean() && f->get<bool>();
    };
    const auto method = text("quant_method");
    if (method != "bitsandbytes") {
        throw InputError(source + ": quantization_config's quant_method \"" + method.substr(0, 40) + "\" is not read; "
                         "Trainbench reads bitsandbytes folders (4-bit nf4 and 8-bit), and quantizes a folder of plain "
                         "weights itself (model.quantize)");
    }
    const bool four = flag("load_in_4bit") || flag("_load_in_4bit"), eight = flag("load_in_8bit") || flag("_load_in_8bit");
    if (four == eight) {
        throw InputError(source + ": quantization_config sets " + std::string(four ? "both" : "neither")
                         + " of load_in_4bit and load_in_8bit; a bitsandbytes folder stores one of them");
    }
    if (four) {
        // transformers' default 4-bit type is fp4.
        const auto type = text("bnb_4bit_quant_type").empty() ? std::string("fp4") : text("bnb_4bit_quant_type");
        if (type != "nf4") {
            throw InputError(source + ": bnb_4bit_quant_type \"" + type.substr(0, 40) + "\" is not read; Trainbench reads "
                             "4-bit NormalFloat (\"nf4\") folders and 8-bit ones");
        }
        a.quantization = "nf4";
        a.doubleQuant = flag("bnb_4bit_use_double_quant");
    } else {
        if (flag("llm_int8_has_fp16_weight")) {
            throw InputError(source + ": llm_int8_has_fp16_weight true keeps fp16 weights, not 8-bit ones; save the "
                             "folder with 8-bit weights or give its plain weights");
        }
        a.quantization = "int8";
    }
}

HfArchitecture hfArchitectureFromJson(const std::string& content, const std::string& source, HfReading reading)
{
    const json j = hfConfigObject(content, source);
    const Reader r(j, source);
    const bool plan = reading == HfReading::Plan;
    HfArchitecture a;
    a.source = source;
    a.modelType = r.text("model_type");
    if (a.modelType.empty() && !plan) {
        throw InputError(source + " has no \"model_type\"; Trainbench trains the families " + familyList());
    }
    bool known = false;
    for (const auto& f : hfFamilies()) known = known || f == a.modelType;
    if (a.modelType.size() > 40) a.modelType = a.modelType.substr(0, 37) + "...";
    if (!known && !plan) {
        throw InputError(source + ": model_type \"" + a.modelType + "\" is not a family Trainbench trains ("
                         + familyList() + "); it is refused rather than trained as something it is not");
    }
    if (!known) {
        // A look-alike: LlamaConfig's field names, with no family's defaults
        // to fall back on for the sizes.
        for (const char* key : {"vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size"}) {
            if (!r.find(key)) r.fail(key, "is missing; a config.json of a decoder-only model has it");
        }
        a.declaredType = a.modelType.empty() ? "decoder" : a.modelType;
        a.modelType = "llama";
        a.lookAlike = true;
    }
    // transformers 5 writes rope_theta, the rotary fraction and the scaling
    // into one rope_parameters object; read as the older fields it would
    // train with the wrong rotary, so it is refused until it is read.
    for (const char* newer : {"rope_parameters", "partial_rotary_factor"}) {
        if (plan) break;
        if (r.find(newer) && !(a.modelType == "gpt_neox" && std::string(newer) == "partial_rotary_factor")) {
            throw InputError(source + ": \"" + newer + "\" (the newer transformers layout of the rotary settings) is "
                             "not read yet; write the config with rope_theta, rope_scaling and rotary_pct, as "
                             "transformers 4.x does, rather than train with the wrong rotary");
        }
    }
    // Fields that change the math and are not implemented: refused by name.
    for (const char* moe : {"num_local_experts", "num_experts", "n_routed_experts", "num_experts_per_tok",
                            "moe_intermediate_size"}) {
        if (const auto* v = r.find(moe); v && !(v->is_number_integer() && v->get<std::int64_t>() == 0)) {
            throw InputError(source + ": \"" + std::string(moe) + "\" describes a mixture-of-experts model, which "
                             "Trainbench does not train");
        }
    }
    if (!plan) readQuantization(a, j, source);
    if (a.modelType == "gpt2" || a.modelType == "gpt_neox") return gptFamily(a, j, r, plan);
    if (plan) {
        // SwiGLU (silu, or none given) or a plain GELU MLP; the rest of the
        // activation's name does not change the memory. (Gemma 3's GeGLU is
        // its own layout.)
        auto act = r.text("hidden_act");
        std::transform(act.begin(), act.end(), act.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
        if (a.modelType != "gemma3_text" && !act.empty() && act != "silu" && act.rfind("gelu", 0) != 0) {
            throw InputError(source + ": hidden_act \"" + act.substr(0, 40)
                             + "\" is not planned yet; silu (SwiGLU, RMSNorm) and gelu (LayerNorm) are");
        }
        a.geluMlp = a.modelType != "gemma3_text" && act.rfind("gelu", 0) == 0;
    } else if (a.modelType == "gemma3_text") {
        // Gemma3TextConfig: hidden_activation (transformers reads it over hidden_act), GeGLU with the tanh GELU.
        const auto act = r.find("hidden_activation") ? r.text("hidden_activation") : r.text("hidden_act");
        if (!act.empty() && act != "gelu_pytorch_tanh") {
            throw InputError(source + ": hidden_activation \"" + act + "\" is not implemented for gemma3_text (only "
                             "\"gelu_pytorch_tanh\", the published GeGLU)");
        }
        for (const char* cap : {"final_logit_softcapping", "attn_logit_softcapping"}) {
            if (const auto* v = r.find(cap)) {
                throw InputError(source + ": " + cap + " " + shown(*v) + " is not implemented (Gemma 3 publishes it null)");
            }
        }
    } else {
        const auto act = r.text("hidden_act");
        if (!act.empty() && act != "silu") {
            throw InputError(source + ": hidden_act \"" + act + "\" is not implemented for " + a.modelType
                             + " (only \"silu\", the published SwiGLU)");
        }
    }
    if (const auto* v = r.find("partial_rotary_factor"); !plan && v && !(v->is_number() && v->get<double>() == 1.0)) {
        throw InputError(source + ": partial_rotary_factor " + shown(*v) + " is not implemented for " + a.modelType);
    }
    if (!plan && (a.modelType == "qwen2" || a.modelType == "qwen3") && r.flag("use_sliding_window", false)) {
        throw InputError(source + ": use_sliding_window true (" + (a.modelType == "qwen2" ? "Qwen2" : "Qwen3")
                         + "'s per-layer window) is not implemented; set it to false to train with full attention");
    }

    const auto d = defaultsFor(a.modelType);
    a.vocabSize = r.positive("vocab_size", d.vocab);
    a.hiddenSize = r.positive("hidden_size", d.hidden);
    a.intermediateSize = r.positive("intermediate_size", d.intermediate);
    a.layers = r.positive("num_hidden_layers", d.layers);
    a.heads = r.positive("num_attention_heads", d.heads);
    a.kvHeads = r.positive("num_key_value_heads", d.kvHeads > 0 ? d.kvHeads : a.heads);
    a.headDim = r.positive("head_dim", d.headDim > 0 ? d.headDim : a.hiddenSize / a.heads);
    a.maxPositions = r.positive("max_position_embeddings", d.positions);
    a.ropeTheta = r.number("rope_theta", d.ropeTheta, 1.0, 1e12);
    a.rmsNormEps = r.number("rms_norm_eps", 1e-6, 0.0, 0.1);
    a.tieEmbeddings = r.flag("tie_word_embeddings", a.modelType == "gemma3_text");
    a.torchDtype = r.text("torch_dtype");
    if (a.modelType == "gemma3_text") gemmaLayout(a, j, r);
    if (a.modelType == "qwen2") {
        a.qkvBias = true;
    } else {
        const bool bias = r.flag("attention_bias", false);
        a.qkvBias = a.outputBias = bias;
        a.mlpBias = a.modelType == "llama" && r.flag("mlp_bias", false);
    }
    a.slidingWindow = familyWindow(j, r);
    a.qkNorm = a.modelType == "qwen3" || a.gemma;
    a.fusedProjections = a.modelType == "phi3";
    if (a.heads % a.kvHeads != 0) {
        throw InputError(source + ": num_key_value_heads " + std::to_string(a.kvHeads)
                         + " does not divide num_attention_heads " + std::to_string(a.heads));
    }
    if (a.geluMlp && a.kvHeads != a.heads) {
        throw InputError(source + ": grouped-query attention with a GELU MLP is not planned yet");
    }
    if (a.headDim % 2 != 0) throw InputError(source + ": the head size " + std::to_string(a.headDim) + " is odd; RoPE needs it even");
    if (!j.contains("head_dim") && d.headDim == 0 && a.hiddenSize % a.heads != 0) {
        throw InputError(source + ": hidden_size " + std::to_string(a.hiddenSize) + " is not a multiple of "
                         + std::to_string(a.heads) + " heads, and no head_dim is given");
    }
    if (const auto* s = r.find("rope_scaling")) {
        if (!s->is_object()) throw InputError(source + ": \"rope_scaling\" must be an object or null, got " + shown(*s));
        const Reader rs(*s, source + " rope_scaling");
        auto type = rs.text("rope_type");
        if (type.empty()) type = rs.text("type");
        if (type == "llama3") {
            a.ropeScalingType = type;
            a.ropeFactor = rs.number("factor", 8.0, 0.0, 1e6);
            a.ropeLowFreqFactor = rs.number("low_freq_factor", 1.0, 0.0, 1e6);
            a.ropeHighFreqFactor = rs.number("high_freq_factor", 4.0, 0.0, 1e6);
            a.ropeOriginalMaxPositions = rs.positive("original_max_position_embeddings", 8192);
            if (a.ropeHighFreqFactor <= a.ropeLowFreqFactor) {
                throw InputError(source + ": rope_scaling high_freq_factor must exceed low_freq_factor");
            }
        } else if (!type.empty() && type != "default" && !plan) {
            throw InputError(source + ": rope_scaling type \"" + type
                             + "\" is not implemented (only \"llama3\"); it is refused rather than trained with "
                               "the wrong positions");
        }
    }
    return a;
}

HfArchitecture readHfArchitecture(const std::string& folder)
{
    namespace fs = std::filesystem;
    std::error_code ec;
    if (!fs::is_directory(folder, ec)) {
        throw InputError("model folder not found: " + folder + " (give the folder that holds config.json and the "
                         "safetensors files)");
    }
    const auto path = (fs::path(folder) / "config.json").string();
    std::ifstream in(path, std::ios::binary);
    if (!in) throw InputError("the model folder " + folder + " has no readable config.json");
    std::stringstream buffer;
    buffer << in.rdbuf();
    return hfArchitectureFromJson(buffer.str(), path);
}

std::string HfArchitecture::summary() const
{
    std::ostringstream s;
    s << (lookAlike ? declaredType : modelType) << ", " << layers << " layers, hidden " << hiddenSize << ", " << heads << " heads";
    if (kvHeads != heads) s << " (" << kvHeads << " key/value)";
    s << " of " << headDim << ", MLP " << intermediateSize << ", vocab " << vocabSize;
    s << (tieEmbeddings ? ", tied head" : ", untied head");
    if (qkvBias && llamaFamily()) s << ", q/k/v bias";
    if (mlpBias && llamaFamily()) s << ", MLP bias";
    if (qkNorm) s << ", q/k norms";
    if (fusedProjections) s << ", fused qkv and gate/up";
    if (gemma) {
        std::int64_t sliding = 0;
        for (const bool b : slidingLayers) sliding += b ? 1 : 0;
        s << ", " << sliding << " of " << layers << " layers sliding";
    }
    if (slidingWindow > 0) s << ", sliding window " << slidingWindow;
    if (rotaryDims > 0) s << ", rotary " << rotaryDims << " of " << headDim;
    if (parallelResidual) s << ", parallel residual";
    if (learnedPositions) s << ", learned positions";
    if (!ropeScalingType.empty()) s << ", rope scaling " << ropeScalingType << " x" << ropeFactor;
    if (!quantization.empty()) s << ", bitsandbytes " << quantization << (doubleQuant ? " (double quantized)" : "");
    return s.str();
}

} // namespace tb
