#include "text/ChatTemplate.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <optional>
#include <unordered_map>

#include "common/Errors.h"
#include "text/Regex.h"
#include "text/Unicode.h"

namespace tb::text {
namespace {

using json = nlohmann::ordered_json;
constexpr int kMaxDepth = 64;          // nested blocks and expressions
constexpr std::size_t kMaxOutput = 64u << 20;
constexpr std::size_t kMaxIterations = 10'000'000;

// ---------------------------------------------------------------- values

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
    bool isUndefined() const { return kind == Kind::Undefined; }
    const json& j() const { return kind == Kind::Namespace ? *ns : data; }
};

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

std::string pyRepr(const json& j);

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

// str(value) as Jinja prints it.
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

// ---------------------------------------------------------------- expressions

struct Expr;
using ExprP = std::unique_ptr<Expr>;

struct Expr {
    enum class T { Literal, Name, Attr, Item, Slice, Call, Method, Filter, Test, Neg, Binary, And, Or, Not, Cond, List, Dict };
    T t;
    int line = 0;
    json literal;
    std::string name; // Name, Attr, Call, Method, Filter, Test; Binary: the operator
    bool negate = false; // Test: "is not"
    std::vector<ExprP> a; // operands / arguments; Slice: object, start, stop, step (null = absent)
    std::vector<std::pair<std::string, ExprP>> kwargs;
};

ExprP make(Expr::T t, int line)
{
    auto e = std::make_unique<Expr>();
    e->t = t;
    e->line = line;
    return e;
}

struct Tok {
    enum class K { Name, Num, Str, Op, End } k;
    std::string s;
    json num;
};

class ExprLexer {
public:
    ExprLexer(const std::string& src, int line, const std::string& where) : m_line(line), m_where(where)
    {
        std::size_t i = 0;
        while (i < src.size()) {
            const char c = src[i];
            if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
                ++i;
                continue;
            }
            if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
                std::size_t j = i;
                while (j < src.size() && (std::isalnum(static_cast<unsigned char>(src[j])) || src[j] == '_')) ++j;
                m_toks.push_back({Tok::K::Name, src.substr(i, j - i), {}});
                i = j;
                continue;
            }
            if (std::isdigit(static_cast<unsigned char>(c))) {
                std::size_t j = i;
                bool isFloat = false;
                while (j < src.size() && (std::isdigit(static_cast<unsigned char>(src[j])) || src[j] == '_')) ++j;
                if (j + 1 < src.size() && src[j] == '.' && std::isdigit(static_cast<unsigned char>(src[j + 1]))) {
                    isFloat = true;
                    ++j;
                    while (j < src.size() && std::isdigit(static_cast<unsigned char>(src[j]))) ++j;
                }
                std::string digits = src.substr(i, j - i);
                digits.erase(std::remove(digits.begin(), digits.end(), '_'), digits.end());
                Tok t{Tok::K::Num, digits, {}};
                if (isFloat) t.num = std::stod(digits);
                else t.num = std::stoll(digits);
                m_toks.push_back(t);
                i = j;
                continue;
            }
            if (c == '\'' || c == '"') {
                std::string s;
                std::size_t j = i + 1;
                bool closed = false;
                while (j < src.size()) {
                    const char d = src[j];
                    if (d == c) {
                        closed = true;
                        ++j;
                        break;
                    }
                    if (d == '\\' && j + 1 < src.size()) {
                        const char e = src[j + 1];
                        j += 2;
                        switch (e) {
                        case 'n': s += '\n'; break;
                        case 't': s += '\t'; break;
                        case 'r': s += '\r'; break;
                        case '\\': s += '\\'; break;
                        case '\'': s += '\''; break;
                        case '"': s += '"'; break;
                        case '0': s += '\0'; break;
                        case 'u':
                        case 'x': {
                            const std::size_t n = e == 'u' ? 4 : 2;
                            if (j + n > src.size()) fail("a bad \\" + std::string(1, e) + " escape");
                            const char32_t cp = char32_t(std::stoul(src.substr(j, n), nullptr, 16));
                            appendUtf8(s, cp);
                            j += n;
                            break;
                        }
                        default:
                            s += '\\';
                            s += e;
                        }
                        continue;
                    }
                    s += d;
                    ++j;
                }
                if (!closed) fail("a string literal is not closed");
                m_toks.push_back({Tok::K::Str, s, {}});
                i = j;
                continue;
            }
            static const char* ops[] = {"==", "!=", "<=", ">=", "//", "**", "<", ">", "+", "-", "*", "/", "%", "~", "|",
                                        ".", ",", ":", "(", ")", "[", "]", "{", "}", "="};
            bool matched = false;
            for (const char* op : ops) {
                const std::size_t n = std::strlen(op);
                if (src.compare(i, n, op) == 0) {
                    m_toks.push_back({Tok::K::Op, op, {}});
                    i += n;
                    matched = true;
                    break;
                }
            }
            if (!matched) fail("the character '" + std::string(1, c) + "' is not part of an expression");
        }
        m_toks.push_back({Tok::K::End, "", {}});
    }
    [[noreturn]] void fail(const std::string& why) const
    {
        throw InputError(m_where + " line " + std::to_string(m_line) + ": " + why);
    }
    const Tok& peek(std::size_t ahead = 0) const { return m_toks[std::min(m_pos + ahead, m_toks.size() - 1)]; }
    Tok next() { return m_toks[std::min(m_pos++, m_toks.size() - 1)]; }
    bool isOp(const char* op, std::size_t ahead = 0) const { return peek(ahead).k == Tok::K::Op && peek(ahead).s == op; }
    bool isName(const char* n, std::size_t ahead = 0) const { return peek(ahead).k == Tok::K::Name && peek(ahead).s == n; }
    bool atEnd() const { return peek().k == Tok::K::End; }
    void expectOp(const char* op)
    {
        if (!isOp(op)) fail(std::string("expected '") + op + "'" + (atEnd() ? " at the end" : " before '" + peek().s + "'"));
        ++m_pos;
    }
    std::string expectName()
    {
        if (peek().k != Tok::K::Name) fail("expected a name" + (atEnd() ? std::string(" at the end") : " before '" + peek().s + "'"));
        return next().s;
    }
    int line() const { return m_line; }

private:
    std::vector<Tok> m_toks;
    std::size_t m_pos = 0;
    int m_line;
    std::string m_where;
};

class ExprParser {
public:
    ExprParser(ExprLexer& lx) : L(lx) {}

