#pragma once
// The filters, tests, methods and globals a template can call, in one table.
// Each entry lists its parameters (name, the value when left out, or
// required); one binder maps a call's positional and keyword arguments onto
// them and reports what does not fit, so an entry's function receives its
// arguments by position, already complete.

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "text/jinja/Value.h"

namespace tb::text::jinja {

enum class BuiltinKind { Filter, Test, Method, Global };
enum class Receiver { Any, Str, Dict }; // whose method it is (a namespace() counts as a dict)

struct Param {
    std::string_view name;
    json fallback = nullptr; // the value when the call leaves it out
    bool required = false;
};

class Arguments;
// `self` is the filtered or tested value or the method's object (undefined for a global).
using BuiltinFunction = Value (*)(const Value& self, const Arguments& args);

struct Builtin {
    BuiltinKind kind;
    std::vector<std::string_view> names; // the first is the name; the rest are aliases
    std::vector<Param> params;
    BuiltinFunction function;
    Receiver receiver = Receiver::Any; // methods: Str or Dict
    // What a missing required argument lacks: "<callee> needs <needs>".
    std::string_view needs = "an argument";
    // Filters that take an undefined value (default, length); the others refuse it.
    bool takesUndefined = false;
    // namespace(): any positional and keyword arguments, unbound.
    bool variadic = false;
};

// Arguments as the call site evaluated them, before binding.
struct CallValues {
    std::vector<Value> positional;
    std::vector<std::pair<std::string, Value>> keywords;
};

// A call's arguments bound to its builtin's parameters.
class Arguments {
public:
    Arguments(const Builtin& builtin, std::string calledAs) : m_builtin(&builtin), m_name(std::move(calledAs)) {}

    // The argument for parameter i: as given, or the parameter's fallback.
    const Value& operator[](std::size_t i) const { return m_values[i]; }
    bool given(std::size_t i) const { return m_given[i]; }
    // The string for parameter i; nullopt for None or undefined; an EvalError
    // naming `what` (by default what()) for another type.
    std::optional<std::string> string(std::size_t i, const std::string& what = {}) const;
    // The builtin as messages name it: "filter trim", "the test 'eq'", "strip()".
    std::string callee() const;
    // As messages about an argument's type name it: "trim", "eq", "strip()".
    std::string what() const;
    [[noreturn]] void failNeeds() const; // "<callee> needs <needs>"
    const CallValues& unbound() const { return m_unbound; } // variadic builtins

private:
    friend Arguments bind(const Builtin& builtin, const std::string& calledAs, CallValues call);

    const Builtin* m_builtin;
    std::string m_name;
    std::vector<Value> m_values;
    std::vector<bool> m_given;
    CallValues m_unbound;
};

// The builtin `name` of `kind`; for a method, the one that `receiver`'s type has.
const Builtin* findBuiltin(BuiltinKind kind, const std::string& name, const Value& receiver = {});
// Binds the call's arguments to the builtin's parameters, or throws EvalError:
// too many positional arguments, an unknown keyword, one given twice, a
// required one missing.
Arguments bind(const Builtin& builtin, const std::string& calledAs, CallValues call);

} // namespace tb::text::jinja
