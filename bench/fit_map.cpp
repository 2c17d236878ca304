// bench_fit_map: how long a 128 x 128 batch x sequence fit map takes (the
// planner panel's heat map), and one slider step (one estimate plus the two
// fit answers), on a model's plan: its step traced at small shapes, derived
// once (timed), then its map and slider step as the Memory planner
// evaluates them. Targets: the map in <= 10 ms, a slider step in <= 30 ms
// on the development machine.
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

// As MemoryPlannerPanel: DerivedStep::fitMap, the answers as fit's.
// longest: the map's longest sequence.
void runDerived(const char* label, const tb::RunConfig& config, const tb::TrainingSetup& setup, std::int64_t budget,
                std::int64_t longest = 4096)
{
    if (skipped(label)) return;
    const auto t0 = std::chrono::steady_clock::now();
    const auto step = tb::deriveStep(config);
    const double deriveMs = millis(std::chrono::steady_clock::now() - t0);
    const auto batches = tb::fitMapAxis(1, 256, 128);
    const auto seqs = tb::fitMapAxis(1, longest, 128);
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
    std::setvbuf(stdout, nullptr, _IOLBF, 0); // (rows as they are measured)
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
    config.device = "cpu";
    config.train.precision = "fp32";
    runDerived("built-in GPT 4x256, text (CPU)", config, tb::setupFor(config), 1LL << 30);
    config.train.precision = "bf16-pure";
    runDerived("the same, pure bf16 (CPU)", config, tb::setupFor(config), 1LL << 30);
    config.train.precision = "bf16";
    runDerived("the same in bf16 (CPU)", config, tb::setupFor(config), 1LL << 30);
    config.train.precision = "fp32";
    // On a GPU a step recorded as programs: each cell's tensors from the
    // device rules' compiled step, the allocator's reserve placed from
    // replays of the programs (docs/derived-plan.md).
    runDerived("the same, on a T4", config, [&] {
        auto s = tb::setupFor(config);
        s.gpu = true;
        s.computeCapability = 75;
        return s;
    }(), t4);
    // A preset from its config.json alone (the probes build their own
    // weights), as the Memory planner plans it: publishedExperiment's
    // scratch folder, the base of a LoRA run in the autocast dtype.
    const auto preset = [&](const char* label, const char* name, const char* precision, int rank, bool checkpointing,
                            const char* attention, int cc, std::int64_t budget, std::int64_t longest = 4096) {
        if (skipped(label)) return;
        if (std::string(attention) == "sdpa" && tb::builtTorchMajor() < 2) {
            std::printf("%-34s skipped: SDPA needs LibTorch 2.x (bench/torch2.sh runs it in the 2.x tree)\n", label);
            return;
        }
        const auto* published = &tb::findArchitecture(name); // (a bundled preset: lives as long as the program)
        auto experiment = tb::publishedExperiment(published->configJson, published->source);
        auto& c = experiment.config;
        c.data.seqLen = 512;
        c.train.batchSize = 2;
        c.lora.rank = rank;
        c.lora.targets = {"q_proj", "v_proj"};
        c.train.precision = precision;
        c.train.activationCheckpointing = checkpointing;
        c.model.attention = attention;
        if (std::string(precision) == "fp16") c.device = "cuda"; // (fp16 is CUDA's)
        tb::loadBaseAsPublished(c);
        auto card = tb::setupFor(c);
        card.gpu = true;
        card.computeCapability = cc;
        runDerived(label, c, card, budget, std::min<std::int64_t>(longest, published->model.maxLen));
    };
    const std::int64_t a100 = 85198045184; // 79.35 GiB
    preset("Llama 2 7B LoRA bf16 on an A100", "llama-2-7b", "bf16", 16, false, "eager", 80, a100);
    preset("Qwen2.5 0.5B full fp16 ckpt on a T4", "qwen2.5-0.5b", "fp16", 0, true, "eager", 75, t4);
    preset("GPT-2 124M fp32 on a T4", "gpt2", "fp32", 0, false, "eager", 75, t4);
    preset("Qwen2.5 0.5B full fp32 ckpt on a T4", "qwen2.5-0.5b", "fp32", 0, true, "eager", 75, t4);
    // Qwen2: biased q, k and v, grouped keys and values, a 152k vocabulary.
    preset("Qwen2.5 1.5B full pure bf16 ckpt SDPA on an A100", "qwen2.5-1.5b", "bf16-pure", 0, true, "sdpa", 80, a100);
    preset("the same, eager", "qwen2.5-1.5b", "bf16-pure", 0, true, "eager", 80, a100);
    // Past its 4096-position window Mistral runs eager attention: each side
    // of the window is its own step (a 7B's full fine-tuning on four A100s'
    // worth of memory, 317 GiB).
    preset("Mistral 7B, as above, SDPA, to 8192, 317 GiB", "mistral-7b", "bf16-pure", 0, true, "sdpa", 80, 4 * a100, 8192);
    preset("Pythia 2.8B full fp32 on a T4", "pythia-2.8b", "fp32", 0, false, "eager", 75, t4);
    return 0;
}
