#pragma once
// Pieces shared by the built-in decoders (GPT and Llama family): the options
// both are built from, a linear layer with an optional LoRA adapter, causal
// attention (eager or fused), RoPE, and activation checkpointing of a block.

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <vector>
#include <string>

#include <torch/torch.h>

#include "config/ModelSpec.h"
#include "train/Quantize.h"

namespace tb {

// The model description (config/ModelSpec.h), as the layers call it.
using ModelOptions = ModelSpec;

// While one is alive on this thread, the layers built allocate their base
// weights (linear layers, embedding tables) in `dtype` and draw nothing into
// them: the caller fills every one from a file (a model folder, a checkpoint).
// A 7B folder then builds in bf16 without a transient fp32 copy and without
// seconds of random draws. LoRA adapters are initialised as usual, since no
// base file holds them. Outside a guard nothing changes, the draws included.
class WeightsFromFile final {
public:
    explicit WeightsFromFile(at::ScalarType dtype);
    ~WeightsFromFile();
    WeightsFromFile(const WeightsFromFile&) = delete;
    WeightsFromFile& operator=(const WeightsFromFile&) = delete;
    // The dtype of base weights being built on this thread, when they come from a file.
    static std::optional<at::ScalarType> active();

private:
    std::optional<at::ScalarType> m_previous;
};

// An embedding table [num, dim] drawn N(0, std), or left for a file to fill
// under WeightsFromFile.
torch::nn::Embedding makeEmbedding(int num, int dim, double std);

// y = x W^T + b (+ (alpha/r) x A^T B^T). The base weight is registered as
// "weight" (and "bias"), so parameter names match the usual checkpoint names
// ("...q_proj.weight"); adapters are "lora_A" [r, in] and "lora_B" [out, r].
// B starts at zero, so an adapter leaves the output unchanged until trained.
//
// Base initialisation: Normal is Hugging Face's N(0, 0.02) with zero bias;
// Uniform is PyTorch's nn.Linear default, U(±1/sqrt(in)) for weight and bias
// (every GPT and Llama layer); Zero starts weight and bias at zero (the GPT's
// residual-branch outputs with added positions). See Gpt.cpp and Llama.cpp
// for the evidence.
enum class LinearInit { Normal, Uniform, Zero };

// Dropout only where it does something: at p = 0 a module call is pure overhead.
torch::Tensor dropoutIf(const torch::Tensor& x, double p, bool training);

// Whether a parameter or checkpoint tensor name is a LoRA adapter's ("...lora_A", "...lora_B").
inline bool isAdapterName(const std::string& name) { return name.find("lora_") != std::string::npos; }

// The standard deviation of the token embedding table's N(0, std) start:
// 1/sqrt(d_model) (rows of norm about 1) for an untied table in a RoPE model,
// 0.02 otherwise. Evidence in Layers.cpp.
double tokenEmbeddingStd(const ModelOptions& o);
class LoraLinearImpl : public torch::nn::Module {
public:
    LoraLinearImpl(int in, int out, int rank, double alpha, bool bias, LinearInit init = LinearInit::Normal);
    // GPT-2's Conv1D: the same layer with its weight stored [in, out] (y = x W + b),
    // the layout of its checkpoints. Adapters keep lora_A [r, in], lora_B [out, r], as PEFT's.
    static std::shared_ptr<LoraLinearImpl> conv1d(int in, int out, int rank, double alpha);
    torch::Tensor forward(const torch::Tensor& x);
    bool hasAdapter() const { return m_rank > 0; }
    // Dropout on the adapter's input while training (0: none), as PEFT's
    // lora_dropout: y = base(x) + scale * B(A(dropout(x))).
    void setAdapterDropout(double p) { m_adapterDropout = p; }
    double adapterScale() const { return m_scale; }
    bool transposedWeight() const { return m_transposed; }
    // The weight's [out, in] whatever its layout, quantized or not.
    std::int64_t outFeatures() const;
    std::int64_t inFeatures() const;

    // Replaces the base weight by its quantized form (QLoRA): the "weight"
    // parameter goes, and the stored form is kept in buffers (weight_data,
    // weight_absmax, ...; a model's .to(dtype) leaves them in their own
    // dtypes, exact). `source` is the weight as its
    // file stores it (a mapped tensor: the layer never holds it unquantized),
    // or undefined for the layer's own weight. Forward then dequantizes the
    // weight for its product and backward again for the input's gradient;
    // nothing dequantized is kept between the two.
    void quantizeBase(const QuantizeSpec& spec, const torch::Tensor& source = {});
    // Takes an already quantized base ([out, in], e.g. a checkpoint's) in place of the weight.
    void setQuantizedBase(QuantizedWeight q);
    bool quantized() const { return m_quantFormat != QuantFormat::None; }
    // The quantized base as stored (tensors on the layer's device).
    QuantizedWeight quantizedBase() const;
    // The base weight in the layer's layout ([out, in]; a Conv1D's [in, out]), dequantized when quantized.
    torch::Tensor baseWeight(at::ScalarType dtype) const;

    void to(torch::Device device, torch::Dtype dtype, bool nonBlocking = false) override;
    void to(torch::Dtype dtype, bool nonBlocking = false) override;
    void to(torch::Device device, bool nonBlocking = false) override;

