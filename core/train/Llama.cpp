#include "train/Llama.h"

namespace tb {
namespace {
// Every linear layer, the untied lm_head included, starts as PyTorch's
// nn.Linear does, U(+-1/sqrt(in)); the embedding table N(0, std) with std
// tokenEmbeddingStd (1/sqrt(d_model) untied, 0.02 tied). Llama's published
// N(0, 0.02) for every matrix is too small for a narrow model: at d_model 128
// the 2-digit addition run (bench/learning_robustness.sh, lr 3e-3) reached
// 80% held-out on 10 of 16 seeds with it, 14 of 16 with U(+-1/sqrt(in)), 16 of
// 16 with the token table scaled too, and the PyTorch reference 16 of 16
// (docs/learning.md, "Learning robustness").
constexpr LinearInit kLlamaInit = LinearInit::Uniform;
} // namespace

RmsNormImpl::RmsNormImpl(int dim, double eps, bool offsetOne) : m_eps(eps), m_offsetOne(offsetOne)
{
    weight = register_parameter("weight", offsetOne ? torch::zeros({dim}) : torch::ones({dim}));
}

torch::Tensor RmsNormImpl::forward(const torch::Tensor& x)
{
    const auto x32 = x.to(torch::kFloat);
    const auto normed = x32 * torch::rsqrt(x32.pow(2).mean(-1, true) + m_eps);
    if (m_offsetOne) return (normed * (1.0 + weight.to(torch::kFloat))).to(x.scalar_type());
    return weight * normed.to(x.scalar_type());
}

LlamaAttentionImpl::LlamaAttentionImpl(const ModelOptions& o)
    : m_nHead(o.nHead), m_nKvHead(o.kvHeads()), m_headDim(o.headDim()), m_dropout(o.dropout)
{
    const int q = o.nHead * m_headDim, kv = m_nKvHead * m_headDim;
    if (o.fusedProjections) {
        m_qkv = register_module("qkv_proj", LoraLinear(o.dModel, q + 2 * kv, o.adapterRank("qkv_proj"), o.loraAlpha, o.qkvBias, kLlamaInit));
    } else {
        m_q = register_module("q_proj", LoraLinear(o.dModel, q, o.adapterRank("q_proj"), o.loraAlpha, o.qkvBias, kLlamaInit));
        m_k = register_module("k_proj", LoraLinear(o.dModel, kv, o.adapterRank("k_proj"), o.loraAlpha, o.qkvBias, kLlamaInit));
        m_v = register_module("v_proj", LoraLinear(o.dModel, kv, o.adapterRank("v_proj"), o.loraAlpha, o.qkvBias, kLlamaInit));
    }
    m_o = register_module("o_proj", LoraLinear(q, o.dModel, o.adapterRank("o_proj"), o.loraAlpha, o.outputBias, kLlamaInit));
    if (o.qkNorm) {
        m_qNorm = register_module("q_norm", RmsNorm(m_headDim, o.rmsNormEps, o.gemmaNorms));
        m_kNorm = register_module("k_norm", RmsNorm(m_headDim, o.rmsNormEps, o.gemmaNorms));
    }
}

torch::Tensor LlamaAttentionImpl::forward(const torch::Tensor& x, const AttentionTables& tables)
{
    const auto B = x.size(0), T = x.size(1);
    torch::Tensor q, k, v;
    if (m_qkv) {
        // Phi-3: q, then k, then v along the one product's output.
        const auto qkv = m_qkv(x);
        const std::int64_t qWidth = std::int64_t(m_nHead) * m_headDim, kvWidth = std::int64_t(m_nKvHead) * m_headDim;
        q = qkv.slice(-1, 0, qWidth).view({B, T, m_nHead, m_headDim});
        k = qkv.slice(-1, qWidth, qWidth + kvWidth).view({B, T, m_nKvHead, m_headDim});
        v = qkv.slice(-1, qWidth + kvWidth, qWidth + 2 * kvWidth).view({B, T, m_nKvHead, m_headDim}).transpose(1, 2);
    } else {
        q = m_q(x).view({B, T, m_nHead, m_headDim});
        k = m_k(x).view({B, T, m_nKvHead, m_headDim});
        v = m_v(x).view({B, T, m_nKvHead, m_headDim}).transpose(1, 2);
    }
    if (m_qNorm) {
        // Qwen3: each head's query and key normalised over the head before RoPE.
        q = m_qNorm(q);
        k = m_kNorm(k);
    }
    q = q.transpose(1, 2);
    k = k.transpose(1, 2);
    q = applyRope(q, tables.ropeCos, tables.ropeSin);
    k = applyRope(k, tables.ropeCos, tables.ropeSin);
    const auto y = causalAttention(q, k, v, tables, m_dropout, is_training(), true);
    return m_o(y.transpose(1, 2).reshape({B, T, m_nHead * m_headDim}));
}

LlamaMlpImpl::LlamaMlpImpl(const ModelOptions& o) : m_ff(o.dFf), m_geluTanh(o.geluTanh)
{
    const bool b = o.mlpBias;
    if (o.fusedProjections) {
        m_gateUp = register_module("gate_up_proj", LoraLinear(o.dModel, 2 * o.dFf, o.adapterRank("gate_up_proj"), o.loraAlpha, b, kLlamaInit));
        m_down = register_module("down_proj", LoraLinear(o.dFf, o.dModel, o.adapterRank("down_proj"), o.loraAlpha, b, kLlamaInit));
        return;
    }
    m_gate = register_module("gate_proj", LoraLinear(o.dModel, o.dFf, o.adapterRank("gate_proj"), o.loraAlpha, b, kLlamaInit));
    m_up = register_module("up_proj", LoraLinear(o.dModel, o.dFf, o.adapterRank("up_proj"), o.loraAlpha, b, kLlamaInit));
    m_down = register_module("down_proj", LoraLinear(o.dFf, o.dModel, o.adapterRank("down_proj"), o.loraAlpha, b, kLlamaInit));
}

torch::Tensor LlamaMlpImpl::forward(const torch::Tensor& x)
{
    if (m_gateUp) {
        // Phi-3: gate, then up along the one product's output; up * silu(gate).
        const auto gateUp = m_gateUp(x);
        return m_down(gateUp.slice(-1, m_ff, 2 * m_ff) * torch::silu(gateUp.slice(-1, 0, m_ff)));
    }
    if (m_geluTanh) return m_down(torch::gelu(m_gate(x), "tanh") * m_up(x)); // Gemma 3's GeGLU
    return m_down(torch::silu(m_gate(x)) * m_up(x));
}

LlamaBlockImpl::LlamaBlockImpl(const ModelOptions& o)
{
    m_attn = register_module("self_attn", LlamaAttention(o));
    m_mlp = register_module("mlp", LlamaMlp(o));
    m_inputNorm = register_module("input_layernorm", RmsNorm(o.dModel, o.rmsNormEps, o.gemmaNorms));
    m_postNorm = register_module("post_attention_layernorm", RmsNorm(o.dModel, o.rmsNormEps, o.gemmaNorms));
    if (o.gemmaNorms) {
        m_preMlpNorm = register_module("pre_feedforward_layernorm", RmsNorm(o.dModel, o.rmsNormEps, true));
        m_postMlpNorm = register_module("post_feedforward_layernorm", RmsNorm(o.dModel, o.rmsNormEps, true));
    }
}

torch::Tensor LlamaBlockImpl::forward(const torch::Tensor& x, const AttentionTables& tables)
{
    if (m_preMlpNorm) {
        // Gemma 3: post_attention_layernorm normalises the attention's output;
        // the MLP has a norm of its own before and after it.
        const auto h = x + m_postNorm(m_attn(m_inputNorm(x), tables));
        return h + m_postMlpNorm(m_mlp(m_preMlpNorm(h)));
    }
    const auto h = x + m_attn(m_inputNorm(x), tables);
    return h + m_mlp(m_postNorm(h));
}

LlamaBodyImpl::LlamaBodyImpl(const ModelOptions& o)
{
    embedTokens = register_module("embed_tokens", makeEmbedding(o.vocabSize, o.dModel, tokenEmbeddingStd(o)));
    layers = register_module("layers", torch::nn::ModuleList());
    for (int i = 0; i < o.nLayer; ++i) layers->push_back(LlamaBlock(o));
    norm = register_module("norm", RmsNorm(o.dModel, o.rmsNormEps, o.gemmaNorms));
}

LlamaImpl::LlamaImpl(const ModelOptions& o) : CausalLmImpl(o)
{
    m_model = register_module("model", LlamaBody(o));
    registerRopeTables(o.headDim(), o.ropeTheta);
    if (o.localRopeTheta > 0.0) registerLocalRopeTables(o.headDim(), o.localRopeTheta);
    if (!o.tieEmbeddings) m_lmHead = register_module("lm_head", LoraLinear(o.dModel, o.vocabSize, 0, 0.0, false, kLlamaInit));
}

torch::Tensor LlamaImpl::forward(const torch::Tensor& tokens)
{
    const auto T = tokens.size(1);
    TORCH_CHECK(T <= m_options.maxLen, "sequence of ", T, " tokens is longer than the model's ", m_options.maxLen);
    auto x = m_model->embedTokens(tokens);
    // Gemma 3: times sqrt(hidden), rounded to the embedding's dtype first, as transformers does.
    if (m_options.embedScale > 0.0) x = x * torch::scalar_tensor(m_options.embedScale, torch::kFloat).to(x.scalar_type());
    if (!m_options.slidingLayers.empty()) {
        const auto full = tablesFor(T, tokens, false), sliding = tablesFor(T, tokens, true);
        std::vector<const AttentionTables*> perLayer;
        for (const bool s : m_options.slidingLayers) perLayer.push_back(s ? &sliding : &full);
        x = m_model->norm(runBlocks(x, m_model->layers, perLayer));
    } else {
        x = m_model->norm(runBlocks(x, m_model->layers, tablesFor(T, tokens)));
    }
    return m_lmHead ? m_lmHead(x) : at::linear(x, m_model->embedTokens->weight);
}

} // namespace tb
