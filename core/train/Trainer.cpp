#include "train/Trainer.h"

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

// 2: parameters named as in Hugging Face checkpoints, no buffers stored.
constexpr std::int64_t kCheckpointFormat = 2;

std::string firstLine(const std::string& text)
{
    const auto nl = text.find('\n');
    return nl == std::string::npos ? text : text.substr(0, nl);
}

std::string fixed(double v, int digits)
{
    std::ostringstream out;
    out << std::fixed << std::setprecision(digits) << v;
    return out.str();
}

bool isEmbedding(const std::string& name)
{
    return name == "wte.weight" || name == "wpe.weight" || name == "model.embed_tokens.weight";
}

// Optimizer state is read onto the CPU; move it to the parameters' device so a
// checkpoint from a GPU resumes on the CPU and the other way round.
void moveOptimizerState(torch::optim::Optimizer& optimizer, const torch::Device& device)
{
    for (auto& [key, state] : optimizer.state()) {
        if (auto* adam = dynamic_cast<torch::optim::AdamWParamState*>(state.get())) {
            adam->exp_avg(adam->exp_avg().to(device));
            adam->exp_avg_sq(adam->exp_avg_sq().to(device));
            if (adam->max_exp_avg_sq().defined()) adam->max_exp_avg_sq(adam->max_exp_avg_sq().to(device));
        } else if (auto* sgd = dynamic_cast<torch::optim::SGDParamState*>(state.get())) {
            if (sgd->momentum_buffer().defined()) sgd->momentum_buffer(sgd->momentum_buffer().to(device));
        }
    }
}

// Reads the optimizer state LibTorch's Optimizer::save wrote, whichever
// LibTorch wrote it. Its own load matches each parameter to its state through
// the parameter's address as text, which 1.13 writes in hex and 2.x in decimal;
// 2.x parses the keys as decimal, so it cannot read a 1.13 checkpoint's state
// (every key becomes 0). Here the saved keys are matched as text, parameter by
// parameter in group order, as both versions wrote them.
template <typename State>
void loadOptimizerState(torch::optim::Optimizer& optimizer, torch::serialize::InputArchive& archive,
                        const std::string& path)
{
    const auto refuse = [&](const std::string& why) {
        throw InputError("checkpoint " + path + " does not fit this run: its optimizer state " + why);
    };
    torch::serialize::InputArchive states, groups;
    archive.read("state", states);
    archive.read("param_groups", groups);
    torch::Tensor count;
    groups.read("param_groups/size", count);
    auto& ours = optimizer.param_groups();
    if (count.item<std::int64_t>() != static_cast<std::int64_t>(ours.size())) {
        refuse("has " + std::to_string(count.item<std::int64_t>()) + " parameter groups, this run has "
               + std::to_string(ours.size()));
    }
    for (std::size_t i = 0; i < ours.size(); ++i) {
        torch::serialize::InputArchive group;
        groups.read("param_groups/" + std::to_string(i), group);
        torch::Tensor size;
        group.read("params/size", size);
        const auto& params = ours[i].params();
        if (size.item<std::int64_t>() != static_cast<std::int64_t>(params.size())) {
            refuse("group " + std::to_string(i) + " has " + std::to_string(size.item<std::int64_t>())
                   + " parameters, this run's has " + std::to_string(params.size()));
        }
        for (std::size_t j = 0; j < params.size(); ++j) {
            c10::IValue key;
            group.read("params/" + std::to_string(j), key);
            torch::serialize::InputArchive saved;
            if (!states.try_read(key.toStringRef(), saved)) continue; // no step taken on it yet
            auto state = std::make_unique<State>();
            state->serialize(saved);
            compat::setOptimizerState(optimizer, params[j], std::move(state));
        }
    }
}

int cudaIndexOf(const std::string& device)
{
    const auto colon = device.find(':');
    return colon == std::string::npos ? 0 : std::stoi(device.substr(colon + 1));
}

} // namespace

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

