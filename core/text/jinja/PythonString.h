#pragma once
// Python's str methods on UTF-8 text, as templates call them ('a b'.split(),
// s.strip('x')) and as the filters of the same names apply them.

#include <optional>
#include <string>

#include "text/jinja/Value.h"

namespace tb::text::jinja {

// strip/lstrip/rstrip: `chars` (null: Unicode white space) dropped from the chosen ends.
std::string pyStrip(const std::string& s, const std::string* chars, bool left, bool right);
// split/rsplit into a JSON list; no separator splits on runs of white space.
// maxsplit < 0 splits everywhere. Throws EvalError for an empty separator.
json pySplit(const std::string& s, const std::optional<std::string>& sep, long long maxsplit, bool fromRight);
std::string pyUpper(const std::string& s); // ASCII letters only; other code points pass unchanged
std::string pyLower(const std::string& s);
// The first letter up and the rest down (ASCII letters); title: in each word.
std::string pyCapitalize(const std::string& s);
std::string pyTitle(const std::string& s);
std::string pyReplace(const std::string& s, const std::string& from, const std::string& to);
long long pyFind(const std::string& s, const std::string& needle); // code point index, or -1

} // namespace tb::text::jinja
