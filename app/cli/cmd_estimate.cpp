// trainbench-cli estimate / fit: the memory planner on the command line.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "Command.h"
#include "common/Errors.h"
#include "config/RunConfig.h"
#include "diagnose/TargetPlan.h"
#include "gpu/Catalogue.h"
#include "memory/Architectures.h"
#include "memory/Estimator.h"
#include "memory/Verdict.h"
#include "memory/MemoryPlan.h"
#include "train/DerivedPlan.h"

namespace tb::cli {
namespace {

std::vector<std::string> splitList(const std::string& text)
{
    std::vector<std::string> out;
    std::stringstream in(text);
    for (std::string item; std::getline(in, item, ',');) {
        if (!item.empty()) out.push_back(item);
    }
    return out;
}

// The context and caching-allocator options of a GPU plan.
void applyGpuOptions(const Args& args, TrainingSetup& s)
{
    if (auto c = args.integer("--cuda-context", 1, 1LL << 40)) s.cudaContextBytes = *c;
    if (args.value("--allocator-slack")) {
        throw InputError("--allocator-slack is gone: the plan now replays the step through a model of the CUDA caching "
                         "allocator; set its options with --max-split-size-mb N or --expandable-segments");
    }
    if (!s.gpu) {
        for (const char* option : {"--max-split-size-mb", "--expandable-segments", "--cuda-context"}) {
            if (args.value(option) || args.flag(option)) {
                throw InputError(std::string(option) + " describes a GPU's caching allocator or context; name the card with --gpu");
            }
        }
    }
    if (auto n = args.integer("--max-split-size-mb", 21, 1 << 30)) s.maxSplitSize = *n << 20;
    if (args.flag("--expandable-segments")) {
        // (The build's major version is all the planner knows: 2.0 had no expandable segments.)
        if (s.torchMajor < 2) throw InputError("--expandable-segments needs LibTorch 2.1 or later; this build runs 1.13");
        s.expandableSegments = true;
    }
}

// The trainer's precisions, as --precision takes them.
bool knownPrecision(const std::string& p) { return p == "fp32" || p == "fp16" || p == "bf16" || p == "bf16-pure"; }

nlohmann::json toJson(const MemoryEstimate& e)
{
    nlohmann::json components = nlohmann::json::object(), formulas = nlohmann::json::object(),
                   phases = nlohmann::json::object();
    for (const auto& t : e.terms) {
        components[t.name] = t.bytes;
        formulas[t.name] = t.formula;
    }
    for (const auto& p : e.phases) phases[p.phase] = p.bytes;
    nlohmann::json out = {{"peak_bytes", e.peakBytes}, {"tensor_peak_bytes", e.tensorPeakBytes}, {"peak_phase", e.peakPhase}, {"components", components},
            {"formulas", formulas},      {"phase_peak_bytes", phases}, {"parameters", e.parameters},
            {"trainable_parameters", e.trainableParameters}, {"notes", e.notes}, {"end_of_step_bytes", e.endOfStepBytes}};
    if (e.reservedPeakBytes > 0) {
        // As torch.cuda.max_memory_allocated and max_memory_reserved report them.
        out["allocated_peak_bytes"] = e.allocatedPeakBytes;
        out["reserved_peak_bytes"] = e.reservedPeakBytes;
    }
    return out;
}

void printEstimate(const MemoryEstimate& e)
{
    std::printf("%lld parameters (%lld trainable)\n", static_cast<long long>(e.parameters),
                static_cast<long long>(e.trainableParameters));
    std::printf("peak %.3f MiB (%lld bytes), during %s; live at the peak:\n", mib(e.peakBytes),
                static_cast<long long>(e.peakBytes), e.peakPhase.c_str());
    for (const auto& t : e.terms) {
        std::printf("  %-16s %12.3f MiB  %s\n", t.name.c_str(), mib(t.bytes), t.formula.c_str());
    }
    std::printf("phase peaks:");
    for (const auto& p : e.phases) std::printf("  %s %.3f MiB", p.phase.c_str(), mib(p.bytes));
    std::printf("\n");
    if (e.reservedPeakBytes > 0) {
        std::printf("caching allocator: max_memory_allocated %.3f MiB, max_memory_reserved %.3f MiB\n",
                    mib(e.allocatedPeakBytes), mib(e.reservedPeakBytes));
    }
    for (const auto& n : e.notes) std::printf("note: %s\n", n.c_str());
}

// Preflight's verdict on the planned precision for this card; empty when it can run.
std::string precisionProblem(const GpuTarget& gpu, const TrainingSetup& setup)
{
    return precisionError(setup.precision, gpu.gpu.cc.known() ? std::optional<ComputeCapability>(gpu.gpu.cc) : std::nullopt);
}

nlohmann::json gpuJson(const GpuTarget& gpu, const TrainingSetup& setup, const MemoryEstimate& e)
{
    const auto usable = gpu.gpu.memoryBytes;
    const auto problem = precisionProblem(gpu, setup);
    nlohmann::json out = {{"name", gpu.label()},
                          {"memory_bytes", usable},
                          {"precision", setup.precision},
                          {"verdict", verdictKey(memoryVerdict(e.peakBytes, usable, problem))},
                          {"fits", e.peakBytes <= usable},
                          {"use_fraction", static_cast<double>(e.peakBytes) / static_cast<double>(usable)},
                          {"lower_bound", e.lowerBound}};
    if (!problem.empty()) out["precision_error"] = problem;
    return out;
}

// One line, one verdict: a precision the card lacks is the verdict, whatever
// the memory (the share is still shown).
void printVerdict(const GpuTarget& gpu, const TrainingSetup& setup, const MemoryEstimate& e)
{
    const double use = static_cast<double>(e.peakBytes) / static_cast<double>(gpu.gpu.memoryBytes);
    const auto problem = precisionProblem(gpu, setup);
    const auto verdict = memoryVerdict(e.peakBytes, gpu.gpu.memoryBytes, problem);
    std::string words = verdictWords(verdict);
    if (verdict == MemoryVerdict::DoesNotRun) words += ": " + setup.precision + " " + problem;
    std::printf("%s: %.2f GiB usable per card; %s; the estimate uses %s%.0f%%: %s\n", gpu.label().c_str(),
                gpu.gpu.memoryBytes / (1024.0 * 1024.0 * 1024.0), setup.precision.c_str(),
                e.lowerBound ? "at least " : "", 100 * use, words.c_str());
    if (!gpu.note.empty()) std::printf("note: %s\n", gpu.note.c_str());
}

int listPresets()
{
    std::printf("%-16s %-22s %16s  %s\n", "preset", "model", "parameters", "source");
    for (const auto& p : bundledArchitectures()) {
        std::printf("%-16s %-22s %16lld  %s\n", p.id.c_str(), p.title.c_str(),
                    static_cast<long long>(p.arch.publishedParameters), p.source.c_str());
    }
    return kExitOk;
}

// fit's answer and the plan at it, as text or JSON; exit 1 when nothing fits.
int printFit(const Args& args, bool bySeq, std::int64_t answer, std::int64_t budget, const MemoryEstimate& e)
{
    if (args.flag("--json")) {
        nlohmann::json out = {{bySeq ? "max_seq_len" : "max_batch", answer}, {"budget_bytes", budget},
                              {"estimate_at_limit", toJson(e)}};
        std::cout << out.dump(2) << "\n";
    } else {
        if (answer == 0) std::printf("nothing fits %lld bytes; at 1 the estimate is:\n", static_cast<long long>(budget));
        else std::printf("%s: %lld (budget %.3f MiB)\n", bySeq ? "largest sequence length" : "largest batch",
                         static_cast<long long>(answer), mib(budget));
        printEstimate(e);
    }
    return answer == 0 ? kExitFailed : kExitOk;
}

// estimate/fit: the plan from the trainer's own step, traced at small
// shapes on this machine's CPU.
struct Derived {
    RunConfig config;
    DerivedStep step;
    std::shared_ptr<const std::string> scratch; // a published model's scratch folder, while it is planned
};

// The text of --preset's or --hf-config's config.json, and where it is from.
std::optional<std::pair<std::string, std::string>> publishedConfig(const Args& args)
{
    if (const auto preset = args.value("--preset")) {
        const auto& p = findArchitecture(*preset);
        return std::pair{p.configJson, "resources/architectures/" + p.id + ".json"};
    }
    const auto hf = args.value("--hf-config");
    if (!hf) return std::nullopt;
    return std::pair{readHfConfigText(*hf), *hf};
}

// A published model (a preset, or a config.json alone) as an experiment to
// trace (memory/Architectures.h), at --seq tokens and on --gpu's device.
RunConfig publishedExperiment(const Args& args, std::shared_ptr<const std::string>& scratch)
{
    const auto published = publishedConfig(args);
    auto experiment = tb::publishedExperiment(published->first, published->second);
    scratch = experiment.folder;
    auto& c = experiment.config;
    if (args.value("--gpu")) c.device = "cuda"; // fp16 is CUDA's
    if (auto t = args.integer("--seq", 1, 1 << 20)) c.data.seqLen = static_cast<int>(*t);
    return c;
}

Derived derivedFromArgs(const Args& args, const char* command, const std::optional<GpuTarget>& gpu = std::nullopt)
{
    if (!args.positionals().empty()) {
        throw InputError(std::string("'") + command + "' takes no positional arguments, got \"" + args.positionals()[0]
                         + "\"");
    }
    const auto path = args.value("--config");
    const int sources = (path ? 1 : 0) + (args.value("--preset") ? 1 : 0) + (args.value("--hf-config") ? 1 : 0);
    if (sources != 1) {
        throw InputError(std::string("'") + command
                         + "' needs exactly one of --config FILE, --preset NAME (see --list-presets) or --hf-config FILE");
    }
    if (args.value("--attention-modules")) {
        throw InputError("--attention-modules is gone: the plan is the trainer's own step, traced with the attention "
                         "modules the trainer builds");
    }
    {
        // The card's options are checked before anything is traced.
        TrainingSetup card;
        card.gpu = gpu.has_value();
        applyGpuOptions(args, card);
    }
    std::shared_ptr<const std::string> scratch;
    RunConfig config = path ? loadConfigFile(*path) : publishedExperiment(args, scratch);
    if (auto b = args.integer("--batch", 1, 1 << 20)) config.train.batchSize = static_cast<int>(*b);
    if (auto t = args.integer("--seq", 1, 1 << 20)) config.data.seqLen = static_cast<int>(*t);
    if (args.flag("--checkpointing")) config.train.activationCheckpointing = true;
    if (auto r = args.integer("--lora-rank", 0, 4096)) config.lora.rank = static_cast<int>(*r);
    if (auto t = args.value("--lora-targets")) config.lora.targets = splitList(*t);
    if (auto n = args.integer("--grad-accum", 1, 1 << 16)) config.train.gradAccum = static_cast<int>(*n);
    // Data parallel: one rank's step is traced; the plan adds the ranks' buckets and rows.
    if (auto g = args.integer("--gpus", 1, 1024)) config.train.worldSize = static_cast<int>(*g);
    if (auto p = args.value("--precision")) {
        if (!knownPrecision(*p)) {
            throw InputError("--precision must be fp32, fp16, bf16 (mixed, fp32 master weights) or bf16-pure, got \""
                             + *p + "\"");
        }
        config.train.precision = *p; // the trainer's own names, bf16-pure included
    }
    // fp16 is CUDA's: the step traced on this CPU is the one a GPU runs.
    if (config.train.precision == "fp16" && config.device.rfind("cuda", 0) != 0) config.device = "cuda";
    // The attention path the trainer takes (fused: SDPA, LibTorch 2.x).
    if (auto a = args.value("--attention")) {
        if (*a != "eager" && *a != "fused") throw InputError("--attention must be eager or fused, got \"" + *a + "\"");
        config.model.attention = *a == "fused" ? "sdpa" : "eager";
    }
    if (auto o = args.value("--optimizer")) {
        if (*o != "adamw" && *o != "sgd" && *o != "sgd-plain") {
            throw InputError("--optimizer must be adamw, sgd (with momentum) or sgd-plain, the trainer's optimizers (the "
                             "plan traces the step the trainer runs), got \"" + *o + "\"");
        }
        config.optim.optimizer = *o == "adamw" ? "adamw" : "sgd";
        if (*o == "sgd-plain") config.optim.momentum = 0;
        if (*o == "sgd" && config.optim.momentum <= 0) config.optim.momentum = 0.9;
    }
    if (auto issues = validateConfig(config, true); !issues.empty()) {
        throw ConfigError(path ? *path : config.name + " (planned as an experiment)", std::move(issues));
    }
    // The step traced is the one the target runs: "auto" precision resolved
    // there (fp16 on a T4), as the Memory planner traces it.
    if (gpu && config.train.precision == "auto") config.train.precision = planOnTarget(config, gpu).setup.precision;
    if (!path) loadBaseAsPublished(config);
    DerivedPlanProgress progress;
    progress.onTrace = [](int traced, std::int64_t b, std::int64_t t) {
        std::fprintf(stderr, "traced step %d (batch %lld, sequence %lld)\n", traced, static_cast<long long>(b),
                     static_cast<long long>(t));
    };
    auto step = deriveStep(config, progress);
    return {std::move(config), std::move(step), std::move(scratch)};
}

// The setup a derived plan is evaluated for (--gpu NAME, else this
// machine's CPU), with the context and allocator options.
TrainingSetup derivedSetup(const Args& args, const RunConfig& config, const std::optional<GpuTarget>& gpu)
{
    auto setup = planOnTarget(config, gpu).setup;
    applyGpuOptions(args, setup);
    return setup;
}

// --gpu's card, with --gpus replicas of it.
std::optional<GpuTarget> gpuFromArgs(const Args& args)
{
    std::optional<GpuTarget> gpu;
    if (auto name = args.value("--gpu")) gpu = GpuCatalogue::bundled().resolve(*name);
    if (auto replicas = args.integer("--gpus", 1, 1024); replicas && gpu) gpu->count = static_cast<int>(*replicas);
    return gpu;
}

// Without --gpus, a card named without a count ("T4") is one of the
// config's train.world_size ranks, as --gpus says (the trace already has
// them: derivedFromArgs).
void replicasFromConfig(const Args& args, const RunConfig& config, std::optional<GpuTarget>& gpu)
{
    if (gpu && !args.value("--gpus") && gpu->count == 1 && config.train.worldSize > 1) gpu->count = config.train.worldSize;
}

int estimate(const Args& args)
{
    if (args.flag("--list-presets")) return listPresets();
    // The model's own step, traced at small widths. On a GPU: the programs
    // by the device rules on the allocator's model (the Llama and GPT
    // families, where the card's kernels have rules); else the traced
    // tensors plus the context and workspaces, a lower bound.
    auto gpu = gpuFromArgs(args);
    auto [config, step, scratch] = derivedFromArgs(args, "estimate", gpu);
    replicasFromConfig(args, config, gpu);
    const auto setup = derivedSetup(args, config, gpu);
    const MemoryPlan plan(std::make_shared<const DerivedStep>(std::move(step)), ArchitectureSpec{});
    const auto e = plan.at(config.train.batchSize, effectiveSeqLen(config), setup);
    if (args.flag("--json")) {
        auto out = toJson(e);
        if (gpu) out["gpu"] = gpuJson(*gpu, setup, e);
        auto text = out.dump(2);
        // The compiled step and its programs: the plan at any batch and
        // sequence (the Memory planner reads it), written compact (a 7B
        // model's programs are about 1.5 MB; indented, several times that).
        text.insert(text.size() - 2, ",\n  \"derived_step\": " + derivedStepToJson(plan.step()));
        std::cout << text << "\n";
    } else {
        printEstimate(e);
        if (gpu) printVerdict(*gpu, setup, e);
    }
    return kExitOk;
}

// The largest batch (or, with --batch, sequence) whose plan fits --budget or the card.
int fit(const Args& args)
{
    auto budget = args.integer("--budget", 1, (1LL << 62));
    auto gpu = gpuFromArgs(args);
    if (budget && gpu) throw InputError("'fit' takes --gpu NAME or --budget BYTES, not both");
    if (!budget && !gpu) throw InputError("'fit' needs --gpu NAME (a card from the catalogue) or --budget BYTES");
    auto [config, step, scratch] = derivedFromArgs(args, "fit", gpu);
    replicasFromConfig(args, config, gpu);
    const auto setup = derivedSetup(args, config, gpu); // (its accumulation and ranks: the plan adds their data)
    const auto batch = config.train.batchSize;
    const auto seqLen = effectiveSeqLen(config);
    const bool fixedSeq = step.fixedSeqLen > 0;
    const auto plan = std::make_optional<MemoryPlan>(std::make_shared<const DerivedStep>(std::move(step)), ArchitectureSpec{});
    if (const auto why = gpu ? plan->notExactOn(setup) : std::string(); !why.empty()) {
        throw InputError("on this GPU the plan is a lower bound (" + why
                         + "): 'fit' would overstate what fits; estimate --gpu NAME shows the bound, or give "
                           "--budget BYTES for the CPU's plan");
    }
    if (gpu) budget = gpu->gpu.memoryBytes;
    const bool bySeq = args.value("--batch").has_value() && !args.value("--seq").has_value() && !fixedSeq;
    const auto answer = bySeq ? plan->largestSequence(batch, setup, *budget) : plan->largestBatch(seqLen, setup, *budget);
    const auto shown = std::max<std::int64_t>(answer, 1);
    return printFit(args, bySeq, answer, *budget, bySeq ? plan->at(batch, shown, setup) : plan->at(shown, seqLen, setup));
}

const std::vector<OptionSpec> kPlanOptions{
    {"--config", true, "the experiment config (JSON)", "FILE"},
    {"--preset", true, "a bundled architecture (estimate --list-presets)", "NAME"},
    {"--hf-config", true, "a Hugging Face config.json of a decoder-only model", "FILE"},
    {"--gpu", true, "plan for a catalogue GPU (\"T4\", \"2xA10G\"): the step by CUDA's rules on its caching allocator, with the CUDA context", "NAME"},
    {"--gpus", true, "data parallel: N replicas, each planned (GPUs of --gpu, or processes on the CPU; default: the "
                     "config's train.world_size)", "N"},
    {"--batch", true, "batch size (default: the config's; 1 for presets)", "N"},
    {"--seq", true, "sequence length (default: the config's; 512 for presets)", "N"},
    {"--precision", true, "fp32, fp16 or bf16 (mixed, fp32 master weights), bf16-pure", "P"},
    {"--optimizer", true, "adamw, sgd (momentum) or sgd-plain", "NAME"},
    {"--checkpointing", false, "plan with activation checkpointing"},
    {"--attention", true, "eager (keeps batch x heads x seq^2 maps) or fused (no maps)", "KIND"},
    {"--attention-modules", true, "removed: the trainer's own modules are traced", "N"},
    {"--grad-accum", true, "gradient accumulation steps", "N"},
    {"--lora-rank", true, "LoRA rank (0: full fine-tuning)", "R"},
    {"--lora-targets", true, "with --lora-rank: projections to adapt (attn, mlp or names; a preset's default attn)", "LIST"},
    {"--cuda-context", true, "GPU: the CUDA context in bytes (default: the published figure for the card's "
                             "compute capability, else 287047680)", "BYTES"},
    {"--max-split-size-mb", true, "GPU: the caching allocator's max_split_size_mb (default unlimited)", "N"},
    {"--expandable-segments", false, "GPU: the caching allocator's expandable_segments:True (LibTorch 2.1 and later)"},
    {"--allocator-slack", true, "removed: the caching allocator is modelled (see --max-split-size-mb)", "F"},
    {"--json", false, "print JSON (peak_bytes, components, phase_peak_bytes)"}};

std::vector<OptionSpec> estimateOptions()
{
    auto o = kPlanOptions;
    o.push_back({"--list-presets", false, "list the bundled architecture presets"});
    o.push_back({"--derived", false, "accepted for older scripts: every plan is derived from the trainer's own step"});
    return o;
}

std::vector<OptionSpec> fitOptions()
{
    auto o = kPlanOptions;
    o.push_back({"--budget", true, "the tensor memory to fit, in bytes", "BYTES"});
    o.push_back({"--derived", false, "accepted for older scripts: every plan is derived from the trainer's own step"});
    return o;
}

const CommandRegistration estimateRegistration{Command{
    "estimate", "Estimate the memory of a training step, term by term, for a config or a published model.",
    "(--config FILE | --preset NAME | --hf-config FILE) [--gpu NAME] [--batch N] [--seq N] [--json]",
    estimateOptions(), &estimate}};
const CommandRegistration fitRegistration{Command{
    "fit", "The largest batch (or, with --batch, sequence length) whose estimate fits a budget.",
    "(--config FILE | --preset NAME | --hf-config FILE) (--gpu NAME | --budget BYTES) [--batch N | --seq N] [--json]",
    fitOptions(), &fit}};

} // namespace
} // namespace tb::cli
