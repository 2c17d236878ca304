// trainbench-cli chat: a conversation with a trained run or a model folder,
// one user message a line of standard input, each reply printed as it grows.
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include "Command.h"
#include "Generation.h"
#include "StoreAccess.h"
#include "common/Errors.h"
#include "train/ModelTools.h"

namespace tb::cli {
namespace {

std::atomic<bool> g_replying{false};
std::atomic<bool> g_stopReply{false};

// Ctrl-C while the model answers ends that answer; at the prompt it ends the conversation.
void onInterrupt(int)
{
    if (g_replying.load()) {
        g_stopReply.store(true);
        return;
    }
    _exit(130);
}

const char* endText(ChatReply::End end)
{
    switch (end) {
    case ChatReply::End::EndOfTurn: return "end_of_turn";
    case ChatReply::End::MaxTokens: return "max_tokens";
    case ChatReply::End::Stopped: return "stopped";
    }
    return "?";
}

int chat(const Args& args)
{
    const auto folder = args.value("--model");
    if (folder && !args.positionals().empty())
        throw InputError("give either a RUN_ID or --model DIR, not both (got \"" + args.positionals()[0].substr(0, 40) + "\" and --model)");
    if (!folder && args.positionals().empty()) throw InputError("'chat' needs a RUN_ID (a run with a checkpoint) or --model DIR");
    for (const char* folderOnly : {"--precision", "--quantize"}) {
        if (!folder && args.value(folderOnly)) throw InputError(std::string("option ") + folderOnly + " is for a model folder: give --model DIR");
    }
    for (const char* runOnly : {"--db", "--checkpoint"}) {
        if (folder && args.value(runOnly)) throw InputError(std::string("option ") + runOnly + " is for a run's checkpoint, not --model");
    }
    const auto settings = generationSettingsOf(args, chatDefaults().maxNewTokens, 1, chatDefaults().temperature);
    const bool json = args.flag("--json");
    std::unique_ptr<ChatModel> model;
    if (folder) {
        model = ChatModel::fromFolder(*folder, args.value("--precision").value_or("fp32"), args.value("--quantize").value_or("none"));
    } else {
        const auto id = args.runId();
        auto store = openExistingStore(args.value("--db").value_or(""));
        const auto run = trainedRun(*store, id, args.value("--checkpoint").value_or(""));
        model = ChatModel::fromRun(run.config, run.checkpoint, "run " + std::to_string(id));
    }
    std::vector<ChatMessage> messages;
    if (const auto system = args.value("--system")) {
        if (!model->hasChatTemplate())
            throw InputError("--system needs a model with a chat template; " + model->describe());
        messages.push_back({"system", *system});
    }
    const bool terminal = isatty(STDIN_FILENO) && !json;
    if (terminal) std::cerr << model->describe() << "\nOne message a line; Ctrl-C stops a reply, Ctrl-D ends.\n";
    struct sigaction action {};
    action.sa_handler = onInterrupt;
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, nullptr);
    nlohmann::json replies = nlohmann::json::array();
    std::string line;
    int turns = 0;
    while (true) {
        if (terminal) std::cerr << "> " << std::flush;
        if (!std::getline(std::cin, line)) break;
        if (line.empty()) continue;
        // Without a template each message is continued on its own: no history.
        if (!model->hasChatTemplate()) messages.clear();
        messages.push_back({"user", line});
        g_stopReply = false;
        g_replying = true;
        ChatReply reply;
        try {
            reply = model->reply(messages, settings, json ? std::function<void(const std::string&)>{} : [](const std::string& piece) {
                std::cout << piece << std::flush;
            }, &g_stopReply);
        } catch (...) {
            g_replying = false;
            throw;
        }
        g_replying = false;
        ++turns;
        if (json) {
            replies.push_back({{"user", line},
                               {"reply", reply.text},
                               {"reply_ids", reply.ids},
                               {"end", endText(reply.end)},
                               {"prompt_tokens", reply.promptTokens},
                               {"prompt_cut", reply.promptCut},
                               {"seconds", reply.seconds}});
        } else {
            std::cout << "\n" << std::flush;
            if (reply.end == ChatReply::End::MaxTokens)
                std::cerr << "(cut at --max-tokens " << settings.maxNewTokens << ")\n";
            else if (reply.end == ChatReply::End::Stopped)
                std::cerr << "(stopped)\n";
            if (reply.promptCut) std::cerr << "(the conversation is longer than the model's window of " << model->window()
                                           << " tokens: its beginning was not read)\n";
        }
        messages.push_back({"assistant", reply.text});
    }
    if (json) {
        const nlohmann::json out = {{"model", model->describe()}, {"chat_template", model->hasChatTemplate()}, {"turns", replies}};
        std::cout << out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    }
    if (turns == 0) throw InputError("no message on standard input: write one user message a line");
    return kExitOk;
}

std::vector<OptionSpec> chatOptions()
{
    std::vector<OptionSpec> options{
        {"--db", true, "experiment database", "FILE"},
        {"--model", true, "a Hugging Face model folder with its tokenizer, instead of a run", "DIR"},
        {"--checkpoint", true, "a checkpoint file of this run instead of its latest", "FILE"},
        {"--system", true, "a system prompt before the conversation (needs a chat template)", "TEXT", true},
        {"--precision", true, "--model: the dtype it computes in (default fp32)", "P"},
        {"--quantize", true, "--model: its block linears quantized as they load, nf4 or int8", "Q"},
        {"--json", false, "print nothing while replying; at the end the conversation as JSON (each reply's text, ids, "
                          "how it ended, prompt tokens, seconds)"}};
    const auto defaults = chatDefaults();
    char temperature[32];
    std::snprintf(temperature, sizeof temperature, "%g", defaults.temperature);
    for (auto& o : generationOptions("tokens a reply has at most (default " + std::to_string(defaults.maxNewTokens) + ")", temperature))
        options.push_back(std::move(o));
    return options;
}

const CommandRegistration chatRegistration{Command{
    "chat",
    "Talk to a trained run or a model folder: each line of standard input is a user message, each reply streams out.",
    "(RUN_ID | --model DIR) [--system TEXT] [--max-tokens N] [--temperature T] [--top-p P] [--top-k K] "
    "[--repetition-penalty R] [--seed S] [--checkpoint FILE] [--precision fp32|bf16|fp16] [--quantize nf4|int8] [--json]",
    chatOptions(), &chat, 1}};

} // namespace
} // namespace tb::cli
