// Python's operators, attribute and item access, and slicing on Jinja values.
#include <algorithm>
#include <cmath>
#include <vector>

#include "text/jinja/Limits.h"
#include "text/jinja/Value.h"

namespace tb::text::jinja {
namespace {

int compareValues(const json& a, const json& b, bool& comparable)
{
    comparable = true;
    if (a.is_number() && b.is_number()) {
        const double x = a.get<double>(), y = b.get<double>();
        return x < y ? -1 : x > y ? 1 : 0;
    }
    if (a.is_string() && b.is_string()) {
        const auto& x = a.get_ref<const std::string&>();
        const auto& y = b.get_ref<const std::string&>();
        return x < y ? -1 : x > y ? 1 : 0;
    }
    comparable = false;
    return 0;
}

Value ordering(const std::string& op, const Value& l, const Value& r)
{
    bool ok = false;
    const int c = compareValues(l.j(), r.j(), ok);
    if (!ok) throw EvalError(std::string("cannot compare ") + typeName(l) + " and " + typeName(r) + " with '" + op + "'");
    return Value::of(op == "<" ? c < 0 : op == ">" ? c > 0 : op == "<=" ? c <= 0 : c >= 0);
}

std::string repeated(const std::string& s, long long n)
{
    std::string out;
    for (long long i = 0; i < n && out.size() < kMaxOutput; ++i) out += s;
    return out;
}

// Arithmetic on two numbers (neither a bool): ints stay ints, Python floors // and %.
Value arithmetic(const std::string& op, const json& x, const json& y)
{
    if (op == "/") {
        if (y.get<double>() == 0) throw EvalError("division by zero");
        return Value::of(x.get<double>() / y.get<double>());
    }
    if (x.is_number_integer() && y.is_number_integer()) {
        const long long a = x.get<long long>(), b = y.get<long long>();
        if (op == "+") return Value::of(a + b);
        if (op == "-") return Value::of(a - b);
        if (op == "*") return Value::of(a * b);
        if (op == "**") return Value::of((long long)std::pow(double(a), double(b)));
        if (b == 0) throw EvalError("division by zero");
        const long long q = a / b - ((a % b != 0) && ((a < 0) != (b < 0)) ? 1 : 0); // Python floors
        if (op == "//") return Value::of(q);
        if (op == "%") return Value::of(a - q * b);
    }
    const double a = x.get<double>(), b = y.get<double>();
    if (op == "+") return Value::of(a + b);
    if (op == "-") return Value::of(a - b);
    if (op == "*") return Value::of(a * b);
    if (op == "**") return Value::of(std::pow(a, b));
    if (b == 0) throw EvalError("division by zero");
    if (op == "//") return Value::of(std::floor(a / b));
    if (op == "%") return Value::of(a - std::floor(a / b) * b);
    throw EvalError("unknown operator '" + op + "'");
}

// The positions obj[start:stop:step] takes from a sequence of n, as Python's slice.indices.
std::vector<long long> sliceIndices(long long n, const Value* start, const Value* stop, long long step)
{
    auto clamp = [&](const Value* v, long long dflt) {
        if (!v || v->isUndefined() || v->j().is_null()) return dflt;
        long long x = toInt(v->j());
        if (x < 0) x += n;
        if (step > 0) return std::clamp(x, 0LL, n);
        return std::clamp(x, -1LL, n - 1);
    };
    const long long b = clamp(start, step > 0 ? 0 : n - 1);
    const long long e = clamp(stop, step > 0 ? n : -1);
    std::vector<long long> idx;
    if (step > 0)
        for (long long i = b; i < e; i += step) idx.push_back(i);
    else
        for (long long i = b; i > e; i += step) idx.push_back(i);
    return idx;
}

} // namespace

Value binaryOperator(const std::string& op, const Value& l, const Value& r)
{
    if (op == "==") return Value::of(equal(l, r));
    if (op == "!=") return Value::of(!equal(l, r));
    if (op == "in") return Value::of(contains(r, l));
    if (op == "not in") return Value::of(!contains(r, l));
    if (op == "~") return Value::of(str(l) + str(r));
    if (l.isUndefined() || r.isUndefined())
        throw EvalError("'" + (l.isUndefined() ? l.missing : r.missing) + "' is undefined (in '" + op + "')");
    const json& x = l.j();
    const json& y = r.j();
    if (op == "<" || op == ">" || op == "<=" || op == ">=") return ordering(op, l, r);
    if (op == "+") {
        if (x.is_string() && y.is_string()) return Value::of(x.get<std::string>() + y.get<std::string>());
        if (x.is_array() && y.is_array()) {
            json out = x;
            for (const auto& v : y) out.push_back(v);
            return Value::of(out);
        }
    }
    if (op == "*" && x.is_string() && y.is_number_integer()) return Value::of(repeated(x.get<std::string>(), y.get<long long>()));
    if (op == "*" && x.is_number_integer() && y.is_string()) return Value::of(repeated(y.get<std::string>(), x.get<long long>()));
    if (!x.is_number() || !y.is_number() || x.is_boolean() || y.is_boolean())
        throw EvalError(std::string("unsupported operand types for '") + op + "': " + typeName(l) + " and " + typeName(r));
    return arithmetic(op, x, y);
}

Value negative(const Value& v)
{
    if (!isNumber(v)) throw EvalError(std::string("cannot negate a value of type ") + typeName(v));
    if (v.j().is_number_integer()) return Value::of(-v.j().get<long long>());
    return Value::of(-v.j().get<double>());
}

Value attribute(const Value& obj, const std::string& name)
{
    if (obj.isUndefined()) throw EvalError("'" + obj.missing + "' is undefined, so it has no attribute '" + name + "'");
    const json& j = obj.j();
    if (j.is_object()) {
        const auto it = j.find(name);
        if (it != j.end()) return Value::of(*it);
    }
    return Value::undefined(obj.missing.empty() ? name : obj.missing + "." + name);
}

Value item(const Value& obj, const Value& key)
{
    if (obj.isUndefined()) throw EvalError("'" + obj.missing + "' is undefined, so it cannot be indexed");
    const json& j = obj.j();
    const json& k = key.j();
    if (j.is_object() && k.is_string()) {
        const auto it = j.find(k.get<std::string>());
        return it != j.end() ? Value::of(*it) : Value::undefined(k.get<std::string>());
    }
    if ((j.is_array() || j.is_string()) && k.is_number_integer()) {
        long long i = k.get<long long>();
        const auto missing = Value::undefined("index " + std::to_string(k.get<long long>()));
        if (j.is_string()) {
            const auto u = toU32(j.get<std::string>());
            if (i < 0) i += (long long)u.size();
            if (i < 0 || i >= (long long)u.size()) return missing;
            return Value::of(fromU32(std::u32string(1, u[std::size_t(i)])));
        }
        if (i < 0) i += (long long)j.size();
        if (i < 0 || i >= (long long)j.size()) return missing;
        return Value::of(j[std::size_t(i)]);
    }
    return Value::undefined("item");
}

Value slice(const Value& obj, const Value* start, const Value* stop, const Value* step)
{
    if (obj.isUndefined()) throw EvalError("'" + obj.missing + "' is undefined, so it cannot be sliced");
    const json& j = obj.j();
    const long long st = step && !step->isUndefined() && !step->j().is_null() ? toInt(step->j()) : 1;
    if (st == 0) throw EvalError("a slice step cannot be zero");
    if (j.is_array()) {
        json out = json::array();
        for (const long long i : sliceIndices((long long)j.size(), start, stop, st)) out.push_back(j[std::size_t(i)]);
        return Value::of(out);
    }
    if (j.is_string()) {
        const auto u = toU32(j.get<std::string>());
        std::u32string out;
        for (const long long i : sliceIndices((long long)u.size(), start, stop, st)) out.push_back(u[std::size_t(i)]);
        return Value::of(fromU32(out));
    }
    throw EvalError(std::string("cannot slice a value of type ") + typeName(obj));
}

} // namespace tb::text::jinja
