#include "train/Layers.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "train/TorchCompat.h"

namespace tb {
namespace {

// Activation checkpointing for one block: forward runs without saving
// activations; backward recomputes the block with grad enabled and
// back-propagates through the recomputation (the reentrant scheme of
// torch.utils.checkpoint). Autocast and RNG state are replayed so the
// recomputation matches the original forward exactly, dropout masks included.
struct BlockCheckpoint : public torch::autograd::Function<BlockCheckpoint> {
    static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor x, DecoderBlock* block,
                                 const AttentionTables* tables)
    {
        ctx->save_for_backward({x});
        ctx->saved_data["block"] = reinterpret_cast<std::int64_t>(block);
        ctx->saved_data["mask"] = tables->maskedOut;
        ctx->saved_data["cos"] = tables->ropeCos;
        ctx->saved_data["sin"] = tables->ropeSin;
        ctx->saved_data["fused"] = tables->fused;
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
        auto* block = reinterpret_cast<DecoderBlock*>(ctx->saved_data["block"].toInt());
        const auto tensorOrNone = [&](const char* key) {
            const auto& v = ctx->saved_data[key];
            return v.isTensor() ? v.toTensor() : torch::Tensor();
        };
        AttentionTables tables{tensorOrNone("mask"), tensorOrNone("cos"), tensorOrNone("sin"),
                               ctx->saved_data["fused"].toBool()};
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

// y = x W^T + b with W dequantized from a layer's quantized base: in
// forward for the product, and again in backward for the input's gradient
// (W is frozen: no weight gradient, and nothing but the layer is kept for
// backward). W comes in the dtype the product runs in: autocast's under
// autocast, else the input's (the model's dtype). The bias, frozen with the
// base, is read from the layer (LibTorch 1.13's Function takes no undefined input).
struct DequantizedLinear : public torch::autograd::Function<DequantizedLinear> {
    static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor x, const LoraLinearImpl* layer)
    {
        ctx->saved_data["layer"] = reinterpret_cast<std::int64_t>(layer);
        const auto dev = x.device().type();
        const auto dtype = compat::autocastEnabled(dev) ? compat::autocastDtype(dev) : x.scalar_type();
        // The casts autocast would make, made here with it off: autocast
        // caches its cast of a leaf input that requires grad, and this
        // forward runs without grad, so the layer's adapter, reading the
        // cached cast, lost its gradient to the input (tst_quantize).
        const c10::impl::ExcludeDispatchKeyGuard noAutocast(
            c10::DispatchKeySet({c10::DispatchKey::AutocastCPU, c10::DispatchKey::AutocastCUDA}));
        const auto bias = layer->bias.defined() ? layer->bias.to(dtype) : layer->bias;
        return at::linear(x.to(dtype), layer->quantizedBase().dequantize(dtype), bias);
    }

    static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                   torch::autograd::variable_list gradOutputs)
    {
        const auto* layer = reinterpret_cast<const LoraLinearImpl*>(ctx->saved_data["layer"].toInt());
        const auto& g = gradOutputs[0];
        return {at::matmul(g, layer->quantizedBase().dequantize(g.scalar_type())), torch::Tensor()};
    }
};

} // namespace

namespace {
thread_local std::optional<at::ScalarType> tWeightsFromFile;
}

WeightsFromFile::WeightsFromFile(at::ScalarType dtype) : m_previous(tWeightsFromFile) { tWeightsFromFile = dtype; }

WeightsFromFile::~WeightsFromFile() { tWeightsFromFile = m_previous; }

std::optional<at::ScalarType> WeightsFromFile::active() { return tWeightsFromFile; }

torch::Tensor dropoutIf(const torch::Tensor& x, double p, bool training)
{
    return p > 0.0 && training ? torch::dropout(x, p, true) : x;
}

torch::nn::Embedding makeEmbedding(int num, int dim, double std)
{
    if (const auto dtype = WeightsFromFile::active()) {
        return torch::nn::Embedding(
            torch::nn::EmbeddingOptions(num, dim)._weight(torch::empty({num, dim}, torch::TensorOptions().dtype(*dtype))));
    }
    // The same draws as before this helper: the table's default N(0, 1), then N(0, std).
    torch::nn::Embedding table(num, dim);
    torch::NoGradGuard noGrad;
    torch::nn::init::normal_(table->weight, 0.0, std);
    return table;
}