    ExprP expression(int depth = 0)
    {
        guard(depth);
        auto e = orExpr(depth + 1);
        if (L.isName("if")) {
            L.next();
            auto cond = orExpr(depth + 1);
            auto c = make(Expr::T::Cond, L.line());
            c->a.push_back(std::move(e));
            c->a.push_back(std::move(cond));
            if (L.isName("else")) {
                L.next();
                c->a.push_back(expression(depth + 1));
            }
            return c;
        }
        return e;
    }
    // An expression without "a if b else c" (a for loop's iterable before its filter).
    ExprP orExpression() { return orExpr(0); }

private:
    void guard(int depth)
    {
        if (depth > kMaxDepth) L.fail("the expression is nested deeper than " + std::to_string(kMaxDepth));
    }
    ExprP orExpr(int d)
    {
        auto e = andExpr(d + 1);
        while (L.isName("or")) {
            L.next();
            auto o = make(Expr::T::Or, L.line());
            o->a.push_back(std::move(e));
            o->a.push_back(andExpr(d + 1));
            e = std::move(o);
        }
        return e;
    }
    ExprP andExpr(int d)
    {
        auto e = notExpr(d + 1);
        while (L.isName("and")) {
            L.next();
            auto o = make(Expr::T::And, L.line());
            o->a.push_back(std::move(e));
            o->a.push_back(notExpr(d + 1));
            e = std::move(o);
        }
        return e;
    }
    ExprP notExpr(int d)
    {
        guard(d);
        if (L.isName("not")) {
            L.next();
            auto n = make(Expr::T::Not, L.line());
            n->a.push_back(notExpr(d + 1));
            return n;
        }
        return compare(d + 1);
    }
    ExprP compare(int d)
    {
        auto e = math1(d + 1);
        while (true) {
            std::string op;
            if (L.isOp("==") || L.isOp("!=") || L.isOp("<") || L.isOp(">") || L.isOp("<=") || L.isOp(">=")) op = L.next().s;
            else if (L.isName("in")) {
                L.next();
                op = "in";
            } else if (L.isName("not") && L.isName("in", 1)) {
                L.next();
                L.next();
                op = "not in";
            } else break;
            auto b = make(Expr::T::Binary, L.line());
            b->name = op;
            b->a.push_back(std::move(e));
            b->a.push_back(math1(d + 1));
            e = std::move(b);
        }
        return e;
    }
    ExprP binaryLoop(int d, ExprP (ExprParser::*sub)(int), std::initializer_list<const char*> ops)
    {
        auto e = (this->*sub)(d + 1);
        while (true) {
            const char* found = nullptr;
            for (const char* op : ops)
                if (L.isOp(op)) found = op;
            if (!found) break;
            L.next();
            auto b = make(Expr::T::Binary, L.line());
            b->name.assign(found, std::strlen(found));
            b->a.push_back(std::move(e));
            b->a.push_back((this->*sub)(d + 1));
            e = std::move(b);
        }
        return e;
    }
    ExprP math1(int d) { return binaryLoop(d, &ExprParser::concat, {"+", "-"}); }
    ExprP concat(int d) { return binaryLoop(d, &ExprParser::math2, {"~"}); }
    ExprP math2(int d) { return binaryLoop(d, &ExprParser::power, {"*", "/", "//", "%"}); }
    ExprP power(int d) { return binaryLoop(d, &ExprParser::unary, {"**"}); }
    ExprP unary(int d)
    {
        guard(d);
        if (L.isOp("-")) {
            L.next();
            auto n = make(Expr::T::Neg, L.line());
            n->a.push_back(unary(d + 1));
            return n;
        }
        if (L.isOp("+")) {
            L.next();
            return unary(d + 1);
        }
        auto e = postfix(primary(d + 1), d + 1);
        return filters(std::move(e), d + 1);
    }
    void callArgs(Expr& call, int d)
    {
        L.expectOp("(");
        while (!L.isOp(")")) {
            if (L.peek().k == Tok::K::Name && L.isOp("=", 1)) {
                std::string key = L.next().s;
                L.next();
                call.kwargs.emplace_back(std::move(key), expression(d + 1));
            } else {
                call.a.push_back(expression(d + 1));
            }
            if (!L.isOp(",")) break;
            L.next();
        }
        L.expectOp(")");
    }
    ExprP postfix(ExprP e, int d)
    {
        while (true) {
            if (L.isOp(".")) {
                L.next();
                const std::string name = L.expectName();
                if (L.isOp("(")) {
                    auto m = make(Expr::T::Method, L.line());
                    m->name = name;
                    m->a.push_back(std::move(e));
                    callArgs(*m, d);
                    e = std::move(m);
                } else {
                    auto a = make(Expr::T::Attr, L.line());
                    a->name = name;
                    a->a.push_back(std::move(e));
                    e = std::move(a);
                }
            } else if (L.isOp("[")) {
                L.next();
                ExprP parts[3];
                int colons = 0;
                if (!L.isOp(":")) parts[0] = expression(d + 1);
                while (L.isOp(":") && colons < 2) {
                    L.next();
                    ++colons;
                    if (!L.isOp(":") && !L.isOp("]")) parts[colons] = expression(d + 1);
                }
                L.expectOp("]");
                if (colons == 0) {
                    auto it = make(Expr::T::Item, L.line());
                    it->a.push_back(std::move(e));
                    it->a.push_back(std::move(parts[0]));
                    e = std::move(it);
                } else {
                    auto sl = make(Expr::T::Slice, L.line());
                    sl->a.push_back(std::move(e));
                    for (auto& p : parts) sl->a.push_back(std::move(p));
                    e = std::move(sl);
                }
            } else if (L.isOp("(")) {
                if (e->t != Expr::T::Name) L.fail("only functions can be called here");
                auto c = make(Expr::T::Call, L.line());
                c->name = e->name;
                callArgs(*c, d);
                e = std::move(c);
            } else {
                return e;
            }
        }
    }
    ExprP filters(ExprP e, int d)
    {
        while (true) {
            if (L.isOp("|")) {
                L.next();
                auto f = make(Expr::T::Filter, L.line());
                f->name = L.expectName();
                f->a.push_back(std::move(e));
                if (L.isOp("(")) callArgs(*f, d);
                e = std::move(f);
            } else if (L.isName("is")) {
                L.next();
                auto t = make(Expr::T::Test, L.line());
                if (L.isName("not")) {
                    L.next();
                    t->negate = true;
                }
                t->name = L.expectName();
                t->a.push_back(std::move(e));
                if (L.isOp("(")) callArgs(*t, d);
                else if (L.peek().k == Tok::K::Num || L.peek().k == Tok::K::Str) t->a.push_back(primary(d + 1));
                e = std::move(t);
            } else {
                return e;
            }
        }
    }
    ExprP primary(int d)
    {
        guard(d);
        const Tok t = L.next();
        switch (t.k) {
        case Tok::K::Num: {
            auto e = make(Expr::T::Literal, L.line());
            e->literal = t.num;
            return e;
        }
        case Tok::K::Str: {
            auto e = make(Expr::T::Literal, L.line());
            std::string s = t.s;
            while (L.peek().k == Tok::K::Str) s += L.next().s; // adjacent literals join
            e->literal = s;
            return e;
        }
        case Tok::K::Name: {
            auto e = make(Expr::T::Literal, L.line());
            if (t.s == "true" || t.s == "True") e->literal = true;
            else if (t.s == "false" || t.s == "False") e->literal = false;
            else if (t.s == "none" || t.s == "None") e->literal = nullptr;
            else {
                e->t = Expr::T::Name;
                e->name = t.s;
            }
            return e;
        }
        case Tok::K::Op:
            if (t.s == "(") {
                auto e = expression(d + 1);
                if (L.isOp(",")) L.fail("tuples are not supported");
                L.expectOp(")");
                return e;
            }
            if (t.s == "[") {
                auto e = make(Expr::T::List, L.line());
                while (!L.isOp("]")) {
                    e->a.push_back(expression(d + 1));
                    if (!L.isOp(",")) break;
                    L.next();
                }
                L.expectOp("]");
                return e;
            }
            if (t.s == "{") {
                auto e = make(Expr::T::Dict, L.line());
                while (!L.isOp("}")) {
                    e->a.push_back(expression(d + 1));
                    L.expectOp(":");
                    e->a.push_back(expression(d + 1));
                    if (!L.isOp(",")) break;
                    L.next();
                }
                L.expectOp("}");
                return e;
            }
            L.fail("unexpected '" + t.s + "'");
        case Tok::K::End: L.fail("the expression ends too early");
        }
        L.fail("unexpected input");
    }

    ExprLexer& L;
};

// ---------------------------------------------------------------- statements

struct Node;
using NodeP = std::unique_ptr<Node>;
using Body = std::vector<NodeP>;

struct Node {
    enum class T { Text, Output, If, For, Set, Break, Continue } t;
    int line = 0;
    std::string text;
    ExprP expr;                                   // Output, Set (value), For (iterable)
    std::vector<std::pair<ExprP, Body>> branches; // If
    Body elseBody;                                // If, For
    std::vector<std::string> targets;             // For (one or two names), Set (name[, attribute])
    ExprP filter;                                 // For ... if cond
    Body body;                                    // For
};

struct Part {
    enum class K { Text, Var, Block, Comment } k;
    std::string s;
    int line = 0;
    bool dashLeft = false, dashRight = false, plusLeft = false, plusRight = false;
};

