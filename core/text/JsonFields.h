#pragma once
// Fields of a tokenizer.json component (or a tokenizer_config.json entry),
// read with one message form: "WHERE.KEY must be ...". Internal to tb_text.

#include <string>

#include <nlohmann/json_fwd.hpp>

namespace tb::text {

// Components nest (Sequence of Sequence ...) at most this deep.
constexpr int kMaxComponentDepth = 16;

// "FILE: PATH", the prefix of a component's messages.
std::string componentPath(const std::string& source, const std::string& path);
// The object's "type"; throws when `j` is not an object or has none.
std::string typeOf(const nlohmann::json& j, const std::string& at);
const std::string& stringField(const nlohmann::json& j, const char* key, const std::string& at);
// `fallback` when the key is missing or null.
bool boolField(const nlohmann::json& j, const char* key, bool fallback, const std::string& at);
// A string of exactly one character.
char32_t charField(const nlohmann::json& j, const char* key, const std::string& at);
// What kind of JSON value `j` is, for messages: "a string", "a number", ...
const char* jsonKind(const nlohmann::json& j);
// Throws when `depth` passes kMaxComponentDepth.
void checkDepth(int depth, const std::string& at);

} // namespace tb::text
