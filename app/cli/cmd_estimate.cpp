// trainbench-cli estimate / fit: the memory planner on the command line.
#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "Command.h"
#include "common/Errors.h"
#include "config/RunConfig.h"
#include "memory/Estimator.h"

namespace tb::cli {
namespace {

double mib(std::int64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

struct Plan {
    ArchitectureSpec arch;
    TrainingSetup setup;
};

Plan planFromArgs(const Args& args, const char* command)
{
    if (!args.positionals().empty()) {
        throw InputError(std::string("'") + command + "' takes no positional arguments, got \"" + args.positionals()[0]
                         + "\"");
    }
    const auto path = args.value("--config");
    if (!path) throw InputError(std::string("'") + command + "' needs --config FILE");
    RunConfig config = loadConfigFile(*path);
    if (auto b = args.integer("--batch", 1, 1 << 20)) config.train.batchSize = static_cast<int>(*b);
    if (auto t = args.integer("--seq", 1, 1 << 20)) config.data.seqLen = static_cast<int>(*t);
    if (auto o = args.value("--optimizer")) {
        if (*o != "adamw" && *o != "sgd") throw InputError("--optimizer must be adamw or sgd, got \"" + *o + "\"");
        config.optim.optimizer = *o;
    }
    if (args.flag("--checkpointing")) config.train.activationCheckpointing = true;
    if (auto r = args.integer("--lora-rank", 0, 4096)) config.lora.rank = static_cast<int>(*r);
    if (auto issues = validateConfig(config, false); !issues.empty()) throw ConfigError(*path, std::move(issues));
    return {architectureFor(config), setupFor(config)};
}

nlohmann::json toJson(const MemoryEstimate& e)
{
    nlohmann::json components = nlohmann::json::object(), formulas = nlohmann::json::object(),
                   phases = nlohmann::json::object();
    for (const auto& t : e.terms) {
        components[t.name] = t.bytes;
        formulas[t.name] = t.formula;
    }
    for (const auto& p : e.phases) phases[p.phase] = p.bytes;
    return {{"peak_bytes", e.peakBytes}, {"peak_phase", e.peakPhase}, {"components", components},
            {"formulas", formulas},      {"phase_peak_bytes", phases}, {"parameters", e.parameters},
            {"trainable_parameters", e.trainableParameters}, {"notes", e.notes}, {"end_of_step_bytes", e.endOfStepBytes}};
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
    for (const auto& n : e.notes) std::printf("note: %s\n", n.c_str());
}

int estimate(const Args& args)
{
    const auto plan = planFromArgs(args, "estimate");
    const auto e = estimateMemory(plan.arch, plan.setup);
    if (args.flag("--json")) std::cout << toJson(e).dump(2) << "\n";
    else printEstimate(e);
    return kExitOk;
}

int fit(const Args& args)
{
    auto plan = planFromArgs(args, "fit");
    const auto budget = args.integer("--budget", 1, (1LL << 62));
    if (!budget) throw InputError("'fit' needs --budget BYTES (a GPU target is not available yet)");
    const bool bySeq = args.value("--batch").has_value() && !args.value("--seq").has_value();
    std::int64_t answer = 0;
    if (bySeq) answer = largestSequence(plan.arch, plan.setup, *budget);
    else answer = largestBatch(plan.arch, plan.setup, *budget);
    auto at = plan.setup;
    if (bySeq) at.seqLen = std::max<std::int64_t>(answer, 1);
    else at.batch = std::max<std::int64_t>(answer, 1);
    const auto e = estimateMemory(plan.arch, at);
    if (args.flag("--json")) {
        nlohmann::json out = {{bySeq ? "max_seq_len" : "max_batch", answer}, {"budget_bytes", *budget},
                              {"estimate_at_limit", toJson(e)}};
        std::cout << out.dump(2) << "\n";
    } else {
        if (answer == 0) std::printf("nothing fits %lld bytes; at 1 the estimate is:\n", static_cast<long long>(*budget));
        else std::printf("%s: %lld (budget %.3f MiB)\n", bySeq ? "largest sequence length" : "largest batch",
                         static_cast<long long>(answer), mib(*budget));
        printEstimate(e);
    }
    return answer == 0 ? kExitFailed : kExitOk;
}

const std::vector<OptionSpec> kPlanOptions{
    {"--config", true, "the experiment config (JSON)", "FILE"},
    {"--batch", true, "override train.batch_size", "N"},
    {"--seq", true, "override data.seq_len", "N"},
    {"--optimizer", true, "override optim.optimizer: adamw or sgd", "NAME"},
    {"--checkpointing", false, "plan with activation checkpointing"},
    {"--lora-rank", true, "override lora.rank", "R"},
    {"--json", false, "print JSON (peak_bytes, components, phase_peak_bytes)"}};

std::vector<OptionSpec> fitOptions()
{
    auto o = kPlanOptions;
    o.push_back({"--budget", true, "the tensor memory to fit, in bytes", "BYTES"});
    return o;
}

const CommandRegistration estimateRegistration{Command{
    "estimate", "Estimate the tensor memory of a config's training step, term by term.",
    "--config FILE [--batch N] [--seq N] [--json]", kPlanOptions, &estimate}};
const CommandRegistration fitRegistration{Command{
    "fit", "The largest batch (or, with --batch, sequence length) whose estimate fits a budget.",
    "--config FILE --budget BYTES [--batch N | --seq N] [--json]", fitOptions(), &fit}};

} // namespace
} // namespace tb::cli
