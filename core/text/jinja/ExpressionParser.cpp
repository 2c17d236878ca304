#include "text/jinja/ExpressionParser.h"

#include "text/jinja/Limits.h"

namespace tb::text::jinja {

ExprP ExpressionParser::expression(int depth)
{
    guard(depth);
    auto e = orExpr(depth + 1);
    if (!L.isName("if")) return e;
    L.next();
    expr::Conditional c;
    c.then = std::move(e);
    c.condition = orExpr(depth + 1);
    if (L.isName("else")) {
        L.next();
        c.otherwise = expression(depth + 1);
    }
    return makeExpr(L.line(), std::move(c));
}

void ExpressionParser::guard(int depth)
{
    if (depth > kMaxDepth) L.fail("the expression is nested deeper than " + std::to_string(kMaxDepth));
}

ExprP ExpressionParser::orExpr(int d)
{
    auto e = andExpr(d + 1);
    while (L.isName("or")) {
        L.next();
        e = makeExpr(L.line(), expr::Logical{false, std::move(e), andExpr(d + 1)});
    }
    return e;
}

ExprP ExpressionParser::andExpr(int d)
{
    auto e = notExpr(d + 1);
    while (L.isName("and")) {
        L.next();
        e = makeExpr(L.line(), expr::Logical{true, std::move(e), notExpr(d + 1)});
    }
    return e;
}

ExprP ExpressionParser::notExpr(int d)
{
    guard(d);
    if (!L.isName("not")) return compare(d + 1);
    L.next();
    return makeExpr(L.line(), expr::Not{notExpr(d + 1)});
}

ExprP ExpressionParser::compare(int d)
{
    auto e = math1(d + 1);
    while (true) {
        std::string op;
        if (L.isOp("==") || L.isOp("!=") || L.isOp("<") || L.isOp(">") || L.isOp("<=") || L.isOp(">=")) {
            op = L.next().text;
        } else if (L.isName("in")) {
            L.next();
            op = "in";
        } else if (L.isName("not") && L.isName("in", 1)) {
            L.next();
            L.next();
            op = "not in";
        } else {
            return e;
        }
        e = makeExpr(L.line(), expr::Binary{op, std::move(e), math1(d + 1)});
    }
}

ExprP ExpressionParser::binaryLoop(int d, ExprP (ExpressionParser::*sub)(int), std::initializer_list<const char*> ops)
{
    auto e = (this->*sub)(d + 1);
    while (true) {
        const char* found = nullptr;
        for (const char* op : ops)
            if (L.isOp(op)) found = op;
        if (!found) return e;
        L.next();
        e = makeExpr(L.line(), expr::Binary{found, std::move(e), (this->*sub)(d + 1)});
    }
}

ExprP ExpressionParser::unary(int d)
{
    guard(d);
    if (L.isOp("-")) {
        L.next();
        return makeExpr(L.line(), expr::Negative{unary(d + 1)});
    }
    if (L.isOp("+")) {
        L.next();
        return unary(d + 1);
    }
    auto e = postfix(primary(d + 1), d + 1);
    return filters(std::move(e), d + 1);
}

CallArgs ExpressionParser::callArgs(int d)
{
    CallArgs args;
    L.expectOp("(");
    while (!L.isOp(")")) {
        if (L.peek().kind == Token::Kind::Name && L.isOp("=", 1)) {
            std::string key = L.next().text;
            L.next();
            args.keywords.emplace_back(std::move(key), expression(d + 1));
        } else {
            args.positional.push_back(expression(d + 1));
        }
        if (!L.isOp(",")) break;
        L.next();
    }
    L.expectOp(")");
    return args;
}

// After "[": an item a[b] or a slice a[b:c:d].
ExprP ExpressionParser::subscript(ExprP object, int d)
{
    ExprP parts[3];
    int colons = 0;
    if (!L.isOp(":")) parts[0] = expression(d + 1);
    while (L.isOp(":") && colons < 2) {
        L.next();
        ++colons;
        if (!L.isOp(":") && !L.isOp("]")) parts[colons] = expression(d + 1);
    }
    L.expectOp("]");
    if (colons == 0) return makeExpr(L.line(), expr::Item{std::move(object), std::move(parts[0])});
    return makeExpr(L.line(), expr::Slice{std::move(object), std::move(parts[0]), std::move(parts[1]), std::move(parts[2])});
}

ExprP ExpressionParser::postfix(ExprP e, int d)
{
    while (true) {
        if (L.isOp(".")) {
            L.next();
            std::string name = L.expectName();
            if (L.isOp("(")) e = makeExpr(L.line(), expr::Method{std::move(e), std::move(name), callArgs(d)});
            else e = makeExpr(L.line(), expr::Attribute{std::move(e), std::move(name)});
        } else if (L.isOp("[")) {
            L.next();
            e = subscript(std::move(e), d);
        } else if (L.isOp("(")) {
            const auto* name = std::get_if<expr::Name>(&e->node);
            if (!name) L.fail("only functions can be called here");
            e = makeExpr(L.line(), expr::Call{name->name, callArgs(d)});
        } else {
            return e;
        }
    }
}

ExprP ExpressionParser::filters(ExprP e, int d)
{
    while (true) {
        if (L.isOp("|")) {
            L.next();
            expr::Filter f{std::move(e), L.expectName(), {}};
            if (L.isOp("(")) f.args = callArgs(d);
            e = makeExpr(L.line(), std::move(f));
        } else if (L.isName("is")) {
            L.next();
            expr::Test t;
            t.value = std::move(e);
            if (L.isName("not")) {
                L.next();
                t.negate = true;
            }
            t.name = L.expectName();
            if (L.isOp("(")) t.args = callArgs(d);
            else if (L.peek().kind == Token::Kind::Number || L.peek().kind == Token::Kind::String)
                t.args.positional.push_back(primary(d + 1)); // x is divisibleby 3
            e = makeExpr(L.line(), std::move(t));
        } else {
            return e;
        }
    }
}

ExprP ExpressionParser::primary(int d)
{
    guard(d);
    const Token t = L.next();
    switch (t.kind) {
    case Token::Kind::Number: return makeExpr(L.line(), expr::Literal{t.number});
    case Token::Kind::String: {
        std::string s = t.text;
        while (L.peek().kind == Token::Kind::String) s += L.next().text; // adjacent literals join
        return makeExpr(L.line(), expr::Literal{s});
    }
    case Token::Kind::Name:
        if (t.text == "true" || t.text == "True") return makeExpr(L.line(), expr::Literal{true});
        if (t.text == "false" || t.text == "False") return makeExpr(L.line(), expr::Literal{false});
        if (t.text == "none" || t.text == "None") return makeExpr(L.line(), expr::Literal{nullptr});
        return makeExpr(L.line(), expr::Name{t.text});
    case Token::Kind::Operator:
        if (t.text == "(") {
            auto e = expression(d + 1);
            if (L.isOp(",")) L.fail("tuples are not supported");
            L.expectOp(")");
            return e;
        }
        if (t.text == "[") return listLiteral(d);
        if (t.text == "{") return dictLiteral(d);
        L.fail("unexpected '" + t.text + "'");
    case Token::Kind::End: L.fail("the expression ends too early");
    }
    L.fail("unexpected input");
}

// After "[": [a, b, ...].
ExprP ExpressionParser::listLiteral(int d)
{
    expr::List list;
    while (!L.isOp("]")) {
        list.items.push_back(expression(d + 1));
        if (!L.isOp(",")) break;
        L.next();
    }
    L.expectOp("]");
    return makeExpr(L.line(), std::move(list));
}

// After "{": {k: v, ...}.
ExprP ExpressionParser::dictLiteral(int d)
{
    expr::Dict dict;
    while (!L.isOp("}")) {
        auto key = expression(d + 1);
        L.expectOp(":");
        dict.entries.emplace_back(std::move(key), expression(d + 1));
        if (!L.isOp(",")) break;
        L.next();
    }
    L.expectOp("}");
    return makeExpr(L.line(), std::move(dict));
}

} // namespace tb::text::jinja
