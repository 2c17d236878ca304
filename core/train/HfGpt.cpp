#include "train/HfGpt.h"

namespace tb {
namespace {

torch::Tensor gelu(const torch::Tensor& x, bool tanh) { return tanh ? torch::gelu(x, "tanh") : torch::gelu(x); }

torch::nn::LayerNorm layerNorm(const ModelOptions& o)
{
    return torch::nn::LayerNorm(torch::nn::LayerNormOptions({o.dModel}).eps(o.layerNormEps));
}

// An adapter on a projection named `leaf` inside `parent` (attn, mlp): PEFT
// matches the leaf name ("c_proj" adapts both of GPT-2's), and the groups
// "attn" and "mlp" name the qualified one.
int rankOf(const ModelOptions& o, const std::string& parent, const std::string& leaf)
{
    return std::max(o.adapterRank(leaf), o.adapterRank(parent + "." + leaf));
}

// ---------------------------------------------------------------- GPT-2
class Gpt2AttentionImpl : public torch::nn::Module {
public:
    explicit Gpt2AttentionImpl(const ModelOptions& o) : m_nHead(o.nHead), m_dropout(o.dropout)
    {
        m_cAttn = register_module("c_attn", LoraLinear(LoraLinearImpl::conv1d(o.dModel, 3 * o.dModel, rankOf(o, "attn", "c_attn"), o.loraAlpha)));
        m_cProj = register_module("c_proj", LoraLinear(LoraLinearImpl::conv1d(o.dModel, o.dModel, rankOf(o, "attn", "c_proj"), o.loraAlpha)));
    }
    torch::Tensor forward(const torch::Tensor& x, const AttentionTables& tables)
    {
        const auto B = x.size(0), T = x.size(1), C = x.size(2);
        const auto parts = m_cAttn(x).split(C, 2); // q, k, v along the output features
        const auto heads = [&](const torch::Tensor& t) { return t.view({B, T, m_nHead, C / m_nHead}).transpose(1, 2); };
        const auto y = causalAttention(heads(parts[0]), heads(parts[1]), heads(parts[2]), tables, m_dropout, is_training(), false);
        return dropoutIf(m_cProj(y.transpose(1, 2).reshape({B, T, C})), m_dropout, is_training());
    }

private:
    int m_nHead;
    double m_dropout;
    LoraLinear m_cAttn{nullptr}, m_cProj{nullptr};
};
TORCH_MODULE(Gpt2Attention);

class Gpt2MlpImpl : public torch::nn::Module {
public:
    explicit Gpt2MlpImpl(const ModelOptions& o) : m_tanh(o.geluTanh), m_dropout(o.dropout)
    {
        m_cFc = register_module("c_fc", LoraLinear(LoraLinearImpl::conv1d(o.dModel, o.dFf, rankOf(o, "mlp", "c_fc"), o.loraAlpha)));
        m_cProj = register_module("c_proj", LoraLinear(LoraLinearImpl::conv1d(o.dFf, o.dModel, rankOf(o, "mlp", "c_proj"), o.loraAlpha)));
    }
    torch::Tensor forward(const torch::Tensor& x)
    {
        return dropoutIf(m_cProj(gelu(m_cFc(x), m_tanh)), m_dropout, is_training());
    }

private:
    bool m_tanh;
    double m_dropout;
    LoraLinear m_cFc{nullptr}, m_cProj{nullptr};
};
TORCH_MODULE(Gpt2Mlp);

class Gpt2BlockImpl : public DecoderBlock {
public:
    explicit Gpt2BlockImpl(const ModelOptions& o)
    {
        m_ln1 = register_module("ln_1", layerNorm(o));
        m_attn = register_module("attn", Gpt2Attention(o));
        m_ln2 = register_module("ln_2", layerNorm(o));
        m_mlp = register_module("mlp", Gpt2Mlp(o));
    }
    torch::Tensor forward(const torch::Tensor& x, const AttentionTables& tables) override
    {
        const auto h = x + m_attn(m_ln1(x), tables);
        return h + m_mlp(m_ln2(h));
    }

private:
    torch::nn::LayerNorm m_ln1{nullptr}, m_ln2{nullptr};
    Gpt2Attention m_attn{nullptr};
    Gpt2Mlp m_mlp{nullptr};
};
TORCH_MODULE(Gpt2Block);

class Gpt2BodyImpl : public torch::nn::Module {
public:
    explicit Gpt2BodyImpl(const ModelOptions& o)
    {
        wte = register_module("wte", makeEmbedding(o.vocabSize, o.dModel, 0.02));
        wpe = register_module("wpe", makeEmbedding(o.maxLen, o.dModel, 0.02));
        h = register_module("h", torch::nn::ModuleList());
        for (int i = 0; i < o.nLayer; ++i) h->push_back(Gpt2Block(o));
        lnF = register_module("ln_f", layerNorm(o));
    }
    torch::nn::Embedding wte{nullptr}, wpe{nullptr};
    torch::nn::ModuleList h;
    torch::nn::LayerNorm lnF{nullptr};
};
TORCH_MODULE(Gpt2Body);

// ---------------------------------------------------------------- GPT-NeoX
class NeoXAttentionImpl : public torch::nn::Module {
public:
    explicit NeoXAttentionImpl(const ModelOptions& o)
        : m_nHead(o.nHead), m_headDim(o.dModel / o.nHead), m_rotary(o.rotaryDims), m_dropout(o.dropout)
    {
        m_qkv = register_module("query_key_value", LoraLinear(o.dModel, 3 * o.dModel, rankOf(o, "attn", "query_key_value"),
                                                              o.loraAlpha, o.qkvBias, LinearInit::Normal));
        m_dense = register_module("dense", LoraLinear(o.dModel, o.dModel, rankOf(o, "attn", "dense"), o.loraAlpha,
                                                      o.outputBias, LinearInit::Normal));
    }
    torch::Tensor forward(const torch::Tensor& x, const AttentionTables& tables)
    {
        const auto B = x.size(0), T = x.size(1), C = x.size(2);
        // Interleaved per head: [B, T, H, 3 * D] -> q, k, v of [B, H, T, D].
        const auto qkv = m_qkv(x).view({B, T, m_nHead, 3 * m_headDim}).transpose(1, 2).chunk(3, -1);
        const auto rotate = [&](const torch::Tensor& t) {
            if (m_rotary <= 0) return t;
            const auto turned = applyRope(t.narrow(-1, 0, m_rotary), tables.ropeCos, tables.ropeSin);
            return m_rotary == m_headDim ? turned : torch::cat({turned, t.narrow(-1, m_rotary, m_headDim - m_rotary)}, -1);
        };
        const auto y = causalAttention(rotate(qkv[0]), rotate(qkv[1]), qkv[2], tables, m_dropout, is_training(), true);
        return m_dense(y.transpose(1, 2).reshape({B, T, C}));
    }

private:
    int m_nHead, m_headDim, m_rotary;
    double m_dropout;
    LoraLinear m_qkv{nullptr}, m_dense{nullptr};
};
TORCH_MODULE(NeoXAttention);

class NeoXMlpImpl : public torch::nn::Module {
public:
    explicit NeoXMlpImpl(const ModelOptions& o) : m_tanh(o.geluTanh)
    {
        m_in = register_module("dense_h_to_4h", LoraLinear(o.dModel, o.dFf, rankOf(o, "mlp", "dense_h_to_4h"), o.loraAlpha, true, LinearInit::Normal));
        m_out = register_module("dense_4h_to_h", LoraLinear(o.dFf, o.dModel, rankOf(o, "mlp", "dense_4h_to_h"), o.loraAlpha, true, LinearInit::Normal));
    }
    torch::Tensor forward(const torch::Tensor& x) { return m_out(gelu(m_in(x), m_tanh)); }

private:
    bool m_tanh;
    LoraLinear m_in{nullptr}, m_out{nullptr};
};
TORCH_MODULE(NeoXMlp);

class NeoXLayerImpl : public DecoderBlock {
public:
    explicit NeoXLayerImpl(const ModelOptions& o) : m_parallel(o.parallelResidual), m_dropout(o.dropout)
    {
        m_ln1 = register_module("input_layernorm", layerNorm(o));
        m_ln2 = register_module("post_attention_layernorm", layerNorm(o));
        m_attn = register_module("attention", NeoXAttention(o));
        m_mlp = register_module("mlp", NeoXMlp(o));
    }
    torch::Tensor forward(const torch::Tensor& x, const AttentionTables& tables) override
    {
        const auto attn = dropoutIf(m_attn(m_ln1(x), tables), m_dropout, is_training());
        if (m_parallel) {
            // Named, so that the order of the work (and of its memory) does not
            // rest on the compiler's order of operands: the MLP branch, then
            // x + attn, then their sum.
            const auto mlp = dropoutIf(m_mlp(m_ln2(x)), m_dropout, is_training());
            return x + attn + mlp;
        }
        const auto h = x + attn;
        return h + dropoutIf(m_mlp(m_ln2(h)), m_dropout, is_training());
    }

private:
    bool m_parallel;
    double m_dropout;
    torch::nn::LayerNorm m_ln1{nullptr}, m_ln2{nullptr};
    NeoXAttention m_attn{nullptr};
    NeoXMlp m_mlp{nullptr};
};
TORCH_MODULE(NeoXLayer);

class NeoXBodyImpl : public torch::nn::Module {
public:
    explicit NeoXBodyImpl(const ModelOptions& o)
    {
        embedIn = register_module("embed_in", makeEmbedding(o.vocabSize, o.dModel, 0.02));
        layers = register_module("layers", torch::nn::ModuleList());
        for (int i = 0; i < o.nLayer; ++i) layers->push_back(NeoXLayer(o));
        finalLayerNorm = register_module("final_layer_norm", layerNorm(o));
    }
    torch::nn::Embedding embedIn{nullptr};
    torch::nn::ModuleList layers;
    torch::nn::LayerNorm finalLayerNorm{nullptr};
};
TORCH_MODULE(NeoXBody);

} // namespace

Gpt2LmImpl::Gpt2LmImpl(const ModelOptions& o) : CausalLmImpl(o)
{
    auto body = register_module("transformer", Gpt2Body(o));
    m_wte = body->wte;
    m_wpe = body->wpe;
    m_blocks = body->h;
    m_lnf = body->lnF;
    if (!o.tieEmbeddings) m_head = register_module("lm_head", LoraLinear(o.dModel, o.vocabSize, 0, 0.0, false));
}

torch::Tensor Gpt2LmImpl::forward(const torch::Tensor& tokens)
{
    const auto T = tokens.size(1);
    TORCH_CHECK(T <= m_options.maxLen, "sequence of ", T, " tokens is longer than the model's ", m_options.maxLen);
    // The tokens' embeddings first, then the positions', as transformers'
    // GPT2Model makes them (one + leaves its operands' order to the
    // compiler). Autograd runs the later node's backward first: the
    // positions' gradient, then the tokens' (a tied head's sum).
    auto x = m_wte(tokens);
    x = x + m_wpe(torch::arange(T, tokens.options()));
    x = dropoutIf(x, m_options.dropout, is_training());
    x = m_lnf(runBlocks(x, m_blocks, tablesFor(T, tokens)));
    return m_head ? m_head(x) : at::linear(x, m_wte->weight);
}

GptNeoXLmImpl::GptNeoXLmImpl(const ModelOptions& o) : CausalLmImpl(o)
{
    auto body = register_module("gpt_neox", NeoXBody(o));
    m_embedIn = body->embedIn;
    m_layers = body->layers;
    m_final = body->finalLayerNorm;
    if (o.rotaryDims > 0) registerRopeTables(o.rotaryDims, o.ropeTheta);
    if (!o.tieEmbeddings) m_embedOut = register_module("embed_out", LoraLinear(o.dModel, o.vocabSize, 0, 0.0, false));
}

torch::Tensor GptNeoXLmImpl::forward(const torch::Tensor& tokens)
{
    const auto T = tokens.size(1);
    TORCH_CHECK(T <= m_options.maxLen, "sequence of ", T, " tokens is longer than the model's ", m_options.maxLen);
    auto x = dropoutIf(m_embedIn(tokens), m_options.dropout, is_training());
    x = m_final(runBlocks(x, m_layers, tablesFor(T, tokens)));
    return m_embedOut ? m_embedOut(x) : at::linear(x, m_embedIn->weight);
}

} // namespace tb
