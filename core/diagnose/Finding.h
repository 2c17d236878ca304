#pragma once
// What the diagnostics found: one problem (or notice) with its cause and fix.
// Preflight rules, the device audit and the error explainer all answer in
// findings, and the store keeps a run's findings with the run.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tb {

enum class Severity { Info, Warning, Error };
const char* severityName(Severity s); // "info" | "warning" | "error"
Severity severityFromName(const std::string& name); // unknown names: Error

// One config field set to a value (compact JSON), e.g. {"train.precision", "\"fp16\""}.
struct ConfigChange {
    std::string path;
    std::string valueJson;
};

struct Finding {
    std::string kind; // bf16_unsupported, cuda_oom, ...
    Severity severity = Severity::Error;
    std::string title;
    std::string cause;
    std::string fix;
    // Facts extracted or computed, shown as they are: text, and numbers kept
    // as numbers in JSON (requested_bytes, devices, ...).
    std::map<std::string, std::string> text;
    std::map<std::string, double> numbers;
    // The automatic fix, where one exists: edits to the config.
    std::vector<ConfigChange> autoFix;
    std::string autoFixLabel; // "Use fp16 with loss scaling"
};

// {"findings": [{"kind", "severity", "title", "cause", "fix", "details": {...}, "auto_fix": {...}}]}
std::string findingsToJson(const std::vector<Finding>& findings, bool pretty = true);
// The reverse (for findings stored with a run). Throws InputError on bad JSON.
std::vector<Finding> findingsFromJson(const std::string& json);
// "error: Out of GPU memory" plus cause and fix, indented, for terminals.
std::string findingText(const Finding& finding);
// True when any finding is an error.
bool hasErrors(const std::vector<Finding>& findings);

} // namespace tb
