#include "train/Gpt.h"

#include <cmath>

#include "train/TorchCompat.h"

namespace tb {
namespace {

// Activation checkpointing for one block: forward runs without saving
// activations; backward recomputes the block with grad enabled and
// back-propagates through the recomputation (the reentrant scheme of
// torch.utils.checkpoint). Autocast and RNG state are replayed so the
// recomputation matches the original forward exactly.
struct BlockCheckpoint : public torch::autograd::Function<BlockCheckpoint> {
    static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor x, GptBlockImpl* block,
                                 const AttentionTables* tables)
    {
        ctx->save_for_backward({x});
        ctx->saved_data["block"] = reinterpret_cast<std::int64_t>(block);
        ctx->saved_data["mask"] = tables->causalMask;
        ctx->saved_data["cos"] = tables->ropeCos.defined() ? tables->ropeCos : torch::Tensor();
        ctx->saved_data["sin"] = tables->ropeSin.defined() ? tables->ropeSin : torch::Tensor();
        const auto dev = x.device().type();
        ctx->saved_data["autocast"] = compat::autocastEnabled(dev);
        ctx->saved_data["autocast_dtype"] = static_cast<std::int64_t>(compat::autocastDtype(dev));
        auto gen = compat::defaultGenerator(x.device());
        ctx->saved_data["rng"] = compat::generatorState(gen);
        return block->forward(x, *tables);
    }

    static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                   torch::autograd::variable_list gradOutputs)
    {
        auto x = ctx->get_saved_variables()[0].detach().requires_grad_(true);
        auto* block = reinterpret_cast<GptBlockImpl*>(ctx->saved_data["block"].toInt());
        AttentionTables tables;
        tables.causalMask = ctx->saved_data["mask"].toTensor();
        if (ctx->saved_data["cos"].isTensor()) tables.ropeCos = ctx->saved_data["cos"].toTensor();
        if (ctx->saved_data["sin"].isTensor()) tables.ropeSin = ctx->saved_data["sin"].toTensor();
        const auto dev = x.device().type();
        auto gen = compat::defaultGenerator(x.device());
        const torch::Tensor rngNow = compat::generatorState(gen);
        compat::setGeneratorState(gen, ctx->saved_data["rng"].toTensor());
        torch::Tensor y;
        {
            torch::AutoGradMode grad(true);
            compat::AutocastScope autocast(dev, ctx->saved_data["autocast"].toBool(),
                                           static_cast<at::ScalarType>(ctx->saved_data["autocast_dtype"].toInt()));
            y = block->forward(x, tables);
        }
        compat::setGeneratorState(gen, rngNow);
        torch::autograd::backward({y}, {gradOutputs[0]});
        return {x.grad(), torch::Tensor(), torch::Tensor()};
    }
};

} // namespace

LoraLinearImpl::LoraLinearImpl(int in, int out, int rank, double alpha, bool bias)
    : m_rank(rank), m_scale(rank > 0 ? alpha / rank : 0.0)
{
    base = register_module("base", torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(bias)));
    torch::nn::init::normal_(base->weight, 0.0, 0.02);
    if (bias) torch::nn::init::zeros_(base->bias);
    if (rank > 0) {
        // A ~ Kaiming-uniform-like small values, B = 0 (LoRA paper, section 4.1).
        loraA = register_parameter("lora_A", torch::randn({rank, in}) * (1.0 / std::sqrt(static_cast<double>(in))));
        loraB = register_parameter("lora_B", torch::zeros({out, rank}));
    }
}

torch::Tensor LoraLinearImpl::forward(const torch::Tensor& x)
{
    auto y = base(x);
    if (m_rank > 0) y = y + torch::matmul(torch::matmul(x, loraA.t()), loraB.t()) * m_scale;
    return y;
}

CausalSelfAttentionImpl::CausalSelfAttentionImpl(const GptOptions& o) : m_nHead(o.nHead), m_dropout(o.dropout)
{
    const int rank = o.loraAttn ? o.loraRank : 0;
    m_qkv = register_module("qkv", LoraLinear(o.dModel, 3 * o.dModel, rank, o.loraAlpha));
    m_proj = register_module("proj", LoraLinear(o.dModel, o.dModel, rank, o.loraAlpha));
    // GPT-2's scaled init of residual projections: std 0.02 / sqrt(2 * n_layer).
    torch::nn::init::normal_(m_proj->base->weight, 0.0, 0.02 / std::sqrt(2.0 * o.nLayer));
    m_residDrop = register_module("resid_drop", torch::nn::Dropout(o.dropout));
}

static torch::Tensor applyRope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin)
{
    // x [B, H, T, D]; rotate the two halves of each head (GPT-NeoX layout).
    const auto half = x.size(-1) / 2;
    const auto x1 = x.narrow(-1, 0, half);
    const auto x2 = x.narrow(-1, half, half);
    return torch::cat({x1 * cos - x2 * sin, x1 * sin + x2 * cos}, -1);
}

torch::Tensor CausalSelfAttentionImpl::forward(const torch::Tensor& x, const AttentionTables& tables)
{
    const auto B = x.size(0), T = x.size(1), C = x.size(2);
    const auto headDim = C / m_nHead;
    auto qkv = m_qkv(x).view({B, T, 3, m_nHead, headDim}).permute({2, 0, 3, 1, 4}); // [3, B, H, T, D]
    auto q = qkv[0], k = qkv[1], v = qkv[2];
    if (tables.ropeCos.defined()) {
        const auto cos = tables.ropeCos.narrow(0, 0, T), sin = tables.ropeSin.narrow(0, 0, T);
        q = applyRope(q, cos, sin);
        k = applyRope(k, cos, sin);
    }
    auto att = torch::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(headDim)));
    const auto mask = tables.causalMask.narrow(0, 0, T).narrow(1, 0, T);
    att = att.masked_fill(mask.logical_not(), -std::numeric_limits<float>::infinity());
    att = torch::softmax(att, -1);
    if (m_dropout > 0.0) att = torch::dropout(att, m_dropout, is_training());
    auto y = torch::matmul(att.to(v.scalar_type()), v).transpose(1, 2).reshape({B, T, C});
    return m_residDrop(m_proj(y));
}