double tokenEmbeddingStd(const ModelOptions& o)
{
    // With RoPE only the token table feeds the residual stream (position lives
    // in q.k), and each block, drawn U(+-1/sqrt(in)), adds outputs of RMS
    // 0.22-0.38 to it (measured on the 2-digit addition Llama's initial
    // weights, seeds 1, 4 and 11; the table's own RMS is 0.02). At N(0, 0.02) a token's own identity is a small part of the
    // stream after the first block, and some initialisations sit on the
    // addition task's 10% plateau for hundreds of steps. That is the
    // initialisation, not the arithmetic: given Trainbench's own initial Llama
    // weights and batches, the plain-PyTorch reference stalled on the same
    // seed (11) and was late on the same ones (5, 12). With those
    // initialisations' embedding tables scaled, held-out exact match >= 80% by
    // step 300 of 500 (2-digit addition, lr 3e-3, seeds 1-16): std 0.02 13 of
    // 16, 0.1 16 of 16, 0.2 16, 0.5 12 (docs/learning.md). 1/sqrt(d_model)
    // is 0.088 at the tested width and 0.016 at Llama 2 7B's, near the
    // published 0.02. A tied table is also the output head and its scale sets
    // the initial logits', and an added position table (learned, sinusoidal)
    // is tuned against 0.02: both keep 0.02.
    const bool rope = o.type == "llama" || o.positionalEncoding == "rope";
    if (o.tieEmbeddings || !rope) return 0.02;
    return 1.0 / std::sqrt(static_cast<double>(o.dModel));
}

LoraLinearImpl::LoraLinearImpl(int in, int out, int rank, double alpha, bool withBias, LinearInit init)
    : m_rank(rank), m_scale(rank > 0 ? alpha / rank : 0.0)
{
    const auto fromFile = WeightsFromFile::active();
    const auto options = fromFile ? torch::TensorOptions().dtype(*fromFile) : torch::TensorOptions();
    weight = register_parameter("weight", torch::empty({out, in}, options));
    if (withBias) bias = register_parameter("bias", torch::empty({out}, options));
    if (fromFile) {
        // left for the caller to fill from the file
    } else if (init == LinearInit::Uniform) {
        const double bound = 1.0 / std::sqrt(static_cast<double>(in));
        torch::nn::init::uniform_(weight, -bound, bound);
        if (withBias) torch::nn::init::uniform_(bias, -bound, bound);
    } else if (init == LinearInit::Zero) {
        torch::nn::init::zeros_(weight);
        if (withBias) torch::nn::init::zeros_(bias);
    } else {
        torch::nn::init::normal_(weight, 0.0, 0.02);
        if (withBias) torch::nn::init::zeros_(bias);
    }
    if (rank > 0) {
        // A small random, B = 0 (LoRA paper, section 4.1).
        loraA = register_parameter("lora_A", torch::randn({rank, in}) * (1.0 / std::sqrt(static_cast<double>(in))));
        loraB = register_parameter("lora_B", torch::zeros({out, rank}));
    }
}

std::shared_ptr<LoraLinearImpl> LoraLinearImpl::conv1d(int in, int out, int rank, double alpha)
{
    auto layer = std::make_shared<LoraLinearImpl>(in, out, rank, alpha, true, LinearInit::Normal);
    torch::NoGradGuard noGrad;
    layer->weight.set_data(layer->weight.detach().t().contiguous()); // [in, out]
    layer->m_transposed = true;
    return layer;
}

void LoraLinearImpl::quantizeBase(const QuantizeSpec& spec, const torch::Tensor& source)
{
    TORCH_CHECK(!quantized(), "the layer's base is quantized already");
    torch::NoGradGuard noGrad;
    const auto& stored = source.defined() ? source : weight;
    // [out, in] whatever the layer's own layout (bitsandbytes stores a Conv1D's transposed too).
    setQuantizedBase(quantizeWeight(m_transposed ? stored.t() : stored, spec));
}

