#include "text/jinja/Builtins.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <ctime>

#include "common/Errors.h"
#include "text/Regex.h"
#include "text/jinja/Limits.h"
#include "text/jinja/PythonString.h"

namespace tb::text::jinja {
namespace {

// ------------------------------------------------------------ methods of str and dict

const std::string& text(const Value& self) { return self.j().get_ref<const std::string&>(); }

template <bool Left, bool Right>
Value stripped(const Value& self, const Arguments& a)
{
    const auto chars = a.string(0);
    return Value::of(pyStrip(text(self), chars ? &*chars : nullptr, Left, Right));
}

// startswith/endswith: a prefix, or a list of them (a non-string item matches as "").
template <bool AtStart>
Value hasAffix(const Value& self, const Arguments& a)
{
    const std::string& s = text(self);
    std::vector<std::string> options;
    if (a[0].j().is_array())
        for (const auto& o : a[0].j()) options.push_back(o.is_string() ? o.get<std::string>() : "");
    else
        options.push_back(requireString(a[0], a.what()));
    for (const auto& o : options) {
        if (AtStart && s.compare(0, o.size(), o) == 0) return Value::of(true);
        if (!AtStart && s.size() >= o.size() && s.compare(s.size() - o.size(), o.size(), o) == 0) return Value::of(true);
    }
    return Value::of(false);
}

template <bool FromRight>
Value splitBy(const Value& self, const Arguments& a)
{
    const auto sep = a.string(0);
    const json& maxsplit = a[1].j();
    return Value::of(pySplit(text(self), sep, maxsplit.is_number_integer() ? maxsplit.get<long long>() : -1, FromRight));
}

// The method and the filter name themselves "replace()" in messages about the arguments.
Value replaced(const std::string& s, const Arguments& a)
{
    const auto from = a.string(0, "replace()"), to = a.string(1, "replace()");
    if (!from || !to) throw EvalError("replace() needs two strings");
    return Value::of(pyReplace(s, *from, *to));
}

Value replaceMethod(const Value& self, const Arguments& a) { return replaced(text(self), a); }
Value replaceFilter(const Value& v, const Arguments& a) { return replaced(requireString(v, a.what()), a); }

Value findIn(const Value& self, const Arguments& a)
{
    const auto sub = a.string(0);
    if (!sub) a.failNeeds();
    return Value::of(pyFind(text(self), *sub));
}

Value joinWith(const Value& self, const Arguments& a)
{
    if (!a[0].j().is_array()) a.failNeeds();
    std::string out;
    bool first = true;
    for (const auto& v : a[0].j()) {
        out += (first ? "" : text(self)) + str(Value::of(v));
        first = false;
    }
    return Value::of(out);
}

enum class Part { Items, Keys, Values };
template <Part P>
Value mappingList(const Value& self, const Arguments&)
{
    json out = json::array();
    for (const auto& [k, v] : self.j().items()) {
        if (P == Part::Items) out.push_back(json::array({k, v}));
        else if (P == Part::Keys) out.push_back(k);
        else out.push_back(v);
    }
    return Value::of(out);
}

Value dictGet(const Value& self, const Arguments& a)
{
    const auto key = a.string(0);
    if (!key) a.failNeeds();
    const auto it = self.j().find(*key);
    return it != self.j().end() ? Value::of(*it) : a[1];
}

// upper(), lower(), capitalize(), title() as methods and as filters.
using Change = std::string (*)(const std::string&);
template <Change C>
Value changeMethod(const Value& self, const Arguments&)
{
    return Value::of(C(text(self)));
}
template <Change C>
Value changeFilter(const Value& v, const Arguments& a)
{
    return Value::of(C(requireString(v, a.what())));
}

// ------------------------------------------------------------ filters

Value defaultFilter(const Value& v, const Arguments& a)
{
    if (v.isUndefined() || (truthy(a[1]) && !truthy(v))) return a[0];
    return v;
}

Value trimmed(const Value& v, const Arguments& a)
{
    std::optional<std::string> chars;
    if (a.given(0)) chars = requireString(a[0], a.what());
    return Value::of(pyStrip(requireString(v, a.what()), chars ? &*chars : nullptr, true, true));
}

Value lengthOf(const Value& v, const Arguments& a)
{
    if (v.isUndefined()) return Value::of(0);
    const json& j = v.j();
    if (j.is_string()) return Value::of((long long)toU32(j.get<std::string>()).size());
    if (j.is_array() || j.is_object()) return Value::of((long long)j.size());
    throw EvalError(std::string("a value of type ") + typeName(v) + " has no length");
}

// transformers' tojson(x, ensure_ascii=False, indent=None, separators=None,
// sort_keys=False), with indent first as Jinja's own tojson has it. Only indent
// is applied; the rest are accepted as templates pass them.
Value tojson(const Value& v, const Arguments& a) { return Value::of(toJson(v.j(), a.given(0) ? int(toInt(a[0].j())) : -1)); }

// first/last of a list or a string; an empty one gives undefined.
template <bool First>
Value firstOrLast(const Value& v, const Arguments& a)
{
    const json& j = v.j();
    if (j.is_array()) return j.empty() ? Value::undefined("first") : Value::of(First ? j.front() : j.back());
    if (j.is_string()) {
        const auto u = toU32(j.get<std::string>());
        return u.empty() ? Value::undefined("first") : Value::of(fromU32(std::u32string(1, First ? u.front() : u.back())));
    }
    throw EvalError(a.callee() + " needs a list or a string");
}

Value joinList(const Value& v, const Arguments& a)
{
    const std::string sep = str(a[0]);
    const json& j = v.j();
    if (!j.is_array()) throw EvalError(a.callee() + " needs a list");
    std::string out;
    for (std::size_t i = 0; i < j.size(); ++i) out += (i ? sep : "") + str(Value::of(j[i]));
    return Value::of(out);
}

Value unchanged(const Value& v, const Arguments&) { return v; }
Value toStr(const Value& v, const Arguments&) { return Value::of(str(v)); }
Value toFloat(const Value& v, const Arguments&) { return Value::of(v.j().is_number() ? v.j().get<double>() : 0.0); }

Value toInteger(const Value& v, const Arguments&)
{
    const json& j = v.j();
    if (j.is_number()) return Value::of(toInt(j));
    if (!j.is_string()) return Value::of(0);
    try {
        return Value::of(std::stoll(j.get<std::string>()));
    } catch (const std::exception&) {
        return Value::of(0);
    }
}

Value toList(const Value& v, const Arguments&)
{
    const json& j = v.j();
    if (j.is_array()) return v;
    json out = json::array();
    if (j.is_string())
        for (const char32_t c : toU32(j.get<std::string>())) out.push_back(fromU32(std::u32string(1, c)));
    else if (j.is_object())
        for (const auto& [k, x] : j.items()) out.push_back(k);
    return Value::of(out);
}

Value itemsOf(const Value& v, const Arguments& a)
{
    if (!v.j().is_object()) throw EvalError(a.callee() + " needs a mapping");
    return mappingList<Part::Items>(v, a);
}

Value reversed(const Value& v, const Arguments& a)
{
    const json& j = v.j();
    if (j.is_array()) {
        json out = json::array();
        for (auto it = j.rbegin(); it != j.rend(); ++it) out.push_back(*it);
        return Value::of(out);
    }
    if (!j.is_string()) throw EvalError(a.callee() + " needs a list or a string");
    auto u = toU32(j.get<std::string>());
    std::reverse(u.begin(), u.end());
    return Value::of(fromU32(u));
}

Value absolute(const Value& v, const Arguments& a)
{
    const json& j = v.j();
    if (j.is_number_integer()) return Value::of(std::llabs(j.get<long long>()));
    if (j.is_number()) return Value::of(std::fabs(j.get<double>()));
    throw EvalError(a.callee() + " needs a number");
}

// ------------------------------------------------------------ tests

Value isDefined(const Value& v, const Arguments&) { return Value::of(!v.isUndefined()); }
Value isUndefined(const Value& v, const Arguments&) { return Value::of(v.isUndefined()); }
Value isEqual(const Value& v, const Arguments& a) { return Value::of(equal(v, a[0])); }
Value isNotEqual(const Value& v, const Arguments& a) { return Value::of(!equal(v, a[0])); }
Value isIn(const Value& v, const Arguments& a) { return Value::of(contains(a[0], v)); }

template <bool Odd>
Value oddOrEven(const Value& v, const Arguments& a)
{
    if (!isNumber(v)) throw EvalError(a.callee() + " needs a number");
    return Value::of((toInt(v.j()) % 2 != 0) == Odd);
}

Value divisibleBy(const Value& v, const Arguments& a)
{
    const Value& d = a[0];
    if (!isNumber(v) || !isNumber(d) || toInt(d.j()) == 0) throw EvalError("divisibleby needs numbers");
    return Value::of(toInt(v.j()) % toInt(d.j()) == 0);
}

// Every cased ASCII letter is lower (upper) case, and the string is not empty.
template <bool Lower>
Value letterCase(const Value& v, const Arguments& a)
{
    const std::string s = requireString(v, a.what());
    bool r = !s.empty();
    for (const char c : s)
        if (std::isalpha(static_cast<unsigned char>(c)) && (Lower != (std::islower(static_cast<unsigned char>(c)) != 0))) r = false;
    return Value::of(r);
}

// A test of the value's JSON type; undefined passes none of them.
template <bool (*Check)(const json&)>
Value typeTest(const Value& v, const Arguments&)
{
    return Value::of(!v.isUndefined() && Check(v.j()));
}

bool isNone(const json& j) { return j.is_null(); }
bool isString(const json& j) { return j.is_string(); }
bool isNumberJson(const json& j) { return j.is_number() && !j.is_boolean(); }
bool isInteger(const json& j) { return j.is_number_integer(); }
bool isFloat(const json& j) { return j.is_number_float(); }
bool isBoolean(const json& j) { return j.is_boolean(); }
bool isTrue(const json& j) { return j.is_boolean() && j.get<bool>(); }
bool isFalse(const json& j) { return j.is_boolean() && !j.get<bool>(); }
bool isIterable(const json& j) { return j.is_array() || j.is_object() || j.is_string(); }

Value isMapping(const Value& v, const Arguments&)
{
    return Value::of(v.kind == Value::Kind::Namespace || (!v.isUndefined() && v.j().is_object()));
}

// ------------------------------------------------------------ globals

Value raiseException(const Value&, const Arguments& a)
{
    throw InputError("the chat template refused the conversation: " + str(a[0]));
}

Value makeNamespace(const Value&, const Arguments& a)
{
    Value v = Value::newNamespace();
    for (const auto& x : a.unbound().positional)
        if (!x.isUndefined() && x.j().is_object())
            for (const auto& [k, y] : x.j().items()) (*v.ns)[k] = y;
    for (const auto& [k, x] : a.unbound().keywords) (*v.ns)[k] = x.isUndefined() ? json() : x.j();
    return v;
}

// range(stop) or range(start, stop[, step]).
Value rangeList(const Value&, const Arguments& a)
{
    long long start = 0, stop = 0;
    if (a.given(1)) {
        start = a.given(0) ? toInt(a[0].j()) : 0;
        stop = toInt(a[1].j());
    } else if (a.given(0)) {
        stop = toInt(a[0].j());
    }
    const long long step = a.given(2) ? toInt(a[2].j()) : 1;
    if (step == 0) throw EvalError("range() step cannot be zero");
    json out = json::array();
    for (long long i = start; step > 0 ? i < stop : i > stop; i += step) {
        out.push_back(i);
        if (out.size() > kMaxIterations) throw EvalError("range() is too long");
    }
    return Value::of(out);
}

Value strftimeNow(const Value&, const Arguments& a)
{
    const std::string format = requireString(a[0], a.what());
    const std::time_t now = std::time(nullptr);
    std::tm tm{};
    localtime_r(&now, &tm);
    char buf[256];
    const std::size_t n = std::strftime(buf, sizeof buf, format.c_str(), &tm);
    return Value::of(std::string(buf, n));
}

// ------------------------------------------------------------ the table

using K = BuiltinKind;

Param required(std::string_view name) { return {.name = name, .required = true}; }

// clang-format off
const std::vector<Builtin>& table()
{
    // Aliases share a row; messages use the name as called. A parameter is
    // {name, the value when left out (None unless given)} or required(name).
    static const std::vector<Builtin> rows = {
        // Methods of str.
        {K::Method, {"strip"}, {{"chars"}}, stripped<true, true>, Receiver::Str},
        {K::Method, {"lstrip"}, {{"chars"}}, stripped<true, false>, Receiver::Str},
        {K::Method, {"rstrip"}, {{"chars"}}, stripped<false, true>, Receiver::Str},
        {K::Method, {"startswith"}, {required("prefix")}, hasAffix<true>, Receiver::Str},
        {K::Method, {"endswith"}, {required("suffix")}, hasAffix<false>, Receiver::Str},
        {K::Method, {"split"}, {{"sep"}, {"maxsplit", -1}}, splitBy<false>, Receiver::Str},
        {K::Method, {"rsplit"}, {{"sep"}, {"maxsplit", -1}}, splitBy<true>, Receiver::Str},
        {K::Method, {"upper"}, {}, changeMethod<pyUpper>, Receiver::Str},
        {K::Method, {"lower"}, {}, changeMethod<pyLower>, Receiver::Str},
        {K::Method, {"capitalize"}, {}, changeMethod<pyCapitalize>, Receiver::Str},
        {K::Method, {"title"}, {}, changeMethod<pyTitle>, Receiver::Str},
        {K::Method, {"replace"}, {{"old"}, {"new"}}, replaceMethod, Receiver::Str},
        {K::Method, {"find"}, {required("sub")}, findIn, Receiver::Str, "a string"},
        {K::Method, {"join"}, {required("iterable")}, joinWith, Receiver::Str, "a list"},
        // Methods of dict.
        {K::Method, {"items"}, {}, mappingList<Part::Items>, Receiver::Dict},
        {K::Method, {"keys"}, {}, mappingList<Part::Keys>, Receiver::Dict},
        {K::Method, {"values"}, {}, mappingList<Part::Values>, Receiver::Dict},
        {K::Method, {"get"}, {required("key"), {"default"}}, dictGet, Receiver::Dict, "a key"},
        // Filters.
        {.kind = K::Filter, .names = {"default", "d"}, .params = {{"default_value", ""}, {"boolean", false}},
         .function = defaultFilter, .takesUndefined = true},
        {.kind = K::Filter, .names = {"safe"}, .params = {}, .function = unchanged, .takesUndefined = true},
        {.kind = K::Filter, .names = {"string"}, .params = {}, .function = toStr, .takesUndefined = true},
        {.kind = K::Filter, .names = {"length", "count"}, .params = {}, .function = lengthOf, .takesUndefined = true},
        {K::Filter, {"trim"}, {{"chars"}}, trimmed},
        {K::Filter, {"tojson"}, {{"indent"}, {"ensure_ascii", false}, {"separators"}, {"sort_keys", false}}, tojson},
        {K::Filter, {"upper"}, {}, changeFilter<pyUpper>},
        {K::Filter, {"lower"}, {}, changeFilter<pyLower>},
        {K::Filter, {"capitalize"}, {}, changeFilter<pyCapitalize>},
        {K::Filter, {"title"}, {}, changeFilter<pyTitle>},
        {K::Filter, {"first"}, {}, firstOrLast<true>},
        {K::Filter, {"last"}, {}, firstOrLast<false>},
        {K::Filter, {"join"}, {{"d", ""}}, joinList},
        {K::Filter, {"int"}, {}, toInteger},
        {K::Filter, {"float"}, {}, toFloat},
        {K::Filter, {"list"}, {}, toList},
        {K::Filter, {"items"}, {}, itemsOf},
        {K::Filter, {"reverse"}, {}, reversed},
        {K::Filter, {"replace"}, {{"old"}, {"new"}}, replaceFilter},
        {K::Filter, {"abs"}, {}, absolute},
        // Tests (each takes an undefined value).
        {K::Test, {"defined"}, {}, isDefined},
        {K::Test, {"undefined"}, {}, isUndefined},
        {K::Test, {"none"}, {}, typeTest<isNone>},
        {K::Test, {"string"}, {}, typeTest<isString>},
        {K::Test, {"number"}, {}, typeTest<isNumberJson>},
        {K::Test, {"integer"}, {}, typeTest<isInteger>},
        {K::Test, {"float"}, {}, typeTest<isFloat>},
        {K::Test, {"boolean"}, {}, typeTest<isBoolean>},
        {K::Test, {"true"}, {}, typeTest<isTrue>},
        {K::Test, {"false"}, {}, typeTest<isFalse>},
        {K::Test, {"mapping"}, {}, isMapping},
        {K::Test, {"iterable", "sequence"}, {}, typeTest<isIterable>},
        {K::Test, {"eq", "equalto", "sameas"}, {required("other")}, isEqual},
        {K::Test, {"ne"}, {required("other")}, isNotEqual},
        {K::Test, {"in"}, {required("seq")}, isIn},
        {K::Test, {"odd"}, {}, oddOrEven<true>},
        {K::Test, {"even"}, {}, oddOrEven<false>},
        {K::Test, {"divisibleby"}, {required("num")}, divisibleBy},
        {K::Test, {"lower"}, {}, letterCase<true>},
        {K::Test, {"upper"}, {}, letterCase<false>},
        // Globals: Jinja's and those transformers adds.
        {K::Global, {"raise_exception"}, {{"message", "(no message)"}}, raiseException},
        {.kind = K::Global, .names = {"namespace"}, .params = {}, .function = makeNamespace, .variadic = true},
        {K::Global, {"range"}, {{"start"}, {"stop"}, {"step"}}, rangeList},
        {K::Global, {"strftime_now"}, {{"format", "%Y-%m-%d"}}, strftimeNow},
    };
    return rows;
}
// clang-format on

bool receives(const Builtin& b, const Value& receiver)
{
    switch (b.receiver) {
    case Receiver::Str: return receiver.j().is_string();
    case Receiver::Dict: return receiver.j().is_object();
    default: return true;
    }
}

} // namespace

const Builtin* findBuiltin(BuiltinKind kind, const std::string& name, const Value& receiver)
{
    for (const Builtin& b : table())
        if (b.kind == kind && std::find(b.names.begin(), b.names.end(), name) != b.names.end() && receives(b, receiver)) return &b;
    return nullptr;
}

// ------------------------------------------------------------ the binder

Arguments bind(const Builtin& builtin, const std::string& calledAs, CallValues call)
{
    Arguments out(builtin, calledAs);
    if (builtin.variadic) {
        out.m_unbound = std::move(call);
        return out;
    }
    const auto& params = builtin.params;
    const std::size_t given = call.positional.size();
    if (given > params.size())
        throw EvalError(out.callee() + " takes " +
                        (params.empty() ? std::string("no arguments")
                                        : "at most " + std::to_string(params.size()) + (params.size() == 1 ? " argument" : " arguments")) +
                        " (" + std::to_string(given) + " given)");
    out.m_values.resize(params.size());
    out.m_given.assign(params.size(), false);
    for (std::size_t i = 0; i < given; ++i) {
        out.m_values[i] = std::move(call.positional[i]);
        out.m_given[i] = true;
    }
    for (auto& [key, value] : call.keywords) {
        const auto p = std::find_if(params.begin(), params.end(), [&](const Param& q) { return q.name == key; });
        if (p == params.end()) throw EvalError(out.callee() + " got an unexpected keyword argument '" + clipForMessage(key, 40) + "'");
        const auto i = std::size_t(p - params.begin());
        if (out.m_given[i]) throw EvalError(out.callee() + " got multiple values for argument '" + key + "'");
        out.m_values[i] = std::move(value);
        out.m_given[i] = true;
    }
    for (std::size_t i = 0; i < params.size(); ++i) {
        if (out.m_given[i]) continue;
        if (params[i].required) out.failNeeds();
        out.m_values[i] = Value::of(params[i].fallback);
    }
    return out;
}

std::optional<std::string> Arguments::string(std::size_t i, const std::string& what) const
{
    const Value& v = m_values[i];
    if (v.isUndefined() || v.j().is_null()) return std::nullopt;
    return requireString(v, what.empty() ? this->what() : what);
}

std::string Arguments::callee() const
{
    switch (m_builtin->kind) {
    case BuiltinKind::Filter: return "filter " + m_name;
    case BuiltinKind::Test: return "the test '" + m_name + "'";
    default: return m_name + "()";
    }
}

std::string Arguments::what() const
{
    const bool bare = m_builtin->kind == BuiltinKind::Filter || m_builtin->kind == BuiltinKind::Test;
    return bare ? m_name : m_name + "()";
}

void Arguments::failNeeds() const { throw EvalError(callee() + " needs " + std::string(m_builtin->needs)); }

} // namespace tb::text::jinja