GptBlockImpl::GptBlockImpl(const GptOptions& o)
{
    m_ln1 = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({o.dModel})));
    m_attn = register_module("attn", CausalSelfAttention(o));
    m_ln2 = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({o.dModel})));
    const int rank = o.loraMlp ? o.loraRank : 0;
    m_fc = register_module("fc", LoraLinear(o.dModel, o.dFf, rank, o.loraAlpha));
    m_out = register_module("out", LoraLinear(o.dFf, o.dModel, rank, o.loraAlpha));
    torch::nn::init::normal_(m_out->base->weight, 0.0, 0.02 / std::sqrt(2.0 * o.nLayer));
    m_drop = register_module("drop", torch::nn::Dropout(o.dropout));
}

torch::Tensor GptBlockImpl::forward(const torch::Tensor& x, const AttentionTables& tables)
{
    auto h = x + m_attn(m_ln1(x), tables);
    return h + m_drop(m_out(torch::gelu(m_fc(m_ln2(h)))));
}

GptImpl::GptImpl(const GptOptions& o) : m_options(o)
{
    m_wte = register_module("wte", torch::nn::Embedding(o.vocabSize, o.dModel));
    torch::nn::init::normal_(m_wte->weight, 0.0, 0.02);
    const auto T = o.maxLen;
    if (o.positionalEncoding == "learned") {
        m_wpe = register_module("wpe", torch::nn::Embedding(T, o.dModel));
        torch::nn::init::normal_(m_wpe->weight, 0.0, 0.02);
    } else if (o.positionalEncoding == "sinusoidal") {
        // Vaswani et al. 2017, section 3.5: PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...).
        auto pos = torch::arange(T, torch::kFloat).unsqueeze(1);
        auto div = torch::exp(torch::arange(0, o.dModel, 2, torch::kFloat) * (-std::log(10000.0) / o.dModel));
        auto table = torch::zeros({T, o.dModel});
        table.index_put_({torch::indexing::Slice(), torch::indexing::Slice(0, torch::indexing::None, 2)},
                         torch::sin(pos * div));
        table.index_put_({torch::indexing::Slice(), torch::indexing::Slice(1, torch::indexing::None, 2)},
                         torch::cos(pos * div).narrow(1, 0, o.dModel / 2));
        m_sinusoid = register_buffer("sinusoid", table);
    } else if (o.positionalEncoding == "rope") {
        // Su et al. 2021 (RoFormer): theta_i = 10000^(-2i/d) per head dimension pair.
        const int headDim = o.dModel / o.nHead;
        auto inv = torch::pow(10000.0, -torch::arange(0, headDim, 2, torch::kFloat) / headDim);
        auto angles = torch::outer(torch::arange(T, torch::kFloat), inv); // [T, headDim/2]
        m_ropeCos = register_buffer("rope_cos", torch::cos(angles));
        m_ropeSin = register_buffer("rope_sin", torch::sin(angles));
    }
    m_causalMask = register_buffer("causal_mask", torch::ones({T, T}, torch::kBool).tril());
    m_drop = register_module("drop", torch::nn::Dropout(o.dropout));
    m_blocks = register_module("blocks", torch::nn::ModuleList());
    for (int i = 0; i < o.nLayer; ++i) m_blocks->push_back(GptBlock(o));
    m_lnf = register_module("lnf", torch::nn::LayerNorm(torch::nn::LayerNormOptions({o.dModel})));
    if (!o.tieEmbeddings) {
        m_head = register_module("head", torch::nn::Linear(torch::nn::LinearOptions(o.dModel, o.vocabSize).bias(false)));
        torch::nn::init::normal_(m_head->weight, 0.0, 0.02);
    }
}

torch::Tensor GptImpl::forward(const torch::Tensor& tokens)
{
    const auto T = tokens.size(1);
    TORCH_CHECK(T <= m_options.maxLen, "sequence of ", T, " tokens is longer than the model's ", m_options.maxLen);
    auto x = m_wte(tokens);
    if (m_wpe) {
        x = x + m_wpe(torch::arange(T, tokens.options()));
    } else if (m_sinusoid.defined()) {
        x = x + m_sinusoid.narrow(0, 0, T);
    }
    x = m_drop(x);
    const AttentionTables tables{m_causalMask, m_ropeCos, m_ropeSin};
    for (const auto& module : *m_blocks) {
        auto* block = module->as<GptBlockImpl>();
        if (m_options.activationCheckpointing && is_training() && torch::GradMode::is_enabled()) {
            // With a frozen embedding (LoRA) the block input needs no grad, and a
            // checkpointed block would then never run backward: its adapters would
            // get no gradient. Make the input a grad-requiring leaf instead.
            if (!x.requires_grad()) x = x.detach().requires_grad_(true);
            x = BlockCheckpoint::apply(x, block, &tables);
        } else {
            x = block->forward(x, tables);
        }
    }
    x = m_lnf(x);
    return m_head ? m_head(x) : torch::matmul(x, m_wte->weight.t());
}

void GptImpl::freezeBaseForLora()
{
    if (m_options.loraRank <= 0) return;
    for (auto& item : named_parameters()) {
        const bool adapter = item.key().find("lora_") != std::string::npos;
        item.value().set_requires_grad(adapter);
    }
}

} // namespace tb
