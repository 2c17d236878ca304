#pragma once
// Fields of a tokenizer.json component (or a tokenizer_config.json entry),
// read with one message form: "WHERE.KEY must be ...". Internal to tb_text.

#include <string>

#include <nlohmann/json_fwd.hpp>

#include "common/Errors.h"

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

// A "Sequence" component's parts, one rule for every stage: j[key] must be an
// array, and each element becomes make(element, "AT.KEY[i]", depth + 1).
template <class Json, class Parts, class Make>
void readSequenceParts(const Json& j, const char* key, const std::string& here, const std::string& at, int depth,
                       Parts& parts, const Make& make)
{
    const auto it = j.find(key);
    if (it == j.end() || !it->is_array()) throw InputError(here + "." + key + " must be an array");
    for (std::size_t i = 0; i < it->size(); ++i)
        parts.push_back(make((*it)[i], at + "." + key + "[" + std::to_string(i) + "]", depth + 1));
}

} // namespace tb::text
