// trainbench-cli chat-template: render conversations with a model folder's chat template.
#include <nlohmann/json.hpp>

#include <fstream>
#include <iostream>
#include <iterator>
#include <optional>

#include "Command.h"
#include "common/Errors.h"
#include "text/ChatTemplate.h"
#include "text/Corpus.h"
#include "text/Tokenizer.h"
#include "text/Regex.h"

namespace tb::cli {
namespace {

using json = nlohmann::ordered_json;

int chatTemplate(const Args& args)
{
    const auto model = args.value("--model");
    if (!model) throw InputError("'chat-template' needs --model DIR (a model folder with a chat template)");
    auto folder = text::readFolderChatTemplate(*model);
    if (const auto file = args.value("--template")) {
        std::ifstream in(*file, std::ios::binary);
        if (!in) throw InputError("--template: cannot read " + *file);
        folder.source.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
        folder.where = *file;
    }
    const text::ChatTemplate tmpl(folder.source, folder.where);
    const bool generation = args.flag("--add-generation-prompt");
    const bool tokenize = args.flag("--tokenize");
    if (tokenize && generation) throw InputError("--tokenize shows training data: leave out --add-generation-prompt");
    std::optional<text::Tokenizer> tok;
    text::CorpusSpec spec;
    if (tokenize) {
        tok = text::Tokenizer::fromModelFolder(*model);
        const auto special = text::readFolderSpecialTokens(*model, *tok);
        spec.format = "chat";
        spec.bos = special.bos;
        spec.eos = special.eos;
        spec.chat = &tmpl;
        spec.chatVariables = folder.variables;
    }
    std::string line;
    std::size_t lineNo = 0;
    while (std::getline(std::cin, line)) {
        ++lineNo;
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.find_first_not_of(" \t") == std::string::npos) continue;
        const std::string where = "line " + std::to_string(lineNo);
        json record;
        try {
            record = json::parse(line);
        } catch (const json::parse_error& e) {
            throw InputError(where + ": not valid JSON (at byte " + std::to_string(e.byte) + ")");
        }
        json context = folder.variables;
        json messages;
        if (record.is_array()) {
            messages = record;
        } else if (const auto why = text::conversationMessages(record, messages); !why.empty()) {
            throw InputError(where + ": " + why + " (a line is {\"messages\": [...]}, a ShareGPT or Alpaca record, or a list of messages)");
        }
        if (record.is_object()) {
            for (const auto& [k, v] : record.items()) context[k] = v;
        }
        context["messages"] = messages;
        if (tokenize) {
            text::EncodedConversation c;
            const json conversation = record.is_array() ? json{{"messages", record}} : record;
            if (const std::string why = text::encodeConversation(conversation, spec, *tok, c); !why.empty())
                throw InputError(where + ": " + why);
            const json out = {{"text", c.text}, {"ids", c.ids}, {"mask", c.mask}};
            std::cout << out.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
            continue;
        }
        if (!context.contains("add_generation_prompt")) context["add_generation_prompt"] = generation;
        std::string rendered;
        try {
            rendered = tmpl.render(context);
        } catch (const InputError& e) {
            throw InputError(where + ": " + e.what());
        }
        std::cout << json(rendered).dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
    }
    return kExitOk;
}

const CommandRegistration chatTemplateRegistration{Command{
    "chat-template",
    "Render conversations with a model folder's chat template (tokenizer_config.json), as transformers' "
    "apply_chat_template renders them: each standard-input line is {\"messages\": [{\"role\", \"content\"}, ...], ...}, "
    "a ShareGPT ({\"conversations\": [{\"from\", \"value\"}, ...]}) or Alpaca ({\"instruction\", \"input\", \"output\"}) "
    "record (other keys become template variables) or a bare list of messages; each output line is the rendered text "
    "as a JSON string.",
    "--model DIR [--template FILE] [--add-generation-prompt | --tokenize]",
    {{"--model", true, "a model folder with tokenizer_config.json", "DIR"},
     {"--template", true, "a template file to use instead of the folder's", "FILE"},
     {"--add-generation-prompt", false, "end with the assistant header, as for generation"},
     {"--tokenize", false, "print {\"text\", \"ids\", \"mask\"} as training sees the conversation: mask 1 on the "
                           "assistant tokens the loss is on"}},
    &chatTemplate,
    0}};

} // namespace
} // namespace tb::cli
