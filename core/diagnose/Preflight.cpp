#include "diagnose/Preflight.h"
#include "diagnose/TargetPlan.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "common/ByteSize.h"
#include "memory/DerivedStep.h"
#include "memory/Estimator.h"
#include "memory/MemoryPlan.h"
#include "memory/Verdict.h"

namespace tb {

namespace {

std::string quoted(const std::string& s) { return "\"" + s + "\""; }

Finding make(std::string kind, Severity severity, std::string title, std::string cause, std::string fix)
{
    Finding f;
    f.kind = std::move(kind);
    f.severity = severity;
    f.title = std::move(title);
    f.cause = std::move(cause);
    f.fix = std::move(fix);
    return f;
}

// Where the run is planned to run.
struct Target {
    bool gpu = false;
    bool known = false; // false: no GPU named and the local machine not checked
    std::string label;  // "Tesla T4", "this machine's CPU"
    std::optional<ComputeCapability> cc;
    std::int64_t memoryBytes = 0; // usable by the run; 0 unknown
    int count = 1;
};

Target resolveTarget(const RunConfig& c, const PreflightTarget& t, std::vector<Finding>& out)
{
    Target target;
    if (t.gpu) {
        target.gpu = target.known = true;
        target.label = t.gpu->label();
        target.cc = t.gpu->gpu.cc;
        target.memoryBytes = t.gpu->gpu.memoryBytes;
        target.count = t.gpu->count;
        return target;
    }
    if (!t.local) return target;
    const auto& local = *t.local;
    const auto cpu = [&] {
        target.known = true;
        target.label = "this machine's CPU";
        target.memoryBytes = local.hostMemoryBytes;
    };
    if (c.device == "cpu" || (c.device == "auto" && local.torchCudaDevices <= 0)) {
        cpu();
        return target;
    }
    // "auto" with a GPU and "cuda" mean cuda:0.
    const int index = c.device.rfind("cuda:", 0) == 0 ? std::atoi(c.device.c_str() + 5) : 0;
    if (c.device != "auto") {
        if (!local.torchBuiltWithCuda || local.torchCudaDevices <= 0) {
            auto f = make("cuda_unavailable", Severity::Error, "No usable CUDA here",
                          std::string("device ") + quoted(c.device) + " asks for a GPU, but "
                              + (local.torchBuiltWithCuda ? "LibTorch sees no CUDA device on this machine (no NVIDIA "
                                                            "driver, no GPU, or CUDA_VISIBLE_DEVICES hides it)."
                                                          : "this LibTorch is built without CUDA (Debian's LibTorch 1.13 "
                                                            "is CPU-only)."),
                          "Train on the CPU (device \"cpu\" or \"auto\"), or run Trainbench built against a CUDA "
                          "LibTorch on a machine with a GPU; 'trainbench-cli devices' says what is missing.");
            f.autoFix = {{"device", "\"auto\""}};
            f.autoFixLabel = "Use device \"auto\" (the CPU here)";
            out.push_back(std::move(f));
            cpu();
            return target;
        }
        if (index >= local.torchCudaDevices) {
            auto f = make("invalid_device_ordinal", Severity::Error, "The requested GPU does not exist",
                          "device " + quoted(c.device) + " names GPU " + std::to_string(index) + ", but LibTorch sees "
                              + std::to_string(local.torchCudaDevices) + " CUDA device(s), cuda:0 to cuda:"
                              + std::to_string(local.torchCudaDevices - 1) + ".",
                          "Use a device that exists; 'trainbench-cli devices' lists them.");
            f.autoFix = {{"device", "\"cuda:0\""}};
            f.autoFixLabel = "Use cuda:0";
            out.push_back(std::move(f));
            return target;
        }
    }
    target.gpu = target.known = true;
    target.label = "cuda:" + std::to_string(index);
    for (const auto& d : local.devices) {
        if (d.index != index) continue;
        target.label += " (" + d.name + ")";
        if (d.cc.known()) target.cc = d.cc;
        target.memoryBytes = d.totalBytes;
        // A launch here gets what is free now: memory other processes hold
        // (NVML's figure) is not the run's to use.
        if (d.usage && d.usage->freeBytes > 0 && d.usage->freeBytes < d.totalBytes) {
            const auto held = d.totalBytes - d.usage->freeBytes;
            target.memoryBytes = d.usage->freeBytes;
            if (held > d.totalBytes / 20) target.label += ", " + byteSizeText(held) + " of it already in use";
        }
    }
    return target;
}

void precisionRules(const RunConfig& c, const Target& target, std::vector<Finding>& out, std::string& precision)
{
    precision = c.train.precision == "auto" ? "fp32" : c.train.precision;
    if (!target.known) return;
    const std::optional<ComputeCapability> cc = target.gpu ? target.cc : std::nullopt;
    if (target.gpu && !cc) return; // capability unknown: nothing to decide on
    const bool noBf16 = cc && !cc->atLeast(8, 0);
    const bool bf16Weights = c.train.weightsDtype == "bf16";
    const bool bf16Precision = c.train.precision == "bf16" || c.train.precision == "bf16-pure";
    if (noBf16 && (bf16Precision || bf16Weights)) {
        const std::string what = bf16Precision ? "train.precision is \"" + c.train.precision + "\"" : "the weights are loaded in bf16";
        auto f = make("bf16_unsupported", Severity::Error, "bf16 on " + target.label + ", which lacks native bf16",
                      what + ", but " + target.label + " has compute capability " + cc->text()
                          + "; native bf16 starts at 8.0 (Ampere). Kernels such as the gradient scaler's unscale are "
                            "missing for bf16 there, and the rest is emulated.",
                      "Use fp16 with dynamic loss scaling and fp32 master weights, decided before anything is loaded "
                      "(train.precision \"fp16\" or \"auto\").");
        // "auto", not "fp16": it picks fp16 with loss scaling on this GPU and
        // stays valid where fp16 is not (a launch on a machine without CUDA).
        if (bf16Precision) f.autoFix.push_back({"train.precision", "\"auto\""});
        if (bf16Weights) f.autoFix.push_back({"train.weights_dtype", c.lora.rank > 0 ? "\"fp16\"" : "\"fp32\""});
        f.autoFixLabel = bf16Precision ? "Use precision \"auto\" (fp16 with loss scaling here)"
                                                     : "Load the weights in a precision this GPU has";
        f.text["compute_capability"] = cc->text();
        out.push_back(std::move(f));
    }
    const PrecisionDecision decision = decidePrecision(c.train.precision, cc);
    if (!decision.error.empty() && !(noBf16 && bf16Precision)) {
        auto f = make("precision_unsupported", Severity::Error, "This precision cannot run on " + target.label,
                      decision.error, "Use train.precision \"auto\": it picks what the target supports.");
        f.autoFix = {{"train.precision", "\"auto\""}};
        f.autoFixLabel = "Use precision \"auto\"";
        out.push_back(std::move(f));
        return;
    }
    if (decision.error.empty()) precision = decision.precision;
    if (c.train.precision == "auto" && decision.error.empty()) {
        out.push_back(make("precision_choice", Severity::Info, "Precision: " + decision.precision + " on " + target.label,
                           decision.reason, "Nothing to do; set train.precision to choose yourself."));
    }
    if (const auto problem = halfBaseProblem(c, precision); !problem.empty()) {
        auto f = make("half_base_precision", Severity::Error, "A half-precision LoRA base at this precision",
                      problem + ".", "Train the adapters under autocast, or load the base in fp32.");
        f.autoFix = {{"train.weights_dtype", "\"fp32\""}};
        f.autoFixLabel = "Load the base in fp32";
        out.push_back(std::move(f));
    }
    // fp16 mixed precision scales the loss; the scaler unscales fp32 master gradients only.
    const bool lossScaling = precision == "fp16";
    if (lossScaling && c.train.weightsDtype != "fp32" && c.lora.rank == 0) {
        auto f = make("amp_scaler_dtype", Severity::Error, "Loss scaling with half-precision trainable weights",
                      "fp16 mixed precision scales the loss, and its gradient scaler unscales fp32 gradients only; "
                      "with the trainable weights loaded in " + c.train.weightsDtype + " the gradients are "
                          + c.train.weightsDtype + " too, and the first optimizer step fails.",
                      "Keep the trainable weights in fp32 and let autocast compute in fp16, or train LoRA adapters "
                      "(in fp32) over a frozen half-precision base.");
        f.autoFix = {{"train.weights_dtype", "\"fp32\""}};
        f.autoFixLabel = "Keep fp32 master weights";
        out.push_back(std::move(f));
    }
}

void attentionRule(const RunConfig& c, const Target& target, std::vector<Finding>& out)
{
    if (c.model.attention != "sdpa" || !target.gpu || !target.cc || target.cc->atLeast(8, 0)) return;
    auto f = make("flash_attention_unsupported", Severity::Warning, "Fused attention falls back on " + target.label,
                  target.label + " has compute capability " + target.cc->text()
                      + "; the FlashAttention kernel needs 8.0 or newer, so scaled_dot_product_attention falls back "
                        "to the memory-efficient or the math kernel: slower, and the math kernel keeps the full "
                        "attention map.",
                  "Nothing breaks. Use eager attention to plan memory exactly, or a GPU of compute capability 8.0 or newer.");
    f.autoFix = {{"model.attention", "\"eager\""}};
    f.autoFixLabel = "Use eager attention";
    out.push_back(std::move(f));
}

void setupRules(const RunConfig& c, std::vector<Finding>& out)
{
    if (c.train.offload != "none" && c.train.activationCheckpointing) {
        auto f = make("offload_with_checkpointing", Severity::Error, "CPU offload together with activation checkpointing",
                      "Offloaded layers stay on the meta device until their hooks load them; activation checkpointing "
                      "recomputes them in backward outside those hooks, and backward fails with \"expected device meta "
                      "but got cuda:0\".",
                      "Do not offload a model you train with checkpointing: load it in fp16 or bf16 straight onto the "
                      "GPU, train LoRA adapters, and fit the memory with checkpointing, a small batch and gradient "
                      "accumulation (the memory planner finds the batch).");
        f.autoFix = {{"train.offload", "\"none\""}};
        f.autoFixLabel = "Turn offload off";
        out.push_back(std::move(f));
    }
    if (c.train.offload != "none" || (c.train.weightsDtype != "fp32" && c.lora.rank <= 0)) {
        out.push_back(make("planning_only", Severity::Info, "Planning fields in use",
                           "train.offload, and train.weights_dtype without LoRA, describe a setup to plan; Trainbench "
                           "itself keeps the weights on one device and trains fp32 master weights (with "
                           "train.precision for autocast) or bf16-pure ones, and refuses to launch with them set. "
                           "With lora.rank the frozen base is kept in train.weights_dtype.",
                           "Set train.offload to \"none\" and train.weights_dtype to \"fp32\" to train this config here."));
    }
    if (c.optim.warmupSteps >= c.train.steps && c.train.steps > 0) {
        auto f = make("warmup_steps", Severity::Warning, "Warmup never ends",
                      "optim.warmup_steps (" + std::to_string(c.optim.warmupSteps) + ") is not below train.steps ("
                          + std::to_string(c.train.steps) + "): the learning rate is still rising when the run ends.",
                      "Use a warmup of a few percent of the steps.");
        f.autoFix = {{"optim.warmup_steps", std::to_string(std::max(0, c.train.steps / 20))}};
        f.autoFixLabel = "Warm up for 5% of the steps";
        out.push_back(std::move(f));
    }
}

// Positions of a model the run starts from (a Hugging Face folder's config.json); 0 unknown.
std::int64_t initFromPositions(const RunConfig& c)
{
    namespace fs = std::filesystem;
    if (c.train.initFrom.empty()) return 0;
    std::error_code ec;
    fs::path folder(c.train.initFrom);
    if (folder.is_relative() && !c.baseDir.empty()) folder = fs::path(c.baseDir) / folder;
    if (!fs::is_directory(folder, ec)) folder = folder.parent_path();
    const auto file = folder / "config.json";
    if (!fs::is_regular_file(file, ec) || fs::file_size(file, ec) > (1u << 20)) return 0;
    std::ifstream in(file);
    const auto j = nlohmann::json::parse(in, nullptr, false);
    if (!j.is_object()) return 0;
    for (const char* key : {"max_position_embeddings", "n_positions", "n_ctx"}) {
        if (j.contains(key) && j[key].is_number_integer()) return j[key].get<std::int64_t>();
    }
    return 0;
}

void dataRules(const RunConfig& c, std::vector<Finding>& out)
{
    const int seq = effectiveSeqLen(c);
    // Only a learned position table has a hard end; rotary and sinusoidal
    // positions extend past max_position_embeddings (quality aside).
    const bool learned = c.model.type == "gpt" && c.model.positionalEncoding == "learned";
    if (const auto positions = learned ? initFromPositions(c) : 0; positions > 0 && seq > positions) {
        auto f = make("sequence_too_long", Severity::Error, "Sequence longer than the model's positions",
                      "data.seq_len is " + std::to_string(seq) + ", but the model in train.init_from has "
                          + std::to_string(positions) + " positions; position ids past the table index out of range "
                          "(on a GPU: \"device-side assert triggered\").",
                      "Use data.seq_len of at most " + std::to_string(positions) + ".");
        f.autoFix = {{"data.seq_len", std::to_string(positions)}};
        f.autoFixLabel = "Use the model's " + std::to_string(positions) + " positions";
        out.push_back(std::move(f));
    }
    if (c.data.source != "text" || c.data.path.empty()) return;
    namespace fs = std::filesystem;
    std::error_code ec;
    const std::string path = resolvedDataPath(c);
    const auto size = static_cast<std::int64_t>(fs::file_size(path, ec));
    if (ec) return; // a missing file is a config issue (dataset_missing)
    if (size == 0) {
        out.push_back(make("dataset_empty", Severity::Error, "The dataset is empty",
                           path + " has no bytes, so there is nothing to train on.",
                           "Point data.path at a text file with content, or leave it out for the bundled sample."));
        return;
    }
    // Byte-level text: a byte is a token. Each split needs one window of seq + 2.
    const auto valTokens = static_cast<std::int64_t>(static_cast<double>(size) * c.data.valFraction);
    const auto trainTokens = size - valTokens;
    if (trainTokens < seq + 2 || valTokens < seq + 2) {
        auto f = make("dataset_too_small", Severity::Error, "Fewer tokens than one sequence",
                      path + " has " + std::to_string(size) + " tokens (bytes); with data.seq_len " + std::to_string(seq)
                          + " and val_fraction " + std::to_string(c.data.valFraction)
                          + ", each split needs at least " + std::to_string(seq + 2) + ".",
                      "Use a longer file, a shorter data.seq_len or a larger data.val_fraction.");
        f.numbers["tokens"] = static_cast<double>(size);
        out.push_back(std::move(f));
        return;
    }
    const std::int64_t batchTokens = static_cast<std::int64_t>(c.train.batchSize) * (seq + 1);
    if (trainTokens < batchTokens) {
        auto f = make("dataset_too_small", Severity::Warning, "Fewer tokens than one batch",
                      "The training split has " + std::to_string(trainTokens) + " tokens, fewer than one batch of "
                          + std::to_string(c.train.batchSize) + " x " + std::to_string(seq + 1) + " = "
                          + std::to_string(batchTokens) + ": every batch repeats the same text and the model memorises it.",
                      "Use more text, or a smaller batch or sequence.");
        f.numbers["tokens"] = static_cast<double>(trainTokens);
        f.numbers["batch_tokens"] = static_cast<double>(batchTokens);
        out.push_back(std::move(f));
    }
}

void modelFileRules(const RunConfig& c, const std::optional<ModelFileFacts>& facts, std::vector<Finding>& out)
{
    if (!facts) return;
    if (!facts->loadError.empty()) {
        out.push_back(make("model_unusable", Severity::Error, "The TorchScript model cannot be used", facts->loadError,
                           "Save the model with torch.jit.save(torch.jit.script(model), path) and point model.path at "
                           "it; its forward takes int64 token ids [batch, seq] and returns logits [batch, seq, vocab]."));
        return;
    }
    const bool logitsShort = facts->vocabSize > 0 && facts->maxTokenId >= facts->vocabSize;
    if (!facts->lookupOutOfRange && !logitsShort) return;
    const std::string data = c.data.source == "text" ? "byte-level text" : "the " + c.data.source + " task";
    auto f = make("token_id_out_of_vocab", Severity::Error, "Token ids beyond the model's vocabulary",
                  "The data (" + data + ") feeds token ids up to " + std::to_string(facts->maxTokenId) + ", but "
                      + (facts->lookupOutOfRange
                             ? "the model's embedding has fewer rows: a forward of that id fails with \""
                                   + facts->lookupError + "\""
                             : "the model's logits have only " + std::to_string(facts->vocabSize)
                                   + " classes, so the loss indexes past them")
                      + ". On a GPU the same lookup stops the run with \"device-side assert triggered\".",
                  "Give the model a vocabulary of at least " + std::to_string(facts->maxTokenId + 1)
                      + " (resize the embedding and the output layer), or train it on data whose ids fit.");
    f.numbers["max_token_id"] = static_cast<double>(facts->maxTokenId);
    if (facts->vocabSize > 0) f.numbers["vocab_size"] = static_cast<double>(facts->vocabSize);
    out.push_back(std::move(f));
}

// The plan of a step of `accum` micro-batches (null: none to check with yet).
using PlanForAccum = std::function<const MemoryPlan*(int accum)>;

// The largest micro-batch (at most maxBatch) that fits while gradient
// accumulation keeps the effective batch, and that accumulation, planned
// with the accumulation it needs: accumulating micro-batches draw every
// micro-batch first and, on LibTorch 2.x, hold the gradients through the
// later forwards, so a batch that fits one pass a step may not fit several.
// {0, 1} when none fits; {-1, 1} when a plan it needs is not there (still
// being derived, or not derivable).
std::pair<std::int64_t, int> batchKeepingEffective(const PlanForAccum& planFor, TrainingSetup setup,
                                                   std::int64_t budget, int effective,
                                                   std::int64_t maxBatch = std::int64_t{1} << 20)
{
    const auto accumFor = [&](std::int64_t b) { return static_cast<int>((effective + b - 1) / b); };
    std::int64_t batch = 0;
    for (int round = 0; round < 8; ++round) {
        const auto* plan = planFor(setup.gradAccum);
        if (!plan) return {-1, 1};
        batch = std::min(plan->largestBatch(setup.seqLen, setup, budget), maxBatch);
        if (batch <= 0) return {0, 1};
        if (accumFor(batch) == setup.gradAccum) return {batch, setup.gradAccum};
        setup.gradAccum = accumFor(batch);
    }
    // Not settled: step down until the batch fits with its own accumulation.
    for (; batch > 0; --batch) {
        setup.batch = batch;
        setup.gradAccum = accumFor(batch);
        const auto* plan = planFor(setup.gradAccum);
        if (!plan) return {-1, 1};
        if (plan->at(batch, setup.seqLen, setup).peakBytes <= budget) return {batch, setup.gradAccum};
    }
    return {0, 1};
}

// The config's own step's plan, from the caller (null where it has none
// or it cannot be derived; why, where it could not, in `failure`). The step
// traced is the one the target runs: "auto" precision resolved there (fp16
// on a T4), as estimate, the Memory planner and a run's launch estimate
// trace it.
std::shared_ptr<const DerivedStep> ownStepPlan(const RunConfig& c, const Target& target, const PreflightTarget& t,
                                               std::string* failure = nullptr)
{
    if (!t.derivePlan) return nullptr;
    auto traced = c;
    traced.train.precision = planOnTarget(c, target.gpu, target.cc, target.count).setup.precision;
    try {
        return t.derivePlan(traced);
    } catch (const std::exception& e) {
        if (failure) *failure = e.what();
        return nullptr;
    }
}

// A config's plans by its micro-batch count: a step's own plan is traced
// with its accumulation, and a step of one micro-batch frees its gradients
// where an accumulating one keeps them, so the other kind is traced apart
// (DerivedStep::tracedAccum).
class PlansByAccum {
public:
    PlansByAccum(const RunConfig& c, const MemoryPlan& plan, const Target& target, const PreflightTarget& t)
        : m_config(c), m_plan(plan), m_target(target), m_t(t)
    {
    }
    const MemoryPlan* operator()(int accum)
    {
        if ((accum > 1) == (m_config.train.gradAccum > 1)) return &m_plan;
        if (!m_other) {
            auto other = m_config;
            other.train.gradAccum = accum > 1 ? 2 : 1;
            auto step = ownStepPlan(other, m_target, m_t);
            if (!step) return nullptr;
            m_other.emplace(std::move(step), m_plan.arch());
        }
        return &*m_other;
    }

private:
    const RunConfig& m_config;
    const MemoryPlan& m_plan;
    const Target& m_target;
    const PreflightTarget& m_t;
    std::optional<MemoryPlan> m_other;
};

// NF4 for a LoRA config that does not fit: its base stored in 4 bits
// (QLoRA), planned from its own step on the target; set when that plan
// fits with 10% to spare and is exact there.
std::optional<MemoryEstimate> nf4Fits(const RunConfig& c, const Target& target, const PreflightTarget& t, RunConfig& nf4)
{
    if (c.lora.rank <= 0 || c.model.quantize != "none" || (c.model.type != "llama" && c.model.type != "hf")) return std::nullopt;
    nf4 = c;
    nf4.model.quantize = "nf4";
    nf4.model.doubleQuant = true;
    nf4.train.weightsDtype = "fp32"; // (a quantized base is not also kept in half precision)
    if (!validateConfig(nf4, false).empty()) return std::nullopt;
    const auto plan = ownStepPlan(nf4, target, t);
    if (!plan) return std::nullopt;
    const auto setup = planOnTarget(nf4, target.gpu, target.cc, target.count).setup;
    if (!plan->notExactOn(setup).empty()) return std::nullopt;
    const auto e = plan->at(setup.batch, setup.seqLen, setup);
    if (e.peakBytes > roomyPeakBytes(target.memoryBytes)) return std::nullopt;
    return e;
}

void memoryRules(const RunConfig& c, const Target& target, const PreflightTarget& t, std::vector<Finding>& out)
{
    if (!plannableModel(c)) {
        if (target.known) {
            out.push_back(make("memory_not_planned", Severity::Info, "Memory is not checked before launch for a TorchScript model",
                               "A TorchScript model is a program: its plan is derived by training its step a few "
                               "times at small shapes, which takes seconds, too long for a check that runs as you "
                               "edit.",
                               "Derive its plan: the Memory planner's Derive plan, or trainbench-cli estimate --config "
                               "FILE --gpu NAME (on a GPU a lower bound); the Run panel shows memory live."));
        }
        return;
    }
    if (!target.known || target.memoryBytes <= 0) return;
    const TargetPlan plan = planOnTarget(c, target.gpu, target.cc, target.count);
    const auto& arch = plan.arch;
    const auto& setup = plan.setup;
    // The config's own step, where the caller derives it (the target runs
    // "auto" resolved); a quick check that does not derive says so, and a
    // step that could not be derived says why.
    std::string failure;
    const auto derived = ownStepPlan(c, target, t, &failure);
    if (!derived && !failure.empty()) {
        // (Info: it is the planner that failed, not the config; said with its reason.)
        out.push_back(make("memory_not_planned", Severity::Info, "The memory plan could not be derived",
                           "Memory is planned from this run's own training step, and recording it failed: " + failure
                               + ". Its memory on " + target.label + " is not checked.",
                           "Fix what the message names (trainbench-cli estimate --config FILE says the same), or "
                           "measure the run (trainbench-cli measure --config FILE)."));
        return;
    }
    if (!derived) {
        out.push_back(make("memory_not_planned", Severity::Info,
                           "Memory is planned from this run's own training step",
                           "Its memory is planned from its own training step, which this quick check does not derive: "
                           "only that plan says what it takes (derived in seconds).",
                           "Derive its plan: trainbench-cli preflight or estimate --config FILE --gpu NAME, or the Memory "
                           "planner (it derives it as you plan); a run records it as it starts."));
        return;
    }
    const bool lowerBound = !derived->notExactOn(setup).empty();
    const MemoryEstimate e = derived->at(setup.batch, setup.seqLen, setup);
    const double use = static_cast<double>(e.peakBytes) / static_cast<double>(target.memoryBytes);
    const auto verdict = memoryVerdict(e.peakBytes, target.memoryBytes);
    char share[16];
    std::snprintf(share, sizeof share, "%.0f%%", 100.0 * use);
    if (verdict == MemoryVerdict::Fits) {
        if (lowerBound) {
            out.push_back(make("memory_not_planned", Severity::Info,
                               "Memory is checked before launch only as a lower bound for this model",
                               "Its own step's plan (" + byteSizeText(e.peakBytes) + ", " + share + " of " + target.label
                                   + ") has no rule for some of its operators on this card: " + derived->notExactOn(setup) + ".",
                               "Derive its plan: the Memory planner's Derive plan, or trainbench-cli estimate --config "
                               "FILE --gpu NAME; a run records it as it starts."));
        }
        return;
    }
    auto terms = e.terms;
    std::sort(terms.begin(), terms.end(), [](const MemoryTerm& a, const MemoryTerm& b) { return a.bytes > b.bytes; });
    std::string dominant;
    for (std::size_t i = 0; i < terms.size() && i < 3; ++i) {
        dominant += (i ? ", " : "") + terms[i].name + " " + byteSizeText(terms[i].bytes);
    }
    const bool over = verdict == MemoryVerdict::DoesNotFit;
    Finding f = make(over ? "memory_over_budget" : "memory_near_budget", over ? Severity::Error : Severity::Warning,
                     over ? "The memory estimate does not fit " + target.label
                          : "The memory estimate leaves little room on " + target.label,
                     "The planner's estimate peaks at " + byteSizeText(e.peakBytes) + (lowerBound ? " or more" : "")
                         + " during " + e.peakPhase + ", " + share
                         + " of the " + byteSizeText(target.memoryBytes) + " usable; the largest terms: " + dominant + ".",
                     "");
    f.numbers["estimated_peak_bytes"] = static_cast<double>(e.peakBytes);
    f.numbers["usable_bytes"] = static_cast<double>(target.memoryBytes);
    f.text["dominant_terms"] = dominant;
    const auto budget = target.memoryBytes;
    const std::int64_t room = roomyPeakBytes(budget);
    const int effective = c.train.batchSize * c.train.gradAccum;
    RunConfig nf4;
    const auto nf4Plan = nf4Fits(c, target, t, nf4);
    const std::string nf4Text = nf4Plan ? " Or store the frozen base in NF4 (QLoRA, model.quantize \"nf4\"): its own step's plan peaks at "
            + byteSizeText(nf4Plan->peakBytes) + " at batch " + std::to_string(c.train.batchSize) + ", with room."
                                        : std::string();
    // The plan the fixes are found on: its own step's.
    const MemoryPlan memory(derived, arch);
    const std::int64_t seqFit = memory.largestSequence(setup.batch, setup, budget);
    const std::int64_t largest = memory.largestBatch(setup.seqLen, setup, budget);
    f.numbers["largest_batch"] = static_cast<double>(largest);
    f.numbers["largest_seq_len"] = static_cast<double>(seqFit);
    // A fix leaves the 10% room whose lack is itself a warning, so applying
    // it creates no new finding.
    PlansByAccum plans(c, memory, target, t);
    const auto [batch, accum] = batchKeepingEffective(std::ref(plans), setup, room, effective);
    if (batch > 0 && batch < c.train.batchSize) {
        f.fix = "Batch " + std::to_string(batch) + " fits with 10% to spare (at sequence " + std::to_string(setup.seqLen)
            + "); keep the effective batch of " + std::to_string(effective) + " with gradient accumulation "
            + std::to_string(accum) + ". Or: sequence " + std::to_string(seqFit) + " at batch "
            + std::to_string(c.train.batchSize) + ", activation checkpointing, " + (c.lora.rank > 0 ? "" : "LoRA, ")
            + "or a larger GPU." + nf4Text;
        f.autoFix = {{"train.batch_size", std::to_string(batch)}, {"train.grad_accum", std::to_string(accum)}};
        f.autoFixLabel = "Use batch " + std::to_string(batch) + " x accumulation " + std::to_string(accum);
    } else if (batch == 0) {
        // With activation checkpointing: that step's own plan, derived with it.
        auto s = setup;
        s.checkpointing = true;
        auto withIt = c;
        withIt.train.activationCheckpointing = true;
        std::optional<MemoryPlan> checkpointed;
        if (nf4Plan || c.train.activationCheckpointing) {
            // (NF4 is the fix, or checkpointing is on already.)
        } else if (auto step = ownStepPlan(withIt, target, t)) {
            checkpointed.emplace(std::move(step), arch);
        }
        std::pair<std::int64_t, int> found{0, 1};
        if (checkpointed) {
            PlansByAccum checkpointedPlans(withIt, *checkpointed, target, t);
            found = batchKeepingEffective(std::ref(checkpointedPlans), s, room, effective, c.train.batchSize);
        }
        const auto [b, bAccum] = found;
        if (nf4Plan) {
            // Nothing fits at this batch but the base in 4 bits does: keep the run as it is, quantize its base.
            char nf4Share[16];
            std::snprintf(nf4Share, sizeof nf4Share, "%.0f%%", 100.0 * static_cast<double>(nf4Plan->peakBytes) / static_cast<double>(budget));
            f.fix = std::string(largest > 0 ? "At most batch " + std::to_string(largest) + " fits, with under 10% to spare."
                                            : "Not even batch 1 fits as configured.")
                + " With the frozen base stored in NF4 (QLoRA: 4-bit NormalFloat, double-quantized scales) this run fits as "
                  "it is: its own step's plan peaks at "
                + byteSizeText(nf4Plan->peakBytes) + " during " + nf4Plan->peakPhase + ", " + nf4Share + " of "
                + byteSizeText(budget) + ".";
            f.numbers["nf4_peak_bytes"] = static_cast<double>(nf4Plan->peakBytes);
            f.autoFix = {{"model.quantize", "\"nf4\""}};
            if (c.train.weightsDtype != "fp32") f.autoFix.push_back({"train.weights_dtype", "\"fp32\""});
            f.autoFixLabel = "Store the base in NF4 (QLoRA)";
        } else if (b > 0) {
            f.fix = (largest > 0 ? "At most batch " + std::to_string(largest) + " fits, with under 10% to spare."
                                 : std::string("Not even batch 1 fits as configured."))
                + " With activation checkpointing batch " + std::to_string(b)
                + " fits with room; keep the effective batch with gradient accumulation " + std::to_string(bAccum) + ".";
            f.autoFix = {{"train.activation_checkpointing", "true"},
                         {"train.batch_size", std::to_string(b)},
                         {"train.grad_accum", std::to_string(bAccum)}};
            f.autoFixLabel = "Checkpointing, batch " + std::to_string(b) + " x accumulation " + std::to_string(bAccum);
        } else {
            f.fix = (largest > 0 ? "Batch 1 fits at sequence " + std::to_string(setup.seqLen) + " with under 10% to spare"
                                 : "Not even batch 1 fits at sequence " + std::to_string(setup.seqLen))
                + ". Shorten the sequence"
                + (seqFit > 0 ? " (" + std::to_string(seqFit) + " fits at this batch)" : std::string())
                + (c.lora.rank > 0 ? ", use a smaller model or a GPU with more memory."
                                   : ", train LoRA adapters, use a smaller model or a GPU with more memory.");
        }
    } else if (batch < 0) {
        // (A step with gradient accumulation is traced apart: PlansByAccum.)
        f.fix = "A smaller batch with gradient accumulation is checked on its own step's plan, which is not derived yet "
                "(the Diagnostics panel checks again once it is). Meanwhile: activation checkpointing, a shorter "
                "sequence or a GPU with more memory." + nf4Text;
    } else {
        f.fix = "It fits, barely: allocator fragmentation or another process can push it over. Leave some room: a "
            "smaller batch with gradient accumulation, or activation checkpointing." + nf4Text;
    }
    out.push_back(std::move(f));
}

} // namespace

std::vector<Finding> configIssueFindings(const std::vector<ConfigIssue>& issues)
{
    std::vector<Finding> out;
    for (const auto& issue : issues) {
        std::string kind = "config_invalid";
        if (issue.path == "optim.lr") kind = "learning_rate";
        else if (issue.path == "optim.warmup_steps") kind = "warmup_steps";
        else if (issue.path == "data.path") kind = "dataset_missing";
        auto f = make(kind, Severity::Error,
                      kind == "learning_rate"     ? "The learning rate is not positive"
                      : kind == "dataset_missing" ? "The dataset file is missing"
                                                  : "The config is not valid",
                      issue.text(), "Correct " + (issue.path.empty() ? std::string("the config") : issue.path) + " and check again.");
        f.text["field"] = issue.path;
        out.push_back(std::move(f));
    }
    return out;
}

std::vector<Finding> runPreflight(const RunConfig& config, const PreflightTarget& target, bool checkFiles)
{
    if (auto issues = validateConfig(config, checkFiles); !issues.empty()) return configIssueFindings(issues);
    std::vector<Finding> out;
    const Target resolved = resolveTarget(config, target, out);
    if (!resolved.known) {
        out.push_back(make("no_target", Severity::Info, "No target GPU",
                           "No GPU was named and this machine was not checked, so capability and memory rules did not run.",
                           "Name the GPU the run is for (--gpu T4, or the Hardware panel's target)."));
    }
    std::string precision;
    precisionRules(config, resolved, out, precision);
    attentionRule(config, resolved, out);
    setupRules(config, out);
    dataRules(config, out);
    modelFileRules(config, target.model, out);
    memoryRules(config, resolved, target, out);
    std::stable_sort(out.begin(), out.end(),
                     [](const Finding& a, const Finding& b) { return static_cast<int>(a.severity) > static_cast<int>(b.severity); });
    return out;
}

RunConfig applyAutoFix(const RunConfig& config, const std::vector<ConfigChange>& changes)
{
    auto j = nlohmann::json::parse(configToJson(config));
    for (const auto& change : changes) {
        nlohmann::json* node = &j;
        std::size_t start = 0;
        while (true) {
            const auto dot = change.path.find('.', start);
            const std::string key = change.path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
            if (dot == std::string::npos) {
                (*node)[key] = nlohmann::json::parse(change.valueJson);
                break;
            }
            node = &(*node)[key];
            start = dot + 1;
        }
    }
    return parseConfig(j.dump(), config.name, config.baseDir);
}

std::int64_t hostMemoryBytes()
{
    const long pages = ::sysconf(_SC_PHYS_PAGES);
    const long pageSize = ::sysconf(_SC_PAGE_SIZE);
    if (pages <= 0 || pageSize <= 0) return 0;
    return static_cast<std::int64_t>(pages) * pageSize;
}

} // namespace tb