    torch::Tensor weight, bias, loraA, loraB;

private:
    void keepQuantizedDtypes(const std::function<void()>& move);
    // The adapter's input (dropped while training with lora.dropout). The
    // adapter's product stays in the forward's one expression: its
    // temporaries live until the sum is made (the step programs shipped
    // record it so: tst_derived_plan fails when they end sooner).
    torch::Tensor adapterInput(const torch::Tensor& x);
    double m_adapterDropout = 0.0;
    int m_rank;
    double m_scale;
    bool m_transposed = false;
    QuantFormat m_quantFormat = QuantFormat::None;
    QuantizedWeight m_quantShape; // format, sizes and scalars; its tensors are the buffers below
    torch::Tensor m_qData, m_qAbsmax, m_qMap, m_qNestedAbsmax, m_qNestedMap;
};
TORCH_MODULE(LoraLinear);

// The linear layers a quantized base stores quantized, by module name: every
// LoraLinear inside the model's blocks. The output head and the embeddings
// stay as they are (transformers' bitsandbytes integration keeps lm_head).
std::vector<std::pair<std::string, LoraLinearImpl*>> quantizableLinears(torch::nn::Module& model);
// Quantizes each of them that is not quantized yet, from its own weight.
void quantizeModelBase(torch::nn::Module& model, const QuantizeSpec& spec);
// A quantized base as tensors (on the CPU), per quantized layer NAME:
// NAME.weight_data, .weight_absmax, .weight_quant_map, and when nested
// .weight_nested_absmax, .weight_nested_quant_map, with NAME.weight_quant_state
// (int64: format, rows, cols, block size, nested, nested block size, the
// nested offset's float bits), as checkpoints store it.
std::map<std::string, torch::Tensor> quantizedBaseTensors(torch::nn::Module& model);
// Whether a tensor name is one of those.
bool isQuantizedBaseName(const std::string& name);
// Puts the quantized base found in `tensors` into the model's layers (each
// layer whose NAME.weight_quant_state is there); returns how many.
int loadQuantizedBase(torch::nn::Module& model, const std::map<std::string, torch::Tensor>& tensors);

// What every block of one forward pass shares, computed once per forward.
struct AttentionTables {
    torch::Tensor maskedOut; // [T, T] bool, true above the diagonal (eager attention only)
    torch::Tensor ropeCos;   // [T, headDim/2] or undefined
    torch::Tensor ropeSin;
    bool fused = false;      // scaled_dot_product_attention with is_causal
    double scale = 0.0;      // the scores' scale; 0: 1 / sqrt(head size)
};

// A transformer block that activation checkpointing can recompute.
class DecoderBlock : public torch::nn::Module {
public:
    virtual torch::Tensor forward(const torch::Tensor& x, const AttentionTables& tables) = 0;
};

// The causal language models the trainer drives: token ids [B, T] int64 ->
// logits [B, T, vocab].
class CausalLmImpl : public torch::nn::Module {
public:
    explicit CausalLmImpl(const ModelOptions& o) : m_options(o) {}
    virtual torch::Tensor forward(const torch::Tensor& tokens) = 0;
    const ModelOptions& options() const { return m_options; }
    // Freezes everything but the LoRA adapters (no-op when LoRA is off).
    void freezeBaseForLora();

protected:
    // Runs the blocks, each under activation checkpointing when enabled.
    torch::Tensor runBlocks(torch::Tensor x, torch::nn::ModuleList& blocks, const AttentionTables& tables);
    // The same with each block's own tables (Gemma 3's sliding and full layers).
    torch::Tensor runBlocks(torch::Tensor x, torch::nn::ModuleList& blocks, const std::vector<const AttentionTables*>& perBlock);
    // Tables for T positions (mask and RoPE rows), on the device of `like`.
    AttentionTables tablesFor(std::int64_t T, const torch::Tensor& like) const;
    // For a model whose layers differ (options().slidingLayers): the full layers' (no window, RoPE at
    // ropeTheta) or the sliding layers' (the window, RoPE at localRopeTheta).
    AttentionTables tablesFor(std::int64_t T, const torch::Tensor& like, bool slidingLayer) const;
    // Registers RoPE cos/sin tables [maxLen, headDim/2] (RoFormer; theta_i = base^(-2i/d)).
    void registerRopeTables(int headDim, double base);
    // The sliding layers' own tables, at `base` and unscaled (Gemma 3's rope_local_base_freq).
    void registerLocalRopeTables(int headDim, double base);

    ModelOptions m_options;
    torch::Tensor m_ropeCos, m_ropeSin;
    torch::Tensor m_localRopeCos, m_localRopeSin;
};

// Rotates the two halves of each head by the position's angles
// (the "rotate_half" layout of GPT-NeoX and Hugging Face Llama). x [B, H, T, D].
torch::Tensor applyRope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);

// softmax(q k^T / sqrt(d) + causal mask) v, for q [B, H, T, D] and k, v with
// H / groups heads (grouped-query attention repeats each k/v head `groups` times).
// With softmaxFp32 the probabilities are computed in float32 (as Hugging Face Llama does).
torch::Tensor causalAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                              const AttentionTables& tables, double dropout, bool training, bool softmaxFp32);

// Whether this LibTorch has scaled_dot_product_attention (2.0 and newer).
bool fusedAttentionAvailable();

} // namespace tb
