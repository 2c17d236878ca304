#pragma once
// The trees the parser builds: expressions ({{ a.b | f(c) }}) and statements
// (text, output, if, for, set, break, continue). Each node kind is its own
// struct; Expr and Node hold one of them and the line it came from.

#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "text/jinja/Value.h"

namespace tb::text::jinja {

struct Expr;
using ExprP = std::unique_ptr<Expr>;

// Arguments as written at a call: f(a, b, key=c).
struct CallArgs {
    std::vector<ExprP> positional;
    std::vector<std::pair<std::string, ExprP>> keywords;
};

namespace expr {
struct Literal { json value; };
struct Name { std::string name; };
struct Attribute { ExprP object; std::string name; };      // a.b
struct Item { ExprP object; ExprP key; };                   // a[b]
struct Slice { ExprP object, start, stop, step; };          // a[b:c:d]; null: left out
struct Call { std::string function; CallArgs args; };       // a global: range(3), namespace(x=1)
struct Method { ExprP object; std::string name; CallArgs args; }; // a.b(c)
struct Filter { ExprP value; std::string name; CallArgs args; };  // a | f(c)
struct Test { ExprP value; std::string name; bool negate = false; CallArgs args; }; // a is [not] t(c)
struct Negative { ExprP operand; };
struct Not { ExprP operand; };
struct Binary { std::string op; ExprP left, right; };     // == != < > <= >= in, not in, ~ + - * / // % **
struct Logical { bool isAnd = false; ExprP left, right; }; // and, or: Python's short-circuit values
struct Conditional { ExprP then, condition, otherwise; }; // a if b else c; otherwise may be null
struct List { std::vector<ExprP> items; };
struct Dict { std::vector<std::pair<ExprP, ExprP>> entries; };
} // namespace expr

struct Expr {
    int line = 0;
    std::variant<expr::Literal, expr::Name, expr::Attribute, expr::Item, expr::Slice, expr::Call, expr::Method,
                 expr::Filter, expr::Test, expr::Negative, expr::Not, expr::Binary, expr::Logical, expr::Conditional,
                 expr::List, expr::Dict>
        node;
};

template <class T>
ExprP makeExpr(int line, T node)
{
    auto e = std::make_unique<Expr>();
    e->line = line;
    e->node = std::move(node);
    return e;
}

struct Node;
using NodeP = std::unique_ptr<Node>;
using Body = std::vector<NodeP>;

namespace stmt {
struct Text { std::string text; };
struct Output { ExprP value; };
struct If { std::vector<std::pair<ExprP, Body>> branches; Body otherwise; };
struct For {
    std::vector<std::string> targets; // one name, or two that unpack each item
    ExprP iterable;
    ExprP filter; // for x in xs if cond; may be null
    Body body;
    Body otherwise; // {% else %}: runs when no item is left
};
struct Set { std::string name; std::string attribute; ExprP value; }; // attribute: {% set ns.attr = v %}
struct Break {};
struct Continue {};
} // namespace stmt

struct Node {
    int line = 0;
    std::variant<stmt::Text, stmt::Output, stmt::If, stmt::For, stmt::Set, stmt::Break, stmt::Continue> node;
};

template <class T>
NodeP makeNode(int line, T node)
{
    auto n = std::make_unique<Node>();
    n->line = line;
    n->node = std::move(node);
    return n;
}

} // namespace tb::text::jinja
