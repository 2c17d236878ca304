#pragma once
// Chat data as people bring it, read into one list of messages.

#include <string>

#include <nlohmann/json.hpp>

namespace tb::text {

// A chat record's messages, in any of the three shapes people bring:
//   {"messages": [{"role", "content"}, ...]}   (OpenAI's, Hugging Face's)
//   ShareGPT: {"conversations": [{"from", "value"}, ...], "system"?}, the
//     roles human, gpt and system (user, assistant and system);
//   Alpaca: {"instruction", "input"?, "output", "system"?, "history"?}: the
//     user's turn is the instruction and the input (those not empty) joined by a newline, the
//     assistant's the output, after "history"'s [user, assistant] pairs.
// Returns why the record is none of them (empty when `messages` is filled).
std::string conversationMessages(const nlohmann::ordered_json& record, nlohmann::ordered_json& messages);

} // namespace tb::text
