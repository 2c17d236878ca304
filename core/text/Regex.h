#pragma once
// Regular expressions with the engine Hugging Face's tokenizers uses:
// Oniguruma, Ruby-style syntax (ONIG_SYNTAX_ONIGURUMA), UTF-8.

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tb::text {

class Regex final {
public:
    // Throws InputError naming `where` and the (clipped) pattern when it does not compile.
    Regex(const std::string& pattern, const std::string& where);
    ~Regex();
    Regex(const Regex&) = delete;
    Regex& operator=(const Regex&) = delete;

    // Successive non-overlapping matches [start, end) in bytes, as the onig
    // crate's find_iter yields them: an empty match right where the previous
    // match ended is skipped by one character.
    std::vector<std::pair<std::size_t, std::size_t>> findAll(std::string_view s) const;

private:
    struct Impl;
    std::unique_ptr<Impl> m;
};

// The text of a pattern for messages: at most 80 characters.
std::string clipForMessage(std::string_view s, std::size_t max = 80);

} // namespace tb::text
