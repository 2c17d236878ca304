#pragma once
// The architecture of a Hugging Face model folder, read from its config.json,
// for the families Trainbench trains (no LibTorch here: validation, the CLI
// and the GUI read it too). Anything the trainer does not implement is
// refused by name rather than trained as something it is not.

#include <cstdint>
#include <string>
#include <vector>

namespace tb {

struct HfArchitecture {
    std::string modelType; // llama | mistral | qwen2 | qwen3 | phi3 | gemma3_text | gpt2 | gpt_neox (config.json "model_type")
    std::string source;    // the config.json it came from
    std::int64_t vocabSize = 0;
    std::int64_t hiddenSize = 0;
    std::int64_t intermediateSize = 0;
    std::int64_t layers = 0;
    std::int64_t heads = 0;
    std::int64_t kvHeads = 0;
    std::int64_t headDim = 0; // "head_dim", or hidden_size / num_attention_heads
    std::int64_t maxPositions = 0;
    double ropeTheta = 10000.0;
    double rmsNormEps = 1e-6;
    bool tieEmbeddings = false;
    bool qkvBias = false;     // q, k and v projections carry a bias (Qwen2, attention_bias)
    bool outputBias = false;  // o_proj carries a bias (Llama's attention_bias)
    bool mlpBias = false;     // gate, up and down projections carry a bias (mlp_bias)
    bool qkNorm = false;      // Qwen3: RMSNorm over each head's queries and keys before RoPE (q_norm, k_norm)
    bool fusedProjections = false; // Phi-3: one qkv_proj (q, k, v along its output) and one gate_up_proj (gate, then up)
    // Gemma 3: (1 + w) RMSNorms in fp32, one before and one after attention and
    // the MLP; embeddings times sqrt(hidden); GeGLU (tanh GELU, geluTanh);
    // attention scaled by query_pre_attn_scalar^-0.5; sliding-window layers
    // (slidingLayers) with their own RoPE base among full ones.
    bool gemma = false;
    double queryPreAttnScalar = 0.0;    // 0: the head size
    std::vector<bool> slidingLayers;    // per layer: sees only slidingWindow positions (Gemma 3's layer_types)
    double localRopeTheta = 0.0;        // the sliding layers' RoPE base (rope_local_base_freq)
    std::int64_t slidingWindow = 0; // Mistral: each query sees this many most recent positions, itself included; 0 = all
    // rope_scaling {"rope_type": "llama3", ...}; ropeScalingType empty when absent.
    std::string ropeScalingType;
    double ropeFactor = 1.0;
    double ropeLowFreqFactor = 1.0;
    double ropeHighFreqFactor = 4.0;
    std::int64_t ropeOriginalMaxPositions = 0;
    std::string torchDtype; // "float32", "bfloat16", ... as stored; informational
    // GPT-2 and GPT-NeoX: LayerNorm with biases, a GELU MLP with biases.
    double layerNormEps = 1e-5;
    bool geluTanh = false;          // gelu_new (GPT-2's tanh approximation) rather than the exact GELU
    bool learnedPositions = false;  // GPT-2's wpe table of maxPositions rows
    std::int64_t rotaryDims = 0;    // GPT-NeoX: the leading head dimensions that RoPE rotates (rotary_pct)
    bool parallelResidual = false;  // GPT-NeoX: x + attn(ln1(x)) + mlp(ln2(x))
    // quantization_config of a bitsandbytes folder (transformers' layout):
    // "nf4" (load_in_4bit, bnb_4bit_quant_type nf4) or "int8" (load_in_8bit);
    // empty for a folder of plain weights.
    std::string quantization;
    bool doubleQuant = false; // bnb_4bit_use_double_quant
    // Read for planning only (HfReading::Plan): a config of another
    // model_type read with LlamaConfig's field names (lookAlike; modelType
    // says "llama", declaredType what the file says), and one whose MLP is a
    // plain GELU one (geluMlp: the built-in GPT's block with RoPE).
    bool lookAlike = false;
    bool geluMlp = false;
    std::string declaredType;

    bool llamaFamily() const
    {
        return modelType == "llama" || modelType == "mistral" || modelType == "qwen2" || modelType == "qwen3"
            || modelType == "phi3" || modelType == "gemma3_text";
    }

    // One line for people: "llama, 22 layers, hidden 2048, 32 heads (4 kv), vocab 32000, ..."
    std::string summary() const;
};

// The families `model.type: "hf"` trains, for messages.
const std::vector<std::string>& hfFamilies();

// How a config.json is read: to train a folder (anything the trainer does
// not implement is refused by name), or to plan one (--hf-config, the
// presets, the Memory planner's import): what does not change the memory is
// not refused (a rotary or scaling variant, softcapping, the quantization
// config, GPT-2's attention scaling flags, Qwen's use_sliding_window, an
// activation of the same shape), and a config of another model_type is read
// as a Llama look-alike (or, with a GELU activation, a GPT one), its size
// fields required.
enum class HfReading { Train, Plan };

// Parses a config.json's text. Throws InputError naming `source`, the field and
// what is wrong, or the unsupported family or feature by name.
HfArchitecture hfArchitectureFromJson(const std::string& text, const std::string& source,
                                      HfReading reading = HfReading::Train);
// The sliding window alone, read as hfArchitectureFromJson reads it (0: none;
// other families have none), without its refusals: the memory planner plans
// configs the trainer would refuse for reasons that do not change the memory.
std::int64_t hfSlidingWindow(const std::string& text, const std::string& source);
// Reads DIR/config.json. Throws InputError when the folder or file is missing.
HfArchitecture readHfArchitecture(const std::string& folder);

} // namespace tb