std::string resolvePrecision(const std::string& requested, const std::string& device)
{
    std::optional<ComputeCapability> cc;
    if (device != "cpu") {
        // The driver API answers without creating a CUDA context.
        const auto driver = makeNvidiaDriver();
        const int index = cudaIndexOf(device);
        ComputeCapability found;
        for (const auto& d : driver->devices()) {
            if (d.index == index) found = d.cc;
        }
        cc = found;
    }
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

struct Trainer::Impl {
    RunConfig config;
    TrainerOptions options;
    std::string device;
    std::string precision;
    torch::Device torchDevice{torch::kCPU};
    std::unique_ptr<Dataset> data;
    std::shared_ptr<CausalLmImpl> model;
    std::vector<torch::Tensor> trainable;
    std::unique_ptr<torch::optim::Optimizer> optimizer;
    at::Generator dataGen;
    std::vector<Batch> validation;
    DynamicLossScaler scaler;
    int startStep = 0;
    std::string lastCheckpoint;
    std::vector<AuditEntry> flagged; // the device audit before step 1
    // The latest forward's token ids as the data gave them (on the CPU, so
    // holding them costs no device memory), for the device-mismatch locator.
    torch::Tensor lastInputs;

    bool autocast() const { return precision == "bf16" || precision == "fp16"; }
    at::ScalarType autocastDtype() const { return precision == "bf16" ? torch::kBFloat16 : torch::kHalf; }
    bool useScaler() const { return precision == "fp16" || options.forceLossScaling; }

    void setLearningRate(double lr)
    {
        for (auto& group : optimizer->param_groups()) {
            if (config.optim.optimizer == "sgd") {
                static_cast<torch::optim::SGDOptions&>(group.options()).lr(lr);
            } else {
                static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
            }
        }
    }

    EvalMetrics evaluate(int step)
    {
        torch::NoGradGuard noGrad;
        model->eval();
        double lossSum = 0, tokens = 0, exact = 0, examples = 0;
        for (const auto& cpuBatch : validation) {
            lastInputs = cpuBatch.inputs;
            const auto batch = cpuBatch.to(torchDevice);
            torch::Tensor logits;
            {
                compat::AutocastScope scope(torchDevice.type(), autocast(), autocastDtype());
                logits = model->forward(batch.inputs);
            }
            lossSum += maskedLossSum(logits, batch, 1.0).item<double>();
            tokens += batch.maskedCount();
            if (data->hasExactMatch()) {
                const auto correct = (logits.argmax(-1) == batch.targets).to(torch::kFloat);
                // An example is right when every masked position is right.
                const auto wrong = ((1.0 - correct) * batch.mask).sum(1);
                exact += (wrong == 0).sum().item<double>();
                examples += static_cast<double>(batch.inputs.size(0));
            }
        }
        model->train();
        lastInputs = torch::Tensor();
        EvalMetrics m;
        m.step = step;
        m.valLoss = tokens > 0 ? lossSum / tokens : 0.0;
        m.valAccuracy = examples > 0 ? exact / examples : -1.0;
        return m;
    }

    // Before step 1: the checkpoint folder exists and can be written (a run
    // that would lose its weights at the end is refused now), and a stale
    // .partial from a killed write is gone.
    void prepareCheckpointDir() const
    {
        namespace fs = std::filesystem;
        if (options.checkpointDir.empty()) return;
        const auto& dir = options.checkpointDir;
        const auto refuse = [&](const std::string& reason) {
            throw InputError("cannot write checkpoints to " + dir + " (" + reason
                             + "); make the folder writable or put the database (--db) somewhere writable");
        };
        std::error_code ec;
        fs::create_directories(dir, ec);
        if (ec) refuse(ec.message());
        for (const auto& entry : fs::directory_iterator(dir, ec)) {
            if (entry.path().extension() == ".partial") fs::remove(entry.path(), ec);
        }
        const auto probe = (fs::path(dir) / ".write-test").string();
        {
            std::ofstream out(probe, std::ios::binary | std::ios::trunc);
            if (!out || !(out << "x") || !out.flush()) refuse(std::strerror(errno));
        }
        fs::remove(probe, ec);
    }

    // Keeps the newest train.keep_checkpoints step-*.pt files of this run.
    void pruneCheckpoints() const
    {
        namespace fs = std::filesystem;
        const int keep = config.train.keepCheckpoints;
        if (keep <= 0) return;
        std::vector<fs::path> found;
        std::error_code ec;
        for (const auto& entry : fs::directory_iterator(options.checkpointDir, ec)) {
            const auto name = entry.path().filename().string();
            if (name.rfind("step-", 0) == 0 && entry.path().extension() == ".pt") found.push_back(entry.path());
        }
        std::sort(found.begin(), found.end()); // zero-padded step numbers sort by step
        for (std::size_t i = 0; i + keep < found.size(); ++i) fs::remove(found[i], ec);
    }

    std::string saveCheckpoint(int step, const TrainerCallbacks& callbacks)
    {
        namespace fs = std::filesystem;
        if (options.checkpointDir.empty()) return {};
        fs::create_directories(options.checkpointDir);
        std::ostringstream name;
        name << "step-" << std::setw(7) << std::setfill('0') << step << ".pt";
        const auto path = (fs::path(options.checkpointDir) / name.str()).string();
        torch::serialize::OutputArchive archive;
        archive.write("format", torch::tensor(kCheckpointFormat));
        archive.write("step", torch::tensor(static_cast<std::int64_t>(step)));
        for (const auto& p : model->named_parameters()) archive.write("model." + p.key(), p.value().detach().cpu());
        // Buffers (RoPE and sinusoid tables) are derived from the config: not stored.
        torch::serialize::OutputArchive optimizerArchive;
        optimizer->save(optimizerArchive);
        archive.write("optimizer", optimizerArchive);
        auto cpuGen = compat::defaultGenerator(torch::Device(torch::kCPU));
        archive.write("rng.cpu", compat::generatorState(cpuGen));
        archive.write("rng.data", compat::generatorState(dataGen));
        if (torchDevice.is_cuda()) {
            auto cudaGen = compat::defaultGenerator(torchDevice);
            archive.write("rng.cuda", compat::generatorState(cudaGen));
        }
        archive.write("scaler", torch::tensor({scaler.currentScale(), static_cast<double>(scaler.goodSteps())},
                                              torch::kDouble));
        // Write, fsync, then rename: a kill or power cut during the write never
        // leaves a torn checkpoint, and a failed write (disk full) leaves the
        // last good one as it was.
        std::string reason;
        try {
            // Not save_to(filename): LibTorch's file writer throws from its
            // destructor when a write fails (disk full) and the process
            // aborts. Through a function the errors stay ours.
            reason = writeFileAtomicallyWith(path, [&](int fd) {
                int error = 0;
                archive.save_to([&](const void* data, std::size_t size) -> std::size_t {
                    if (error == 0) error = writeAll(fd, data, size);
                    return size; // the archive carries on; the error is reported after
                });
                return error;
            });
        } catch (const c10::Error& e) {
            reason = firstLine(e.what_without_backtrace());
        }
        if (!reason.empty()) {
            throw RunError("could not write the checkpoint for step " + std::to_string(step) + " (" + reason + ")"
                           + (lastCheckpoint.empty() ? std::string() : "; the last good checkpoint is " + lastCheckpoint)
                           + ". Free disk space or move the database, then resume the run");
        }
        std::error_code ec;
        const auto bytes = static_cast<std::int64_t>(fs::file_size(path, ec));
        lastCheckpoint = path;
        pruneCheckpoints();
        if (callbacks.onCheckpoint) callbacks.onCheckpoint(step, path, bytes);
        return path;
    }

    void loadCheckpoint(const std::string& path)
    {
        torch::serialize::InputArchive archive;
        try {
            // Onto the CPU whatever device wrote it; parameters are copied to theirs below.
            archive.load_from(path, torch::Device(torch::kCPU));
        } catch (const c10::Error& e) {
            throw InputError("checkpoint " + path + " cannot be read (" + firstLine(e.what_without_backtrace())
                             + "); it may be truncated or not a Trainbench checkpoint");
        }
        // A fresh tensor per key: InputArchive::read into a defined tensor resizes it in place.
        const auto read = [&](const char* key) {
            torch::Tensor t;
            archive.read(key, t);
            return t;
        };
        try {
            const auto format = read("format").item<std::int64_t>();
            if (format != kCheckpointFormat) {
                throw InputError("checkpoint " + path + " has format " + std::to_string(format)
                                 + ", this Trainbench reads format " + std::to_string(kCheckpointFormat));
            }
            startStep = static_cast<int>(read("step").item<std::int64_t>());
            torch::NoGradGuard noGrad;
            for (auto& p : model->named_parameters()) {
                torch::Tensor saved;
                archive.read("model." + p.key(), saved);
                if (saved.sizes() != p.value().sizes()) {
                    throw InputError("checkpoint " + path + " does not match this model: " + p.key() + " has shape "
                                     + c10::str(saved.sizes()) + ", the config builds " + c10::str(p.value().sizes()));
                }
                p.value().copy_(saved);
            }
            torch::serialize::InputArchive optimizerArchive;
            archive.read("optimizer", optimizerArchive);
            if (config.optim.optimizer == "sgd") {
                loadOptimizerState<torch::optim::SGDParamState>(*optimizer, optimizerArchive, path);
            } else {
                loadOptimizerState<torch::optim::AdamWParamState>(*optimizer, optimizerArchive, path);
            }
            moveOptimizerState(*optimizer, torchDevice);
            auto cpuGen = compat::defaultGenerator(torch::Device(torch::kCPU));
            compat::setGeneratorState(cpuGen, read("rng.cpu"));
            compat::setGeneratorState(dataGen, read("rng.data"));
            torch::Tensor cudaState;
            if (torchDevice.is_cuda() && archive.try_read("rng.cuda", cudaState)) {
                auto cudaGen = compat::defaultGenerator(torchDevice);
                compat::setGeneratorState(cudaGen, cudaState);
            }
            const auto scale = read("scaler");
            scaler.setScale(scale[0].item<double>(), static_cast<int>(scale[1].item<double>()));
        } catch (const c10::Error& e) {
            throw InputError("checkpoint " + path + " does not fit this run (" + firstLine(e.what_without_backtrace())
                             + ")");
        }
    }
};

Trainer::Trainer(const RunConfig& config, const TrainerOptions& options) : m(std::make_unique<Impl>())
{
    if (auto issues = validateConfig(config, false); !issues.empty()) throw ConfigError("config", std::move(issues));
    m->config = config;
    m->options = options;
    applyThreadCount(config.train.threads);
    m->device = resolveDevice(config.device);
    m->precision = resolvePrecision(config.train.precision, m->device);
    m->torchDevice = torch::Device(m->device);
    if (options.measureMemory && m->device == "cpu") MemoryProbe::installCpuCounter();

    if (config.model.attention == "sdpa" && !fusedAttentionAvailable()) {
        throw InputError("model.attention: \"sdpa\" (scaled_dot_product_attention) needs LibTorch 2.0 or newer; this "
                         "is LibTorch " + torchVersion() + ". Use \"eager\"");
    }

    torch::manual_seed(config.train.seed);
    m->data = makeDataset(config);
    m->model = makeModel(modelOptionsFor(config, *m->data));
    const std::string initFrom = !options.initFrom.empty() ? options.initFrom : config.train.initFrom;
    if (!initFrom.empty() && options.resumeFrom.empty()) {
        // Model weights only; the optimizer, schedule and data order start afresh.
        loadModelWeights(*m->model, readModelWeights(initFrom), initFrom);
    }
    m->prepareCheckpointDir();
    m->model->freezeBaseForLora();
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
        const bool matrix = p.value().dim() >= 2 && (config.optim.decayEmbeddings || !isEmbedding(p.key()));
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
        m->optimizer = std::make_unique<torch::optim::AdamW>(groups(defaults), defaults);
    }
    m->dataGen = at::make_generator<at::CPUGeneratorImpl>(config.train.seed * 0x9e3779b97f4a7c15ULL + 17);
    m->validation = m->data->validationBatches(config.train.batchSize, config.train.evalBatches);
    if (!options.resumeFrom.empty()) m->loadCheckpoint(options.resumeFrom);
}

