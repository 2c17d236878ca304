// bench_step_programs: the Llama family's step as programs recorded at small
// widths (train/DerivedPlan.h recordStepPrograms), evaluated at published
// models' widths, against the hand replay (memory/Estimator.cpp):
//   - how long recording takes, and how many probe steps;
//   - on the CPU: the derived plan's peak against the hand replay's (bytes);
//   - on an A100 (LibTorch as built): the programs replayed on the caching
//     allocator model, with no device rules yet, against the hand replay's
//     max_memory_allocated and max_memory_reserved (percent).
// A folder with a head size of its own (Qwen3 0.6B's layout) has no exact
// hand replay: its row shows how far under the replay planned it.
// Run from the source tree: bench_step_programs [FOLDER_OF_PRESETS] [WORDS]
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "config/RunConfig.h"
#include "memory/Estimator.h"
#include "memory/StepProgram.h"
#include "train/DerivedPlan.h"

namespace fs = std::filesystem;

namespace {

std::string readText(const fs::path& p)
{
    std::ifstream in(p);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

double percent(std::int64_t a, std::int64_t b) { return 100.0 * (static_cast<double>(a) / static_cast<double>(b) - 1.0); }

void bench(const std::string& label, const std::string& configJson, const fs::path& scratch)
{
    const auto folder = scratch / label;
    fs::create_directories(folder);
    std::ofstream(folder / "config.json") << configJson;
    if (const auto at = configJson.find("\"head_dim\""); at != std::string::npos) {
        fs::create_directories(folder / "as-planned");
        auto asPlanned = configJson;
        asPlanned.erase(at, asPlanned.find(',', at) + 1 - at);
        std::ofstream(folder / "as-planned" / "config.json") << asPlanned;
    }
    tb::RunConfig c;
    c.device = "cpu";
    c.model.type = "hf";
    c.model.path = folder.string();
    c.data.source = "tokens";
    c.data.path = (folder / "train.bin").string();
    c.data.tokenDtype = "uint32";
    c.train.evalBatches = 2;
    c.train.threads = 1;
    struct Setup {
        const char* precision;
        int rank;
    };
    for (const auto& s : {Setup{"fp32", 0}, Setup{"fp32", 16}, Setup{"bf16", 0}, Setup{"bf16", 16}}) {
        c.train.precision = s.precision;
        c.lora.rank = s.rank;
        c.lora.targets = {"q_proj", "v_proj"};
        int steps = 0;
        tb::DerivedPlanProgress progress;
        progress.onTrace = [&steps](int n, std::int64_t, std::int64_t) { steps = n; };
        std::string why;
        const auto t0 = std::chrono::steady_clock::now();
        const auto programs = tb::recordStepPrograms(c, &why, progress);
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (!programs) {
            std::printf("%-16s %-4s lora %2d  no program: %s\n", label.c_str(), s.precision, s.rank, why.c_str());
            continue;
        }
        for (const auto& [batch, seq] : {std::pair{1, 2048}, std::pair{4, 512}}) {
            c.train.batchSize = batch;
            c.data.seqLen = seq;
            const auto step = programs->at(batch, seq);
            const auto cpuTrace = tb::replayStep(step);
            std::int64_t cpuPeak = 0;
            for (std::size_t i = 0; i < cpuTrace.live.size(); ++i) cpuPeak = std::max(cpuPeak, cpuTrace.transient[i]);
            auto arch = tb::architectureFor(c);
            if (!arch.notExact.empty()) {
                // What the hand replay planned: the folder read with hidden / heads as the head size.
                auto asIf = c;
                asIf.model.path = (folder / "as-planned").string();
                arch = tb::architectureFor(asIf);
            }
            const auto hand = tb::estimateMemory(arch, tb::setupFor(c));
            auto gpu = tb::setupFor(c);
            gpu.gpu = true;
            gpu.computeCapability = 80;
            const auto handGpu = tb::estimateMemory(arch, gpu);
            const auto replay = tb::replayOnCudaAllocator(step);
            std::printf("%-16s %-4s lora %2d  %5.1f s %2d steps  B %d T %4d  cpu: %+14lld bytes vs hand  a100: "
                        "allocated %+6.2f%%, reserved %+6.2f%%%s\n",
                        label.c_str(), s.precision, s.rank, seconds, steps, batch, seq,
                        static_cast<long long>(cpuPeak - hand.peakBytes), percent(replay.peakAllocated, handGpu.allocatedPeakBytes),
                        percent(replay.peakReserved, handGpu.reservedPeakBytes),
                        configJson.find("head_dim") == std::string::npos ? "" : "  (hand: the folder as it planned it, head size hidden / heads)");
        }
    }
}

} // namespace

int main(int argc, char** argv)
{
    const fs::path presets = argc > 1 ? argv[1] : "resources/architectures";
    const std::string only = argc > 2 ? argv[2] : "";
    const auto scratch = fs::temp_directory_path() / "bench_step_programs";
    fs::create_directories(scratch);
    std::vector<std::pair<std::string, std::string>> models;
    for (const char* id : {"tinyllama-1.1b", "qwen2.5-0.5b", "llama-2-7b", "mistral-7b", "qwen2.5-7b"}) {
        const auto path = presets / (std::string(id) + ".json");
        if (!fs::exists(path)) {
            std::fprintf(stderr, "bench_step_programs: %s is missing (run from the source tree, or name the presets folder)\n",
                         path.c_str());
            return 2;
        }
        models.emplace_back(id, readText(path));
    }
    // Qwen3 0.6B's layout (its config.json's sizes): 16 heads of 128 over hidden 1024.
    models.emplace_back("qwen3-0.6b-like", R"({"model_type": "qwen2", "vocab_size": 151936, "hidden_size": 1024,
        "intermediate_size": 3072, "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8,
        "head_dim": 128, "max_position_embeddings": 40960, "rms_norm_eps": 1e-06, "hidden_act": "silu",
        "rope_theta": 1000000.0, "tie_word_embeddings": true})");
    for (const auto& [id, json] : models) {
        if (id.find(only) == std::string::npos) continue;
        bench(id, json, scratch);
        std::fflush(stdout);
    }
    fs::remove_all(scratch);
    return 0;
}
