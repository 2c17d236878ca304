#pragma once
// Expressions, by precedence from the loosest: a if b else c, or, and, not,
// comparisons and `in`, + -, ~, * / // %, **, unary minus, then filters and
// tests applied to a primary with its attributes, items, slices and calls.

#include "text/jinja/Lexer.h"
#include "text/jinja/Syntax.h"

namespace tb::text::jinja {

class ExpressionParser {
public:
    explicit ExpressionParser(TokenStream& tokens) : L(tokens) {}

    ExprP expression(int depth = 0);
    // An expression without "a if b else c" (a for loop's iterable before its filter).
    ExprP orExpression() { return orExpr(0); }

private:
    void guard(int depth);
    ExprP orExpr(int d);
    ExprP andExpr(int d);
    ExprP notExpr(int d);
    ExprP compare(int d);
    ExprP binaryLoop(int d, ExprP (ExpressionParser::*sub)(int), std::initializer_list<const char*> ops);
    ExprP math1(int d) { return binaryLoop(d, &ExpressionParser::concat, {"+", "-"}); }
    ExprP concat(int d) { return binaryLoop(d, &ExpressionParser::math2, {"~"}); }
    ExprP math2(int d) { return binaryLoop(d, &ExpressionParser::power, {"*", "/", "//", "%"}); }
    ExprP power(int d) { return binaryLoop(d, &ExpressionParser::unary, {"**"}); }
    ExprP unary(int d);
    CallArgs callArgs(int d);
    ExprP subscript(ExprP object, int d);
    ExprP postfix(ExprP e, int d);
    ExprP filters(ExprP e, int d);
    ExprP primary(int d);
    ExprP listLiteral(int d);
    ExprP dictLiteral(int d);

    TokenStream& L;
};

} // namespace tb::text::jinja
