#pragma once
// Renders a parsed template with the given variables, within the limits of
// Limits.h. Errors are InputErrors naming the template and the line;
// raise_exception's carries the template's own message.

#include <string>

#include "text/jinja/Syntax.h"

namespace tb::text::jinja {

std::string render(const Body& body, const json& context, const std::string& where);

} // namespace tb::text::jinja
