#include "text/jinja/Lexer.h"

#include <algorithm>
#include <cctype>
#include <cstring>

#include "common/Errors.h"
#include "text/Unicode.h"

namespace tb::text::jinja {
namespace {

bool isSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

// Where the tag whose content starts at `start` closes with `close`, or npos.
// Quotes hide a closing marker in output and statement tags, not in comments.
std::size_t findTagEnd(const std::string& src, std::size_t start, const std::string& close, bool comment)
{
    if (comment) return src.find(close, start);
    char quote = 0;
    for (std::size_t k = start; k + 1 < src.size(); ++k) {
        const char c = src[k];
        if (quote) {
            if (c == '\\') ++k;
            else if (c == quote) quote = 0;
            continue;
        }
        if (c == '\'' || c == '"') quote = c;
        else if (src.compare(k, 2, close) == 0) return k;
    }
    return std::string::npos;
}

// The next "{{", "{%" or "{#" at or after i, or npos.
std::size_t findTagOpen(const std::string& src, std::size_t i)
{
    for (std::size_t k = src.find('{', i); k != std::string::npos; k = src.find('{', k + 1))
        if (k + 1 < src.size() && (src[k + 1] == '{' || src[k + 1] == '%' || src[k + 1] == '#')) return k;
    return std::string::npos;
}

// The tag opening at `open`; `line` is its line. Returns the index after it.
std::size_t readTag(const std::string& src, std::size_t open, int line, const std::string& where, TemplatePart& p)
{
    const char kind = src[open + 1];
    p.kind = kind == '{' ? TemplatePart::Kind::Output : kind == '%' ? TemplatePart::Kind::Statement : TemplatePart::Kind::Comment;
    p.line = line;
    std::size_t start = open + 2;
    if (start < src.size() && src[start] == '-') {
        p.dashLeft = true;
        ++start;
    } else if (start < src.size() && src[start] == '+') {
        p.plusLeft = true;
        ++start;
    }
    const std::string close = kind == '{' ? "}}" : kind == '%' ? "%}" : "#}";
    const std::size_t end = findTagEnd(src, start, close, p.kind == TemplatePart::Kind::Comment);
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
    p.text = src.substr(start, contentEnd - start);
    return end + 2;
}

std::vector<TemplatePart> scanParts(const std::string& src, const std::string& where)
{
    std::vector<TemplatePart> parts;
    std::size_t i = 0;
    int line = 1;
    auto countLines = [&](std::size_t from, std::size_t to) { line += int(std::count(src.begin() + long(from), src.begin() + long(to), '\n')); };
    while (i < src.size()) {
        const std::size_t open = findTagOpen(src, i);
        if (open == std::string::npos) {
            parts.push_back({TemplatePart::Kind::Text, src.substr(i), line});
            break;
        }
        if (open > i) parts.push_back({TemplatePart::Kind::Text, src.substr(i, open - i), line});
        countLines(i, open);
        TemplatePart p{TemplatePart::Kind::Text, "", line};
        const std::size_t after = readTag(src, open, line, where, p);
        countLines(open, after);
        parts.push_back(std::move(p));
        i = after;
    }
    return parts;
}

// Whitespace control on the text between two parts (either may be null: the
// template's start or end).
void controlWhiteSpace(std::string& t, const TemplatePart* prev, const TemplatePart* next)
{
    bool lineStart = prev == nullptr;
    if (prev && prev->dashRight) {
        std::size_t b = 0;
        while (b < t.size() && isSpace(t[b])) ++b;
        t.erase(0, b);
    } else if (prev && prev->kind != TemplatePart::Kind::Output && !prev->plusRight) {
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
    } else if (next && next->kind != TemplatePart::Kind::Output && !next->plusLeft) {
        const std::size_t nl = t.rfind('\n');
        const std::size_t from = nl == std::string::npos ? 0 : nl + 1;
        if (nl != std::string::npos || lineStart) {
            if (t.find_first_not_of(" \t", from) == std::string::npos) t.resize(from);
        }
    }
}

} // namespace

std::vector<TemplatePart> splitTemplate(const std::string& src, const std::string& where)
{
    std::vector<TemplatePart> parts = scanParts(src, where);
    for (std::size_t k = 0; k < parts.size(); ++k) {
        if (parts[k].kind != TemplatePart::Kind::Text) continue;
        controlWhiteSpace(parts[k].text, k > 0 ? &parts[k - 1] : nullptr, k + 1 < parts.size() ? &parts[k + 1] : nullptr);
    }
    return parts;
}

// ------------------------------------------------------------ expression tokens

TokenStream::TokenStream(const std::string& src, int line, const std::string& where) : m_line(line), m_where(where)
{
    std::size_t i = 0;
    while (i < src.size()) {
        const char c = src[i];
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
            ++i;
        } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
            std::size_t j = i;
            while (j < src.size() && (std::isalnum(static_cast<unsigned char>(src[j])) || src[j] == '_')) ++j;
            m_tokens.push_back({Token::Kind::Name, src.substr(i, j - i), {}});
            i = j;
        } else if (std::isdigit(static_cast<unsigned char>(c))) {
            i = lexNumber(src, i);
        } else if (c == '\'' || c == '"') {
            i = lexString(src, i);
        } else {
            i = lexOperator(src, i);
        }
    }
    m_tokens.push_back({Token::Kind::End, "", {}});
}

