#include "train/Trainer.h"
#include "common/Errors.h"
#include "config/LearningRate.h"
#include "train/Bf16AdamW.h"
#include "train/HfModel.h"
#include "train/TrainerImpl.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <optional>
#include <sstream>
#include <thread>

#include <dlfcn.h>

#include "common/Files.h"
#include "gpu/Discovery.h"
#include "memory/MemoryProbe.h"
#include "train/Datasets.h"
#include "train/HostHeap.h"
#include "train/LossScaler.h"
#include "train/ModelIo.h"
#include "train/ScriptedModel.h"
#include "train/Threads.h"
#include "train/TorchCompat.h"
#include "train/TrainStep.h"

namespace tb {
namespace {



// The embedding tables: the built-in GPT's wte/wpe and Llama's
// model.embed_tokens; in a Hugging Face folder also GPT-2's transformer.wte/wpe
// and GPT-NeoX's gpt_neox.embed_in (its untied embed_out is a head, decayed
// like lm_head). A TorchScript model's names are its own and keep the exact match.
bool isEmbedding(const std::string& name, bool hfFolder)
{
    if (name == "wte.weight" || name == "wpe.weight" || name == "model.embed_tokens.weight") return true;
    return hfFolder
        && (name == "transformer.wte.weight" || name == "transformer.wpe.weight" || name == "gpt_neox.embed_in.weight");
}


int cudaIndexOf(const std::string& device)
{
    const auto colon = device.find(':');
    return colon == std::string::npos ? 0 : std::stoi(device.substr(colon + 1));
}

} // namespace

std::string detail::fixed(double v, int digits)
{
    std::ostringstream out;
    out << std::fixed << std::setprecision(digits) << v;
    return out.str();
}

std::string torchVersion() { return TORCH_VERSION; }

bool cudaUsable() { return torch::cuda::is_available(); }

std::string resolveDevice(const std::string& requested)
{
    if (requested == "cpu") return "cpu";
    const bool cuda = torch::cuda::is_available();
    if (requested == "auto") return cuda ? "cuda:0" : "cpu";
    if (requested != "cuda" && requested.rfind("cuda:", 0) != 0) {
        throw InputError("device \"" + requested + "\" is not a device name; use \"auto\", \"cpu\", \"cuda\" or \"cuda:N\"");
    }
    if (!cuda) {
        throw InputError("device \"" + requested
                         + "\" is not usable here: LibTorch sees no CUDA device (this LibTorch may be built without "
                           "CUDA, as Debian's 1.13 is, or there is no NVIDIA driver or GPU). Use \"cpu\" or \"auto\"");
    }
    const int index = requested == "cuda" ? 0 : cudaIndexOf(requested);
    const int count = static_cast<int>(torch::cuda::device_count());
    if (index >= count) {
        throw InputError("device \"" + requested + "\" does not exist: LibTorch sees " + std::to_string(count)
                         + " CUDA device(s), cuda:0 to cuda:" + std::to_string(count - 1));
    }
    return "cuda:" + std::to_string(index);
}

// The device's compute capability: nullopt on the CPU; on a GPU the driver's
// answer (unknown when it gives none).
std::optional<ComputeCapability> deviceCapability(const std::string& device)
{
    if (device == "cpu") return std::nullopt;
    // The driver API answers without creating a CUDA context.
    const auto driver = makeNvidiaDriver();
    const int index = cudaIndexOf(device);
    ComputeCapability found;
    for (const auto& d : driver->devices()) {
        if (d.index == index) found = d.cc;
    }
    return found;
}

std::string resolvePrecision(const std::string& requested, std::optional<ComputeCapability> cc)
{
    // Decided before any model is built (docs/known-failures.md: bf16 weights on a 7.5 GPU).
    const PrecisionDecision decision = decidePrecision(requested, cc);
    if (!decision.error.empty()) throw InputError(decision.error);
    return decision.precision;
}

TorchCudaInfo torchCudaInfo()
{
    TorchCudaInfo info;
#ifdef TB_TORCH_CUDA
    info.builtWithCuda = true;
#endif
    info.available = torch::cuda::is_available();
    info.deviceCount = info.available ? static_cast<int>(torch::cuda::device_count()) : 0;
    // The CUDA runtime LibTorch loaded, if any (a PyTorch wheel ships libcudart).
    using RuntimeVersion = int (*)(int*);
    if (auto fn = reinterpret_cast<RuntimeVersion>(dlsym(RTLD_DEFAULT, "cudaRuntimeGetVersion"))) fn(&info.cudaRuntimeVersion);
    return info;
}


std::string planningOnlyFieldsProblem(const RunConfig& config)
{
    // A LoRA base in half precision is trained (the frozen parameters kept
    // in it); without LoRA the weights are the trainable ones, and fp32
    // master weights (or bf16-pure) are what Trainbench trains.
    const bool weights = config.train.weightsDtype != "fp32" && config.lora.rank <= 0, offload = config.train.offload != "none";
    if (!weights && !offload) return halfBaseProblem(config, config.train.precision);
    const std::string both = weights && offload ? " and " : "";
    const std::string set = (weights ? "train.weights_dtype \"" + config.train.weightsDtype + "\"" : std::string())
        + both + (offload ? "train.offload \"" + config.train.offload + "\"" : std::string());
    return set + (weights && offload ? " describe" : " describes")
        + " a setup to plan (estimate, the Memory planner and preflight plan it for built-in and Hugging Face "
          "models): Trainbench keeps the weights on the device, and trains fp32 master weights (or bf16-pure) "
          "unless only LoRA adapters train, so a run, measure or derived plan of this config would be another "
          "setup. Set "
        + (weights ? "train.weights_dtype to \"fp32\"" : std::string()) + both
        + (offload ? "train.offload to \"none\"" : std::string()) + " to run it"
        + (weights ? " (train.precision \"bf16-pure\" trains the weights in bf16; with lora.rank the frozen base "
                     "is kept in weights_dtype)"
                   : std::string());
}

Trainer::Trainer(const RunConfig& config, const TrainerOptions& options) : m(std::make_unique<Impl>())
{
    if (auto issues = validateConfig(config, false); !issues.empty()) throw ConfigError("config", std::move(issues));
    // Planning fields: a step run with them ignored would be measured or
    // traced as another setup than the one planned.
    if (auto problem = planningOnlyFieldsProblem(config); !problem.empty()) throw InputError(problem);
    m->config = config;
    m->options = options;
    int threads = config.train.threads;
    if (threads == 0 && options.dist.active() && options.dist.localWorldSize > 1) {
        // The ranks on this machine share its cores.
        threads = std::max(1, static_cast<int>(std::max(1u, std::thread::hardware_concurrency())) / options.dist.localWorldSize);
    }
    applyThreadCount(threads);
    if (options.dist.active() && (config.device == "cuda" || (config.device == "auto" && cudaUsable()))) {
        // One GPU per process: local rank i trains on GPU i.
        m->device = resolveDevice("cuda:" + std::to_string(options.dist.localRank));
    } else {
        m->device = resolveDevice(config.device);
    }
    m->capability = deviceCapability(m->device);
    m->precision = resolvePrecision(config.train.precision, m->capability);
    if (auto problem = halfBaseProblem(config, m->precision); !problem.empty()) throw InputError(problem);
    // LoRA over a base loaded in half precision (as PEFT loads a published
    // model): the frozen parameters are kept in it, the adapters in fp32.
    const bool halfBase = config.lora.rank > 0 && config.train.weightsDtype != "fp32" && m->precision != "bf16-pure";
    const auto baseDtype = config.train.weightsDtype == "bf16" ? torch::kBFloat16 : torch::kHalf;
    m->torchDevice = torch::Device(m->device);
    if (options.measureMemory && m->device == "cpu") MemoryProbe::installCpuCounter();

    if (config.model.attention == "sdpa" && !fusedAttentionAvailable()) {
        throw InputError("model.attention: \"sdpa\" (scaled_dot_product_attention) needs LibTorch 2.0 or newer; this "
                         "is LibTorch " + torchVersion() + ". Use \"eager\"");
    }

    torch::manual_seed(config.train.seed);
    const bool probe = options.probeModel != nullptr;
    m->data = probe && options.probeIdBytes > 0
        ? TokenDataset::synthetic(options.probeModel->vocabSize, effectiveSeqLen(config), options.probeIdBytes == 4,
                                  options.probeMask)
        : makeDataset(config, options.data);
    auto modelOptions = probe ? *options.probeModel : modelOptionsFor(config, *m->data);
    if (options.slidingWindow > 0) modelOptions.slidingWindow = options.slidingWindow;
    if (config.model.type == "hf" && !probe) {
        // The folder (or the checkpoint resumed) fills every base weight: build
        // them in the dtype they train in, without random draws.
        const WeightsFromFile fromFile(m->precision == "bf16-pure" ? torch::kBFloat16 : halfBase ? baseDtype : torch::kFloat);
        m->model = makeModel(modelOptions);
    } else {
        m->model = makeModel(modelOptions);
    }
    // A Hugging Face folder brings its weights (a resumed run's come from its checkpoint).
    // QLoRA: the base's block linears quantized as the folder is read (or,
    // for a built-in model, from its initialisation). Checkpoints hold the
    // quantized base as trained: a resumed run, export and sample read it
    // there (loadModelWeights), and the other parameters too.
    const QuantizeSpec quantize{quantFormatOf(config.model.quantize == "none" ? "" : config.model.quantize),
                                config.model.doubleQuant};
    const std::string initFrom = !options.initFrom.empty() ? options.initFrom : config.train.initFrom;
    if (quantize.active() && !initFrom.empty() && !std::filesystem::exists(std::filesystem::path(initFrom) / "adapter_config.json")) {
        throw InputError("train.init_from: with model.quantize \"" + config.model.quantize + "\" only a PEFT adapter folder "
                         "can be loaded on the quantized base (" + initFrom + " holds base weights); quantize that model "
                         "itself: give its folder as model.path");
    }
    // A resumed QLoRA run takes its quantized base from its checkpoint (a
    // 7B folder took about 40 s to quantize again); one written before
    // checkpoints held it has the folder quantized again.
    bool baseFromCheckpoint = false;
    if (!options.resumeFrom.empty() && quantize.active() && !probe) {
        m->openCheckpoint(options.resumeFrom);
        baseFromCheckpoint = m->loadCheckpointQuantizedBase();
    }
    if (config.model.type == "hf" && (options.resumeFrom.empty() || (quantize.active() && !baseFromCheckpoint)) && !probe) {
        loadHfFolderWeights(*m->model, resolvedModelPath(config), "config.json", quantize);
    }
    if (!initFrom.empty() && options.resumeFrom.empty() && !probe) {
        // Model weights only; the optimizer, schedule and data order start afresh.
        if (config.model.type != "hf" || !loadHfInitFrom(*m->model, initFrom)) {
            loadModelWeights(*m->model, readModelWeights(initFrom), initFrom);
        }
    }
    quantizeModelBase(*m->model, quantize);
    m->prepareCheckpointDir();
    m->model->freezeBaseForLora();
    if (halfBase) {
        torch::NoGradGuard noGrad;
        for (auto& p : m->model->parameters()) {
            if (!p.requires_grad() && p.is_floating_point()) p.set_data(p.detach().to(baseDtype));
        }
    }
    // Pure bf16: weights (so gradients and AdamW's state) in bf16, no autocast; the loss is fp32.
    if (m->precision == "bf16-pure") m->model->to(torch::kBFloat16);
    if (config.model.type == "torchscript") {
        // Tensor by tensor: a meta tensor stays where it is, and the audit below names it.
        moveModel(*m->model, m->torchDevice);
    } else {
        m->model->to(m->torchDevice);
    }
    m->model->train();
    for (auto& e : auditModel(*m->model, m->device, true, "none")) {
        if (!e.ok) m->flagged.push_back(std::move(e));
    }
    // AdamW decays weight matrices only: not biases or norm gains, and not
    // embedding tables unless optim.decay_embeddings says so.
    std::vector<torch::Tensor> decay, noDecay;
    for (auto& p : m->model->named_parameters()) {
        if (!p.value().requires_grad()) continue;
        m->trainable.push_back(p.value());
        const bool matrix = p.value().dim() >= 2 && (config.optim.decayEmbeddings || !isEmbedding(p.key(), config.model.type == "hf"));
        (matrix ? decay : noDecay).push_back(p.value());
    }
    const auto& o = config.optim;
    const auto groups = [&](auto defaults) {
        std::vector<torch::optim::OptimizerParamGroup> out;
        if (!decay.empty()) out.emplace_back(decay, std::make_unique<decltype(defaults)>(defaults));
        defaults.weight_decay(0.0);
        if (!noDecay.empty()) out.emplace_back(noDecay, std::make_unique<decltype(defaults)>(defaults));
        return out;
    };
    if (o.optimizer == "sgd") {
        const auto defaults = torch::optim::SGDOptions(o.lr).momentum(o.momentum).weight_decay(o.weightDecay);
        m->optimizer = std::make_unique<torch::optim::SGD>(groups(defaults), defaults);
    } else {
        const auto defaults =
            torch::optim::AdamWOptions(o.lr).betas({o.betas[0], o.betas[1]}).weight_decay(o.weightDecay);
        if (m->precision == "bf16-pure") {
            m->optimizer = std::make_unique<Bf16AdamW>(groups(defaults), defaults, config.train.seed * 0xd1b54a32d192ed03ULL + 7);
        } else {
            m->optimizer = std::make_unique<torch::optim::AdamW>(groups(defaults), defaults);
        }
    }
    m->dataGen = at::make_generator<at::CPUGeneratorImpl>(config.train.seed * 0x9e3779b97f4a7c15ULL + 17);
    if (options.dist.active()) m->connect();
    // Data parallel: rank 0 evaluates the global batch's worth of examples,
    // what one process at world x batch would; the other ranks evaluate nothing.
    if (m->rank == 0) m->validation = m->data->validationBatches(config.train.batchSize * m->world, config.train.evalBatches);
    if (!options.resumeFrom.empty()) m->loadCheckpoint(options.resumeFrom);
    // The checkpoint restores rank 0's random state on every rank: dropout
    // must differ between ranks again.
    if (!options.resumeFrom.empty() && m->world > 1) {
        torch::manual_seed(config.train.seed + 1000003ULL * static_cast<std::uint64_t>(m->rank)
                           + 7919ULL * static_cast<std::uint64_t>(m->startStep));
    }
}
void Trainer::Impl::connect()
{
#ifdef TB_HAVE_C10D
    // CUDA tensors' collectives go through NCCL where this LibTorch has it;
    // the rest through Gloo.
    const bool cudaRun = device != "cpu";
    if (precision == "bf16-pure" && !(cudaRun && DistGroup::ncclBuilt())) {
        // Gloo has no bfloat16 all-reduce (pytorch/pytorch#111131); NCCL has.
        throw InputError(std::string("train.precision \"bf16-pure\" cannot train data parallel here: Gloo, the backend ")
                         + (cudaRun ? "this LibTorch (built without NCCL) uses" : "for CPU tensors")
                         + ", cannot add bf16 gradients across processes. Use \"bf16\" (mixed, fp32 gradients) or fp32"
                         + (cudaRun ? "" : ", or train on CUDA GPUs with a CUDA build (NCCL)"));
    }
    group = std::make_unique<DistGroup>(options.dist, cudaRun);
    rank = group->rank();
    world = group->size();
    std::string folder = options.checkpointDir;
    if (rank == 0) {
        group->publish("run_folder", folder);
    } else {
        folder = group->fetch("run_folder");
        if (options.onRunFolder) options.onRunFolder(folder);
    }
    group->setRunFolder(folder);
    // Every rank starts from rank 0's weights and buffers.
    {
        torch::NoGradGuard noGrad;
        std::vector<torch::Tensor> state;
        for (const auto& p : model->parameters()) state.push_back(p);
        for (const auto& b : model->buffers()) state.push_back(b);
        group->broadcastFromRankZero(state);
    }
    // Dropout differs between ranks, as it would between the rows of one batch.
    torch::manual_seed(config.train.seed + 1000003ULL * static_cast<std::uint64_t>(rank));
    GradReducer::Options o;
    o.overlap = options.distOverlap;
    o.bucketBytes = static_cast<std::int64_t>(config.train.distBucketMb) << 20;
    o.firstBucketBytes = std::min(o.firstBucketBytes, o.bucketBytes);
    reducer = std::make_unique<GradReducer>(*group, trainable, o);
#else
    throw InputError("this trainbench was built without data parallel (Gloo's headers were missing at build time: install "
                     "libgloo-dev and rebuild); it cannot join " + options.dist.describe());
#endif
}
Trainer::~Trainer() = default;

const std::string& Trainer::device() const { return m->device; }
const std::string& Trainer::precision() const { return m->precision; }
std::optional<ComputeCapability> Trainer::computeCapability() const { return m->capability; }
int Trainer::startStep() const { return m->startStep; }
int Trainer::worldSize() const { return m->world; }
int Trainer::rank() const { return m->rank; }
std::string Trainer::datasetDescription() const { return m->data->describe(); }
const std::vector<AuditEntry>& Trainer::auditFindings() const { return m->flagged; }

std::int64_t Trainer::parameterCount() const
{
    std::int64_t n = 0;
    for (const auto& p : m->model->parameters()) n += p.numel();
    for (const auto& [name, layer] : quantizableLinears(*m->model)) {
        if (layer->quantized()) n += layer->outFeatures() * layer->inFeatures();
    }
    return n;
}

std::vector<const void*> Trainer::quantizedBaseBlocks() const
{
    std::vector<const void*> out;
    for (const auto& [name, layer] : quantizableLinears(*m->model)) {
        if (!layer->quantized()) continue;
        for (const auto& b : layer->named_buffers(false)) out.push_back(b.value().storage().data());
    }
    return out;
}

std::vector<std::pair<std::int64_t, std::int64_t>> Trainer::parameterSizes() const
{
    std::vector<std::pair<std::int64_t, std::int64_t>> out;
    for (const auto& p : m->model->parameters()) {
        out.emplace_back(p.numel(), p.requires_grad() ? p.numel() * static_cast<std::int64_t>(p.element_size()) : 0);
    }
    return out;
}

std::vector<std::pair<std::string, std::vector<float>>> Trainer::parameterValues() const
{
    std::vector<std::pair<std::string, std::vector<float>>> out;
    for (const auto& p : m->model->named_parameters()) {
        const auto t = p.value().detach().to(torch::kCPU, torch::kFloat).contiguous();
        out.emplace_back(p.key(), std::vector<float>(t.data_ptr<float>(), t.data_ptr<float>() + t.numel()));
    }
    return out;
}

std::int64_t Trainer::trainableParameterCount() const
{
    std::int64_t n = 0;
    for (const auto& p : m->trainable) n += p.numel();
    return n;
}

std::int64_t Trainer::trainableParameterBytes() const
{
    std::int64_t n = 0;
    for (const auto& p : m->trainable) n += p.numel() * static_cast<std::int64_t>(p.element_size());
    return n;
}

TrainResult Trainer::run(const TrainerCallbacks& callbacks)
{
    using Clock = std::chrono::steady_clock;
    const auto& t = m->config.train;
    const int total = t.steps;
    const int evalEvery = t.evalEvery > 0 ? t.evalEvery : std::max(1, total / 10);
    const TrainerEmit emit = [&](const char* severity, const char* kind, const std::string& message) {
        if (callbacks.onEvent) callbacks.onEvent({severity, kind, message});
    };
    TrainResult result;
    result.stepsDone = m->startStep;
    // On the CPU, keep the step's freed tensors in the heap for the next step (HostHeap.h).
    std::optional<HostHeapScope> heap;
    if (m->torchDevice.is_cpu()) heap.emplace();
    m->announce(emit, parameterCount(), trainableParameterCount());

    const std::string memoryDevice = m->options.measureMemory ? m->device : std::string();
    const double tokensPerStep = static_cast<double>(t.batchSize) * t.gradAccum * m->data->seqLen() * m->world;
    bool stopAgreed = false;
    double steadyCommWait = 0;
    Clock::time_point steadyFrom;
    int steadyFromStep = 0;
    double excludedSeconds = 0; // validation and checkpoints are not training throughput
    try {
        if (m->startStep == 0 && !m->validation.empty() && !m->options.probeModel && !m->options.skipEvaluation) {
            // The untrained baseline, so plots and summaries show how far the
            // loss fell (not for the derived plan's probes, which record a step).
            const auto e = m->evaluate(0);
            if (callbacks.onEval) callbacks.onEval(e);
        }
        for (int step = m->startStep + 1; step <= total; ++step) {
            // Data parallel: only a stop every rank agreed on (shareStep),
            // so that no rank leaves while the others start another step.
            if (m->world > 1 ? stopAgreed : m_cancel.load()) break;
            const auto started = Clock::now();
            if (!memoryDevice.empty()) MemoryProbe::resetPeak(memoryDevice);

            const double lr = learningRateAt(m->config.optim, step, total);
            m->setLearningRate(lr);
            m->optimizer->zero_grad();

            StepPhases phases(m->options, memoryDevice, step);
            double commWait = 0;
            const torch::Tensor lossSum = m->forwardBackward(phases, commWait);
            phases.begin(2);
            torch::Tensor gradNorm;
            const bool skipped = !m->optimizerStep(step, gradNorm, emit);
            phases.end(2, "optimizer");
            m->lastInputs = torch::Tensor(); // kept only while a step may fail, not as memory between steps
            if (phases.measured() && m->options.recordPhaseMemory) {
                result.phaseMemory.insert(result.phaseMemory.end(), phases.phases().begin(), phases.phases().end());
            }
            result.stepsDone = step;
            // Data parallel: the global loss (each rank's share is its tokens'
            // loss over the global count), a stop asked on any rank, and each
            // rank's peak, in one small all-reduce every step.
            std::vector<std::int64_t> rankPeaks;
            double globalLoss = 0;
            if (m->world > 1) {
                const auto shared = m->shareStep(lossSum, m_cancel.load(), phases.largestPeak());
                globalLoss = shared.loss;
                stopAgreed = shared.cancel;
                rankPeaks = shared.peaks;
            }
            const bool log = step % t.logEvery == 0 || step == total;
            // (The derived plan's probes record a step, not validation.)
            const bool evalNow = !m->validation.empty() && !m->options.probeModel && !m->options.skipEvaluation
                && (step % evalEvery == 0 || step == total);
            // Data parallel: every rank knows the global loss, so every rank
            // checks it every step and they stop on the same step.
            if (log || evalNow || m_cancel.load() || m->world > 1) {
                // Reading the loss synchronises a GPU: only when it is reported.
                const double loss = m->world > 1 ? globalLoss : lossSum.item<double>();
                result.finalLoss = loss;
                if (!std::isfinite(loss)) {
                    result.status = TrainResult::Status::Failed;
                    result.message = "the loss became " + std::string(std::isnan(loss) ? "NaN" : "infinite")
                        + " at step " + std::to_string(step) + " (learning rate " + detail::fixed(lr, 6)
                        + "): lower optim.lr, keep optim.grad_clip on, or train in fp32";
                    emit("error", "diverged", result.message);
                    return result;
                }
                if (log && callbacks.onStep) {
                    const double stepMs = std::chrono::duration<double, std::milli>(Clock::now() - started).count();
                    callbacks.onStep(m->stepMetrics({step, total, loss, lr, stepMs, commWait, tokensPerStep, skipped},
                                                    gradNorm, phases, rankPeaks));
                }
            }
            const auto pausedAt = Clock::now();
            if (evalNow) {
                const auto e = m->evaluate(step);
                result.finalValLoss = e.valLoss;
                result.finalValAccuracy = e.valAccuracy;
                if (callbacks.onEval) callbacks.onEval(e);
            }
            if (t.checkpointEvery > 0 && step % t.checkpointEvery == 0 && step != total) {
                m->saveCheckpoint(step, callbacks);
            }
            if (steadyFromStep > 0) excludedSeconds += std::chrono::duration<double>(Clock::now() - pausedAt).count();
            if (steadyFromStep > 0) steadyCommWait += commWait;
            if (step - m->startStep == 10) {
                steadyFrom = Clock::now();
                steadyFromStep = step;
            }
        }
        if (steadyFromStep > 0 && result.stepsDone > steadyFromStep + 1) {
            const double seconds = std::chrono::duration<double>(Clock::now() - steadyFrom).count() - excludedSeconds;
            result.steadyTokensPerSecond = tokensPerStep * (result.stepsDone - steadyFromStep) / seconds;
            result.steadySeconds = seconds;
            result.steadyCommWaitSeconds = steadyCommWait;
        }
        const bool cancelled = result.stepsDone < total;
        if (result.stepsDone > m->startStep || cancelled) result.lastCheckpoint = m->saveCheckpoint(result.stepsDone, callbacks);
        if (result.lastCheckpoint.empty()) result.lastCheckpoint = m->lastCheckpoint;
        result.status = cancelled ? TrainResult::Status::Cancelled : TrainResult::Status::Finished;
        result.message = cancelled ? "cancelled after step " + std::to_string(result.stepsDone) + " of " + std::to_string(total)
                                   : "finished " + std::to_string(total) + " steps";
        if (result.stepsDone == m->startStep && !cancelled) result.message = "nothing to do: already at step " + std::to_string(total);
#ifdef TB_HAVE_C10D
        // The others end only after rank 0 has written its checkpoint: a
        // launcher (srun --kill-on-bad-exit, --nproc) that sees a rank end
        // must not take rank 0 down in the middle of it.
        if (m->group) m->group->endTogether();
#endif
    } catch (const c10::Error& e) {
        result.status = TrainResult::Status::Failed;
        result.message = firstLine(e.what_without_backtrace());
    } catch (const std::exception& e) {
        result.status = TrainResult::Status::Failed;
        // A TorchScript model's errors come as the interpreter's traceback; its last line is the error.
        result.message = errorSummary(e.what());
    }
    if (result.status == TrainResult::Status::Failed) {
        m->explainFailure(result);
        emit("error", "exception", result.message);
    }
    return result;
}

} // namespace tb
