// trainbench-cli sample: generate from a trained run's checkpoint.
#include <iostream>

#include <nlohmann/json.hpp>

#include "Command.h"
#include "StoreAccess.h"
#include "common/Errors.h"
#include "train/ModelTools.h"

namespace tb::cli {
namespace {

int sample(const Args& args)
{
    const auto id = args.runId();
    const auto prompt = args.value("--prompt");
    if (!prompt) throw InputError("'sample' needs --prompt TEXT (for the addition task e.g. --prompt \"12+34=\")");
    SampleRequest request;
    request.prompt = *prompt;
    request.maxTokens = static_cast<int>(args.integer("--max-tokens", 1, 100000).value_or(64));
    request.topK = static_cast<int>(args.integer("--top-k", 0, 1000000).value_or(0));
    request.seed = static_cast<std::uint64_t>(args.integer("--seed", 0, 1LL << 62).value_or(1));
    if (const auto t = args.value("--temperature")) {
        std::size_t used = 0;
        double v = -1;
        try {
            v = std::stod(*t, &used);
        } catch (const std::exception&) {
            used = 0;
        }
        if (used != t->size() || !(v >= 0.0 && v <= 100.0)) {
            throw InputError("option --temperature must be a number from 0 (greedy) to 100, got \"" + *t + "\"");
        }
        request.temperature = v;
    }
    auto store = openExistingStore(args.value("--db").value_or(""));
    const auto run = trainedRun(*store, id, args.value("--checkpoint").value_or(""));
    const auto result = sampleFromCheckpoint(run.config, run.checkpoint, request);
    if (args.flag("--json")) {
        const nlohmann::json out = {{"prompt", result.prompt},
                                    {"completion", result.completion},
                                    {"completion_ids", result.completionIds}};
        // Byte-level models can emit invalid UTF-8: replace it rather than fail.
        std::cout << out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    } else {
        std::cout << result.prompt << result.completion << "\n";
    }
    return kExitOk;
}

const CommandRegistration registration{Command{
    "sample",
    "Generate from a trained run (its latest checkpoint, or --checkpoint FILE).",
    "RUN_ID --prompt TEXT [--max-tokens N] [--temperature T] [--top-k K] [--seed S] [--checkpoint FILE] [--json]",
    {{"--db", true, "experiment database", "FILE"},
     {"--prompt", true, "the text to continue; addition: \"12+34=\" (the answer is printed the usual way round)",
      "TEXT", true /* empty: the dataset says what a prompt needs */},
     {"--max-tokens", true, "tokens to generate at most (default 64; addition stops at its end marker)", "N"},
     {"--temperature", true, "0 = greedy, default 1", "T"},
     {"--top-k", true, "sample from the K most likely tokens only (0 = all)", "K"},
     {"--seed", true, "random seed (default 1)", "S"},
     {"--checkpoint", true, "a checkpoint file of this run instead of its latest", "FILE"},
     {"--json", false, "print {\"prompt\", \"completion\", \"completion_ids\"}"}},
    &sample}};

} // namespace
} // namespace tb::cli
