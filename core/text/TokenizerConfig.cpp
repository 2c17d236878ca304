#include "text/TokenizerConfig.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <iterator>

#include "common/Errors.h"
#include "text/JsonFields.h"
#include "text/Regex.h"

namespace tb::text {
namespace {

using json = nlohmann::json;
constexpr std::uintmax_t kMaxConfigBytes = 64u << 20;
constexpr std::int32_t kMaxAddedId = 16'000'000;

// The one message for a bad value: the file, the key, what it must be and what it is.
InputError badValue(const std::filesystem::path& file, const std::string& key, const std::string& expected, const json& got)
{
    return InputError(file.string() + ": " + key + " must be " + expected + ", not " + jsonKind(got));
}

std::optional<bool> readFlag(const json& config, const char* key, const std::filesystem::path& file)
{
    const auto it = config.find(key);
    if (it == config.end() || it->is_null()) return std::nullopt;
    if (!it->is_boolean()) throw badValue(file, key, "true, false or null", *it);
    return it->get<bool>();
}

// "eos_token": "</s>", {"content": "</s>", ...} or null.
TokenizerConfig::SpecialToken readSpecialToken(const json& config, const char* key, const std::filesystem::path& file)
{
    TokenizerConfig::SpecialToken out;
    const auto it = config.find(key);
    if (it == config.end()) return out;
    out.declared = true;
    if (it->is_null()) return out;
    if (it->is_string()) out.content = it->get<std::string>();
    else if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) out.content = (*it)["content"].get<std::string>();
    else throw badValue(file, key, "a string, {\"content\": \"...\"} or null", *it);
    return out;
}

// "chat_template": a string, or a list of {"name": ..., "template": ...} of which "default" is used.
std::optional<std::string> readChatTemplate(const json& config, const std::filesystem::path& file)
{
    const auto it = config.find("chat_template");
    if (it == config.end() || it->is_null()) return std::nullopt;
    if (it->is_string()) return it->get<std::string>();
    if (!it->is_array()) throw badValue(file, "chat_template", "a string or a list of {\"name\": ..., \"template\": ...}", *it);
    std::optional<std::string> out;
    for (std::size_t i = 0; i < it->size(); ++i) {
        const json& named = (*it)[i];
        const std::string at = file.string() + ": chat_template[" + std::to_string(i) + "]";
        if (!named.is_object()) throw InputError(at + " must be {\"name\": ..., \"template\": ...}, not " + jsonKind(named));
        const std::string& name = stringField(named, "name", at);
        const std::string& text = stringField(named, "template", at);
        if (name == "default") out = text;
    }
    return out;
}

std::int32_t addedTokenId(const std::string& key, const std::filesystem::path& file)
{
    const std::string at = file.string() + ": added_tokens_decoder";
    if (key.empty() || key.size() > 9 || key.find_first_not_of("0123456789") != std::string::npos)
        throw InputError(at + " key \"" + clipForMessage(key) + "\" is not a token id");
    const long id = std::stol(key);
    if (id > kMaxAddedId) throw InputError(at + "[\"" + key + "\"]: the id must be from 0 to " + std::to_string(kMaxAddedId));
    return std::int32_t(id);
}

// "added_tokens_decoder": {"ID": {"content": ..., "special": ..., "lstrip": ..., "rstrip": ...}, ...}
std::vector<TokenizerConfig::AddedTokenEntry> readAddedTokens(const json& config, const std::filesystem::path& file)
{
    std::vector<TokenizerConfig::AddedTokenEntry> out;
    const auto it = config.find("added_tokens_decoder");
    if (it == config.end() || it->is_null()) return out;
    if (!it->is_object()) throw badValue(file, "added_tokens_decoder", "an object of \"ID\": {\"content\": ...}", *it);
    for (const auto& [key, a] : it->items()) {
        TokenizerConfig::AddedTokenEntry entry;
        entry.id = addedTokenId(key, file);
        const std::string at = file.string() + ": added_tokens_decoder[\"" + key + "\"]";
        if (!a.is_object()) throw InputError(at + " must be an object, not " + jsonKind(a));
        entry.content = stringField(a, "content", at);
        entry.special = boolField(a, "special", false, at);
        entry.lstrip = boolField(a, "lstrip", false, at);
        entry.rstrip = boolField(a, "rstrip", false, at);
        out.push_back(std::move(entry));
    }
    return out;
}

} // namespace

std::vector<std::pair<const char*, const TokenizerConfig::SpecialToken*>> TokenizerConfig::specialTokens() const
{
    return {{"bos_token", &bosToken}, {"eos_token", &eosToken}, {"unk_token", &unkToken}, {"pad_token", &padToken}};
}

TokenizerConfig parseTokenizerConfig(std::string text, const std::filesystem::path& file)
{
    json config;
    try {
        config = json::parse(text);
    } catch (const json::parse_error& e) {
        throw InputError(file.string() + ": not valid JSON at byte " + std::to_string(e.byte));
    }
    if (!config.is_object()) throw InputError(file.string() + ": must be a JSON object");
    TokenizerConfig out;
    out.file = file;
    out.text = std::move(text);
    out.addedTokens = readAddedTokens(config, file);
    out.addBosToken = readFlag(config, "add_bos_token", file);
    out.addEosToken = readFlag(config, "add_eos_token", file);
    out.bosToken = readSpecialToken(config, "bos_token", file);
    out.eosToken = readSpecialToken(config, "eos_token", file);
    out.unkToken = readSpecialToken(config, "unk_token", file);
    out.padToken = readSpecialToken(config, "pad_token", file);
    out.chatTemplate = readChatTemplate(config, file);
    return out;
}

TokenizerConfig readTokenizerConfig(const std::filesystem::path& dir)
{
    const auto file = dir / "tokenizer_config.json";
    std::error_code ec;
    if (!std::filesystem::is_regular_file(file, ec)) return {};
    if (std::filesystem::file_size(file, ec) > kMaxConfigBytes) throw InputError(file.string() + " is larger than 64 MiB");
    std::ifstream in(file, std::ios::binary);
    if (!in) throw InputError(file.string() + ": cannot be read");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return parseTokenizerConfig(std::move(text), file);
}

} // namespace tb::text
