// bench_step_programs: the Llama and GPT families' steps as programs recorded at small
// widths (train/DerivedPlan.h deriveStep), evaluated at published models'
// widths:
//   - how long recording takes, and how many probe steps;
//   - on the CPU: the plan's peak (bytes);
//   - on an A100 (LibTorch as built): the plan's GPU figures (the programs
//     by CUDA's device rules, memory/DeviceRules.h, on the caching allocator
//     model): its peak (what nvidia-smi shows), max_memory_allocated and
//     max_memory_reserved, and how long one GPU plan takes.
// Run from the source tree: bench_step_programs [FOLDER_OF_PRESETS] [WORDS]
#include <array>
#include <chrono>
#include <cstdlib>
#include <map>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "config/RunConfig.h"
#include "memory/Estimator.h"
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


void bench(const std::string& label, const std::string& configJson, const fs::path& scratch)
{
    const auto folder = scratch / label;
    fs::create_directories(folder);
    std::ofstream(folder / "config.json") << configJson;
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
        bool checkpointing;
        double dropout;
    };
    for (const auto& s : {Setup{"fp32", 0, false, 0.0}, Setup{"fp32", 16, false, 0.0}, Setup{"bf16", 0, false, 0.0},
                          Setup{"bf16", 16, false, 0.0}, Setup{"bf16", 16, true, 0.1}, Setup{"fp32", 0, true, 0.1}}) {
        c.train.precision = s.precision;
        c.lora.rank = s.rank;
        // (The GPT family's folders: the attention's fused projection.)
        c.lora.targets = configJson.find("\"gpt") != std::string::npos ? std::vector<std::string>{"attn"}
                                                                        : std::vector<std::string>{"q_proj", "v_proj"};
        c.train.activationCheckpointing = s.checkpointing;
        c.model.dropout = s.dropout;
        int steps = 0;
        tb::DerivedPlanProgress progress;
        progress.onTrace = [&steps](int n, std::int64_t, std::int64_t) { steps = n; };
        const auto t0 = std::chrono::steady_clock::now();
        tb::DerivedStep derived;
        try {
            derived = tb::deriveStep(c, progress);
        } catch (const std::exception& e) {
            std::printf("%-16s %-4s lora %2d  no plan: %s\n", label.c_str(), s.precision, s.rank, e.what());
            continue;
        }
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        {
            tb::TrainingSetup a100;
            a100.gpu = true;
            a100.computeCapability = 80;
            a100.precision = s.precision;
            if (const auto why = derived.notExactOn(a100); !why.empty()) {
                std::printf("%-16s %-4s lora %2d  not exact on an A100: %s\n", label.c_str(), s.precision, s.rank, why.c_str());
            }
        }
        if (std::getenv("TB_DEBUG_OPS") && derived.programs) {
            const auto& shape = derived.programs->programs[2].shape;
            std::map<std::string, std::array<int, 3>> count;
            for (const auto& e : shape.events) {
                if (e.bytes <= 0) continue;
                auto& n = count[shape.opName(e) + " e" + std::to_string(e.elementBytes)];
                ++n[0];
                if (e.firstInOp) ++n[1];
            }
            for (const auto& [op, n] : count) std::printf("  %-50s %5d allocations, %5d first\n", op.c_str(), n[0], n[1]);
        }
        for (const auto& [batch, seq] : {std::pair{1, 2048}, std::pair{4, 512}}) {
            c.train.batchSize = batch;
            c.data.seqLen = seq;
            const auto cpuSetup = tb::setupFor(c);
            const auto cpu = derived.at(batch, seq, cpuSetup);
            auto gpu = cpuSetup;
            gpu.gpu = true;
            gpu.computeCapability = 80;
            const auto g0 = std::chrono::steady_clock::now();
            const auto onGpu = derived.at(batch, seq, gpu);
            const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - g0).count();
            std::printf("%-16s %-9s lora %2d%s%s  %5.1f s %2d steps  B %d T %4d  cpu: %14lld bytes  a100: %14lld bytes, "
                        "allocated %14lld, reserved %14lld (%s, %.1f ms)\n",
                        label.c_str(), s.precision, s.rank, s.checkpointing ? " ckpt" : "", s.dropout > 0 ? " drop" : "",
                        seconds, steps, batch, seq, static_cast<long long>(cpu.peakBytes), static_cast<long long>(onGpu.peakBytes),
                        static_cast<long long>(onGpu.allocatedPeakBytes), static_cast<long long>(onGpu.reservedPeakBytes),
                        onGpu.lowerBound ? "lower bound" : "exact", ms);
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
    for (const char* id : {"tinyllama-1.1b", "qwen2.5-0.5b", "llama-2-7b", "mistral-7b", "qwen2.5-7b", "gpt2-medium", "pythia-1.4b"}) {
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
