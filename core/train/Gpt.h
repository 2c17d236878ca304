#pragma once
// GPT-style decoder: pre-LayerNorm blocks, causal self-attention, GELU MLP,
// tied embeddings, learned / sinusoidal / RoPE positions. Every tensor the
// forward pass reads is a registered parameter or buffer, so .to(device) and
// .to(dtype) move all of it.

#include "train/Layers.h"

namespace tb {

using GptOptions = ModelOptions;

class CausalSelfAttentionImpl : public torch::nn::Module {
public:
    explicit CausalSelfAttentionImpl(const ModelOptions& o);
    torch::Tensor forward(const torch::Tensor& x, const AttentionTables& tables);

private:
    int m_nHead;
    double m_dropout;
    LoraLinear m_qkv{nullptr}, m_proj{nullptr};
};
TORCH_MODULE(CausalSelfAttention);

class GptBlockImpl : public DecoderBlock {
public:
    explicit GptBlockImpl(const ModelOptions& o);
    torch::Tensor forward(const torch::Tensor& x, const AttentionTables& tables) override;

private:
    double m_dropout;
    torch::nn::LayerNorm m_ln1{nullptr}, m_ln2{nullptr};
    CausalSelfAttention m_attn{nullptr};
    LoraLinear m_fc{nullptr}, m_out{nullptr};
};
TORCH_MODULE(GptBlock);

class GptImpl : public CausalLmImpl {
public:
    explicit GptImpl(const ModelOptions& o);
    // tokens [B, T] int64 -> logits [B, T, vocab]
    torch::Tensor forward(const torch::Tensor& tokens) override;

private:
    torch::nn::Embedding m_wte{nullptr}, m_wpe{nullptr};
    torch::nn::ModuleList m_blocks;
    torch::nn::LayerNorm m_lnf{nullptr};
    LoraLinear m_head{nullptr}; // only when embeddings are not tied
    torch::Tensor m_sinusoid;
};
TORCH_MODULE(Gpt);

} // namespace tb