std::vector<Part> lex(const std::string& src, const std::string& where)
{
    std::vector<Part> parts;
    std::size_t i = 0;
    int line = 1;
    auto countLines = [&](std::size_t from, std::size_t to) {
        for (std::size_t k = from; k < to; ++k)
            if (src[k] == '\n') ++line;
    };
    while (i < src.size()) {
        std::size_t open = std::string::npos;
        for (std::size_t k = src.find('{', i); k != std::string::npos; k = src.find('{', k + 1)) {
            if (k + 1 < src.size() && (src[k + 1] == '{' || src[k + 1] == '%' || src[k + 1] == '#')) {
                open = k;
                break;
            }
        }
        if (open == std::string::npos) {
            parts.push_back({Part::K::Text, src.substr(i), line});
            break;
        }
        if (open > i) parts.push_back({Part::K::Text, src.substr(i, open - i), line});
        countLines(i, open);
        const char kind = src[open + 1];
        Part p{kind == '{' ? Part::K::Var : kind == '%' ? Part::K::Block : Part::K::Comment, "", line};
        std::size_t start = open + 2;
        if (start < src.size() && src[start] == '-') {
            p.dashLeft = true;
            ++start;
        } else if (start < src.size() && src[start] == '+') {
            p.plusLeft = true;
            ++start;
        }
        const std::string close = kind == '{' ? "}}" : kind == '%' ? "%}" : "#}";
        std::size_t end = std::string::npos;
        if (p.k == Part::K::Comment) {
            end = src.find(close, start);
        } else {
            char quote = 0;
            for (std::size_t k = start; k + 1 < src.size(); ++k) {
                const char c = src[k];
                if (quote) {
                    if (c == '\\') ++k;
                    else if (c == quote) quote = 0;
                    continue;
                }
                if (c == '\'' || c == '"') quote = c;
                else if (src.compare(k, 2, close) == 0) {
                    end = k;
                    break;
                }
            }
        }
        if (end == std::string::npos)
            throw InputError(where + " line " + std::to_string(line) + ": a '" + src.substr(open, 2) + "' is not closed with '" + close + "'");
        std::size_t contentEnd = end;
        if (contentEnd > start && src[contentEnd - 1] == '-') {
            p.dashRight = true;
            --contentEnd;
        } else if (contentEnd > start && src[contentEnd - 1] == '+') {
            p.plusRight = true;
            --contentEnd;
        }
        p.s = src.substr(start, contentEnd - start);
        countLines(open, end + 2);
        parts.push_back(std::move(p));
        i = end + 2;
    }

    // Whitespace control: "-" strips all whitespace on its side; trim_blocks
    // drops the first newline after a block or comment tag; lstrip_blocks
    // drops spaces and tabs between a line's start and a block or comment tag.
    auto isSpace = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; };
    for (std::size_t k = 0; k < parts.size(); ++k) {
        if (parts[k].k != Part::K::Text) continue;
        std::string& t = parts[k].s;
        const Part* prev = k > 0 ? &parts[k - 1] : nullptr;
        const Part* next = k + 1 < parts.size() ? &parts[k + 1] : nullptr;
        bool lineStart = prev == nullptr;
        if (prev && prev->dashRight) {
            std::size_t b = 0;
            while (b < t.size() && isSpace(t[b])) ++b;
            t.erase(0, b);
        } else if (prev && prev->k != Part::K::Var && !prev->plusRight) {
            if (t.compare(0, 1, "\n") == 0) {
                t.erase(0, 1);
                lineStart = true;
            } else if (t.compare(0, 2, "\r\n") == 0) {
                t.erase(0, 2);
                lineStart = true;
            }
        }
        if (next && next->dashLeft) {
            std::size_t e = t.size();
            while (e > 0 && isSpace(t[e - 1])) --e;
            t.resize(e);
        } else if (next && next->k != Part::K::Var && !next->plusLeft) {
            const std::size_t nl = t.rfind('\n');
            const std::size_t from = nl == std::string::npos ? 0 : nl + 1;
            if (nl != std::string::npos || lineStart) {
                if (t.find_first_not_of(" \t", from) == std::string::npos) t.resize(from);
            }
        }
    }
    // A tag that opens the template with nothing before it: lstrip_blocks has nothing to strip.
    return parts;
}

class Parser {
public:
    Parser(std::vector<Part> parts, std::string where) : m_parts(std::move(parts)), m_where(std::move(where)) {}

    Body parseAll()
    {
        std::string end;
        Body b = parseBody({}, end, 0);
        return b;
    }

private:
    [[noreturn]] void fail(int line, const std::string& why) const
    {
        throw InputError(m_where + " line " + std::to_string(line) + ": " + why);
    }

    static std::string firstWord(const std::string& s)
    {
        std::size_t b = 0;
        while (b < s.size() && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
        std::size_t e = b;
        while (e < s.size() && (std::isalnum(static_cast<unsigned char>(s[e])) || s[e] == '_')) ++e;
        return s.substr(b, e - b);
    }
    static std::string afterFirstWord(const std::string& s)
    {
        std::size_t b = 0;
        while (b < s.size() && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
        while (b < s.size() && (std::isalnum(static_cast<unsigned char>(s[b])) || s[b] == '_')) ++b;
        return s.substr(b);
    }

    // Parses until one of `ends` (block keywords); `found` receives which.
    Body parseBody(const std::vector<std::string>& ends, std::string& found, int depth)
    {
        if (depth > kMaxDepth) fail(m_parts.empty() ? 0 : m_parts[std::min(m_pos, m_parts.size() - 1)].line,
                                    "blocks are nested deeper than " + std::to_string(kMaxDepth));
        Body body;
        while (m_pos < m_parts.size()) {
            const Part& p = m_parts[m_pos];
            if (p.k == Part::K::Text) {
                if (!p.s.empty()) {
                    auto n = std::make_unique<Node>();
                    n->t = Node::T::Text;
                    n->line = p.line;
                    n->text = p.s;
                    body.push_back(std::move(n));
                }
                ++m_pos;
                continue;
            }
            if (p.k == Part::K::Comment) {
                ++m_pos;
                continue;
            }
            if (p.k == Part::K::Var) {
                ExprLexer lx(p.s, p.line, m_where);
                ExprParser ep(lx);
                auto n = std::make_unique<Node>();
                n->t = Node::T::Output;
                n->line = p.line;
                n->expr = ep.expression();
                if (!lx.atEnd()) lx.fail("unexpected '" + lx.peek().s + "' in {{ }}");
                body.push_back(std::move(n));
                ++m_pos;
                continue;
            }
            const std::string word = firstWord(p.s);
            if (std::find(ends.begin(), ends.end(), word) != ends.end()) {
                found = word;
                return body;
            }
            ++m_pos;
            if (word == "if") body.push_back(parseIf(p, depth));
            else if (word == "for") body.push_back(parseFor(p, depth));
            else if (word == "set") body.push_back(parseSet(p));
            else if (word == "break" || word == "continue") {
                auto n = std::make_unique<Node>();
                n->t = word == "break" ? Node::T::Break : Node::T::Continue;
                n->line = p.line;
                body.push_back(std::move(n));
            } else if (word == "endif" || word == "endfor" || word == "elif" || word == "else") {
                fail(p.line, "{% " + word + " %} without its opening block");
            } else {
                fail(p.line, "{% " + clipForMessage(word.empty() ? p.s : word, 40) +
                                 " %} is not supported (supported: if/elif/else, for with loop variables, set, "
                                 "break, continue)");
            }
        }
        if (!ends.empty()) fail(m_parts.empty() ? 0 : m_parts.back().line, "the template ends before {% " + ends.back() + " %}");
        return body;
    }

    NodeP parseIf(const Part& p, int depth)
    {
        auto n = std::make_unique<Node>();
        n->t = Node::T::If;
        n->line = p.line;
        std::string cond = afterFirstWord(p.s);
        int line = p.line;
        while (true) {
            ExprLexer lx(cond, line, m_where);
            ExprParser ep(lx);
            auto e = ep.expression();
            if (!lx.atEnd()) lx.fail("unexpected '" + lx.peek().s + "' in the condition");
            std::string found;
            Body b = parseBody({"elif", "else", "endif"}, found, depth + 1);
            n->branches.emplace_back(std::move(e), std::move(b));
            const Part& end = m_parts[m_pos++];
            if (found == "elif") {
                cond = afterFirstWord(end.s);
                line = end.line;
                continue;
            }
            if (found == "else") {
                std::string f2;
                n->elseBody = parseBody({"endif"}, f2, depth + 1);
                ++m_pos;
            }
            return n;
        }
    }

    NodeP parseFor(const Part& p, int depth)
    {
        auto n = std::make_unique<Node>();
        n->t = Node::T::For;
        n->line = p.line;
        ExprLexer lx(afterFirstWord(p.s), p.line, m_where);
        n->targets.push_back(lx.expectName());
        while (lx.isOp(",")) {
            lx.next();
            n->targets.push_back(lx.expectName());
        }
        if (n->targets.size() > 2) lx.fail("a for loop takes one or two names");
        if (!lx.isName("in")) lx.fail("expected 'in' in the for loop");
        lx.next();
        ExprParser ep(lx);
        n->expr = ep.orExpression();
        if (lx.isName("if")) {
            lx.next();
            n->filter = ep.expression();
        }
        if (lx.isName("recursive")) lx.fail("recursive loops are not supported");
        if (!lx.atEnd()) lx.fail("unexpected '" + lx.peek().s + "' in the for loop");
        std::string found;
        n->body = parseBody({"else", "endfor"}, found, depth + 1);
        ++m_pos;
        if (found == "else") {
            std::string f2;
            n->elseBody = parseBody({"endfor"}, f2, depth + 1);
            ++m_pos;
        }
        return n;
    }

    NodeP parseSet(const Part& p)
    {
        auto n = std::make_unique<Node>();
        n->t = Node::T::Set;
        n->line = p.line;
        ExprLexer lx(afterFirstWord(p.s), p.line, m_where);
        n->targets.push_back(lx.expectName());
        if (lx.isOp(".")) {
            lx.next();
            n->targets.push_back(lx.expectName());
        }
        if (lx.isOp(",")) lx.fail("setting several names at once is not supported");
        if (!lx.isOp("=")) lx.fail("{% set NAME %}...{% endset %} blocks are not supported; use {% set NAME = value %}");
        lx.next();
        ExprParser ep(lx);
        n->expr = ep.expression();
        if (!lx.atEnd()) lx.fail("unexpected '" + lx.peek().s + "' in {% set %}");
        return n;
    }

    std::vector<Part> m_parts;
    std::size_t m_pos = 0;
    std::string m_where;
};

// ---------------------------------------------------------------- rendering

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
        exec(body, 0);
        return std::move(m_out);
    }

private:
    [[noreturn]] void fail(int line, const std::string& why) const
    {
        throw InputError(m_where + " line " + std::to_string(line) + ": " + why);
    }

