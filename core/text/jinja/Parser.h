#pragma once
// The template's statements: text, {{ output }}, if/elif/else, for (with a
// filter, else, break and continue), set (a name or a namespace attribute).
// Anything else is an InputError naming the construct and its line.

#include <string>

#include "text/jinja/Syntax.h"

namespace tb::text::jinja {

Body parseTemplate(const std::string& source, const std::string& where);

} // namespace tb::text::jinja
