// trainbench-cli tune: the fastest configuration of an experiment that fits,
// found by plan and, on this machine, confirmed by measuring the best few.
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "Command.h"
#include "common/ByteSize.h"
#include "common/Errors.h"
#include "config/RunConfig.h"
#include "config/ByteSizes.h"
#include "run/RunSession.h"
#include "train/Layers.h"
#include "tune/Tune.h"
#include "tune/TuneMeasure.h"

namespace tb::cli {
namespace {

std::string tokensText(double perSecond)
{
    if (perSecond <= 0) return "-";
    char text[32];
    std::snprintf(text, sizeof text, "%.0f", perSecond);
    return text;
}

void printTable(const TuneResult& r, bool all)
{
    std::printf("target: %s, budget %s; %zu candidates planned\n", r.targetLabel.c_str(), byteSizeText(r.budgetBytes).c_str(),
                r.candidates.size());
    std::printf("  %-54s %12s %7s  %-7s %12s %12s\n", "configuration", "planned", "budget", "verdict", "predicted/s",
                "measured/s");
    int rejected = 0;
    for (std::size_t i = 0; i < r.candidates.size(); ++i) {
        const auto& k = r.candidates[i];
        if (!k.rejected.empty()) {
            ++rejected;
            if (!all) continue;
        }
        const double share = r.budgetBytes > 0 ? 100.0 * static_cast<double>(k.peakBytes) / static_cast<double>(r.budgetBytes) : 0;
        const char* verdict = k.verdict == MemoryVerdict::Fits ? "fits" : k.verdict == MemoryVerdict::Tight ? "tight"
                                                             : k.verdict == MemoryVerdict::DoesNotFit ? "no fit" : "no run";
        std::printf("%s %-54s %12s %6.0f%%  %-7s %12s %12s\n", static_cast<int>(i) == r.winner ? "*" : " ",
                    k.describe().c_str(), k.peakBytes > 0 ? byteSizeText(k.peakBytes).c_str() : "-", share, verdict,
                    tokensText(k.predictedTokensPerSecond).c_str(), tokensText(k.measuredTokensPerSecond).c_str());
        if (!k.measureError.empty()) std::printf("    measuring failed: %s\n", k.measureError.c_str());
        if (all && !k.rejected.empty()) std::printf("    %s\n", k.rejected.c_str());
    }
    if (rejected > 0 && !all) {
        std::printf("  (%d more do not fit or do not run; --all lists them with the reason)\n", rejected);
    }
    for (const auto& n : r.notes) std::printf("note: %s\n", n.c_str());
}

int tune(const Args& args)
{
    if (!args.positionals().empty()) {
        throw InputError("'tune' takes no positional arguments, got \"" + args.positionals()[0] + "\"");
    }
    const auto path = args.value("--config");
    if (!path) throw InputError("'tune' needs --config FILE");
    const auto gpuName = args.value("--gpu");
    const auto budget = args.value("--budget");
    if (gpuName && budget) throw InputError("'tune' takes --gpu NAME or --budget BYTES, not both");
    const RunConfig base = loadConfigFile(*path);

    TuneOptions options;
    if (gpuName) options.gpu = GpuCatalogue::bundled().resolve(*gpuName);
    else options.local = localMachine();
    if (budget) options.budgetBytes = budgetBytes(*budget);
    options.keepEffectiveBatch = args.flag("--keep-effective-batch");
    options.sdpaAvailable = fusedAttentionAvailable();
    if (auto b = args.integer("--max-batch", 1, 1 << 20)) options.maxBatch = *b;

    const auto measureSteps = args.integer("--measure-steps", 0, 100000);
    if (options.gpu && measureSteps.value_or(0) > 0) {
        throw InputError("--measure-steps measures on this machine, but --gpu plans for a catalogue card; leave one out");
    }
    const int steps = options.gpu ? 0 : static_cast<int>(measureSteps.value_or(5));
    const int top = static_cast<int>(args.integer("--measure-top", 1, 1000).value_or(3));

    // The throughput model: a catalogue card's data sheet, or a probe of this machine.
    ThroughputMachine machine;
    if (options.gpu) {
        machine = throughputFromCatalogue(options.gpu->gpu);
    } else {
        const bool localGpu = base.device != "cpu" && options.local && options.local->torchCudaDevices > 0;
        machine = probeThroughput(base, localGpu ? "cuda" : "cpu");
    }
    auto result = planTune(base, options, machine);
    const bool json = args.flag("--json");
    if (steps > 0 && result.winner >= 0) {
        const auto which = args.flag("--measure-all") ? candidatesToMeasure(result, 1 << 30) : candidatesToMeasure(result, top);
        TuneMeasureProgress progress;
        progress.onCandidate = [&](int index, int done, int total) {
            std::fprintf(stderr, "measuring %d of %d: %s (%d steps)\n", done + 1, total,
                         result.candidates[static_cast<std::size_t>(index)].describe().c_str(), steps);
        };
        measureCandidates(result, base, which, steps, progress);
    }

    if (json) {
        std::cout << tuneResultToJson(result) << "\n";
    } else {
        printTable(result, args.flag("--all"));
    }
    if (result.winner < 0) {
        if (!json) {
            std::printf("nothing fits %s on %s. The smallest changes that would:\n", byteSizeText(result.budgetBytes).c_str(),
                        result.targetLabel.c_str());
            for (const auto& s : result.nothingFits) std::printf("  - %s\n", s.c_str());
        }
        return kExitFailed;
    }
    const auto& w = result.candidates[static_cast<std::size_t>(result.winner)];
    if (!json) {
        std::printf("winner: %s (%s)\n", w.describe().c_str(),
                    w.measuredTokensPerSecond > 0 ? "fastest measured" : "fastest predicted, not measured");
        if (result.changes.empty()) std::printf("it is the config as it stands\n");
        for (const auto& c : result.changes) std::printf("  %s\n", c.c_str());
        if (!result.effectiveBatchNote.empty()) std::printf("note: %s\n", result.effectiveBatchNote.c_str());
    }
    if (auto out = args.value("--output")) {
        RunConfig winner = w.config;
        // Relative paths are the config's folder's: written elsewhere, they are made absolute.
        const auto folder = [](const std::string& file) {
            return std::filesystem::weakly_canonical(std::filesystem::absolute(file)).parent_path();
        };
        if (folder(*out) != folder(*path)) {
            if (!winner.data.path.empty()) winner.data.path = resolvedDataPath(winner);
            if (!winner.model.path.empty()) winner.model.path = resolvedModelPath(winner);
        }
        std::ofstream file(*out, std::ios::binary | std::ios::trunc);
        file << configToJson(winner) << "\n";
        file.close();
        if (!file) throw InputError("--output: cannot write " + *out);
        if (!json) std::printf("wrote the winning config to %s\n", out->c_str());
    }
    return kExitOk;
}

const CommandRegistration tuneRegistration{Command{
    "tune",
    "The fastest configuration of an experiment that fits a budget: planned, ranked, and measured on this machine.",
    "--config FILE (--gpu NAME | --budget BYTES) [--keep-effective-batch] [--measure-steps N] [--output FILE] [--json]",
    {{"--config", true, "the experiment config (JSON)", "FILE"},
     {"--gpu", true, "plan for a catalogue card (\"T4\", \"2xA10G\"); its memory is the budget; nothing is measured", "NAME"},
     {"--budget", true, "the memory a step may use on this machine, in bytes or with a unit (\"4 GiB\"); default: "
                        "this machine's GPU memory", "BYTES"},
     {"--keep-effective-batch", false, "keep batch x accumulation as the config has it (else the accumulation stays "
                                       "and the micro-batch varies)"},
     {"--measure-steps", true, "this machine: train the best candidates this many steps each, after one untimed step "
                               "(default 5; 0 plans only)", "N"},
     {"--measure-top", true, "how many of the best predicted candidates to measure (default 3)", "K"},
     {"--measure-all", false, "measure every candidate that fits (for checking the ranking; slow)"},
     {"--max-batch", true, "the largest micro-batch tried (default 4096)", "N"},
     {"--output", true, "write the winning configuration as a config file", "FILE"},
     {"--all", false, "list the candidates that do not fit or do not run too, with the reason"},
     {"--json", false, "print JSON: every candidate, the winner's index and the changes"}},
    &tune}};

} // namespace
} // namespace tb::cli
