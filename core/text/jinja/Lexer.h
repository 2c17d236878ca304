#pragma once
// Lexing: the template source cut into text and tags (with Jinja's
// whitespace control as transformers configures it), and one tag's content
// cut into expression tokens.

#include <cstddef>
#include <string>
#include <vector>

#include "text/jinja/Value.h"

namespace tb::text::jinja {

struct Token {
    enum class Kind { Name, Number, String, Operator, End } kind;
    std::string text;
    json number;
};

// The tokens of one tag's content and a cursor over them; its messages name
// the template and the tag's line.
class TokenStream {
public:
    TokenStream(const std::string& src, int line, const std::string& where);

    [[noreturn]] void fail(const std::string& why) const;
    const Token& peek(std::size_t ahead = 0) const;
    Token next();
    bool isOp(const char* op, std::size_t ahead = 0) const;
    bool isName(const char* name, std::size_t ahead = 0) const;
    bool atEnd() const { return peek().kind == Token::Kind::End; }
    void expectOp(const char* op);
    std::string expectName();
    int line() const { return m_line; }

private:
    std::size_t lexNumber(const std::string& src, std::size_t i);
    std::size_t lexString(const std::string& src, std::size_t i);
    std::size_t lexOperator(const std::string& src, std::size_t i);

    std::vector<Token> m_tokens;
    std::size_t m_pos = 0;
    int m_line;
    std::string m_where;
};

// A piece of the template: text, {{ output }}, {% statement %} or {# comment #}.
struct TemplatePart {
    enum class Kind { Text, Output, Statement, Comment } kind;
    std::string text; // the text, or the tag's content without its delimiters and markers
    int line = 0;
    bool dashLeft = false, dashRight = false, plusLeft = false, plusRight = false; // {%- -%} {%+ +%}
};

// The source cut into parts, whitespace control applied: "-" strips all
// white space on its side; trim_blocks drops the first newline after a block
// or comment tag; lstrip_blocks drops spaces and tabs between a line's start
// and a block or comment tag. Throws InputError for a tag left open.
std::vector<TemplatePart> splitTemplate(const std::string& src, const std::string& where);

} // namespace tb::text::jinja
