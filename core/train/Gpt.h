#pragma once
// GPT-style decoder: pre-LayerNorm blocks, causal self-attention, GELU MLP,
// tied embeddings, learned / sinusoidal / RoPE positions. Every tensor the
// forward pass reads is a registered parameter or buffer, so .to(device) and
// .to(dtype) move all of it (story 1 of FAILURES.md is the counter-example).

#include <string>

#include <torch/torch.h>

namespace tb {

struct GptOptions {
    int vocabSize = 256;
    int maxLen = 64;
    int nLayer = 2;
    int dModel = 128;
    int nHead = 4;
    int dFf = 512;
    std::string positionalEncoding = "learned";
    double dropout = 0.0;
    bool tieEmbeddings = true;
    bool activationCheckpointing = false;
    int loraRank = 0;
    double loraAlpha = 16.0;
    bool loraAttn = true;
    bool loraMlp = true;
};

// A linear layer with an optional low-rank adapter: y = W x + b + (alpha/r) B A x.
// B starts at zero, so an adapter leaves the output unchanged until trained.
class LoraLinearImpl : public torch::nn::Module {
public:
    LoraLinearImpl(int in, int out, int rank, double alpha, bool bias = true);
    torch::Tensor forward(const torch::Tensor& x);
    bool hasAdapter() const { return m_rank > 0; }

    torch::nn::Linear base{nullptr};
    torch::Tensor loraA, loraB;

private:
    int m_rank;
    double m_scale;
};
TORCH_MODULE(LoraLinear);

// Tensors shared by every block, owned (registered) by the Gpt module.
struct AttentionTables {
    torch::Tensor causalMask; // [T, T] bool, true = may attend
    torch::Tensor ropeCos;    // [T, head/2] or undefined
    torch::Tensor ropeSin;
};

class CausalSelfAttentionImpl : public torch::nn::Module {
public:
    explicit CausalSelfAttentionImpl(const GptOptions& o);
    torch::Tensor forward(const torch::Tensor& x, const AttentionTables& tables);

private:
    int m_nHead;
    double m_dropout;
    LoraLinear m_qkv{nullptr}, m_proj{nullptr};
    torch::nn::Dropout m_residDrop{nullptr};
};
TORCH_MODULE(CausalSelfAttention);

class GptBlockImpl : public torch::nn::Module {
public:
    explicit GptBlockImpl(const GptOptions& o);
    torch::Tensor forward(const torch::Tensor& x, const AttentionTables& tables);

private:
    torch::nn::LayerNorm m_ln1{nullptr}, m_ln2{nullptr};
    CausalSelfAttention m_attn{nullptr};
    LoraLinear m_fc{nullptr}, m_out{nullptr};
    torch::nn::Dropout m_drop{nullptr};
};
TORCH_MODULE(GptBlock);

class GptImpl : public torch::nn::Module {
public:
    explicit GptImpl(const GptOptions& o);
    // tokens [B, T] int64 -> logits [B, T, vocab]
    torch::Tensor forward(const torch::Tensor& tokens);
    const GptOptions& options() const { return m_options; }
    // Freezes everything but the LoRA adapters (no-op when LoRA is off).
    void freezeBaseForLora();

private:
    GptOptions m_options;
    torch::nn::Embedding m_wte{nullptr}, m_wpe{nullptr};
    torch::nn::Dropout m_drop{nullptr};
    torch::nn::ModuleList m_blocks;
    torch::nn::LayerNorm m_lnf{nullptr};
    torch::nn::Linear m_head{nullptr}; // only when embeddings are not tied
    torch::Tensor m_causalMask, m_sinusoid, m_ropeCos, m_ropeSin;
};
TORCH_MODULE(Gpt);

} // namespace tb
