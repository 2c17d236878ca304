#include "text/ChatTemplate.h"
#include "text/TokenizerConfig.h"

#include <fstream>

#include "common/Errors.h"
#include "text/Unicode.h"
#include "text/jinja/Parser.h"
#include "text/jinja/Renderer.h"

// The engine lives in text/jinja/: values, lexer and node types, parser, the
// table of builtins, renderer. This file is the chat-facing door to it.

namespace tb::text {

using json = nlohmann::ordered_json;

struct ChatTemplate::Impl {
    std::string where;
    jinja::Body body;
};

ChatTemplate::ChatTemplate(const std::string& source, const std::string& where) : m(std::make_unique<Impl>())
{
    if (source.size() > (4u << 20)) throw InputError(where + ": the chat template is larger than 4 MiB");
    if (firstInvalidUtf8(source) != std::string::npos) throw InputError(where + ": the chat template is not valid UTF-8");
    m->where = where;
    // Jinja drops one newline at the very end of a template (keep_trailing_newline is off).
    std::string text = source;
    if (text.size() >= 2 && text.compare(text.size() - 2, 2, "\r\n") == 0) text.resize(text.size() - 2);
    else if (!text.empty() && text.back() == '\n') text.pop_back();
    m->body = jinja::parseTemplate(text, where);
}

ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

std::string ChatTemplate::render(const nlohmann::ordered_json& context) const
{
    return jinja::render(m->body, context, m->where);
}

FolderChatTemplate readFolderChatTemplate(const std::filesystem::path& dir)
{
    FolderChatTemplate out;
    // The one reader of tokenizer_config.json (TokenizerConfig.h), with its rule for bad values.
    const TokenizerConfig config = readTokenizerConfig(dir);
    for (const auto& [key, token] : config.specialTokens())
        if (token->content) out.variables[key] = *token->content;
    if (config.chatTemplate) {
        out.source = *config.chatTemplate;
        out.where = config.file.string() + " chat_template";
    }
    std::error_code ec;
    if (out.source.empty() && std::filesystem::is_regular_file(dir / "chat_template.jinja", ec)) {
        std::ifstream in(dir / "chat_template.jinja", std::ios::binary);
        out.source.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
        out.where = (dir / "chat_template.jinja").string();
    }
    if (out.source.empty())
        throw InputError(dir.string() + " has no chat template (tokenizer_config.json \"chat_template\" or chat_template.jinja); "
                                        "a base model is trained on text or jsonl data, not chat");
    return out;
}

} // namespace tb::text
