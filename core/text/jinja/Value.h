#pragma once
// Jinja's values, with the Python semantics that Jinja gives them: str() and
// repr(), truthiness, equality and ordering, `in`, the arithmetic operators,
// attribute and item access, slicing, and json.dumps for the tojson filter.
// A value is JSON data, a namespace() (attributes set in place), or
// undefined (a name, attribute or item that does not exist).

#include <memory>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace tb::text::jinja {

using json = nlohmann::ordered_json;

// A template's own logic failed (a type mismatch, a division by zero, an
// undefined value used). The renderer adds the template's name and line.
class EvalError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

struct Value {
    enum class Kind { Undefined, Data, Namespace } kind = Kind::Undefined;
    json data;
    std::shared_ptr<json> ns; // a namespace(): attributes set in place
    std::string missing;      // Undefined: what was looked up

    static Value of(json j)
    {
        Value v;
        v.kind = Kind::Data;
        v.data = std::move(j);
        return v;
    }
    static Value undefined(std::string what)
    {
        Value v;
        v.missing = std::move(what);
        return v;
    }
    static Value newNamespace();
    bool isUndefined() const { return kind == Kind::Undefined; }
    const json& j() const { return kind == Kind::Namespace ? *ns : data; }
};

// Text as code points: Python indexes, slices and measures str by code point.
std::u32string toU32(const std::string& s);
std::string fromU32(const std::u32string& s);

std::string pyRepr(const json& j);
std::string str(const Value& v); // str(value), as {{ value }} prints it
bool truthy(const Value& v);
const char* typeName(const Value& v);
// json.dumps(value, ensure_ascii=False), indented when indent >= 0.
std::string toJson(const json& j, int indent);

bool isNumber(const Value& v);
// int(x) for a number (floats truncate); other JSON throws nlohmann's type_error.
long long toInt(const json& j);
// The string in `v`, or an EvalError naming `what` (e.g. "trim", "strip()").
std::string requireString(const Value& v, const std::string& what);

bool equal(const Value& a, const Value& b);
bool contains(const Value& container, const Value& needle); // needle in container

// Operators.cpp: the binary operators (not `and`/`or`), unary minus, and access.
Value binaryOperator(const std::string& op, const Value& l, const Value& r);
Value negative(const Value& v);
Value attribute(const Value& obj, const std::string& name);
Value item(const Value& obj, const Value& key);
// obj[start:stop:step]; a null pointer is a part left out.
Value slice(const Value& obj, const Value* start, const Value* stop, const Value* step);

} // namespace tb::text::jinja
