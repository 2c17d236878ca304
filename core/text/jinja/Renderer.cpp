#include "text/jinja/Renderer.h"

#include <unordered_map>

#include "common/Errors.h"
#include "text/Regex.h"
#include "text/jinja/Builtins.h"
#include "text/jinja/Limits.h"

namespace tb::text::jinja {
namespace {

enum class Flow { Normal, Break, Continue };

class Renderer {
public:
    Renderer(const std::string& where, const json& context) : m_where(where)
    {
        m_scopes.emplace_back();
        for (const auto& [k, v] : context.items()) m_scopes.back()[k] = Value::of(v);
    }

    std::string run(const Body& body)
    {
        exec(body);
        return std::move(m_out);
    }

private:
    [[noreturn]] void fail(int line, const std::string& why) const
    {
        throw InputError(m_where + " line " + std::to_string(line) + ": " + why);
    }
    Value lookup(const std::string& name) const;
    void emit(const std::string& s, int line);

    // Statements; the parser bounds their nesting (kMaxDepth), and so this recursion.
    Flow exec(const Body& body);
    Flow exec(const Node& n)
    {
        return std::visit([&](const auto& s) { return execute(s, n.line); }, n.node);
    }
    Flow execute(const stmt::Text& s, int line)
    {
        emit(s.text, line);
        return Flow::Normal;
    }
    Flow execute(const stmt::Output& s, int line)
    {
        emit(str(eval(*s.value)), line);
        return Flow::Normal;
    }
    Flow execute(const stmt::If& s, int line);
    Flow execute(const stmt::For& s, int line);
    Flow execute(const stmt::Set& s, int line);
    Flow execute(const stmt::Break&, int) { return Flow::Break; }
    Flow execute(const stmt::Continue&, int) { return Flow::Continue; }
    std::vector<Value> loopItems(const stmt::For& s, int line);
    void bindLoopTargets(const stmt::For& s, const Value& item, int line);

    // Expressions: each node's value; eval() names the line in an EvalError.
    Value eval(const Expr& e);
    Value evaluate(const expr::Literal& e) { return Value::of(e.value); }
    Value evaluate(const expr::Name& e) { return lookup(e.name); }
    Value evaluate(const expr::Attribute& e) { return attribute(eval(*e.object), e.name); }
    Value evaluate(const expr::Item& e) { return item(eval(*e.object), eval(*e.key)); }
    Value evaluate(const expr::Slice& e);
    Value evaluate(const expr::Call& e);
    Value evaluate(const expr::Method& e);
    Value evaluate(const expr::Filter& e);
    Value evaluate(const expr::Test& e);
    Value evaluate(const expr::Negative& e) { return negative(eval(*e.operand)); }
    Value evaluate(const expr::Not& e) { return Value::of(!truthy(eval(*e.operand))); }
    Value evaluate(const expr::Binary& e);
    Value evaluate(const expr::Logical& e);
    Value evaluate(const expr::Conditional& e);
    Value evaluate(const expr::List& e);
    Value evaluate(const expr::Dict& e);
    CallValues evaluate(const CallArgs& args);

