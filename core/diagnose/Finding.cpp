#include "diagnose/Finding.h"

#include <nlohmann/json.hpp>

#include "common/Errors.h"

namespace tb {

const char* severityName(Severity s)
{
    switch (s) {
    case Severity::Info: return "info";
    case Severity::Warning: return "warning";
    case Severity::Error: return "error";
    }
    return "error";
}

Severity severityFromName(const std::string& name)
{
    if (name == "info") return Severity::Info;
    if (name == "warning") return Severity::Warning;
    return Severity::Error;
}

namespace {

nlohmann::json toJson(const Finding& f)
{
    nlohmann::json details = nlohmann::json::object();
    for (const auto& [k, v] : f.text) details[k] = v;
    for (const auto& [k, v] : f.numbers) {
        // Whole numbers (bytes, counts) print as integers.
        if (v == static_cast<double>(static_cast<long long>(v))) details[k] = static_cast<long long>(v);
        else details[k] = v;
    }
    nlohmann::json j = {{"kind", f.kind},   {"severity", severityName(f.severity)},
                        {"title", f.title}, {"cause", f.cause},
                        {"fix", f.fix},     {"details", details}};
    if (!f.autoFix.empty()) {
        nlohmann::json changes = nlohmann::json::object();
        for (const auto& c : f.autoFix) changes[c.path] = nlohmann::json::parse(c.valueJson, nullptr, false);
        j["auto_fix"] = {{"label", f.autoFixLabel}, {"changes", changes}};
    }
    return j;
}

} // namespace

std::string findingsToJson(const std::vector<Finding>& findings, bool pretty)
{
    nlohmann::json list = nlohmann::json::array();
    for (const auto& f : findings) list.push_back(toJson(f));
    return nlohmann::json{{"findings", list}}.dump(pretty ? 2 : -1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::vector<Finding> findingsFromJson(const std::string& json)
{
    std::vector<Finding> out;
    try {
        const auto doc = nlohmann::json::parse(json);
        for (const auto& j : doc.at("findings")) {
            Finding f;
            f.kind = j.at("kind").get<std::string>();
            f.severity = severityFromName(j.value("severity", "error"));
            f.title = j.value("title", "");
            f.cause = j.value("cause", "");
            f.fix = j.value("fix", "");
            if (j.contains("details")) {
                for (const auto& [k, v] : j.at("details").items()) {
                    if (v.is_number()) f.numbers[k] = v.get<double>();
                    else if (v.is_string()) f.text[k] = v.get<std::string>();
                }
            }
            if (j.contains("auto_fix")) {
                f.autoFixLabel = j["auto_fix"].value("label", "");
                for (const auto& [k, v] : j["auto_fix"].at("changes").items()) f.autoFix.push_back({k, v.dump()});
            }
            out.push_back(std::move(f));
        }
    } catch (const std::exception& e) {
        throw InputError(std::string("stored findings are not valid JSON (") + e.what() + ")");
    }
    return out;
}

std::string findingText(const Finding& f)
{
    std::string out = std::string(severityName(f.severity)) + ": " + f.title + " [" + f.kind + "]\n";
    out += "  cause: " + f.cause + "\n";
    out += "  fix:   " + f.fix + "\n";
    if (!f.autoFix.empty()) {
        out += "  automatic fix (" + f.autoFixLabel + "):";
        for (const auto& c : f.autoFix) out += " " + c.path + " = " + c.valueJson;
        out += "\n";
    }
    return out;
}

bool hasErrors(const std::vector<Finding>& findings)
{
    for (const auto& f : findings) {
        if (f.severity == Severity::Error) return true;
    }
    return false;
}

} // namespace tb