std::size_t TokenStream::lexNumber(const std::string& src, std::size_t i)
{
    auto digit = [&](std::size_t k) { return std::isdigit(static_cast<unsigned char>(src[k])) != 0; };
    std::size_t j = i;
    bool isFloat = false;
    while (j < src.size() && (digit(j) || src[j] == '_')) ++j;
    if (j + 1 < src.size() && src[j] == '.' && digit(j + 1)) {
        isFloat = true;
        ++j;
        while (j < src.size() && digit(j)) ++j;
    }
    std::string digits = src.substr(i, j - i);
    digits.erase(std::remove(digits.begin(), digits.end(), '_'), digits.end());
    Token t{Token::Kind::Number, digits, {}};
    if (isFloat) t.number = std::stod(digits);
    else t.number = std::stoll(digits);
    m_tokens.push_back(t);
    return j;
}

std::size_t TokenStream::lexString(const std::string& src, std::size_t i)
{
    const char quote = src[i];
    std::string s;
    std::size_t j = i + 1;
    bool closed = false;
    while (j < src.size()) {
        const char d = src[j];
        if (d == quote) {
            closed = true;
            ++j;
            break;
        }
        if (d != '\\' || j + 1 >= src.size()) {
            s += d;
            ++j;
            continue;
        }
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
            appendUtf8(s, char32_t(std::stoul(src.substr(j, n), nullptr, 16)));
            j += n;
            break;
        }
        default:
            s += '\\';
            s += e;
        }
    }
    if (!closed) fail("a string literal is not closed");
    m_tokens.push_back({Token::Kind::String, s, {}});
    return j;
}

std::size_t TokenStream::lexOperator(const std::string& src, std::size_t i)
{
    static const char* ops[] = {"==", "!=", "<=", ">=", "//", "**", "<", ">", "+", "-", "*", "/", "%", "~", "|",
                                ".",  ",",  ":",  "(",  ")",  "[",  "]", "{", "}", "="};
    for (const char* op : ops) {
        const std::size_t n = std::strlen(op);
        if (src.compare(i, n, op) == 0) {
            m_tokens.push_back({Token::Kind::Operator, op, {}});
            return i + n;
        }
    }
    fail("the character '" + std::string(1, src[i]) + "' is not part of an expression");
}

void TokenStream::fail(const std::string& why) const
{
    throw InputError(m_where + " line " + std::to_string(m_line) + ": " + why);
}

const Token& TokenStream::peek(std::size_t ahead) const { return m_tokens[std::min(m_pos + ahead, m_tokens.size() - 1)]; }

Token TokenStream::next() { return m_tokens[std::min(m_pos++, m_tokens.size() - 1)]; }

bool TokenStream::isOp(const char* op, std::size_t ahead) const
{
    return peek(ahead).kind == Token::Kind::Operator && peek(ahead).text == op;
}

bool TokenStream::isName(const char* name, std::size_t ahead) const
{
    return peek(ahead).kind == Token::Kind::Name && peek(ahead).text == name;
}

void TokenStream::expectOp(const char* op)
{
    if (!isOp(op)) fail(std::string("expected '") + op + "'" + (atEnd() ? " at the end" : " before '" + peek().text + "'"));
    ++m_pos;
}

std::string TokenStream::expectName()
{
    if (peek().kind != Token::Kind::Name)
        fail("expected a name" + (atEnd() ? std::string(" at the end") : " before '" + peek().text + "'"));
    return next().text;
}

} // namespace tb::text::jinja