std::int64_t LoraLinearImpl::outFeatures() const
{
    if (quantized()) return m_quantShape.rows;
    return m_transposed ? weight.size(1) : weight.size(0);
}

std::int64_t LoraLinearImpl::inFeatures() const
{
    if (quantized()) return m_quantShape.cols;
    return m_transposed ? weight.size(0) : weight.size(1);
}

void LoraLinearImpl::setQuantizedBase(QuantizedWeight q)
{
    TORCH_CHECK(!quantized(), "the layer's base is quantized already");
    const auto out = outFeatures(), in = inFeatures();
    TORCH_CHECK(q.rows == out && q.cols == in, "a quantized base of ", q.rows, " x ", q.cols, " for a layer of ", out, " x ", in);
    const auto problem = q.problem();
    TORCH_CHECK(problem.empty(), "the quantized base of a ", out, " x ", in, " layer is damaged: ", problem);
    q = q.to(weight.device());
    m_quantFormat = q.format;
    m_qData = register_buffer("weight_data", q.data);
    m_qAbsmax = register_buffer("weight_absmax", q.absmax);
    if (q.quantMap.defined()) m_qMap = register_buffer("weight_quant_map", q.quantMap);
    if (q.nested) {
        m_qNestedAbsmax = register_buffer("weight_nested_absmax", q.nestedAbsmax);
        m_qNestedMap = register_buffer("weight_nested_quant_map", q.nestedQuantMap);
    }
    q.data = q.absmax = q.quantMap = q.nestedAbsmax = q.nestedQuantMap = torch::Tensor();
    m_quantShape = q;
    // (A Conv1D keeps m_transposed: its file layout. The quantized form is [out, in] whatever the layout.)
    parameters_.erase("weight");
    weight = torch::Tensor();
}

QuantizedWeight LoraLinearImpl::quantizedBase() const
{
    auto q = m_quantShape;
    q.data = m_qData;
    q.absmax = m_qAbsmax;
    q.quantMap = m_qMap;
    q.nestedAbsmax = m_qNestedAbsmax;
    q.nestedQuantMap = m_qNestedMap;
    return q;
}

void LoraLinearImpl::to(torch::Device device, torch::Dtype dtype, bool nonBlocking)
{
    keepQuantizedDtypes([&] { Module::to(device, dtype, nonBlocking); });
}

void LoraLinearImpl::to(torch::Dtype dtype, bool nonBlocking)
{
    keepQuantizedDtypes([&] { Module::to(dtype, nonBlocking); });
}

void LoraLinearImpl::to(torch::Device device, bool nonBlocking) { Module::to(device, nonBlocking); }

void LoraLinearImpl::keepQuantizedDtypes(const std::function<void()>& move)
{
    // LibTorch's Module::to(dtype) converts every buffer, integer ones too:
    // the packed codes and float32 scales are put back in their own dtypes on
    // their new device.
    std::vector<std::pair<torch::Tensor*, torch::Tensor>> kept;
    for (auto* t : {&m_qData, &m_qAbsmax, &m_qMap, &m_qNestedAbsmax, &m_qNestedMap}) {
        if (t->defined()) kept.emplace_back(t, t->detach());
    }
    move();
    torch::NoGradGuard noGrad;
    for (auto& [t, before] : kept) t->set_data(before.to(t->device()));
}

torch::Tensor LoraLinearImpl::baseWeight(at::ScalarType dtype) const
{
    if (!quantized()) return weight.to(dtype);
    const auto w = quantizedBase().dequantize(dtype);
    return m_transposed ? w.t().contiguous() : w;
}

