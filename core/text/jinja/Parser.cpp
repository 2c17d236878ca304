#include "text/jinja/Parser.h"

#include <algorithm>
#include <cctype>

#include "common/Errors.h"
#include "text/Regex.h"
#include "text/jinja/ExpressionParser.h"
#include "text/jinja/Lexer.h"
#include "text/jinja/Limits.h"

namespace tb::text::jinja {
namespace {

bool isWordByte(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

std::size_t skipSpace(const std::string& s)
{
    std::size_t b = 0;
    while (b < s.size() && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
    return b;
}

std::string firstWord(const std::string& s)
{
    const std::size_t b = skipSpace(s);
    std::size_t e = b;
    while (e < s.size() && isWordByte(s[e])) ++e;
    return s.substr(b, e - b);
}

std::string afterFirstWord(const std::string& s)
{
    std::size_t b = skipSpace(s);
    while (b < s.size() && isWordByte(s[b])) ++b;
    return s.substr(b);
}

class TemplateParser {
public:
    TemplateParser(std::vector<TemplatePart> parts, std::string where) : m_parts(std::move(parts)), m_where(std::move(where)) {}

    Body parseAll()
    {
        std::string end;
        return parseBody({}, end, 0);
    }

private:
    [[noreturn]] void fail(int line, const std::string& why) const
    {
        throw InputError(m_where + " line " + std::to_string(line) + ": " + why);
    }

    Body parseBody(const std::vector<std::string>& ends, std::string& found, int depth);
    NodeP parseOutput(const TemplatePart& p);
    NodeP parseStatement(const TemplatePart& p, const std::string& word, int depth);
    NodeP parseIf(const TemplatePart& p, int depth);
    NodeP parseFor(const TemplatePart& p, int depth);
    NodeP parseSet(const TemplatePart& p);

    std::vector<TemplatePart> m_parts;
    std::size_t m_pos = 0;
    std::string m_where;
};

// Parses until one of `ends` (block keywords); `found` receives which.
Body TemplateParser::parseBody(const std::vector<std::string>& ends, std::string& found, int depth)
{
    if (depth > kMaxDepth)
        fail(m_parts.empty() ? 0 : m_parts[std::min(m_pos, m_parts.size() - 1)].line,
             "blocks are nested deeper than " + std::to_string(kMaxDepth));
    Body body;
    while (m_pos < m_parts.size()) {
        const TemplatePart& p = m_parts[m_pos];
        if (p.kind == TemplatePart::Kind::Text) {
            if (!p.text.empty()) body.push_back(makeNode(p.line, stmt::Text{p.text}));
            ++m_pos;
            continue;
        }
        if (p.kind == TemplatePart::Kind::Comment) {
            ++m_pos;
            continue;
        }
        if (p.kind == TemplatePart::Kind::Output) {
            body.push_back(parseOutput(p));
            ++m_pos;
            continue;
        }
        const std::string word = firstWord(p.text);
        if (std::find(ends.begin(), ends.end(), word) != ends.end()) {
            found = word;
            return body;
        }
        ++m_pos;
        body.push_back(parseStatement(p, word, depth));
    }
    if (!ends.empty()) fail(m_parts.empty() ? 0 : m_parts.back().line, "the template ends before {% " + ends.back() + " %}");
    return body;
}

NodeP TemplateParser::parseOutput(const TemplatePart& p)
{
    TokenStream tokens(p.text, p.line, m_where);
    ExpressionParser ep(tokens);
    auto value = ep.expression();
    if (!tokens.atEnd()) tokens.fail("unexpected '" + tokens.peek().text + "' in {{ }}");
    return makeNode(p.line, stmt::Output{std::move(value)});
}

NodeP TemplateParser::parseStatement(const TemplatePart& p, const std::string& word, int depth)
{
    if (word == "if") return parseIf(p, depth);
    if (word == "for") return parseFor(p, depth);
    if (word == "set") return parseSet(p);
    if (word == "break") return makeNode(p.line, stmt::Break{});
    if (word == "continue") return makeNode(p.line, stmt::Continue{});
    if (word == "endif" || word == "endfor" || word == "elif" || word == "else")
        fail(p.line, "{% " + word + " %} without its opening block");
    fail(p.line, "{% " + clipForMessage(word.empty() ? p.text : word, 40) +
                     " %} is not supported (supported: if/elif/else, for with loop variables, set, break, continue)");
}

NodeP TemplateParser::parseIf(const TemplatePart& p, int depth)
{
    stmt::If n;
    std::string cond = afterFirstWord(p.text);
    int line = p.line;
    while (true) {
        TokenStream tokens(cond, line, m_where);
        ExpressionParser ep(tokens);
        auto e = ep.expression();
        if (!tokens.atEnd()) tokens.fail("unexpected '" + tokens.peek().text + "' in the condition");
        std::string found;
        Body b = parseBody({"elif", "else", "endif"}, found, depth + 1);
        n.branches.emplace_back(std::move(e), std::move(b));
        const TemplatePart& end = m_parts[m_pos++];
        if (found == "elif") {
            cond = afterFirstWord(end.text);
            line = end.line;
            continue;
        }
        if (found == "else") {
            std::string endif;
            n.otherwise = parseBody({"endif"}, endif, depth + 1);
            ++m_pos;
        }
        return makeNode(p.line, std::move(n));
    }
}

NodeP TemplateParser::parseFor(const TemplatePart& p, int depth)
{
    stmt::For n;
    TokenStream tokens(afterFirstWord(p.text), p.line, m_where);
    n.targets.push_back(tokens.expectName());
    while (tokens.isOp(",")) {
        tokens.next();
        n.targets.push_back(tokens.expectName());
    }
    if (n.targets.size() > 2) tokens.fail("a for loop takes one or two names");
    if (!tokens.isName("in")) tokens.fail("expected 'in' in the for loop");
    tokens.next();
    ExpressionParser ep(tokens);
    n.iterable = ep.orExpression();
    if (tokens.isName("if")) {
        tokens.next();
        n.filter = ep.expression();
    }
    if (tokens.isName("recursive")) tokens.fail("recursive loops are not supported");
    if (!tokens.atEnd()) tokens.fail("unexpected '" + tokens.peek().text + "' in the for loop");
    std::string found;
    n.body = parseBody({"else", "endfor"}, found, depth + 1);
    ++m_pos;
    if (found == "else") {
        std::string endfor;
        n.otherwise = parseBody({"endfor"}, endfor, depth + 1);
        ++m_pos;
    }
    return makeNode(p.line, std::move(n));
}

NodeP TemplateParser::parseSet(const TemplatePart& p)
{
    stmt::Set n;
    TokenStream tokens(afterFirstWord(p.text), p.line, m_where);
    n.name = tokens.expectName();
    if (tokens.isOp(".")) {
        tokens.next();
        n.attribute = tokens.expectName();
    }
    if (tokens.isOp(",")) tokens.fail("setting several names at once is not supported");
    if (!tokens.isOp("=")) tokens.fail("{% set NAME %}...{% endset %} blocks are not supported; use {% set NAME = value %}");
    tokens.next();
    ExpressionParser ep(tokens);
    n.value = ep.expression();
    if (!tokens.atEnd()) tokens.fail("unexpected '" + tokens.peek().text + "' in {% set %}");
    return makeNode(p.line, std::move(n));
}

} // namespace

Body parseTemplate(const std::string& source, const std::string& where)
{
    TemplateParser parser(splitTemplate(source, where), where);
    return parser.parseAll();
}

} // namespace tb::text::jinja
