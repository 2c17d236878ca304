#include "text/Unicode.h"

#include <unicode/uchar.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>

#include <stdexcept>
#include <vector>

namespace tb::text {
namespace {

// The length of the UTF-8 sequence a non-ASCII lead byte starts (0: not a lead
// byte) and the range its second byte must be in (no overlong forms, no surrogates).
std::size_t leadByte(unsigned char b, unsigned char& lo, unsigned char& hi)
{
    lo = 0x80;
    hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) return 2;
    if (b == 0xE0) { lo = 0xA0; return 3; }
    if (b >= 0xE1 && b <= 0xEC) return 3;
    if (b == 0xED) { hi = 0x9F; return 3; }
    if (b >= 0xEE && b <= 0xEF) return 3;
    if (b == 0xF0) { lo = 0x90; return 4; }
    if (b >= 0xF1 && b <= 0xF3) return 4;
    if (b == 0xF4) { hi = 0x8F; return 4; }
    return 0;
}

} // namespace

// The UTF-8 sequence at p[i] (p[i] >= 0x80): how many bytes it takes, and
// whether they form a whole character. A broken one takes its maximal valid
// subpart (at least one byte), which Rust's from_utf8_lossy replaces by one U+FFFD.
static std::size_t sequenceAt(const unsigned char* p, std::size_t n, std::size_t i, bool& whole)
{
    unsigned char lo = 0x80, hi = 0xBF;
    const std::size_t len = leadByte(p[i], lo, hi);
    whole = false;
    if (len == 0) return 1;
    std::size_t k = 1;
    while (k < len && i + k < n) {
        const unsigned char c = p[i + k];
        if (c < (k == 1 ? lo : 0x80) || c > (k == 1 ? hi : 0xBF)) break;
        ++k;
    }
    whole = k == len;
    return k;
}

std::size_t firstInvalidUtf8(std::string_view s)
{
    const auto* p = reinterpret_cast<const unsigned char*>(s.data());
    std::size_t i = 0;
    while (i < s.size()) {
        if (p[i] < 0x80) {
            ++i;
            continue;
        }
        bool whole = false;
        const std::size_t k = sequenceAt(p, s.size(), i, whole);
        if (!whole) return i;
        i += k;
    }
    return std::string_view::npos;
}

char32_t nextCodePoint(std::string_view s, std::size_t& i)
{
    const auto* p = reinterpret_cast<const unsigned char*>(s.data());
    const unsigned char b = p[i];
    if (b < 0x80) {
        ++i;
        return b;
    }
    if (b < 0xE0) {
        const char32_t c = (char32_t(b & 0x1F) << 6) | (p[i + 1] & 0x3F);
        i += 2;
        return c;
    }
    if (b < 0xF0) {
        const char32_t c = (char32_t(b & 0x0F) << 12) | (char32_t(p[i + 1] & 0x3F) << 6) | (p[i + 2] & 0x3F);
        i += 3;
        return c;
    }
    const char32_t c = (char32_t(b & 0x07) << 18) | (char32_t(p[i + 1] & 0x3F) << 12) |
                       (char32_t(p[i + 2] & 0x3F) << 6) | (p[i + 3] & 0x3F);
    i += 4;
    return c;
}

void appendUtf8(std::string& out, char32_t c)
{
    if (c < 0x80) {
        out.push_back(char(c));
    } else if (c < 0x800) {
        out.push_back(char(0xC0 | (c >> 6)));
        out.push_back(char(0x80 | (c & 0x3F)));
    } else if (c < 0x10000) {
        out.push_back(char(0xE0 | (c >> 12)));
        out.push_back(char(0x80 | ((c >> 6) & 0x3F)));
        out.push_back(char(0x80 | (c & 0x3F)));
    } else {
        out.push_back(char(0xF0 | (c >> 18)));
        out.push_back(char(0x80 | ((c >> 12) & 0x3F)));
        out.push_back(char(0x80 | ((c >> 6) & 0x3F)));
        out.push_back(char(0x80 | (c & 0x3F)));
    }
}

std::string utf8Lossy(std::string_view s)
{
    std::string out;
    out.reserve(s.size());
    const auto* p = reinterpret_cast<const unsigned char*>(s.data());
    std::size_t i = 0;
    while (i < s.size()) {
        if (p[i] < 0x80) {
            out.push_back(s[i++]);
            continue;
        }
        bool whole = false;
        const std::size_t k = sequenceAt(p, s.size(), i, whole);
        if (whole) out.append(s.substr(i, k));
        else out += "\xEF\xBF\xBD";
        i += k;
    }
    return out;
}