    Value lookup(const std::string& name) const
    {
        for (auto it = m_scopes.rbegin(); it != m_scopes.rend(); ++it) {
            const auto f = it->find(name);
            if (f != it->end()) return f->second;
        }
        return Value::undefined(name);
    }

    Flow exec(const Body& body, int depth)
    {
        for (const auto& n : body) {
            const Flow f = exec(*n, depth);
            if (f != Flow::Normal) return f;
        }
        return Flow::Normal;
    }

    void emit(const std::string& s, int line)
    {
        m_out += s;
        if (m_out.size() > kMaxOutput) fail(line, "the rendered text is larger than 64 MiB");
    }

    Flow exec(const Node& n, int depth)
    {
        switch (n.t) {
        case Node::T::Text: emit(n.text, n.line); return Flow::Normal;
        case Node::T::Output: emit(str(eval(*n.expr)), n.line); return Flow::Normal;
        case Node::T::If:
            for (const auto& [cond, body] : n.branches)
                if (truthy(eval(*cond))) return exec(body, depth + 1);
            return exec(n.elseBody, depth + 1);
        case Node::T::Set: {
            Value v = eval(*n.expr);
            if (n.targets.size() == 1) {
                m_scopes.back()[n.targets[0]] = std::move(v);
            } else {
                Value target = lookup(n.targets[0]);
                if (target.kind != Value::Kind::Namespace)
                    fail(n.line, "cannot set an attribute of '" + n.targets[0] + "', which is not a namespace()");
                (*target.ns)[n.targets[1]] = v.isUndefined() ? json() : v.j();
            }
            return Flow::Normal;
        }
        case Node::T::Break: return Flow::Break;
        case Node::T::Continue: return Flow::Continue;
        case Node::T::For: return execFor(n, depth);
        }
        return Flow::Normal;
    }