torch::Tensor LoraLinearImpl::forward(const torch::Tensor& x)
{
    if (quantized()) {
        // (DequantizedLinear gives the bias no gradient: it trains with the base, which a quantized base does not.)
        TORCH_CHECK(!torch::GradMode::is_enabled() || !bias.defined() || !bias.requires_grad(),
                    "a quantized layer's bias is frozen with its base (only LoRA adapters train on it)");
        auto y = DequantizedLinear::apply(x, this);
        if (m_rank > 0) y = y + at::linear(at::linear(adapterInput(x), loraA), loraB) * m_scale;
        return y;
    }
    if (m_transposed) {
        // Conv1D: addmm over [B*T, in], as transformers' Conv1D computes it.
        auto shape = x.sizes().vec();
        shape.back() = weight.size(1);
        auto y = at::addmm(bias, x.reshape({-1, x.size(-1)}), weight).view(shape);
        if (m_rank > 0) y = y + at::linear(at::linear(adapterInput(x), loraA), loraB) * m_scale;
        return y;
    }
    // at::linear, not torch::nn::functional::linear: for a 3-D input the
    // latter runs matmul then add_, the former one fused addmm over [B*T, in].
    auto y = at::linear(x, weight, bias);
    if (m_rank > 0) y = y + at::linear(at::linear(adapterInput(x), loraA), loraB) * m_scale;
    return y;
}

torch::Tensor LoraLinearImpl::adapterInput(const torch::Tensor& x)
{
    return dropoutIf(x, m_adapterDropout, is_training());
}

std::vector<std::pair<std::string, LoraLinearImpl*>> quantizableLinears(torch::nn::Module& model)
{
    std::vector<std::pair<std::string, LoraLinearImpl*>> out;
    for (const auto& m : model.named_modules()) {
        auto* linear = dynamic_cast<LoraLinearImpl*>(m.value().get());
        if (linear && m.key().find('.') != std::string::npos) out.emplace_back(m.key(), linear);
    }
    return out;
}

void quantizeModelBase(torch::nn::Module& model, const QuantizeSpec& spec)
{
    if (!spec.active()) return;
    for (auto& [name, linear] : quantizableLinears(model)) {
        if (!linear->quantized()) linear->quantizeBase(spec);
    }
}

namespace {
const char* const kQuantParts[] = {".weight_data", ".weight_absmax", ".weight_quant_map", ".weight_nested_absmax",
                                   ".weight_nested_quant_map", ".weight_quant_state"};
}

std::map<std::string, torch::Tensor> quantizedBaseTensors(torch::nn::Module& model)
{
    std::map<std::string, torch::Tensor> out;
    for (auto& [name, linear] : quantizableLinears(model)) {
        if (!linear->quantized()) continue;
        const auto q = linear->quantizedBase();
        std::int32_t offsetBits = 0;
        std::memcpy(&offsetBits, &q.nestedOffset, sizeof offsetBits);
        out[name + ".weight_quant_state"] = torch::tensor(std::vector<std::int64_t>{static_cast<std::int64_t>(q.format), q.rows, q.cols,
                                                                                    q.blockSize, q.nested ? 1 : 0, q.nestedBlockSize, offsetBits});
        const std::pair<const char*, const torch::Tensor*> parts[] = {{".weight_data", &q.data},
                                                                      {".weight_absmax", &q.absmax},
                                                                      {".weight_quant_map", &q.quantMap},
                                                                      {".weight_nested_absmax", &q.nestedAbsmax},
                                                                      {".weight_nested_quant_map", &q.nestedQuantMap}};
        for (const auto& [part, t] : parts) {
            if (t->defined()) out[name + part] = t->detach().cpu();
        }
    }
    return out;
}

bool isQuantizedBaseName(const std::string& name)
{
    for (const char* part : kQuantParts) {
        const auto n = std::strlen(part);
        if (name.size() > n && name.compare(name.size() - n, n, part) == 0) return true;
    }
    return false;
}

