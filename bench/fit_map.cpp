// bench_fit_map: how long a 128 x 128 batch x sequence fit map takes (the
// planner panel's heat map), and one slider step (one estimate plus the two
// fit answers). Target: the map in <= 10 ms on the development machine.
// The derived plan (a step traced at small shapes) is timed too: deriving it
// once, then its map and slider step as the Memory planner evaluates them.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "memory/Architectures.h"
#include "memory/DerivedStep.h"
#include "memory/Estimator.h"
#include "memory/MemoryPlan.h"
#include "train/DerivedPlan.h"

namespace {

std::string g_only; // bench_fit_map WORDS: only the rows whose label contains WORDS (e.g. "7B")
bool skipped(const char* label) { return std::string(label).find(g_only) == std::string::npos; }

double millis(std::chrono::steady_clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

template <typename F>
double medianMs(int rounds, F&& f)
{
    std::vector<double> times;
    for (int i = 0; i < rounds; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        f();
        times.push_back(millis(std::chrono::steady_clock::now() - t0));
    }
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
}

// longest: the map's longest sequence (0: the model's table, else 4096).
void run(const char* label, const tb::ArchitectureSpec& arch, tb::TrainingSetup setup, std::int64_t budget,
         std::int64_t longest = 0)
{
    if (skipped(label)) return;
    const std::int64_t maxSeq = longest > 0 ? longest
                              : arch.positional == "learned" && !setup.positionsFollowSeq ? arch.maxPositions : 4096;
    const auto batches = tb::fitMapAxis(1, 256, 128);
    const auto seqs = tb::fitMapAxis(1, maxSeq, 128);
    tb::FitMap map;
    const double mapMs = medianMs(7, [&] { map = tb::fitMap(arch, setup, budget, batches, seqs); });
    std::int64_t fitting = 0;
    for (auto b : map.peakBytes) fitting += b <= budget;
    // A slider step as the panel takes it (MemoryPlan::answersAt).
    const tb::MemoryPlan plan(arch);
    const double stepMs = medianMs(21, [&] { (void)plan.answersAt(setup.batch, setup.seqLen, setup, budget, 1 << 16, true); });
    // One replay (on a GPU, through the caching allocator's model).
    const double estimateMs = medianMs(21, [&] { (void)tb::estimateMemory(arch, setup); });
    if (!map.compiled) std::printf("(replayed every cell: the step did not compile)\n");
    std::printf("%-34s map %zux%zu %8.2f ms (%5.2f us/point, %lld cells fit)   slider step %6.3f ms   one estimate %6.3f ms\n",
                label, batches.size(), seqs.size(), mapMs, 1000.0 * mapMs / static_cast<double>(map.peakBytes.size()),
                static_cast<long long>(fitting), stepMs, estimateMs);
}

// As MemoryPlannerPanel: DerivedStep::fitMap, the answers as fit's.
void runDerived(const char* label, const tb::RunConfig& config, const tb::TrainingSetup& setup, std::int64_t budget)
{
    if (skipped(label)) return;
    const auto t0 = std::chrono::steady_clock::now();
    const auto step = tb::deriveStep(config);
    const double deriveMs = millis(std::chrono::steady_clock::now() - t0);
    const auto batches = tb::fitMapAxis(1, 256, 128);
    const auto seqs = tb::fitMapAxis(1, 4096, 128);
    std::vector<std::int64_t> cells;
    const auto map = [&] { cells = step.fitMap(setup, budget, batches, seqs).peakBytes; };
    // The first map asks oneDNN for the scratch of the bf16 products of the
    // cells nearest the budget (CpuGemmScratch caches the answers).
    const auto first = std::chrono::steady_clock::now();
    map();
    const double firstMs = millis(std::chrono::steady_clock::now() - first);
    const double mapMs = medianMs(7, map);
    const tb::MemoryPlan plan(std::make_shared<const tb::DerivedStep>(step), tb::ArchitectureSpec{});
    const double stepMs = medianMs(21, [&] {
        (void)plan.answersAt(config.train.batchSize, config.data.seqLen, setup, budget, 1 << 16, true);
    });
    std::printf("%-34s derived in %.0f ms (%d traced steps); map %zux%zu %8.2f ms (first %.2f ms)   slider step %6.3f ms\n",
                label, deriveMs, step.segment.traces, batches.size(), seqs.size(), mapMs, firstMs, stepMs);
}

} // namespace

int main(int argc, char** argv)
{
    if (argc > 1) g_only = argv[1];
    const std::int64_t t4 = 15655829504; // a T4 as PyTorch reports it
    tb::TrainingSetup gpu;
    gpu.gpu = true;
    // The built-in GPT of a text experiment: learned positions sized to the sequence.
    tb::RunConfig config;
    config.model.nLayer = 4;
    config.model.dModel = 256;
    config.model.nHead = 8;
    config.data.source = "text";
    config.data.seqLen = 256;
    config.train.batchSize = 16;
    run("built-in GPT 4x256, text (CPU)", tb::architectureFor(config), tb::setupFor(config), 1LL << 30);
    run("built-in GPT 4x256, text, pure bf16 (CPU)", tb::architectureFor(config),
        [&] { auto s = tb::setupFor(config); s.precision = "bf16-pure"; return s; }(), 1LL << 30);
    run("built-in GPT 4x256, text, on a T4", tb::architectureFor(config), [&] { auto s = tb::setupFor(config); s.gpu = true; return s; }(), t4);
    run("the same, pure bf16, SDPA (CPU)", tb::architectureFor(config),
        [&] { auto s = tb::setupFor(config); s.precision = "bf16-pure"; s.attention = "fused"; return s; }(), 1LL << 30);
    config.device = "cpu";
    config.train.precision = "fp32";
    runDerived("the same, derived (CPU)", config, tb::TrainingSetup{}, 1LL << 30);
    config.train.precision = "bf16";
    runDerived("the same in bf16, derived (CPU)", config, tb::setupFor(config), 1LL << 30);
    config.train.precision = "fp32";
    // On a GPU the derived plan of a step recorded as programs: each cell's
    // tensors from the device rules' compiled step, the allocator's reserve
    // placed from replays of the programs (docs/derived-plan.md).
    runDerived("the same, derived, on a T4", config, [&] {
        auto s = tb::setupFor(config);
        s.gpu = true;
        s.computeCapability = 75;
        return s;
    }(), t4);
    // A preset from its config.json alone (the probes build their own
    // weights), as the Memory planner plans it: publishedExperiment's
    // scratch folder, the base of a LoRA run in the autocast dtype.
    const auto derivedPreset = [&](const char* label, const char* preset, const char* precision, int rank,
                                   bool checkpointing, int cc, std::int64_t budget) {
        if (skipped(label)) return;
        const auto& published = tb::findArchitecture(preset);
        auto experiment = tb::publishedExperiment(published.configJson, published.source);
        auto& c = experiment.config;
        c.data.seqLen = 512;
        c.train.batchSize = 2;
        c.lora.rank = rank;
        c.lora.targets = {"q_proj", "v_proj"};
        c.train.precision = precision;
        c.train.activationCheckpointing = checkpointing;
        if (std::string(precision) == "fp16") c.device = "cuda"; // (fp16 is CUDA's)
        tb::loadBaseAsPublished(c);
        auto card = tb::setupFor(c);
        card.gpu = true;
        card.computeCapability = cc;
        runDerived(label, c, card, budget);
    };
    derivedPreset("Llama 2 7B LoRA bf16, derived, on an A100", "llama-2-7b", "bf16", 16, false, 80, 85198045184);
    // Mixed precision is planned from its own step too.
    derivedPreset("Qwen2.5 0.5B full fp16 ckpt, derived, on a T4", "qwen2.5-0.5b", "fp16", 0, true, 75, t4);
    run("GPT-2 124M on a T4 (fp32)", tb::findArchitecture("gpt2").arch, gpu, t4);
    // Full fine-tuning in fp32 and pure bf16 (LoRA and mixed precision are
    // planned from their own step: the derived rows above), on cards where
    // part of each map fits.
    auto full = gpu;
    full.checkpointing = true;
    run("Qwen2.5 0.5B full fp32 ckpt on a T4", tb::findArchitecture("qwen2.5-0.5b").arch, full, t4);
    auto flash = full;
    flash.precision = "bf16-pure";
    flash.attention = "fused";
    flash.computeCapability = 80;
    // Qwen2: biased q, k and v, grouped keys and values, a 152k vocabulary.
    run("Qwen2.5 1.5B full pure bf16 ckpt SDPA on an A100", tb::findArchitecture("qwen2.5-1.5b").arch, flash, 85198045184); // 79.35 GiB
    auto eager = flash;
    eager.attention = "eager";
    run("the same, eager", tb::findArchitecture("qwen2.5-1.5b").arch, eager, 85198045184);
    // Past its 4096-position window Mistral runs eager attention: the map
    // compiles each side of the window apart (a 7B's full fine-tuning on
    // four A100s' worth of memory, 317 GiB).
    run("Mistral 7B, as above, SDPA, to 8192, 317 GiB", tb::findArchitecture("mistral-7b").arch, flash, 4 * 85198045184LL, 8192);
    auto heavy = tb::findArchitecture("pythia-2.8b").arch;
    run("Pythia 2.8B full fp32 on a T4", heavy, gpu, t4);
    return 0;
}