    Flow execFor(const Node& n, int depth)
    {
        const Value seq = eval(*n.expr);
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
                fail(n.line, std::string("cannot loop over a value of type ") + typeName(seq));
        }
        auto bind = [&](const Value& item) {
            if (n.targets.size() == 1) {
                m_scopes.back()[n.targets[0]] = item;
                return;
            }
            const json& pair = item.j();
            if (!pair.is_array() || pair.size() != 2) fail(n.line, "cannot unpack the loop item into two names");
            m_scopes.back()[n.targets[0]] = Value::of(pair[0]);
            m_scopes.back()[n.targets[1]] = Value::of(pair[1]);
        };
        if (n.filter) {
            std::vector<Value> kept;
            for (const auto& item : items) {
                m_scopes.emplace_back();
                bind(item);
                const bool keep = truthy(eval(*n.filter));
                m_scopes.pop_back();
                if (keep) kept.push_back(item);
            }
            items = std::move(kept);
        }
        if (items.empty()) return exec(n.elseBody, depth + 1);
        const std::size_t count = items.size();
        for (std::size_t i = 0; i < count; ++i) {
            if (++m_iterations > kMaxIterations) fail(n.line, "the template loops more than 10 million times");
            m_scopes.emplace_back();
            bind(items[i]);
            json loop = {{"index", i + 1},        {"index0", i},         {"first", i == 0},     {"last", i + 1 == count},
                         {"length", count},       {"revindex", count - i}, {"revindex0", count - i - 1}};
            loop["previtem"] = i > 0 ? items[i - 1].j() : json();
            loop["nextitem"] = i + 1 < count ? items[i + 1].j() : json();
            m_scopes.back()["loop"] = Value::of(std::move(loop));
            const Flow f = exec(n.body, depth + 1);
            m_scopes.pop_back();
            if (f == Flow::Break) break;
        }
        return Flow::Normal;
    }

    // ------------------------------------------------------------ expressions

    static long long toInt(const json& j) { return j.is_number_float() ? (long long)j.get<double>() : j.get<long long>(); }
    static bool isNumber(const Value& v) { return !v.isUndefined() && v.j().is_number(); }

    Value attr(const Value& obj, const std::string& name, int line)
    {
        if (obj.isUndefined()) fail(line, "'" + obj.missing + "' is undefined, so it has no attribute '" + name + "'");
        const json& j = obj.j();
        if (j.is_object()) {
            const auto it = j.find(name);
            if (it != j.end()) return Value::of(*it);
        }
        return Value::undefined(obj.missing.empty() ? name : obj.missing + "." + name);
    }

    Value item(const Value& obj, const Value& key, int line)
    {
        if (obj.isUndefined()) fail(line, "'" + obj.missing + "' is undefined, so it cannot be indexed");
        const json& j = obj.j();
        const json& k = key.j();
        if (j.is_object() && k.is_string()) {
            const auto it = j.find(k.get<std::string>());
            return it != j.end() ? Value::of(*it) : Value::undefined(k.get<std::string>());
        }
        if ((j.is_array() || j.is_string()) && k.is_number_integer()) {
            long long i = k.get<long long>();
            if (j.is_string()) {
                const auto u = toU32(j.get<std::string>());
                if (i < 0) i += (long long)u.size();
                if (i < 0 || i >= (long long)u.size()) return Value::undefined("index " + std::to_string(k.get<long long>()));
                return Value::of(fromU32(std::u32string(1, u[std::size_t(i)])));
            }
            if (i < 0) i += (long long)j.size();
            if (i < 0 || i >= (long long)j.size()) return Value::undefined("index " + std::to_string(k.get<long long>()));
            return Value::of(j[std::size_t(i)]);
        }
        return Value::undefined("item");
    }

    Value slice(const Value& obj, const Value* start, const Value* stop, const Value* step, int line)
    {
        if (obj.isUndefined()) fail(line, "'" + obj.missing + "' is undefined, so it cannot be sliced");
        const json& j = obj.j();
        long long st = step && !step->isUndefined() && !step->j().is_null() ? toInt(step->j()) : 1;
        if (st == 0) fail(line, "a slice step cannot be zero");
        auto bounds = [&](long long n, long long& b, long long& e) {
            auto clamp = [&](const Value* v, long long dflt, bool isStart) {
                if (!v || v->isUndefined() || v->j().is_null()) return dflt;
                long long x = toInt(v->j());
                if (x < 0) x += n;
                if (st > 0) return std::clamp(x, 0LL, n);
                (void)isStart;
                return std::clamp(x, -1LL, n - 1);
            };
            b = clamp(start, st > 0 ? 0 : n - 1, true);
            e = clamp(stop, st > 0 ? n : -1, false);
        };
        auto indices = [&](long long n) {
            long long b = 0, e = 0;
            bounds(n, b, e);
            std::vector<long long> idx;
            if (st > 0)
                for (long long i = b; i < e; i += st) idx.push_back(i);
            else
                for (long long i = b; i > e; i += st) idx.push_back(i);
            return idx;
        };
        if (j.is_array()) {
            json out = json::array();
            for (const long long i : indices((long long)j.size())) out.push_back(j[std::size_t(i)]);
            return Value::of(out);
        }
        if (j.is_string()) {
            const auto u = toU32(j.get<std::string>());
            std::u32string out;
            for (const long long i : indices((long long)u.size())) out.push_back(u[std::size_t(i)]);
            return Value::of(fromU32(out));
        }
        fail(line, std::string("cannot slice a value of type ") + typeName(obj));
    }

    static int compareValues(const json& a, const json& b, bool& comparable)
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

    static bool equal(const Value& a, const Value& b)
    {
        if (a.isUndefined() || b.isUndefined()) return a.isUndefined() && b.isUndefined();
        const json& x = a.j();
        const json& y = b.j();
        if (x.is_number() && y.is_number()) return x.get<double>() == y.get<double>();
        if (x.is_boolean() != y.is_boolean()) return false;
        return x == y;
    }

    bool contains(const Value& container, const Value& needle, int line)
    {
        if (container.isUndefined()) return false; // Jinja's Undefined iterates as empty
        const json& c = container.j();
        if (c.is_string()) {
            if (!needle.j().is_string()) fail(line, "'in <string>' needs a string on the left");
            return c.get<std::string>().find(needle.j().get<std::string>()) != std::string::npos;
        }
        if (c.is_array()) {
            for (const auto& e : c)
                if (equal(Value::of(e), needle)) return true;
            return false;
        }
        if (c.is_object()) return needle.j().is_string() && c.contains(needle.j().get<std::string>());
        fail(line, std::string("'in' cannot look into a value of type ") + typeName(container));
    }

    Value binary(const Expr& e)
    {
        const std::string& op = e.name;
        const Value l = eval(*e.a[0]);
        const Value r = eval(*e.a[1]);
        if (op == "==") return Value::of(equal(l, r));
        if (op == "!=") return Value::of(!equal(l, r));
        if (op == "in") return Value::of(contains(r, l, e.line));
        if (op == "not in") return Value::of(!contains(r, l, e.line));
        if (op == "~") return Value::of(str(l) + str(r));
        if (l.isUndefined() || r.isUndefined())
            fail(e.line, "'" + (l.isUndefined() ? l.missing : r.missing) + "' is undefined (in '" + op + "')");
        const json& x = l.j();
        const json& y = r.j();
        if (op == "<" || op == ">" || op == "<=" || op == ">=") {
            bool ok = false;
            const int c = compareValues(x, y, ok);
            if (!ok) fail(e.line, std::string("cannot compare ") + typeName(l) + " and " + typeName(r) + " with '" + op + "'");
            return Value::of(op == "<" ? c < 0 : op == ">" ? c > 0 : op == "<=" ? c <= 0 : c >= 0);
        }
        if (op == "+") {
            if (x.is_string() && y.is_string()) return Value::of(x.get<std::string>() + y.get<std::string>());
            if (x.is_array() && y.is_array()) {
                json out = x;
                for (const auto& v : y) out.push_back(v);
                return Value::of(out);
            }
        }
        if (op == "*" && ((x.is_string() && y.is_number_integer()) || (x.is_number_integer() && y.is_string()))) {
            const std::string s = x.is_string() ? x.get<std::string>() : y.get<std::string>();
            const long long n = x.is_string() ? y.get<long long>() : x.get<long long>();
            std::string out;
            for (long long i = 0; i < n && out.size() < kMaxOutput; ++i) out += s;
            return Value::of(out);
        }
        if (!x.is_number() || !y.is_number() || x.is_boolean() || y.is_boolean())
            fail(e.line, std::string("unsupported operand types for '") + op + "': " + typeName(l) + " and " + typeName(r));
        const bool ints = x.is_number_integer() && y.is_number_integer();
        if (op == "/") {
            if (y.get<double>() == 0) fail(e.line, "division by zero");
            return Value::of(x.get<double>() / y.get<double>());
        }
        if (ints) {
            const long long a = x.get<long long>(), b = y.get<long long>();
            if (op == "+") return Value::of(a + b);
            if (op == "-") return Value::of(a - b);
            if (op == "*") return Value::of(a * b);
            if (op == "**") return Value::of((long long)std::pow(double(a), double(b)));
            if (b == 0) fail(e.line, "division by zero");
            const long long q = a / b - ((a % b != 0) && ((a < 0) != (b < 0)) ? 1 : 0); // Python floors
            if (op == "//") return Value::of(q);
            if (op == "%") return Value::of(a - q * b);
        }
        const double a = x.get<double>(), b = y.get<double>();
        if (op == "+") return Value::of(a + b);
        if (op == "-") return Value::of(a - b);
        if (op == "*") return Value::of(a * b);
        if (op == "**") return Value::of(std::pow(a, b));
        if (b == 0) fail(e.line, "division by zero");
        if (op == "//") return Value::of(std::floor(a / b));
        if (op == "%") return Value::of(a - std::floor(a / b) * b);
        fail(e.line, "unknown operator '" + op + "'");
    }

    std::vector<Value> args(const Expr& e, std::size_t from)
    {
        std::vector<Value> out;
        for (std::size_t i = from; i < e.a.size(); ++i) out.push_back(eval(*e.a[i]));
        return out;
    }
    const Expr* kwarg(const Expr& e, const char* name) const
    {
        for (const auto& [k, v] : e.kwargs)
            if (k == name) return v.get();
        return nullptr;
    }

    static std::string strip(const std::string& s, const std::string* chars, bool left, bool right)
    {
        const auto u = toU32(s);
        std::u32string set;
        if (chars) set = toU32(*chars);
        auto drop = [&](char32_t c) { return chars ? set.find(c) != std::u32string::npos : isWhiteSpace(c); };
        std::size_t b = 0, e = u.size();
        if (left)
            while (b < e && drop(u[b])) ++b;
        if (right)
            while (e > b && drop(u[e - 1])) --e;
        return fromU32(u.substr(b, e - b));
    }

    std::string requireString(const Value& v, int line, const std::string& what)
    {
        if (v.isUndefined()) fail(line, "'" + v.missing + "' is undefined (" + what + ")");
        if (!v.j().is_string()) fail(line, what + " needs a string, not " + typeName(v));
        return v.j().get<std::string>();
    }

    Value method(const Expr& e)
    {
        const Value self = eval(*e.a[0]);
        const auto a = args(e, 1);
        const std::string& m = e.name;
        if (self.isUndefined()) fail(e.line, "'" + self.missing + "' is undefined, so it has no method " + m + "()");
        const json& j = self.j();
        auto argString = [&](std::size_t i) -> std::optional<std::string> {
            if (i >= a.size() || a[i].isUndefined() || a[i].j().is_null()) return std::nullopt;
            return requireString(a[i], e.line, m + "()");
        };
        if (j.is_string()) {
            const std::string s = j.get<std::string>();
            if (m == "strip" || m == "lstrip" || m == "rstrip") {
                const auto chars = argString(0);
                return Value::of(strip(s, chars ? &*chars : nullptr, m != "rstrip", m != "lstrip"));
            }
            if (m == "startswith" || m == "endswith") {
                if (a.empty()) fail(e.line, m + "() needs an argument");
                std::vector<std::string> options;
                if (a[0].j().is_array())
                    for (const auto& o : a[0].j()) options.push_back(o.is_string() ? o.get<std::string>() : "");
                else options.push_back(requireString(a[0], e.line, m + "()"));
                for (const auto& o : options) {
                    if (m == "startswith" && s.compare(0, o.size(), o) == 0) return Value::of(true);
                    if (m == "endswith" && s.size() >= o.size() && s.compare(s.size() - o.size(), o.size(), o) == 0) return Value::of(true);
                }
                return Value::of(false);
            }
            if (m == "split" || m == "rsplit") {
                const auto sep = argString(0);
                long long maxsplit = a.size() > 1 && a[1].j().is_number_integer() ? a[1].j().get<long long>() : -1;
                if (const Expr* k = kwarg(e, "maxsplit")) maxsplit = toInt(eval(*k).j());
                json out = json::array();
                if (sep) {
                    if (sep->empty()) fail(e.line, "split() with an empty separator");
                    if (m == "split") {
                        std::size_t at = 0;
                        long long n = 0;
                        while (maxsplit < 0 || n < maxsplit) {
                            const auto f = s.find(*sep, at);
                            if (f == std::string::npos) break;
                            out.push_back(s.substr(at, f - at));
                            at = f + sep->size();
                            ++n;
                        }
                        out.push_back(s.substr(at));
                    } else {
                        std::vector<std::string> parts;
                        std::size_t end = s.size();
                        long long n = 0;
                        while (maxsplit < 0 || n < maxsplit) {
                            if (end < sep->size()) break;
                            const auto f = s.rfind(*sep, end - sep->size());
                            if (f == std::string::npos) break;
                            parts.push_back(s.substr(f + sep->size(), end - f - sep->size()));
                            end = f;
                            ++n;
                        }
                        parts.push_back(s.substr(0, end));
                        for (auto it = parts.rbegin(); it != parts.rend(); ++it) out.push_back(*it);
                    }
                } else {
                    const auto u = toU32(s);
                    std::size_t i = 0;
                    long long n = 0;
                    while (i < u.size()) {
                        while (i < u.size() && isWhiteSpace(u[i])) ++i;
                        if (i >= u.size()) break;
                        if (maxsplit >= 0 && n >= maxsplit) {
                            std::size_t e2 = u.size();
                            while (e2 > i && isWhiteSpace(u[e2 - 1])) --e2;
                            out.push_back(fromU32(u.substr(i, e2 - i)));
                            break;
                        }
                        std::size_t j2 = i;
                        while (j2 < u.size() && !isWhiteSpace(u[j2])) ++j2;
                        out.push_back(fromU32(u.substr(i, j2 - i)));
                        i = j2;
                        ++n;
                    }
                }
                return Value::of(out);
            }
            if (m == "upper" || m == "lower") {
                std::string out;
                for (const char32_t c : toU32(s)) {
                    if (m == "lower") appendLowercase(out, c);
                    else if (c < 0x80) out.push_back(char(c >= 'a' && c <= 'z' ? c - 32 : c));
                    else appendUtf8(out, c);
                }
                return Value::of(out);
            }
            if (m == "replace") {
                const auto from = argString(0), to = argString(1);
                if (!from || !to) fail(e.line, "replace() needs two strings");
                if (from->empty()) return Value::of(s);
                std::string out;
                std::size_t at = 0;
                for (auto f = s.find(*from); f != std::string::npos; f = s.find(*from, at)) {
                    out += s.substr(at, f - at) + *to;
                    at = f + from->size();
                }
                return Value::of(out + s.substr(at));
            }
            if (m == "find") {
                const auto needle = argString(0);
                if (!needle) fail(e.line, "find() needs a string");
                const auto f = s.find(*needle);
                return Value::of(f == std::string::npos ? -1LL : (long long)toU32(s.substr(0, f)).size());
            }
            if (m == "capitalize" || m == "title") {
                std::string out;
                bool start = true;
                for (const char32_t c : toU32(s)) {
                    const bool alpha = c < 0x80 ? std::isalpha(int(c)) != 0 : isWordChar(c);
                    if (start && c < 0x80 && c >= 'a' && c <= 'z') out.push_back(char(c - 32));
                    else if (!start && c < 0x80 && c >= 'A' && c <= 'Z') out.push_back(char(c + 32));
                    else appendUtf8(out, c);
                    if (m == "capitalize") start = false;
                    else start = !alpha;
                }
                return Value::of(out);
            }
            if (m == "join") {
                if (a.empty() || !a[0].j().is_array()) fail(e.line, "join() needs a list");
                std::string out;
                bool first = true;
                for (const auto& v : a[0].j()) {
                    out += (first ? "" : s) + str(Value::of(v));
                    first = false;
                }
                return Value::of(out);
            }
        } else if (j.is_object()) {
            if (m == "items" || m == "keys" || m == "values") {
                json out = json::array();
                for (const auto& [k, v] : j.items()) {
                    if (m == "items") out.push_back(json::array({k, v}));
                    else if (m == "keys") out.push_back(k);
                    else out.push_back(v);
                }
                return Value::of(out);
            }
            if (m == "get") {
                const auto key = argString(0);
                if (!key) fail(e.line, "get() needs a key");
                const auto it = j.find(*key);
                if (it != j.end()) return Value::of(*it);
                return a.size() > 1 ? a[1] : Value::of(nullptr);
            }
        }
        fail(e.line, std::string("the method ") + m + "() of " + typeName(self) + " is not supported");
    }

    std::string toJson(const json& j, const Expr& e)
    {
        int indent = -1;
        if (const Expr* k = kwarg(e, "indent")) indent = int(toInt(eval(*k).j()));
        else if (e.a.size() > 1) indent = int(toInt(eval(*e.a[1]).j()));
        // Python's json.dumps(ensure_ascii=False): ", " and ": " between items without indent.
        std::function<std::string(const json&, int)> dump = [&](const json& v, int level) -> std::string {
            const std::string pad = indent >= 0 ? "\n" + std::string(std::size_t(indent * (level + 1)), ' ') : "";
            const std::string close = indent >= 0 ? "\n" + std::string(std::size_t(indent * level), ' ') : "";
            if (v.is_array()) {
                if (v.empty()) return "[]";
                std::string out = "[";
                for (std::size_t i = 0; i < v.size(); ++i) out += (i ? (indent >= 0 ? "," : ", ") : "") + pad + dump(v[i], level + 1);
                return out + close + "]";
            }
            if (v.is_object()) {
                if (v.empty()) return "{}";
                std::string out = "{";
                bool first = true;
                for (const auto& [k, x] : v.items()) {
                    out += (first ? "" : (indent >= 0 ? "," : ", ")) + pad + json(k).dump(-1, ' ', false, json::error_handler_t::replace) + ": " + dump(x, level + 1);
                    first = false;
                }
                return out + close + "}";
            }
            if (v.is_number_float()) return pyFloat(v.get<double>()) == "nan" ? "NaN" : pyFloat(v.get<double>());
            return v.dump(-1, ' ', false, json::error_handler_t::replace);
        };
        return dump(j, 0);
    }

    Value filter(const Expr& e)
    {
        const std::string& f = e.name;
        if (f == "default" || f == "d") {
            const Value v = eval(*e.a[0]);
            bool boolean = false;
            if (const Expr* k = kwarg(e, "boolean")) boolean = truthy(eval(*k));
            else if (e.a.size() > 2) boolean = truthy(eval(*e.a[2]));
            if (v.isUndefined() || (boolean && !truthy(v))) return e.a.size() > 1 ? eval(*e.a[1]) : Value::of("");
            return v;
        }
        const Value v = eval(*e.a[0]);
        if (f == "safe") return v;
        if (f == "string") return Value::of(str(v));
        if (v.isUndefined() && f != "length" && f != "count")
            fail(e.line, "'" + v.missing + "' is undefined (filter " + f + ")");
        const json& j = v.isUndefined() ? json() : v.j();
        if (f == "trim") {
            std::optional<std::string> chars;
            if (e.a.size() > 1) chars = requireString(eval(*e.a[1]), e.line, "trim");
            return Value::of(strip(requireString(v, e.line, "trim"), chars ? &*chars : nullptr, true, true));
        }
        if (f == "length" || f == "count") {
            if (v.isUndefined()) return Value::of(0);
            if (j.is_string()) return Value::of((long long)toU32(j.get<std::string>()).size());
            if (j.is_array() || j.is_object()) return Value::of((long long)j.size());
            fail(e.line, std::string("a value of type ") + typeName(v) + " has no length");
        }
        if (f == "tojson") return Value::of(toJson(j, e));
        if (f == "upper" || f == "lower" || f == "capitalize" || f == "title") {
            auto m = make(Expr::T::Method, e.line);
            m->name = f;
            auto lit = make(Expr::T::Literal, e.line);
            lit->literal = requireString(v, e.line, f);
            m->a.push_back(std::move(lit));
            return method(*m);
        }
        if (f == "first" || f == "last") {
            if (j.is_array()) return j.empty() ? Value::undefined("first") : Value::of(f == "first" ? j.front() : j.back());
            if (j.is_string()) {
                const auto u = toU32(j.get<std::string>());
                return u.empty() ? Value::undefined("first") : Value::of(fromU32(std::u32string(1, f == "first" ? u.front() : u.back())));
            }
            fail(e.line, std::string("filter ") + f + " needs a list or a string");
        }
        if (f == "join") {
            std::string sep = e.a.size() > 1 ? str(eval(*e.a[1])) : "";
            if (!j.is_array()) fail(e.line, "filter join needs a list");
            std::string out;
            for (std::size_t i = 0; i < j.size(); ++i) out += (i ? sep : "") + str(Value::of(j[i]));
            return Value::of(out);
        }
        if (f == "int") {
            if (j.is_number()) return Value::of(toInt(j));
            if (j.is_string()) {
                try {
                    return Value::of(std::stoll(j.get<std::string>()));
                } catch (const std::exception&) {
                    return Value::of(0);
                }
            }
            return Value::of(0);
        }
        if (f == "float") return Value::of(j.is_number() ? j.get<double>() : 0.0);
        if (f == "list") {
            if (j.is_array()) return v;
            json out = json::array();
            if (j.is_string())
                for (const char32_t c : toU32(j.get<std::string>())) out.push_back(fromU32(std::u32string(1, c)));
            else if (j.is_object())
                for (const auto& [k, x] : j.items()) out.push_back(k);
            return Value::of(out);
        }
        if (f == "items") {
            if (!j.is_object()) fail(e.line, "filter items needs a mapping");
            json out = json::array();
            for (const auto& [k, x] : j.items()) out.push_back(json::array({k, x}));
            return Value::of(out);
        }
        if (f == "reverse") {
            if (j.is_array()) {
                json out = json::array();
                for (auto it = j.rbegin(); it != j.rend(); ++it) out.push_back(*it);
                return Value::of(out);
            }
            if (j.is_string()) {
                auto u = toU32(j.get<std::string>());
                std::reverse(u.begin(), u.end());
                return Value::of(fromU32(u));
            }
            fail(e.line, "filter reverse needs a list or a string");
        }
        if (f == "replace") {
            auto m = make(Expr::T::Method, e.line);
            m->name = "replace";
            auto lit = make(Expr::T::Literal, e.line);
            lit->literal = requireString(v, e.line, "replace");
            m->a.push_back(std::move(lit));
            for (std::size_t i = 1; i < e.a.size(); ++i) {
                auto arg = make(Expr::T::Literal, e.line);
                arg->literal = eval(*e.a[i]).j();
                m->a.push_back(std::move(arg));
            }
            return method(*m);
        }
        if (f == "abs") {
            if (j.is_number_integer()) return Value::of(std::llabs(j.get<long long>()));
            if (j.is_number()) return Value::of(std::fabs(j.get<double>()));
            fail(e.line, "filter abs needs a number");
        }
        fail(e.line, "the filter '" + clipForMessage(f, 40) + "' is not supported");
    }

    Value test(const Expr& e)
    {
        const Value v = eval(*e.a[0]);
        const std::string& t = e.name;
        bool r = false;
        const json& j = v.isUndefined() ? json() : v.j();
        auto arg = [&]() {
            if (e.a.size() < 2) fail(e.line, "the test '" + t + "' needs an argument");
            return eval(*e.a[1]);
        };
        if (t == "defined") r = !v.isUndefined();
        else if (t == "undefined") r = v.isUndefined();
        else if (t == "none") r = !v.isUndefined() && j.is_null();
        else if (t == "string") r = !v.isUndefined() && j.is_string();
        else if (t == "number") r = !v.isUndefined() && j.is_number() && !j.is_boolean();
        else if (t == "integer") r = !v.isUndefined() && j.is_number_integer();
        else if (t == "float") r = !v.isUndefined() && j.is_number_float();
        else if (t == "boolean") r = !v.isUndefined() && j.is_boolean();
        else if (t == "true") r = !v.isUndefined() && j.is_boolean() && j.get<bool>();
        else if (t == "false") r = !v.isUndefined() && j.is_boolean() && !j.get<bool>();
        else if (t == "mapping") r = v.kind == Value::Kind::Namespace || (!v.isUndefined() && j.is_object());
        else if (t == "iterable") r = !v.isUndefined() && (j.is_array() || j.is_object() || j.is_string());
        else if (t == "sequence") r = !v.isUndefined() && (j.is_array() || j.is_object() || j.is_string());
        else if (t == "eq" || t == "equalto" || t == "sameas") r = equal(v, arg());
        else if (t == "ne") r = !equal(v, arg());
        else if (t == "in") r = contains(arg(), v, e.line);
        else if (t == "odd" || t == "even") {
            if (!isNumber(v)) fail(e.line, "the test '" + t + "' needs a number");
            r = (toInt(j) % 2 != 0) == (t == "odd");
        } else if (t == "divisibleby") {
            const Value d = arg();
            if (!isNumber(v) || !isNumber(d) || toInt(d.j()) == 0) fail(e.line, "divisibleby needs numbers");
            r = toInt(j) % toInt(d.j()) == 0;
        } else if (t == "lower" || t == "upper") {
            const std::string s = requireString(v, e.line, t);
            r = !s.empty();
            for (const char c : s)
                if (std::isalpha(static_cast<unsigned char>(c)) && ((t == "lower") != (std::islower(static_cast<unsigned char>(c)) != 0))) r = false;
        } else {
            fail(e.line, "the test '" + clipForMessage(t, 40) + "' is not supported");
        }
        return Value::of(e.negate ? !r : r);
    }

    Value call(const Expr& e)
    {
        const std::string& f = e.name;
        if (f == "raise_exception") {
            const auto a = args(e, 0);
            throw InputError("the chat template refused the conversation: " + (a.empty() ? std::string("(no message)") : str(a[0])));
        }
        if (f == "namespace") {
            Value v;
            v.kind = Value::Kind::Namespace;
            v.ns = std::make_shared<json>(json::object());
            for (const auto& a : args(e, 0)) {
                if (!a.isUndefined() && a.j().is_object())
                    for (const auto& [k, x] : a.j().items()) (*v.ns)[k] = x;
            }
            for (const auto& [k, x] : e.kwargs) {
                const Value val = eval(*x);
                (*v.ns)[k] = val.isUndefined() ? json() : val.j();
            }
            return v;
        }
        if (f == "range") {
            const auto a = args(e, 0);
            long long start = 0, stop = 0, step = 1;
            if (a.size() == 1) stop = toInt(a[0].j());
            else if (a.size() >= 2) {
                start = toInt(a[0].j());
                stop = toInt(a[1].j());
                if (a.size() > 2) step = toInt(a[2].j());
            }
            if (step == 0) fail(e.line, "range() step cannot be zero");
            json out = json::array();
            for (long long i = start; step > 0 ? i < stop : i > stop; i += step) {
                out.push_back(i);
                if (out.size() > kMaxIterations) fail(e.line, "range() is too long");
            }
            return Value::of(out);
        }
        if (f == "strftime_now") {
            const auto a = args(e, 0);
            const std::string fmt = a.empty() ? "%Y-%m-%d" : requireString(a[0], e.line, "strftime_now()");
            const std::time_t now = std::time(nullptr);
            std::tm tm{};
            localtime_r(&now, &tm);
            char buf[256];
            const std::size_t n = std::strftime(buf, sizeof buf, fmt.c_str(), &tm);
            return Value::of(std::string(buf, n));
        }
        const Value v = lookup(f);
        fail(e.line, v.isUndefined() ? "'" + f + "' is undefined, so it cannot be called" : "'" + f + "' is not a function");
    }

    Value eval(const Expr& e)
    {
        switch (e.t) {
        case Expr::T::Literal: return Value::of(e.literal);
        case Expr::T::Name: return lookup(e.name);
        case Expr::T::Attr: return attr(eval(*e.a[0]), e.name, e.line);
        case Expr::T::Item: return item(eval(*e.a[0]), eval(*e.a[1]), e.line);
        case Expr::T::Slice: {
            const Value obj = eval(*e.a[0]);
            Value parts[3];
            const Value* p[3] = {nullptr, nullptr, nullptr};
            for (int i = 0; i < 3; ++i)
                if (e.a[std::size_t(i) + 1]) {
                    parts[i] = eval(*e.a[std::size_t(i) + 1]);
                    p[i] = &parts[i];
                }
            return slice(obj, p[0], p[1], p[2], e.line);
        }
        case Expr::T::Call: return call(e);
        case Expr::T::Method: return method(e);
        case Expr::T::Filter: return filter(e);
        case Expr::T::Test: return test(e);
        case Expr::T::Neg: {
            const Value v = eval(*e.a[0]);
            if (!isNumber(v)) fail(e.line, std::string("cannot negate a value of type ") + typeName(v));
            if (v.j().is_number_integer()) return Value::of(-v.j().get<long long>());
            return Value::of(-v.j().get<double>());
        }
        case Expr::T::Binary: return binary(e);
        case Expr::T::And: {
            Value l = eval(*e.a[0]);
            return truthy(l) ? eval(*e.a[1]) : l;
        }
        case Expr::T::Or: {
            Value l = eval(*e.a[0]);
            return truthy(l) ? l : eval(*e.a[1]);
        }
        case Expr::T::Not: return Value::of(!truthy(eval(*e.a[0])));
        case Expr::T::Cond:
            if (truthy(eval(*e.a[1]))) return eval(*e.a[0]);
            return e.a.size() > 2 ? eval(*e.a[2]) : Value::undefined("else");
        case Expr::T::List: {
            json out = json::array();
            for (const auto& x : e.a) {
                const Value v = eval(*x);
                out.push_back(v.isUndefined() ? json() : v.j());
            }
            return Value::of(out);
        }
        case Expr::T::Dict: {
            json out = json::object();
            for (std::size_t i = 0; i + 1 < e.a.size(); i += 2) {
                const Value k = eval(*e.a[i]);
                const Value v = eval(*e.a[i + 1]);
                out[str(k)] = v.isUndefined() ? json() : v.j();
            }
            return Value::of(out);
        }
        }
        fail(e.line, "cannot evaluate this expression");
    }

    std::string m_where;
    std::vector<std::unordered_map<std::string, Value>> m_scopes;
    std::string m_out;
    std::size_t m_iterations = 0;
};

} // namespace

