#include "text/jinja/Value.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "text/Unicode.h"

namespace tb::text::jinja {
namespace {

std::string pyFloat(double d)
{
    if (std::isnan(d)) return "nan";
    if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
    char buf[64];
    const auto r = std::to_chars(buf, buf + sizeof buf, d);
    std::string s(buf, r.ptr);
    if (s.find_first_of(".en") == std::string::npos) s += ".0";
    return s;
}

std::string pyStrRepr(const std::string& s)
{
    const bool single = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
    const char q = single ? '"' : '\'';
    std::string out(1, q);
    for (const char c : s) {
        switch (c) {
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        default:
            if (c == q) {
                out += '\\';
                out += c;
            } else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
                char buf[8];
                std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned char>(c));
                out += buf;
            } else {
                out += c;
            }
        }
    }
    return out + q;
}

// A line break and `indent` spaces for each level; nothing without indent.
std::string lineStart(int indent, int level)
{
    if (indent < 0) return "";
    std::string s(1 + std::size_t(indent * level), ' ');
    s[0] = '\n';
    return s;
}

// Python's json.dumps(ensure_ascii=False): ", " and ": " between items without indent.
std::string dumpJson(const json& v, int indent, int level)
{
    const std::string pad = lineStart(indent, level + 1);
    const std::string close = lineStart(indent, level);
    const char* comma = indent >= 0 ? "," : ", ";
    if (v.is_array()) {
        if (v.empty()) return "[]";
        std::string out = "[";
        for (std::size_t i = 0; i < v.size(); ++i) {
            if (i) out += comma;
            out += pad;
            out += dumpJson(v[i], indent, level + 1);
        }
        return out + close + "]";
    }
    if (v.is_object()) {
        if (v.empty()) return "{}";
        std::string out = "{";
        bool first = true;
        for (const auto& [k, x] : v.items()) {
            if (!first) out += comma;
            out += pad;
            out += json(k).dump(-1, ' ', false, json::error_handler_t::replace);
            out += ": ";
            out += dumpJson(x, indent, level + 1);
            first = false;
        }
        return out + close + "}";
    }
    if (v.is_number_float()) return pyFloat(v.get<double>()) == "nan" ? "NaN" : pyFloat(v.get<double>());
    return v.dump(-1, ' ', false, json::error_handler_t::replace);
}

} // namespace

Value Value::newNamespace()
{
    Value v;
    v.kind = Kind::Namespace;
    v.ns = std::make_shared<json>(json::object());
    return v;
}

std::u32string toU32(const std::string& s)
{
    std::u32string out;
    for (std::size_t i = 0; i < s.size();) out.push_back(nextCodePoint(s, i));
    return out;
}

std::string fromU32(const std::u32string& s)
{
    std::string out;
    for (const char32_t c : s) appendUtf8(out, c);
    return out;
}

std::string pyRepr(const json& j)
{
    switch (j.type()) {
    case json::value_t::null: return "None";
    case json::value_t::boolean: return j.get<bool>() ? "True" : "False";
    case json::value_t::number_integer: return std::to_string(j.get<long long>());
    case json::value_t::number_unsigned: return std::to_string(j.get<unsigned long long>());
    case json::value_t::number_float: return pyFloat(j.get<double>());
    case json::value_t::string: return pyStrRepr(j.get<std::string>());
    case json::value_t::array: {
        std::string out = "[";
        for (std::size_t i = 0; i < j.size(); ++i) out += (i ? ", " : "") + pyRepr(j[i]);
        return out + "]";
    }
    case json::value_t::object: {
        std::string out = "{";
        bool first = true;
        for (const auto& [k, v] : j.items()) {
            out += (first ? "" : ", ") + pyStrRepr(k) + ": " + pyRepr(v);
            first = false;
        }
        return out + "}";
    }
    default: return "";
    }
}

std::string str(const Value& v)
{
    if (v.isUndefined()) return "";
    if (v.kind == Value::Kind::Namespace) return "<Namespace>";
    const json& j = v.j();
    if (j.is_string()) return j.get<std::string>();
    return pyRepr(j);
}

bool truthy(const Value& v)
{
    if (v.isUndefined()) return false;
    if (v.kind == Value::Kind::Namespace) return true;
    const json& j = v.j();
    switch (j.type()) {
    case json::value_t::null: return false;
    case json::value_t::boolean: return j.get<bool>();
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return j.get<long long>() != 0;
    case json::value_t::number_float: return j.get<double>() != 0.0;
    case json::value_t::string: return !j.get_ref<const std::string&>().empty(); // json::empty() is false for every string
    case json::value_t::array:
    case json::value_t::object: return !j.empty();
    default: return false;
    }
}

const char* typeName(const Value& v)
{
    if (v.isUndefined()) return "undefined";
    if (v.kind == Value::Kind::Namespace) return "namespace";
    switch (v.j().type()) {
    case json::value_t::null: return "None";
    case json::value_t::boolean: return "bool";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "int";
    case json::value_t::number_float: return "float";
    case json::value_t::string: return "str";
    case json::value_t::array: return "list";
    case json::value_t::object: return "dict";
    default: return "value";
    }
}

std::string toJson(const json& j, int indent) { return dumpJson(j, indent, 0); }

bool isNumber(const Value& v) { return !v.isUndefined() && v.j().is_number(); }

long long toInt(const json& j) { return j.is_number_float() ? (long long)j.get<double>() : j.get<long long>(); }

std::string requireString(const Value& v, const std::string& what)
{
    if (v.isUndefined()) throw EvalError("'" + v.missing + "' is undefined (" + what + ")");
    if (!v.j().is_string()) throw EvalError(what + " needs a string, not " + typeName(v));
    return v.j().get<std::string>();
}

bool equal(const Value& a, const Value& b)
{
    if (a.isUndefined() || b.isUndefined()) return a.isUndefined() && b.isUndefined();
    const json& x = a.j();
    const json& y = b.j();
    if (x.is_number() && y.is_number()) return x.get<double>() == y.get<double>();
    if (x.is_boolean() != y.is_boolean()) return false;
    return x == y;
}

bool contains(const Value& container, const Value& needle)
{
    if (container.isUndefined()) return false; // Jinja's Undefined iterates as empty
    const json& c = container.j();
    if (c.is_string()) {
        if (!needle.j().is_string()) throw EvalError("'in <string>' needs a string on the left");
        return c.get<std::string>().find(needle.j().get<std::string>()) != std::string::npos;
    }
    if (c.is_array()) {
        for (const auto& e : c)
            if (equal(Value::of(e), needle)) return true;
        return false;
    }
    if (c.is_object()) return needle.j().is_string() && c.contains(needle.j().get<std::string>());
    throw EvalError(std::string("'in' cannot look into a value of type ") + typeName(container));
}

} // namespace tb::text::jinja
