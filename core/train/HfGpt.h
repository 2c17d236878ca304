#pragma once
// GPT-2 (GPT2LMHeadModel) and GPT-NeoX / Pythia (GPTNeoXForCausalLM) with
// Hugging Face's parameter names, layouts and arithmetic, for model folders
// of those families (model.type "hf"):
// - GPT-2: transformer.{wte,wpe,h.N.{ln_1,attn.{c_attn,c_proj},ln_2,mlp.{c_fc,c_proj}},ln_f};
//   Conv1D weights stored [in, out]; c_attn fuses q, k, v along its output
//   (q the first hidden_size columns); learned positions; GELU (tanh form for
//   gelu_new); the head tied to wte unless the config says otherwise.
// - GPT-NeoX: gpt_neox.{embed_in,layers.N.{input_layernorm,post_attention_layernorm,
//   attention.{query_key_value,dense},mlp.{dense_h_to_4h,dense_4h_to_h}},final_layer_norm},
//   embed_out; query_key_value interleaved per head ([q k v] of head 0, then
//   head 1, ...); RoPE on the first rotary_pct of each head (rotate-half);
//   parallel residual x + attn(ln1(x)) + mlp(ln2(x)) when use_parallel_residual.

#include "train/Layers.h"

namespace tb {

class Gpt2LmImpl : public CausalLmImpl {
public:
    explicit Gpt2LmImpl(const ModelOptions& o);
    torch::Tensor forward(const torch::Tensor& tokens) override;

private:
    torch::nn::Embedding m_wte{nullptr}, m_wpe{nullptr};
    torch::nn::ModuleList m_blocks;
    torch::nn::LayerNorm m_lnf{nullptr};
    LoraLinear m_head{nullptr};
};

class GptNeoXLmImpl : public CausalLmImpl {
public:
    explicit GptNeoXLmImpl(const ModelOptions& o);
    torch::Tensor forward(const torch::Tensor& tokens) override;

private:
    torch::nn::Embedding m_embedIn{nullptr};
    torch::nn::ModuleList m_layers;
    torch::nn::LayerNorm m_final{nullptr};
    LoraLinear m_embedOut{nullptr};
};

} // namespace tb
