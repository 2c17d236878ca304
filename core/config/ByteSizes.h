#pragma once
// Sizes people write: "32.00 MiB", "1.5 GB", "512 bytes" (PyTorch's messages,
// a user's --budget), and a budget given on the command line or in a dialog.

#include <cstdint>
#include <optional>
#include <string>

namespace tb {

// "32.00 MiB", "1.5 GB", "832.00 KiB", "512 bytes" -> bytes (KiB binary, KB
// decimal); nullopt otherwise.
std::optional<std::int64_t> parseByteSize(const std::string& text);

// A memory budget: whole bytes ("4294967296") or a size with its unit
// ("4 GiB", "512MiB"). InputError naming `option` for anything else, or a
// size that is not above 0.
std::int64_t budgetBytes(const std::string& text, const std::string& option = "--budget");

} // namespace tb