    std::string m_where;
    std::vector<std::unordered_map<std::string, Value>> m_scopes;
    std::string m_out;
    std::size_t m_iterations = 0;
};

Value Renderer::lookup(const std::string& name) const
{
    for (auto it = m_scopes.rbegin(); it != m_scopes.rend(); ++it) {
        const auto f = it->find(name);
        if (f != it->end()) return f->second;
    }
    return Value::undefined(name);
}

void Renderer::emit(const std::string& s, int line)
{
    m_out += s;
    if (m_out.size() > kMaxOutput) fail(line, "the rendered text is larger than 64 MiB");
}

// ------------------------------------------------------------ statements

Flow Renderer::exec(const Body& body)
{
    for (const auto& n : body) {
        const Flow f = exec(*n);
        if (f != Flow::Normal) return f;
    }
    return Flow::Normal;
}

Flow Renderer::execute(const stmt::If& s, int)
{
    for (const auto& [cond, body] : s.branches)
        if (truthy(eval(*cond))) return exec(body);
    return exec(s.otherwise);
}

Flow Renderer::execute(const stmt::Set& s, int line)
{
    Value v = eval(*s.value);
    if (s.attribute.empty()) {
        m_scopes.back()[s.name] = std::move(v);
        return Flow::Normal;
    }
    Value target = lookup(s.name);
    if (target.kind != Value::Kind::Namespace) fail(line, "cannot set an attribute of '" + s.name + "', which is not a namespace()");
    (*target.ns)[s.attribute] = v.isUndefined() ? json() : v.j();
    return Flow::Normal;
}

// The items the loop visits: a list's items, a dict's keys, a string's
// characters (none for undefined), kept by the loop's filter.
std::vector<Value> Renderer::loopItems(const stmt::For& s, int line)
{
    const Value seq = eval(*s.iterable);
    std::vector<Value> items;
    if (!seq.isUndefined()) {
        const json& j = seq.j();
        if (j.is_array())
            for (const auto& e : j) items.push_back(Value::of(e));
        else if (j.is_object())
            for (const auto& [k, v] : j.items()) items.push_back(Value::of(k));
        else if (j.is_string())
            for (const char32_t c : toU32(j.get<std::string>())) items.push_back(Value::of(fromU32(std::u32string(1, c))));
        else
            fail(line, std::string("cannot loop over a value of type ") + typeName(seq));
    }
    if (!s.filter) return items;
    std::vector<Value> kept;
    for (const auto& item : items) {
        m_scopes.emplace_back();
        bindLoopTargets(s, item, line);
        const bool keep = truthy(eval(*s.filter));
        m_scopes.pop_back();
        if (keep) kept.push_back(item);
    }
    return kept;
}

void Renderer::bindLoopTargets(const stmt::For& s, const Value& item, int line)
{
    if (s.targets.size() == 1) {
        m_scopes.back()[s.targets[0]] = item;
        return;
    }
    const json& pair = item.j();
    if (!pair.is_array() || pair.size() != 2) fail(line, "cannot unpack the loop item into two names");
    m_scopes.back()[s.targets[0]] = Value::of(pair[0]);
    m_scopes.back()[s.targets[1]] = Value::of(pair[1]);
}

Flow Renderer::execute(const stmt::For& s, int line)
{
    const std::vector<Value> items = loopItems(s, line);
    if (items.empty()) return exec(s.otherwise);
    const std::size_t count = items.size();
    for (std::size_t i = 0; i < count; ++i) {
        if (++m_iterations > kMaxIterations) fail(line, "the template loops more than 10 million times");
        m_scopes.emplace_back();
        bindLoopTargets(s, items[i], line);
        json loop = {{"index", i + 1},   {"index0", i},             {"first", i == 0},          {"last", i + 1 == count},
                     {"length", count},  {"revindex", count - i},   {"revindex0", count - i - 1}};
        loop["previtem"] = i > 0 ? items[i - 1].j() : json();
        loop["nextitem"] = i + 1 < count ? items[i + 1].j() : json();
        m_scopes.back()["loop"] = Value::of(std::move(loop));
        const Flow f = exec(s.body);
        m_scopes.pop_back();
        if (f == Flow::Break) break;
    }
    return Flow::Normal;
}

// ------------------------------------------------------------ expressions

Value Renderer::eval(const Expr& e)
{
    try {
        return std::visit([&](const auto& node) { return evaluate(node); }, e.node);
    } catch (const EvalError& error) {
        fail(e.line, error.what());
    }
}

Value Renderer::evaluate(const expr::Slice& e)
{
    const Value obj = eval(*e.object);
    Value parts[3];
    const Value* p[3] = {nullptr, nullptr, nullptr};
    const ExprP* given[3] = {&e.start, &e.stop, &e.step};
    for (int i = 0; i < 3; ++i)
        if (*given[i]) {
            parts[i] = eval(**given[i]);
            p[i] = &parts[i];
        }
    return slice(obj, p[0], p[1], p[2]);
}

Value Renderer::evaluate(const expr::Binary& e)
{
    const Value l = eval(*e.left);
    const Value r = eval(*e.right);
    return binaryOperator(e.op, l, r);
}

Value Renderer::evaluate(const expr::Logical& e)
{
    Value l = eval(*e.left);
    if (truthy(l) == e.isAnd) return eval(*e.right);
    return l;
}

Value Renderer::evaluate(const expr::Conditional& e)
{
    if (truthy(eval(*e.condition))) return eval(*e.then);
    return e.otherwise ? eval(*e.otherwise) : Value::undefined("else");
}

Value Renderer::evaluate(const expr::List& e)
{
    json out = json::array();
    for (const auto& x : e.items) {
        const Value v = eval(*x);
        out.push_back(v.isUndefined() ? json() : v.j());
    }
    return Value::of(out);
}

Value Renderer::evaluate(const expr::Dict& e)
{
    json out = json::object();
    for (const auto& [key, value] : e.entries) {
        const Value k = eval(*key);
        const Value v = eval(*value);
        out[str(k)] = v.isUndefined() ? json() : v.j();
    }
    return Value::of(out);
}

CallValues Renderer::evaluate(const CallArgs& args)
{
    CallValues out;
    for (const auto& x : args.positional) out.positional.push_back(eval(*x));
    for (const auto& [key, x] : args.keywords) out.keywords.emplace_back(key, eval(*x));
    return out;
}

// ------------------------------------------------------------ calls of builtins

Value Renderer::evaluate(const expr::Call& e)
{
    const Builtin* b = findBuiltin(BuiltinKind::Global, e.function);
    if (!b) {
        const Value v = lookup(e.function);
        throw EvalError(v.isUndefined() ? "'" + e.function + "' is undefined, so it cannot be called" : "'" + e.function + "' is not a function");
    }
    return b->function(Value(), bind(*b, e.function, evaluate(e.args)));
}

Value Renderer::evaluate(const expr::Method& e)
{
    const Value self = eval(*e.object);
    CallValues args = evaluate(e.args);
    if (self.isUndefined()) throw EvalError("'" + self.missing + "' is undefined, so it has no method " + e.name + "()");
    const Builtin* b = findBuiltin(BuiltinKind::Method, e.name, self);
    if (!b) throw EvalError(std::string("the method ") + e.name + "() of " + typeName(self) + " is not supported");
    return b->function(self, bind(*b, e.name, std::move(args)));
}

Value Renderer::evaluate(const expr::Filter& e)
{
    const Value v = eval(*e.value);
    const Builtin* b = findBuiltin(BuiltinKind::Filter, e.name);
    if (v.isUndefined() && !(b && b->takesUndefined)) throw EvalError("'" + v.missing + "' is undefined (filter " + e.name + ")");
    if (!b) throw EvalError("the filter '" + clipForMessage(e.name, 40) + "' is not supported");
    return b->function(v, bind(*b, e.name, evaluate(e.args)));
}

Value Renderer::evaluate(const expr::Test& e)
{
    const Value v = eval(*e.value);
    const Builtin* b = findBuiltin(BuiltinKind::Test, e.name);
    if (!b) throw EvalError("the test '" + clipForMessage(e.name, 40) + "' is not supported");
    const bool r = truthy(b->function(v, bind(*b, e.name, evaluate(e.args))));
    return Value::of(e.negate ? !r : r);
}

} // namespace

std::string render(const Body& body, const json& context, const std::string& where)
{
    Renderer r(where, context);
    return r.run(body);
}

} // namespace tb::text::jinja
