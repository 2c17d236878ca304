#pragma once
// Chat templates: the Jinja subset that the published templates of the
// supported families use (Llama 3, Qwen2/3 ChatML, Mistral [INST], Gemma,
// Zephyr), rendered the way transformers renders them: a sandboxed Jinja
// environment with trim_blocks and lstrip_blocks, the loopcontrols extension,
// and the raise_exception, namespace, range and strftime_now globals and the
// tojson filter it adds.
//
// Anything outside the subset (macros, call blocks, an unknown filter or
// test) is an InputError naming the construct and its line.

#include <filesystem>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

namespace tb::text {

class ChatTemplate final {
public:
    // Parses `source`; `where` names it in messages (e.g. "DIR/tokenizer_config.json chat_template").
    ChatTemplate(const std::string& source, const std::string& where);
    ~ChatTemplate();
    ChatTemplate(ChatTemplate&&) noexcept;
    ChatTemplate& operator=(ChatTemplate&&) noexcept;

    // Renders with the given variables (messages, bos_token, eos_token,
    // add_generation_prompt, ...). Throws InputError for raise_exception (with
    // its message) and for errors while rendering (with the line).
    std::string render(const nlohmann::ordered_json& context) const;

private:
    struct Impl;
    std::unique_ptr<Impl> m;
};

// A model folder's template (tokenizer_config.json "chat_template", the
// default of a list, or chat_template.jinja beside it) and the variables
// transformers passes with it: bos_token, eos_token, unk_token, pad_token as
// strings. Throws InputError when the folder has no template.
struct FolderChatTemplate {
    std::string source;
    std::string where;
    nlohmann::ordered_json variables = nlohmann::ordered_json::object();
};
FolderChatTemplate readFolderChatTemplate(const std::filesystem::path& dir);

} // namespace tb::text
