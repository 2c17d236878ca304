#include "text/JsonFields.h"

#include <nlohmann/json.hpp>

#include "common/Errors.h"
#include "text/Unicode.h"

namespace tb::text {

std::string componentPath(const std::string& source, const std::string& path) { return source + ": " + path; }

std::string typeOf(const nlohmann::json& j, const std::string& at)
{
    if (!j.is_object()) throw InputError(at + " must be an object");
    return stringField(j, "type", at);
}

const std::string& stringField(const nlohmann::json& j, const char* key, const std::string& at)
{
    const auto it = j.find(key);
    if (it == j.end() || !it->is_string()) throw InputError(at + "." + key + " must be a string");
    return it->get_ref<const std::string&>();
}

bool boolField(const nlohmann::json& j, const char* key, bool fallback, const std::string& at)
{
    const auto it = j.find(key);
    if (it == j.end() || it->is_null()) return fallback;
    if (!it->is_boolean()) throw InputError(at + "." + key + " must be true or false");
    return it->get<bool>();
}

char32_t charField(const nlohmann::json& j, const char* key, const std::string& at)
{
    const std::string& s = stringField(j, key, at);
    std::size_t i = 0;
    if (s.empty() || firstInvalidUtf8(s) != std::string::npos) throw InputError(at + "." + key + " must be one character");
    const char32_t c = nextCodePoint(s, i);
    if (i != s.size()) throw InputError(at + "." + key + " must be one character");
    return c;
}

const char* jsonKind(const nlohmann::json& j)
{
    switch (j.type()) {
    case nlohmann::json::value_t::null: return "null";
    case nlohmann::json::value_t::boolean: return "true or false";
    case nlohmann::json::value_t::string: return "a string";
    case nlohmann::json::value_t::array: return "a list";
    case nlohmann::json::value_t::object: return "an object";
    case nlohmann::json::value_t::binary: return "binary data";
    case nlohmann::json::value_t::discarded: return "nothing";
    default: return "a number";
    }
}

void checkDepth(int depth, const std::string& at)
{
    if (depth > kMaxComponentDepth)
        throw InputError(at + ": Sequence nested deeper than " + std::to_string(kMaxComponentDepth));
}

} // namespace tb::text
