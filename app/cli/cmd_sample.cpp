// trainbench-cli sample: generate from a trained run's checkpoint, or run a
// Hugging Face model folder directly (--model DIR).
#include <iostream>
#include <optional>

#include <nlohmann/json.hpp>

#include "Command.h"
#include "Generation.h"
#include "StoreAccess.h"
#include "common/Errors.h"
#include "text/Corpus.h"
#include "text/Tokenizer.h"
#include "train/ModelTools.h"

namespace tb::cli {
namespace {

int sampleFolder(const Args& args, const std::string& folder)
{
    if (!args.positionals().empty()) {
        throw InputError("'sample --model DIR' takes no RUN_ID; give either a run id or --model, got \""
                         + args.positionals()[0] + "\"");
    }
    for (const char* runOnly : {"--db", "--checkpoint"}) {
        if (args.value(runOnly)) throw InputError(std::string("option ") + runOnly + " is for a run's checkpoint, not --model");
    }
    const auto ids = args.value("--prompt-ids");
    const auto promptText = args.value("--prompt");
    if (promptText && ids) throw InputError("give the prompt once: --prompt TEXT or --prompt-ids 1,2,3");
    if (args.flag("--chat") && !promptText) throw InputError("--chat takes the user's message as --prompt TEXT");
    if (!ids && !promptText) throw InputError("'sample --model DIR' needs --prompt TEXT (with the folder's tokenizer) or --prompt-ids 1,2,3");
    FolderSampleRequest request;
    std::optional<text::Tokenizer> tokenizer;
    if (promptText) {
        if (!text::Tokenizer::folderHasTokenizer(folder))
            throw InputError(folder + " has no tokenizer.json or tokenizer.model, so a text prompt cannot be tokenized; give --prompt-ids 1,2,3");
        tokenizer = text::Tokenizer::fromModelFolder(folder);
        const auto special = text::readFolderSpecialTokens(folder, *tokenizer);
        std::vector<std::int32_t> encoded;
        if (args.flag("--chat")) {
            // One user message through the folder's chat template, ready for the reply.
            encoded = text::encodeChatPrompt(*promptText, folder, *tokenizer, special.bos);
        } else {
            // The template's BOS, as in training; an EOS the template appends would end the prompt.
            encoded = tokenizer->encode(*promptText, true);
            if (!encoded.empty() && encoded.back() == special.eos) encoded.pop_back();
        }
        if (encoded.empty()) throw InputError("--prompt is empty; give some text to continue");
        request.promptIds.assign(encoded.begin(), encoded.end());
    } else {
        request.promptIds = text::parseTokenIds(*ids, "option --prompt-ids");
    }
    request.generation = generationSettingsOf(args, 64, 0, 1.0);
    request.logits = args.flag("--logits");
    request.probabilities = args.flag("--probabilities");
    request.precision = args.value("--precision").value_or("fp32");
    request.quantize = args.value("--quantize").value_or("none");
    if (request.logits && !args.flag("--json")) throw InputError("--logits is printed only with --json");
    if (request.probabilities && (!args.flag("--json") || request.generation.maxNewTokens == 0))
        throw InputError("--probabilities is printed only with --json and at least one new token (--max-tokens 1 or more)");
    const auto result = sampleFromFolder(folder, request);
    if (args.flag("--json")) {
        nlohmann::json out = {{"model", folder},
                              {"architecture", result.architecture},
                              {"prompt_ids", request.promptIds},
                              {"completion_ids", result.completionIds},
                              {"stopped_at_eos", result.stoppedAtEos},
                              {"precision", request.precision},
                              {"load_seconds", result.loadSeconds},
                              {"compute_seconds", result.computeSeconds}};
        if (request.logits) out["logits"] = result.logits;
        if (request.probabilities) out["probabilities"] = result.probabilities;
        if (tokenizer) {
            out["prompt"] = *promptText;
            out["completion"] = tokenizer->decode(std::vector<std::int32_t>(result.completionIds.begin(), result.completionIds.end()));
        }
        std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    } else if (tokenizer && args.flag("--chat")) {
        // The reply alone, without the token that ended the turn.
        std::vector<std::int32_t> reply(result.completionIds.begin(), result.completionIds.end());
        std::cout << tokenizer->decode(reply, true) << "\n";
    } else if (tokenizer) {
        // The prompt and its continuation decoded together, as one text.
        std::vector<std::int32_t> all(request.promptIds.begin(), request.promptIds.end());
        all.insert(all.end(), result.completionIds.begin(), result.completionIds.end());
        std::cout << tokenizer->decode(all, true) << "\n";
    } else {
        std::string line;
        for (const auto id : result.completionIds) {
            if (!line.empty()) line += ' ';
            line += std::to_string(id);
        }
        std::cout << line << "\n";
    }
    return kExitOk;
}

int sample(const Args& args)
{
    if (const auto folder = args.value("--model")) return sampleFolder(args, *folder);
    for (const char* folderOnly : {"--prompt-ids", "--logits", "--probabilities", "--precision", "--quantize"}) {
        if (args.value(folderOnly) || args.flag(folderOnly)) {
            throw InputError(std::string("option ") + folderOnly + " is for a model folder: give --model DIR");
        }
    }
    const auto id = args.runId();
    const auto prompt = args.value("--prompt");
    if (!prompt) throw InputError("'sample' needs --prompt TEXT (for the addition task e.g. --prompt \"12+34=\")");
    SampleRequest request;
    request.prompt = *prompt;
    request.chat = args.flag("--chat");
    request.generation = generationSettingsOf(args, 64, 1, 1.0);
    auto store = openExistingStore(args.value("--db").value_or(""));
    const auto run = trainedRun(*store, id, args.value("--checkpoint").value_or(""));
    const auto result = sampleFromCheckpoint(run.config, run.checkpoint, request);
    if (args.flag("--json")) {
        const nlohmann::json out = {{"prompt", result.prompt},
                                    {"completion", result.completion},
                                    {"completion_ids", result.completionIds}};
        // Byte-level models can emit invalid UTF-8: replace it rather than fail.
        std::cout << out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    } else if (request.chat) {
        std::cout << result.completion << "\n"; // the assistant's reply
    } else {
        std::cout << result.prompt << result.completion << "\n";
    }
    return kExitOk;
}

std::vector<OptionSpec> sampleOptions()
{
    std::vector<OptionSpec> options{
        {"--db", true, "experiment database", "FILE"},
        {"--model", true, "a Hugging Face model folder (config.json and safetensors) to run without a run", "DIR"},
        {"--prompt", true, "the text to continue; addition: \"12+34=\" (the answer is printed the usual way round); "
                           "--model: tokenized with the folder's tokenizer",
         "TEXT", true /* empty: the dataset says what a prompt needs */},
        {"--prompt-ids", true, "--model: the prompt as token ids, e.g. 1,15043,29892", "IDS"},
        {"--chat", false, "the prompt is a user message, rendered with the model folder's chat template; prints the reply"},
        {"--checkpoint", true, "a checkpoint file of this run instead of its latest", "FILE"},
        {"--precision", true, "--model: the dtype it computes in, whatever the folder stores (default fp32)", "P"},
        {"--quantize", true, "--model: its block linears quantized as they load, nf4 or int8 (a bitsandbytes folder is read as stored)", "Q"},
        {"--logits", false, "--model --json: add \"logits\", the fp32 logits of every prompt position"},
        {"--probabilities", false, "--model --json: add \"probabilities\", the first new token's after the repetition penalty, "
                                   "temperature, top-k and top-p (0 where filtered)"},
        {"--json", false, "print {\"prompt\", \"completion\", \"completion_ids\"} (--model: {\"completion_ids\", ...})"}};
    for (auto& o : generationOptions("tokens to generate at most (default 64; addition stops at its end marker; "
                                     "--model: 0 = a forward pass only, stops at the folder's eos_token_id)", "1"))
        options.push_back(std::move(o));
    return options;
}

const CommandRegistration sampleRegistration{Command{
    "sample",
    "Generate from a trained run (its latest checkpoint, or --checkpoint FILE), or from a Hugging Face model folder.",
    "(RUN_ID --prompt TEXT | --model DIR (--prompt TEXT | --prompt-ids 1,2,3)) [--max-tokens N] [--temperature T] [--top-p P] "
    "[--top-k K] [--repetition-penalty R] [--seed S] [--chat] [--checkpoint FILE] [--precision fp32|bf16|fp16] "
    "[--quantize nf4|int8] [--json [--logits] [--probabilities]]",
    sampleOptions(), &sample, 1}};

} // namespace
} // namespace tb::cli
