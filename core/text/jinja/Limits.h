#pragma once
// The bounds a template and its rendering stay within, whatever the input.

#include <cstddef>

namespace tb::text::jinja {

constexpr int kMaxDepth = 64;                       // nested blocks and expressions
constexpr std::size_t kMaxOutput = 64u << 20;       // the rendered text, and a string repeated with '*'
constexpr std::size_t kMaxIterations = 10'000'000; // loop iterations in a render, and range()'s length

} // namespace tb::text::jinja