std::string normalize(std::string_view s, NormalForm form)
{
    bool ascii = true;
    for (const char c : s)
        if (static_cast<unsigned char>(c) >= 0x80) {
            ascii = false;
            break;
        }
    if (ascii) return std::string(s); // every normal form leaves ASCII as it is
    UErrorCode err = U_ZERO_ERROR;
    const UNormalizer2* n = nullptr;
    switch (form) {
    case NormalForm::NFC: n = unorm2_getNFCInstance(&err); break;
    case NormalForm::NFD: n = unorm2_getNFDInstance(&err); break;
    case NormalForm::NFKC: n = unorm2_getNFKCInstance(&err); break;
    case NormalForm::NFKD: n = unorm2_getNFKDInstance(&err); break;
    }
    if (U_FAILURE(err)) throw std::runtime_error(std::string("ICU normaliser unavailable: ") + u_errorName(err));
    std::vector<UChar> in(s.size() + 1);
    int32_t inLen = 0;
    u_strFromUTF8(in.data(), int32_t(in.size()), &inLen, s.data(), int32_t(s.size()), &err);
    if (U_FAILURE(err)) throw std::runtime_error(std::string("ICU UTF-8 conversion failed: ") + u_errorName(err));
    if (unorm2_isNormalized(n, in.data(), inLen, &err) && U_SUCCESS(err)) return std::string(s);
    err = U_ZERO_ERROR;
    std::vector<UChar> norm(std::size_t(inLen) * 4 + 16);
    int32_t normLen = unorm2_normalize(n, in.data(), inLen, norm.data(), int32_t(norm.size()), &err);
    if (err == U_BUFFER_OVERFLOW_ERROR) {
        err = U_ZERO_ERROR;
        norm.resize(std::size_t(normLen) + 1);
        normLen = unorm2_normalize(n, in.data(), inLen, norm.data(), int32_t(norm.size()), &err);
    }
    if (U_FAILURE(err)) throw std::runtime_error(std::string("ICU normalisation failed: ") + u_errorName(err));
    std::string out(std::size_t(normLen) * 3 + 4, '\0');
    int32_t outLen = 0;
    u_strToUTF8(out.data(), int32_t(out.size()), &outLen, norm.data(), normLen, &err);
    if (U_FAILURE(err)) throw std::runtime_error(std::string("ICU UTF-8 conversion failed: ") + u_errorName(err));
    out.resize(std::size_t(outLen));
    return out;
}

bool isWhiteSpace(char32_t c) { return u_hasBinaryProperty(UChar32(c), UCHAR_WHITE_SPACE); }

std::string stripWhiteSpace(std::string_view s, bool left, bool right)
{
    std::size_t b = 0, e = s.size();
    if (left)
        while (b < e) {
            std::size_t i = b;
            if (!isWhiteSpace(nextCodePoint(s, i))) break;
            b = i;
        }
    if (right)
        while (e > b) {
            std::size_t st = e - 1;
            while (st > b && (static_cast<unsigned char>(s[st]) & 0xC0) == 0x80) --st;
            std::size_t i = st;
            if (!isWhiteSpace(nextCodePoint(s, i))) break;
            e = st;
        }
    return std::string(s.substr(b, e - b));
}

bool isNumeric(char32_t c)
{
    const auto t = u_charType(UChar32(c));
    return t == U_DECIMAL_DIGIT_NUMBER || t == U_LETTER_NUMBER || t == U_OTHER_NUMBER;
}

bool isCombiningMark(char32_t c)
{
    const auto t = u_charType(UChar32(c));
    return t == U_NON_SPACING_MARK || t == U_COMBINING_SPACING_MARK || t == U_ENCLOSING_MARK;
}

bool isWordChar(char32_t c)
{
    const auto t = u_charType(UChar32(c));
    return u_hasBinaryProperty(UChar32(c), UCHAR_ALPHABETIC) || t == U_NON_SPACING_MARK ||
           t == U_COMBINING_SPACING_MARK || t == U_ENCLOSING_MARK || t == U_DECIMAL_DIGIT_NUMBER ||
           t == U_CONNECTOR_PUNCTUATION || u_hasBinaryProperty(UChar32(c), UCHAR_JOIN_CONTROL);
}

void appendLowercase(std::string& out, char32_t c)
{
    if (c < 0x80) {
        out.push_back(char(c >= 'A' && c <= 'Z' ? c + 32 : c));
        return;
    }
    UChar src[2];
    int32_t srcLen = 0;
    U16_APPEND_UNSAFE(src, srcLen, UChar32(c));
    UChar dst[8];
    UErrorCode err = U_ZERO_ERROR;
    const int32_t dstLen = u_strToLower(dst, 8, src, srcLen, "", &err);
    if (U_FAILURE(err)) {
        appendUtf8(out, c);
        return;
    }
    for (int32_t i = 0; i < dstLen;) {
        UChar32 d;
        U16_NEXT_UNSAFE(dst, i, d);
        appendUtf8(out, char32_t(d));
    }
}

} // namespace tb::text
