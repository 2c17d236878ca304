#include "text/ChatRecords.h"

#include <utility>

#include "text/Regex.h"

namespace tb::text {
namespace {
using ojson = nlohmann::ordered_json;
} // namespace

std::string conversationMessages(const ojson& record, ojson& messages)
{
    if (!record.is_object()) return "not a JSON object";
    const auto text = [&](const ojson& in, const char* key, bool required, std::string& value) -> std::string {
        const auto it = in.find(key);
        if (it == in.end() || it->is_null()) return required ? std::string("no \"") + key + "\"" : std::string();
        if (!it->is_string()) return std::string("\"") + key + "\" is not a string";
        value = it->get<std::string>();
        return {};
    };
    const auto message = [](const char* role, std::string content) { return ojson{{"role", role}, {"content", std::move(content)}}; };
    if (const auto it = record.find("messages"); it != record.end()) {
        if (!it->is_array()) return "\"messages\" is not a list";
        messages = *it;
        return {};
    }
    messages = ojson::array();
    std::string system;
    if (record.contains("conversations")) {
        const ojson& turns = record["conversations"];
        if (!turns.is_array()) return "\"conversations\" is not a list";
        if (auto why = text(record, "system", false, system); !why.empty()) return why;
        if (!system.empty()) messages.push_back(message("system", system));
        for (std::size_t k = 0; k < turns.size(); ++k) {
            const ojson& t = turns[k];
            const std::string n = "turn " + std::to_string(k + 1);
            if (!t.is_object()) return n + " of \"conversations\" is not an object";
            std::string from, value;
            if (auto why = text(t, "from", true, from); !why.empty()) return n + ": " + why;
            if (auto why = text(t, "value", true, value); !why.empty()) return n + ": " + why;
            const char* role = from == "human" ? "user" : from == "gpt" ? "assistant" : from == "system" ? "system" : nullptr;
            if (!role) return n + " is from \"" + clipForMessage(from, 40) + "\" (human, gpt or system)";
            messages.push_back(message(role, value));
        }
        return {};
    }
    if (record.contains("instruction") || record.contains("output")) {
        std::string instruction, input, output;
        if (auto why = text(record, "instruction", true, instruction); !why.empty()) return why;
        if (auto why = text(record, "input", false, input); !why.empty()) return why;
        if (auto why = text(record, "output", true, output); !why.empty()) return why + " (the answer to train on)";
        if (auto why = text(record, "system", false, system); !why.empty()) return why;
        if (!system.empty()) messages.push_back(message("system", system));
        if (const auto h = record.find("history"); h != record.end() && !h->is_null()) {
            if (!h->is_array()) return "\"history\" is not a list";
            for (std::size_t k = 0; k < h->size(); ++k) {
                const ojson& pair = (*h)[k];
                if (!pair.is_array() || pair.size() != 2 || !pair[0].is_string() || !pair[1].is_string())
                    return "\"history\" entry " + std::to_string(k + 1) + " is not a [user, assistant] pair of strings";
                messages.push_back(message("user", pair[0].get<std::string>()));
                messages.push_back(message("assistant", pair[1].get<std::string>()));
            }
        }
        // The non-empty ones of the two, joined by a newline (LLaMA-Factory's reading).
        const std::string user = instruction.empty() ? input : input.empty() ? instruction : instruction + "\n" + input;
        messages.push_back(message("user", user));
        messages.push_back(message("assistant", output));
        return {};
    }
    return "no \"messages\" list (nor ShareGPT's \"conversations\", nor Alpaca's \"instruction\" and \"output\")";
}

} // namespace tb::text