int loadQuantizedBase(torch::nn::Module& model, const std::map<std::string, torch::Tensor>& tensors)
{
    int loaded = 0;
    for (auto& [name, linear] : quantizableLinears(model)) {
        const auto state = tensors.find(name + ".weight_quant_state");
        if (state == tensors.end() || linear->quantized()) continue;
        const auto s = state->second.to(torch::kLong).contiguous();
        TORCH_CHECK(s.numel() == 7, name, ".weight_quant_state holds ", s.numel(), " numbers, not 7");
        const auto* v = s.data_ptr<std::int64_t>();
        QuantizedWeight q;
        TORCH_CHECK(v[0] == static_cast<std::int64_t>(QuantFormat::Nf4) || v[0] == static_cast<std::int64_t>(QuantFormat::Int8),
                    name, ": unknown quantized format ", v[0]);
        q.format = static_cast<QuantFormat>(v[0]);
        q.rows = v[1];
        q.cols = v[2];
        q.blockSize = v[3];
        q.nested = v[4] != 0;
        q.nestedBlockSize = v[5];
        const auto bits = static_cast<std::int32_t>(v[6]);
        std::memcpy(&q.nestedOffset, &bits, sizeof bits);
        const auto part = [&](const char* suffix, bool needed) {
            const auto it = tensors.find(name + suffix);
            TORCH_CHECK(it != tensors.end() || !needed, "the quantized base of ", name, " lacks ", name, suffix);
            return it == tensors.end() ? torch::Tensor() : it->second;
        };
        q.data = part(".weight_data", true);
        q.absmax = part(".weight_absmax", true);
        q.quantMap = part(".weight_quant_map", q.format == QuantFormat::Nf4);
        q.nestedAbsmax = part(".weight_nested_absmax", q.nested);
        q.nestedQuantMap = part(".weight_nested_quant_map", q.nested);
        linear->setQuantizedBase(std::move(q));
        ++loaded;
    }
    return loaded;
}

void CausalLmImpl::freezeBaseForLora()
{
    if (m_options.loraRank <= 0) return;
    for (auto& item : named_parameters()) {
        item.value().set_requires_grad(isAdapterName(item.key()));
    }
}

void CausalLmImpl::registerLocalRopeTables(int headDim, double base)
{
    const auto inv = torch::pow(base, -torch::arange(0, headDim, 2, torch::kDouble) / headDim);
    const auto angles = torch::outer(torch::arange(m_options.maxLen, torch::kDouble), inv);
    m_localRopeCos = register_buffer("rope_local_cos", torch::cos(angles).to(torch::kFloat));
    m_localRopeSin = register_buffer("rope_local_sin", torch::sin(angles).to(torch::kFloat));
}

void CausalLmImpl::registerRopeTables(int headDim, double base)
{
    auto inv = torch::pow(base, -torch::arange(0, headDim, 2, torch::kDouble) / headDim);
    const auto& o = m_options;
    if (o.ropeFactor > 0.0) {
        // rope_scaling "llama3" (Llama 3.1): wavelengths longer than
        // original_max / low_freq_factor are stretched by `factor`, shorter than
        // original_max / high_freq_factor kept, and those between blended
        // linearly in original_max / wavelength.
        const double old = o.ropeOriginalMaxPositions, low = o.ropeLowFreqFactor, high = o.ropeHighFreqFactor;
        const auto wavelen = 2.0 * M_PI / inv;
        auto scaled = torch::where(wavelen > old / low, inv / o.ropeFactor, inv);
        const auto smooth = (old / wavelen - low) / (high - low);
        const auto blended = (1.0 - smooth) * scaled / o.ropeFactor + smooth * scaled;
        const auto medium = (wavelen >= old / high).logical_and(wavelen <= old / low);
        inv = torch::where(medium, blended, scaled);
    }
    auto angles = torch::outer(torch::arange(m_options.maxLen, torch::kDouble), inv); // [T, headDim/2]
    m_ropeCos = register_buffer("rope_cos", torch::cos(angles).to(torch::kFloat));
    m_ropeSin = register_buffer("rope_sin", torch::sin(angles).to(torch::kFloat));
}

AttentionTables CausalLmImpl::tablesFor(std::int64_t T, const torch::Tensor& like) const
{
    return tablesFor(T, like, m_options.slidingLayers.empty());
}