struct ChatTemplate::Impl {
    std::string where;
    Body body;
};

ChatTemplate::ChatTemplate(const std::string& source, const std::string& where) : m(std::make_unique<Impl>())
{
    if (source.size() > (4u << 20)) throw InputError(where + ": the chat template is larger than 4 MiB");
    if (firstInvalidUtf8(source) != std::string::npos) throw InputError(where + ": the chat template is not valid UTF-8");
    m->where = where;
    // Jinja drops one newline at the very end of a template (keep_trailing_newline is off).
    std::string text = source;
    if (text.size() >= 2 && text.compare(text.size() - 2, 2, "\r\n") == 0) text.resize(text.size() - 2);
    else if (!text.empty() && text.back() == '\n') text.pop_back();
    Parser parser(lex(text, where), where);
    m->body = parser.parseAll();
}

ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

std::string ChatTemplate::render(const nlohmann::ordered_json& context) const
{
    Renderer r(m->where, context);
    return r.run(m->body);
}

FolderChatTemplate readFolderChatTemplate(const std::filesystem::path& dir)
{
    FolderChatTemplate out;
    const auto configPath = dir / "tokenizer_config.json";
    std::error_code ec;
    json config = json::object();
    if (std::filesystem::is_regular_file(configPath, ec)) {
        if (std::filesystem::file_size(configPath, ec) > (64u << 20)) throw InputError(configPath.string() + " is larger than 64 MiB");
        std::ifstream in(configPath, std::ios::binary);
        try {
            config = json::parse(in);
        } catch (const json::parse_error& e) {
            throw InputError(configPath.string() + ": not valid JSON at byte " + std::to_string(e.byte));
        }
    }
    if (config.is_object()) {
        for (const char* key : {"bos_token", "eos_token", "unk_token", "pad_token"}) {
            const auto it = config.find(key);
            if (it == config.end()) continue;
            if (it->is_string()) out.variables[key] = *it;
            else if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) out.variables[key] = (*it)["content"];
        }
        if (const auto t = config.find("chat_template"); t != config.end()) {
            if (t->is_string()) out.source = t->get<std::string>();
            else if (t->is_array())
                for (const auto& named : *t)
                    if (named.is_object() && named.value("name", "") == "default" && named.contains("template") && named["template"].is_string())
                        out.source = named["template"].get<std::string>();
            out.where = configPath.string() + " chat_template";
        }
    }
    if (out.source.empty() && std::filesystem::is_regular_file(dir / "chat_template.jinja", ec)) {
        std::ifstream in(dir / "chat_template.jinja", std::ios::binary);
        out.source.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
        out.where = (dir / "chat_template.jinja").string();
    }
    if (out.source.empty())
        throw InputError(dir.string() + " has no chat template (tokenizer_config.json \"chat_template\" or chat_template.jinja); "
                                        "a base model is trained on text or jsonl data, not chat");
    return out;
}

} // namespace tb::text
