// The planner against published GPU measurements: each row rebuilt from its
// source (model config, training script), planned as the source ran it, and
// compared with the figure it reports (allocated, or what nvidia-smi shows,
// as the source states). Goal: within 10%. Prints the table.
#include <QtTest>

#include <cstdio>

#include "config/RunConfig.h"
#include "memory/Estimator.h"

using namespace tb;

namespace {

constexpr double GiB = 1024.0 * 1024.0 * 1024.0;

ArchitectureSpec llamaShape(const char* name, std::int64_t hidden, std::int64_t layers, std::int64_t heads,
                            std::int64_t kvHeads, std::int64_t mlp, std::int64_t vocab, bool tied, bool qkvBias)
{
    ArchitectureSpec a;
    a.name = name;
    a.family = "llama";
    a.positional = "rope";
    a.hidden = hidden;
    a.layers = layers;
    a.heads = heads;
    a.kvHeads = kvHeads;
    a.intermediate = mlp;
    a.vocabSize = vocab;
    a.tieEmbeddings = tied;
    a.qkvBias = qkvBias;
    a.maxPositions = 8192;
    return a;
}

struct Row {
    const char* source;
    ArchitectureSpec arch;
    TrainingSetup setup;
    double measured; // bytes
    bool smi;        // nvidia-smi (reserved + context); else the allocator's peak
};

} // namespace

class TestPublishedRows : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void planWithinTenPercentOfPublishedPeaks()
    {
        std::vector<Row> rows;
        {
            // torchtune README, "Optimization flags" (PR #2003): Llama-3.2-3B
            // full fine-tune on an A100, bf16 weights, gradients and AdamW
            // state, batch 2 x 4096 packed, no checkpointing, SDPA, fp32
            // logits for the loss; torch.cuda.memory_stats active_bytes.all.peak.
            TrainingSetup s;
            s.batch = 2;
            s.seqLen = 4096;
            s.precision = "bf16-pure";
            s.attention = "fused";
            s.torchMajor = 2;
            s.gpu = true;
            s.computeCapability = 80;
            rows.push_back({"torchtune Llama-3.2-3B full bf16 2x4096",
                            llamaShape("Llama-3.2-3B", 3072, 28, 24, 8, 8192, 128256, true, false), s, 60.0 * GiB, false});
        }
        // Qwen (v1) README, "Profiling of Memory and Speed": one
        // A100-SXM4-80G, CUDA 11.8, PyTorch 2.0, flash attention 2, batch 1
        // with gradient accumulation 8, bf16 weights, LoRA r64 on every
        // linear layer, checkpointing. The memory column is in "GB", tool
        // not stated: read as nvidia-smi, decimal gigabytes as written.
        const auto qwen = [&](const char* name, ArchitectureSpec arch, std::int64_t seq, double gb) {
            TrainingSetup s;
            s.batch = 1;
            s.seqLen = seq;
            s.precision = "bf16";
            s.halfBase = true;
            s.loraRank = 64;
            s.loraTargets = loraProjections("llama", {"attn", "mlp"});
            s.checkpointing = true;
            s.gradAccum = 8;
            s.attention = "fused";
            s.torchMajor = 2;
            s.gpu = true;
            s.computeCapability = 80;
            rows.push_back({name, arch, s, gb * 1e9, true});
        };
        const auto qwen7 = llamaShape("Qwen-7B", 4096, 32, 32, 32, 11008, 151936, false, true);
        qwen("Qwen-7B LoRA r64 seq 256", qwen7, 256, 20.1);
        qwen("Qwen-7B LoRA r64 seq 2048", qwen7, 2048, 23.8);
        qwen("Qwen-7B LoRA r64 seq 8192", qwen7, 8192, 36.6);
        qwen("Qwen-1.8B LoRA r64 seq 8192", llamaShape("Qwen-1.8B", 2048, 24, 16, 16, 5504, 151936, false, true), 8192, 21.8);
        qwen("Qwen-14B LoRA r64 seq 2048", llamaShape("Qwen-14B", 5120, 40, 40, 40, 13696, 152064, false, true), 2048, 37.4);

        std::printf("%-42s %10s %10s %8s\n", "row", "measured", "planned", "error");
        QStringList misses;
        for (const auto& r : rows) {
            const auto e = estimateMemory(r.arch, r.setup);
            const double planned = static_cast<double>(r.smi ? e.peakBytes : e.allocatedPeakBytes);
            const double error = planned / r.measured - 1.0;
            std::printf("%-42s %7.2f GiB %7.2f GiB %+7.1f%%  (%s)\n", r.source, r.measured / GiB, planned / GiB,
                        100 * error, r.smi ? "nvidia-smi" : "allocated");
            if (std::abs(error) > 0.10) misses << QString::fromLatin1(r.source);
        }
        // Known misses, until a GPU run settles them: at 8192 tokens the
        // plan is 17-20% over the Qwen figures read as decimal GB (its
        // allocated peak alone is over what was measured; read as GiB both
        // rows would be within 4% and the 256-token row 16% under). A row that starts to fit, or another
        // that stops, fails here.
        QCOMPARE(misses, (QStringList{"Qwen-7B LoRA r64 seq 8192", "Qwen-1.8B LoRA r64 seq 8192"}));
    }
};

QTEST_APPLESS_MAIN(TestPublishedRows)
#include "tst_published_rows.moc"