AttentionTables CausalLmImpl::tablesFor(std::int64_t T, const torch::Tensor& like, bool slidingLayer) const
{
    AttentionTables t;
    t.fused = m_options.attention == "sdpa";
    t.scale = m_options.queryScale;
    // Built per forward pass for T positions: T^2 booleans, not a max_len^2 buffer.
    // A sliding window (Mistral, Gemma 3's sliding layers) needs the explicit mask once T exceeds it.
    const bool windowed = slidingLayer && m_options.slidingWindow > 0 && T > m_options.slidingWindow;
    if (windowed) t.fused = false;
    if (!t.fused) {
        t.maskedOut = torch::ones({T, T}, like.options().dtype(torch::kBool)).triu(1);
        // Query i sees keys i - window + 1 .. i: the window most recent positions, itself included.
        if (windowed) t.maskedOut = t.maskedOut.logical_or(torch::ones({T, T}, t.maskedOut.options()).tril(-m_options.slidingWindow));
    }
    if (slidingLayer && m_localRopeCos.defined()) {
        t.ropeCos = m_localRopeCos.narrow(0, 0, T);
        t.ropeSin = m_localRopeSin.narrow(0, 0, T);
    } else if (m_ropeCos.defined()) {
        t.ropeCos = m_ropeCos.narrow(0, 0, T);
        t.ropeSin = m_ropeSin.narrow(0, 0, T);
    }
    return t;
}

torch::Tensor CausalLmImpl::runBlocks(torch::Tensor x, torch::nn::ModuleList& blocks, const AttentionTables& tables)
{
    return runBlocks(x, blocks, std::vector<const AttentionTables*>(blocks->size(), &tables));
}

torch::Tensor CausalLmImpl::runBlocks(torch::Tensor x, torch::nn::ModuleList& blocks, const std::vector<const AttentionTables*>& perBlock)
{
    const bool checkpoint = m_options.activationCheckpointing && is_training() && torch::GradMode::is_enabled();
    for (std::size_t i = 0; i < blocks->size(); ++i) {
        auto* block = (*blocks)[i]->as<DecoderBlock>();
        const auto& tables = *perBlock[i];
        if (checkpoint) {
            // With a frozen embedding (LoRA) the block input needs no grad, and a
            // checkpointed block would then never run backward: its adapters would
            // get no gradient. Make the input a grad-requiring leaf instead.
            if (!x.requires_grad()) x = x.detach().requires_grad_(true);
            x = BlockCheckpoint::apply(x, block, &tables);
        } else {
            x = block->forward(x, tables);
        }
    }
    return x;
}

torch::Tensor applyRope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin)
{
    const auto half = x.size(-1) / 2;
    const auto x1 = x.narrow(-1, 0, half);
    const auto x2 = x.narrow(-1, half, half);
    const auto c = cos.to(x.scalar_type()), s = sin.to(x.scalar_type());
    return torch::cat({x1 * c - x2 * s, x2 * c + x1 * s}, -1);
}

bool fusedAttentionAvailable() { return compat::kHasFusedAttention; }

torch::Tensor causalAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                              const AttentionTables& tables, double dropout, bool training, bool softmaxFp32)
{
    auto keys = k, values = v;
    const auto groups = q.size(1) / k.size(1);
    if (groups > 1) {
        // [B, KV, T, D] -> [B, KV * groups, T, D], each k/v head serving `groups` query heads.
        const auto B = k.size(0), KV = k.size(1), T = k.size(2), D = k.size(3);
        keys = k.unsqueeze(2).expand({B, KV, groups, T, D}).reshape({B, KV * groups, T, D});
        values = v.unsqueeze(2).expand({B, KV, groups, T, D}).reshape({B, KV * groups, T, D});
    }
    const double usual = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
    const double scale = tables.scale > 0.0 ? tables.scale : usual;
    if (tables.fused) {
        // SDPA scales by 1/sqrt(head size): another scale goes onto the queries first.
        const auto queries = scale == usual ? q : q * (scale / usual);
        return compat::fusedCausalAttention(queries, keys, values, training ? dropout : 0.0);
    }
    auto att = torch::matmul(q, keys.transpose(-2, -1)) * scale;
    att = att.masked_fill(tables.maskedOut, -std::numeric_limits<float>::infinity());
    att = softmaxFp32 ? torch::softmax(att, -1, torch::kFloat) : torch::softmax(att, -1);
    if (dropout > 0.0 && training) att = torch::dropout(att, dropout, true);
    return torch::matmul(att.to(values.scalar_type()), values);
}

} // namespace tb
