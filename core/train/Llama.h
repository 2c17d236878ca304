#pragma once
// Llama-family decoder with the parameter names, shapes and arithmetic of
// Hugging Face's LlamaForCausalLM: RMSNorm, SwiGLU MLP, rotate-half RoPE with
// rope_theta, grouped-query attention, no biases, untied head by default.
// Names: model.embed_tokens.weight, model.layers.N.self_attn.{q,k,v,o}_proj.weight,
// model.layers.N.mlp.{gate,up,down}_proj.weight, model.layers.N.input_layernorm.weight,
// model.layers.N.post_attention_layernorm.weight, model.norm.weight, lm_head.weight.

#include <cstdint>

#include "train/Layers.h"

namespace tb {

// x * rsqrt(mean(x^2) + eps) computed in float32, cast back, times the gain.
class RmsNormImpl : public torch::nn::Module {
public:
    // offsetOne: Gemma's RMSNorm, scaled by (1 + w) in fp32 (w starts at 0);
    // else Llama's, w times the normalised input cast back to its dtype.
    RmsNormImpl(int dim, double eps, bool offsetOne = false);
    torch::Tensor forward(const torch::Tensor& x);
    torch::Tensor weight;

private:
    double m_eps;
    bool m_offsetOne;
};
TORCH_MODULE(RmsNorm);

class LlamaAttentionImpl : public torch::nn::Module {
public:
    explicit LlamaAttentionImpl(const ModelOptions& o);
    torch::Tensor forward(const torch::Tensor& x, const AttentionTables& tables);

private:
    int m_nHead, m_nKvHead, m_headDim;
    double m_dropout;
    LoraLinear m_q{nullptr}, m_k{nullptr}, m_v{nullptr}, m_o{nullptr};
    LoraLinear m_qkv{nullptr};                  // Phi-3: q, k and v from one product
    RmsNorm m_qNorm{nullptr}, m_kNorm{nullptr}; // Qwen3 only
};
TORCH_MODULE(LlamaAttention);

class LlamaMlpImpl : public torch::nn::Module {
public:
    explicit LlamaMlpImpl(const ModelOptions& o);
    torch::Tensor forward(const torch::Tensor& x);

private:
    LoraLinear m_gate{nullptr}, m_up{nullptr}, m_down{nullptr};
    LoraLinear m_gateUp{nullptr}; // Phi-3: gate and up from one product
    int m_ff = 0;
    bool m_geluTanh = false; // Gemma 3: GeGLU
};
TORCH_MODULE(LlamaMlp);

class LlamaBlockImpl : public DecoderBlock {
public:
    explicit LlamaBlockImpl(const ModelOptions& o);
    torch::Tensor forward(const torch::Tensor& x, const AttentionTables& tables) override;

private:
    LlamaAttention m_attn{nullptr};
    LlamaMlp m_mlp{nullptr};
    RmsNorm m_inputNorm{nullptr}, m_postNorm{nullptr};
    RmsNorm m_preMlpNorm{nullptr}, m_postMlpNorm{nullptr}; // Gemma 3 only
};
TORCH_MODULE(LlamaBlock);

// The "model." part of LlamaForCausalLM.
class LlamaBodyImpl : public torch::nn::Module {
public:
    explicit LlamaBodyImpl(const ModelOptions& o);
    torch::nn::Embedding embedTokens{nullptr};
    torch::nn::ModuleList layers;
    RmsNorm norm{nullptr};
};
TORCH_MODULE(LlamaBody);

class LlamaImpl : public CausalLmImpl {
public:
    explicit LlamaImpl(const ModelOptions& o);
    torch::Tensor forward(const torch::Tensor& tokens) override;

private:
    LlamaBody m_model{nullptr};
    LoraLinear m_lmHead{nullptr}; // only when embeddings are not tied
};
TORCH_MODULE(Llama);

} // namespace tb
