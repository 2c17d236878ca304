#pragma once
// UTF-8 helpers and the Unicode facts the tokenizers need. Properties and
// normalisation come from ICU, never from hand-written tables.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tb::text {

// The byte offset of the first invalid UTF-8 sequence, or npos when `s` is valid.
// Surrogates and overlong forms are invalid, as in Rust's str.
std::size_t firstInvalidUtf8(std::string_view s);
// Decodes the code point at s[i] (s must be valid UTF-8) and advances i.
char32_t nextCodePoint(std::string_view s, std::size_t& i);
void appendUtf8(std::string& out, char32_t c);
// Length in bytes of the UTF-8 sequence starting with lead byte `b`.
inline std::size_t utf8Length(unsigned char b)
{
    return b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
}
// Bytes -> text the way Rust's String::from_utf8_lossy does: each maximal
// invalid subpart becomes one U+FFFD.
std::string utf8Lossy(std::string_view bytes);

enum class NormalForm { NFC, NFD, NFKC, NFKD };
std::string normalize(std::string_view s, NormalForm form);

bool isWhiteSpace(char32_t c);   // the White_Space property (Rust's char::is_whitespace, regex \s)
// s without the White_Space characters at its start (left) and end (right).
std::string stripWhiteSpace(std::string_view s, bool left = true, bool right = true);
bool isNumeric(char32_t c);      // general category Nd, Nl or No (Rust's char::is_numeric)
bool isWordChar(char32_t c);     // regex \w: Alphabetic, M, Nd, Pc, Join_Control
bool isCombiningMark(char32_t c); // general category Mn, Mc or Me
// Full lowercase mapping of one code point, without context (Rust's char::to_lowercase).
void appendLowercase(std::string& out, char32_t c);

} // namespace tb::text