Trainer::~Trainer() = default;

const std::string& Trainer::device() const { return m->device; }
const std::string& Trainer::precision() const { return m->precision; }
int Trainer::startStep() const { return m->startStep; }
std::string Trainer::datasetDescription() const { return m->data->describe(); }
const std::vector<AuditEntry>& Trainer::auditFindings() const { return m->flagged; }

std::int64_t Trainer::parameterCount() const
{
    std::int64_t n = 0;
    for (const auto& p : m->model->parameters()) n += p.numel();
    return n;
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

TrainResult Trainer::run(const TrainerCallbacks& callbacks)
{
    using Clock = std::chrono::steady_clock;
    const auto& t = m->config.train;
    const int total = t.steps;
    const int evalEvery = t.evalEvery > 0 ? t.evalEvery : std::max(1, total / 10);
    const auto emit = [&](const char* severity, const char* kind, const std::string& message) {
        if (callbacks.onEvent) callbacks.onEvent({severity, kind, message});
    };
    TrainResult result;
    result.stepsDone = m->startStep;
    // On the CPU, keep the step's freed tensors in the heap for the next step (HostHeap.h).
    std::optional<HostHeapScope> heap;
    if (m->torchDevice.is_cpu()) heap.emplace();
    emit("info", "start",
         (m->startStep > 0 ? "resumed at step " + std::to_string(m->startStep) + " on " : "training on ") + m->device
             + ", precision " + m->precision + ", " + std::to_string(parameterCount()) + " parameters ("
             + std::to_string(trainableParameterCount()) + " trainable), " + m->data->describe());
    if (m->validation.empty()) emit("warning", "validation", "the validation split is empty; no validation loss will be reported");
    if (!m->flagged.empty()) {
        std::string list;
        for (std::size_t i = 0; i < m->flagged.size() && i < 4; ++i) {
            list += (i ? "; " : "") + m->flagged[i].path + " (" + m->flagged[i].kind + ", " + m->flagged[i].device + ")";
        }
        if (m->flagged.size() > 4) list += "; and " + std::to_string(m->flagged.size() - 4) + " more";
        emit("warning", "device_audit",
             std::to_string(m->flagged.size()) + " tensor(s) will not follow the model to a device: " + list
                 + ". Register them as parameters or buffers (trainbench-cli audit lists each with its cause)");
    }

    const std::string memoryDevice = m->options.measureMemory ? m->device : std::string();
    const double tokensPerStep = static_cast<double>(t.batchSize) * t.gradAccum * m->data->seqLen();
    torch::Tensor lossAccumulator;
    Clock::time_point steadyFrom;
    int steadyFromStep = 0;
    double excludedSeconds = 0; // validation and checkpoints are not training throughput
    try {
        if (m->startStep == 0 && !m->validation.empty()) {
            // The untrained baseline, so plots and summaries show how far the loss fell.
            const auto e = m->evaluate(0);
            if (callbacks.onEval) callbacks.onEval(e);
        }
        for (int step = m->startStep + 1; step <= total; ++step) {
            if (m_cancel.load()) break;
            const auto started = Clock::now();
            if (!memoryDevice.empty()) MemoryProbe::resetPeak(memoryDevice);

            const double lr = learningRateAt(step, total, m->config.optim.warmupSteps, m->config.optim.lr,
                                             m->config.optim.schedule == "cosine");
            m->setLearningRate(lr);
            m->optimizer->zero_grad();

            // Per-phase tensor bytes: the step's peak and the phase it came in
            // (all of them for trainbench-cli measure). A phase that runs once
            // per micro-batch keeps its largest peak.
            const bool phases = !memoryDevice.empty();
            std::array<PhaseMemory, 3> phase;
            const auto phaseBegin = [&](int i) {
                if (!phases) return;
                MemoryProbe::resetPeak(memoryDevice);
                const auto now = MemoryProbe::snapshot(memoryDevice).currentBytes;
                if (phase[i].phase.empty()) phase[i].startBytes = now;
            };
            const auto phaseEnd = [&](int i, const char* name) {
                if (!phases) return;
                const auto mem = MemoryProbe::snapshot(memoryDevice);
                phase[i].step = step;
                phase[i].phase = name;
                phase[i].peakBytes = std::max(phase[i].peakBytes, mem.peakBytes);
                phase[i].endBytes = mem.currentBytes;
            };
            phaseBegin(0);
            std::vector<Batch> micro;
            micro.reserve(t.gradAccum);
            for (int i = 0; i < t.gradAccum; ++i) micro.push_back(m->data->trainBatch(t.batchSize, m->dataGen));
            const double normalizer = maskedTokenCount(micro);
            lossAccumulator = torch::Tensor();
            for (const auto& cpuBatch : micro) {
                m->lastInputs = cpuBatch.inputs;
                const auto batch = cpuBatch.to(m->torchDevice);
                torch::Tensor loss;
                {
                    compat::AutocastScope scope(m->torchDevice.type(), m->autocast(), m->autocastDtype());
                    loss = maskedLossSum(m->model->forward(batch.inputs), batch, normalizer);
                }
                phaseEnd(0, "forward");
                phaseBegin(1);
                (m->useScaler() ? m->scaler.scale(loss) : loss).backward();
                lossAccumulator = lossAccumulator.defined() ? lossAccumulator + loss.detach() : loss.detach();
                phaseEnd(1, "backward");
                phaseBegin(0);
            }
            phaseBegin(2);
            if (step == m->options.injectNonFiniteGradientAtStep && !m->trainable.empty()) {
                m->trainable.front().grad().fill_(std::numeric_limits<float>::infinity());
            }

            bool skipped = false;
            if (m->useScaler()) {
                const bool finite = m->scaler.unscale(m->trainable);
                m->scaler.update(finite);
                skipped = !finite;
            }
            torch::Tensor gradNorm;
            if (!skipped) {
                const double clip = m->config.optim.gradClip > 0 ? m->config.optim.gradClip
                                                                  : std::numeric_limits<double>::infinity();
                gradNorm = clipGradNorm(m->trainable, clip);
                m->optimizer->step();
            } else {
                emit("warning", "loss_scale",
                     "step " + std::to_string(step) + ": fp16 gradients overflowed; step skipped, loss scale now "
                         + fixed(m->scaler.currentScale(), 0));
            }
            phaseEnd(2, "optimizer");
            m->lastInputs = torch::Tensor(); // kept only while a step may fail, not as memory between steps
            if (phases && m->options.recordPhaseMemory) {
                result.phaseMemory.insert(result.phaseMemory.end(), phase.begin(), phase.end());
            }
            result.stepsDone = step;

            const bool log = step % t.logEvery == 0 || step == total;
            const bool evalNow = !m->validation.empty() && (step % evalEvery == 0 || step == total);
            if (log || evalNow || m_cancel.load()) {
                // Reading the loss synchronises a GPU: only when it is reported.
                const double loss = lossAccumulator.item<double>();
                result.finalLoss = loss;
                if (!std::isfinite(loss)) {
                    result.status = TrainResult::Status::Failed;
                    result.message = "the loss became " + std::string(std::isnan(loss) ? "NaN" : "infinite")
                        + " at step " + std::to_string(step) + " (learning rate " + fixed(lr, 6)
                        + "): lower optim.lr, keep optim.grad_clip on, or train in fp32";
                    emit("error", "diverged", result.message);
                    return result;
                }
                if (log && callbacks.onStep) {
                    StepMetrics s;
                    s.step = step;
                    s.totalSteps = total;
                    s.loss = loss;
                    s.lr = lr;
                    s.gradNorm = gradNorm.defined() ? gradNorm.item<double>() : 0.0;
                    s.stepMs = std::chrono::duration<double, std::milli>(Clock::now() - started).count();
                    s.tokensPerSecond = tokensPerStep / std::max(s.stepMs / 1000.0, 1e-9);
                    if (phases) {
                        s.memCurrentBytes = MemoryProbe::snapshot(memoryDevice).currentBytes;
                        for (const auto& p : phase) {
                            if (p.peakBytes > s.memPeakBytes) {
                                s.memPeakBytes = p.peakBytes;
                                s.memPeakPhase = p.phase == "forward" ? "forward" : p.phase == "backward" ? "backward" : "optimizer";
                            }
                        }
                    }
                    s.lossScale = m->useScaler() ? m->scaler.currentScale() : 0.0;
                    s.skipped = skipped;
                    callbacks.onStep(s);
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
            if (step - m->startStep == 10) {
                steadyFrom = Clock::now();
                steadyFromStep = step;
            }
        }
        if (steadyFromStep > 0 && result.stepsDone > steadyFromStep + 1) {
            const double seconds = std::chrono::duration<double>(Clock::now() - steadyFrom).count() - excludedSeconds;
            result.steadyTokensPerSecond = tokensPerStep * (result.stepsDone - steadyFromStep) / seconds;
        }
        const bool cancelled = result.stepsDone < total;
        if (result.stepsDone > m->startStep || cancelled) result.lastCheckpoint = m->saveCheckpoint(result.stepsDone, callbacks);
        if (result.lastCheckpoint.empty()) result.lastCheckpoint = m->lastCheckpoint;
        result.status = cancelled ? TrainResult::Status::Cancelled : TrainResult::Status::Finished;
        result.message = cancelled ? "cancelled after step " + std::to_string(result.stepsDone) + " of " + std::to_string(total)
                                   : "finished " + std::to_string(total) + " steps";
        if (result.stepsDone == m->startStep && !cancelled) result.message = "nothing to do: already at step " + std::to_string(total);
    } catch (const c10::Error& e) {
        result.status = TrainResult::Status::Failed;
        result.message = firstLine(e.what_without_backtrace());
    } catch (const std::exception& e) {
        result.status = TrainResult::Status::Failed;
        // A TorchScript model's errors come as the interpreter's traceback; its last line is the error.
        result.message = errorSummary(e.what());
    }
    if (result.status == TrainResult::Status::Failed && isDeviceMismatchText(result.message) && m->lastInputs.defined()) {
        try {
            result.deviceMeeting = locateDeviceMeeting(*m->model, m->lastInputs.to(m->torchDevice));
        } catch (const std::exception&) {
            // The locator is a help; the failure stands without it.
        }
    }
    if (result.status == TrainResult::Status::Failed) emit("error", "exception", result.message);
    return result;
}

} // namespace tb
