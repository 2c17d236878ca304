#include "diagnose/ErrorExplainer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <regex>

#include <nlohmann/json.hpp>

#include "common/ByteSize.h"
#include "common/Errors.h"

namespace tb {

namespace {

constexpr std::size_t kMaxLine = 2000;     // and at most this much of a line
constexpr int kWindowLines = 4;            // a message may wrap over this many lines

std::string lower(std::string s)
{
    for (auto& c : s) {
        if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    }
    return s;
}

// Lines of the text with terminal colours, carriage-return progress bars and
// control characters removed, each at most kMaxLine long.
std::vector<std::string> cleanLines(const std::string& raw)
{
    const std::size_t start = raw.size() > kExplainMaxBytes ? raw.size() - kExplainMaxBytes : 0;
    std::vector<std::string> lines(1);
    auto push = [&](char c) {
        if (lines.back().size() < kMaxLine) lines.back().push_back(c);
    };
    for (std::size_t i = start; i < raw.size(); ++i) {
        const auto c = static_cast<unsigned char>(raw[i]);
        if (c == 0x1b) { // ESC: CSI "ESC [ ... final", OSC "ESC ] ... BEL|ESC \", else one more byte
            if (i + 1 < raw.size() && raw[i + 1] == '[') {
                i += 2;
                while (i < raw.size() && !(raw[i] >= 0x40 && raw[i] <= 0x7e)) ++i;
            } else if (i + 1 < raw.size() && raw[i + 1] == ']') {
                i += 2;
                while (i < raw.size() && raw[i] != '\a' && !(raw[i] == 0x1b && i + 1 < raw.size() && raw[i + 1] == '\\')) ++i;
                if (i < raw.size() && raw[i] == 0x1b) ++i;
            } else {
                ++i;
            }
            continue;
        }
        if (c == '\n' || c == '\r') {
            if (!lines.back().empty()) lines.emplace_back();
            continue;
        }
        if (c < 0x20 || c == 0x7f) {
            push(' ');
            continue;
        }
        push(static_cast<char>(c));
    }
    if (lines.back().empty()) lines.pop_back();
    return lines;
}

// A line with its successors, for messages that wrap.
std::string window(const std::vector<std::string>& lines, std::size_t at)
{
    std::string out;
    for (std::size_t i = at; i < lines.size() && i < at + kWindowLines && out.size() < kMaxLine; ++i) {
        if (!out.empty()) out += ' ';
        out += lines[i];
    }
    return out;
}

std::optional<std::string> firstGroup(const std::string& text, const std::regex& re, int group = 1)
{
    std::smatch m;
    if (std::regex_search(text, m, re) && m[group].matched) return m[group].str();
    return std::nullopt;
}

// "wrapper_CUDA__index_select" -> "index_select"; "wrapper_addmm" -> "addmm".
std::string operatorName(std::string op)
{
    for (const char* prefix : {"wrapper_", "cuda_", "cpu_", "_"}) {
        const std::size_t n = std::char_traits<char>::length(prefix);
        while (op.size() > n && lower(op.substr(0, n)) == prefix) op.erase(0, n);
    }
    return op;
}

// Bounded repetitions keep the search linear on long runs of digits.
const std::string kSize = "([0-9]{1,12}(?:\\.[0-9]{1,6})? ?(?:[kmgtp]i?b|bytes?|b))";

// Device facts of a mismatch message: the devices, the argument and the operator.
void deviceFacts(const std::string& w, Finding& f)
{
    constexpr auto icase = std::regex::ECMAScript | std::regex::icase;
    static const std::regex twoDevices("found at least two devices,? ([a-z0-9:]{1,24}) and ([a-z0-9:]{1,24})", icase);
    static const std::regex gotOn("but got (\\w{1,80}) is on ([a-z0-9:]{1,24}),? different from other tensors on ([a-z0-9:]{1,24})", icase);
    static const std::regex checking("when checking arg(?:ument)?(?: for argument (\\w{1,80}))? in method (\\w{1,80})", icase);
    static const std::regex deviceType(
        "expected object of device type (\\w{1,80}) but got device type (\\w{1,80}) for argument #\\d{1,3} '(\\w{1,80})'(?: in call to (\\w{1,80}))?", icase);
    static const std::regex argumentOn(
        "tensor for argument #\\d{1,3} '(\\w{1,80})' is on (\\w{1,80}),? but expected it to be on (\\w{1,80})(?: \\(while checking arguments for (\\w{1,80})\\))?", icase);
    static const std::regex inputWeight("input type \\(torch\\.(cuda\\.)?\\w{0,24}tensor\\) and weight type \\(torch\\.(cuda\\.)?\\w{0,24}tensor\\)", icase);
    static const std::regex expectedGot("expected device ([a-z0-9:]{1,24}) but got ([a-z0-9:]{1,24})", icase);
    static const std::regex gradient("function (\\w{1,80}) returned an invalid gradient at index (\\d{1,6})", icase);
    static const std::regex indexed("indices should be either on cpu or on the same device as the indexed tensor \\(([a-z0-9:]{1,24})\\)", icase);
    std::vector<std::string> devices;
    std::smatch m;
    if (std::regex_search(w, m, twoDevices)) devices = {m[1].str(), m[2].str()};
    else if (std::regex_search(w, m, gotOn)) {
        f.text["argument"] = m[1].str();
        devices = {m[2].str(), m[3].str()};
    } else if (std::regex_search(w, m, deviceType)) {
        devices = {m[1].str(), m[2].str()};
        f.text["argument"] = m[3].str();
        if (m[4].matched) f.text["operator"] = operatorName(m[4].str());
    } else if (std::regex_search(w, m, argumentOn)) {
        f.text["argument"] = m[1].str();
        devices = {m[2].str(), m[3].str()};
        if (m[4].matched) f.text["operator"] = operatorName(m[4].str());
    } else if (std::regex_search(w, m, inputWeight)) {
        devices = {m[1].matched ? "cuda" : "cpu", m[2].matched ? "cuda" : "cpu"};
        f.text["argument"] = "input, weight";
    } else if (std::regex_search(w, m, expectedGot)) {
        devices = {m[1].str(), m[2].str()};
    } else if (std::regex_search(w, m, indexed)) {
        devices = {"cpu", m[1].str()};
    }
    if (std::regex_search(w, m, checking)) {
        if (m[1].matched) f.text["argument"] = m[1].str();
        f.text["operator"] = operatorName(m[2].str());
    }
    if (std::regex_search(w, m, gradient)) {
        f.text["operator"] = m[1].str();
        f.numbers["gradient_index"] = std::stod(m[2].str());
    }
    // "GPU" in older messages means a CUDA device.
    for (auto& d : devices) {
        d = lower(d);
        if (d == "gpu") d = "cuda";
    }
    if (devices.size() == 2 && devices[0] != devices[1]) {
        f.text["devices"] = devices[0] + ", " + devices[1];
        std::string where;
        if (f.text.count("argument")) where += " at argument " + f.text["argument"];
        if (f.text.count("operator")) where += " of " + f.text["operator"];
        f.cause = "Here " + devices[0] + " and " + devices[1] + " meet" + where + ". " + f.cause;
    }
}

void oomFacts(const std::string& w, Finding& f)
{
    const OomFacts o = parseOomMessage(w);
    const auto put = [&](const char* key, std::int64_t v) {
        if (v >= 0) f.numbers[key] = static_cast<double>(v);
    };
    put("requested_bytes", o.requestedBytes);
    put("total_bytes", o.totalBytes);
    put("free_bytes", o.freeBytes);
    put("allocated_bytes", o.allocatedBytes);
    put("reserved_bytes", o.reservedBytes);
    put("reserved_unallocated_bytes", o.reservedUnallocatedBytes);
    put("process_bytes", o.processBytes);
    put("other_process_bytes", o.otherProcessBytes);
    if (!o.gpu.empty()) f.text["gpu"] = o.gpu;
    f.text["verdict"] = o.verdict;
    std::string facts;
    if (o.requestedBytes >= 0) facts += "It tried to allocate " + byteSizeText(o.requestedBytes);
    if (o.freeBytes >= 0) facts += std::string(facts.empty() ? "It had " : " with ") + byteSizeText(o.freeBytes) + " free";
    if (o.totalBytes >= 0) facts += " of " + byteSizeText(o.totalBytes);
    if (o.allocatedBytes >= 0) facts += "; PyTorch's tensors held " + byteSizeText(o.allocatedBytes);
    if (o.reservedUnallocatedBytes > 0) facts += ", and " + byteSizeText(o.reservedUnallocatedBytes) + " more was reserved but unused";
    if (o.otherProcessBytes > 0) facts += "; other processes held " + byteSizeText(o.otherProcessBytes);
    if (!facts.empty()) f.cause = facts + ". " + f.cause;
}

// The kernel's assertion is printed before the error that reports it.
void assertFacts(const std::vector<std::string>& lines, const std::vector<std::string>& lowered, Finding& f)
{
    static const std::regex assertion("assertion `([^`]{1,200})` failed", std::regex::ECMAScript | std::regex::icase);
    for (std::size_t i = 0; i < lines.size(); ++i) {
        if (lowered[i].find("assertion `") == std::string::npos) continue;
        if (auto a = firstGroup(lines[i], assertion)) {
            f.text["assertion"] = *a;
            return;
        }
    }
}

int severityRank(Severity s) { return static_cast<int>(s); }

} // namespace

void addPlannerAnswer(Finding& f, const ExplainContext& context)
{
    if (f.kind != "cuda_oom") return;
    // The concrete answer leads the fix; the general advice follows it.
    const std::string config = context.configuredBatch > 0
        ? "With the config (batch " + std::to_string(context.configuredBatch) + "), the memory planner says "
        : "The memory planner says ";
    const auto total = f.numbers.find("total_bytes");
    const std::string within = total != f.numbers.end()
        ? " in the " + byteSizeText(static_cast<std::int64_t>(total->second)) + " this GPU has"
        : std::string(" on this GPU");
    if (context.largestFittingBatch == 0) {
        f.fix = config + "no batch fits" + within + ": shorten the sequence or use checkpointing or LoRA. " + f.fix;
    } else if (context.largestFittingBatch > 0) {
        f.numbers["fitting_batch"] = static_cast<double>(context.largestFittingBatch);
        f.fix = config + "batch " + std::to_string(context.largestFittingBatch) + " fits" + within + ". " + f.fix;
    }
}

struct ErrorExplainer::Entry {
    struct Pattern {
        std::string contains; // lower-case
        std::optional<std::regex> regex;
        std::optional<Severity> severity;
    };
    FindingKind kind;
    int priority = 0;
    std::vector<Pattern> patterns;
    std::map<std::string, std::string> verdictFixes;
    std::map<std::string, std::string> likelyCauses; // by verdict: replaces the kind's list of every cause
};

ErrorExplainer::ErrorExplainer() = default;
ErrorExplainer::~ErrorExplainer() = default;
ErrorExplainer::ErrorExplainer(ErrorExplainer&&) noexcept = default;
ErrorExplainer& ErrorExplainer::operator=(ErrorExplainer&&) noexcept = default;

OomFacts parseOomMessage(const std::string& raw)
{
    const std::string w = lower(raw.size() > 1u << 16 ? raw.substr(0, 1u << 16) : raw);
    OomFacts o;
    const auto bytes = [&](const std::regex& re) -> std::int64_t {
        if (auto s = firstGroup(w, re)) {
            if (auto b = parseByteSize(*s)) return *b;
        }
        return -1;
    };
    static const std::regex requested("tried to allocate " + kSize);
    static const std::regex totalOld(kSize + " total capacity");
    static const std::regex totalNew("total capaci?ty of " + kSize);
    static const std::regex freeOld(kSize + " free");
    static const std::regex freeNew("of which " + kSize + " is free");
    static const std::regex allocatedOld(kSize + " already allocated");
    static const std::regex allocatedNew(kSize + " is allocated by pytorch");
    static const std::regex reservedOld(kSize + " (?:reserved in total by pytorch|cached)");
    static const std::regex reservedUnallocated(kSize + " is reserved by pytorch but unallocated");
    static const std::regex thisProcess("this process has " + kSize + " memory in use");
    static const std::regex anonymousProcess("(?:^|[^0-9a-z_]|\\. )process has " + kSize + " memory in use");
    static const std::regex process("process (\\d{1,10}) has " + kSize + " memory in use");
    static const std::regex gpu("gpu (\\d{1,4})");
    o.requestedBytes = bytes(requested);
    o.totalBytes = bytes(totalNew);
    if (o.totalBytes < 0) o.totalBytes = bytes(totalOld);
    o.freeBytes = bytes(freeNew);
    if (o.freeBytes < 0) o.freeBytes = bytes(freeOld);
    o.allocatedBytes = bytes(allocatedNew);
    if (o.allocatedBytes < 0) o.allocatedBytes = bytes(allocatedOld);
    o.reservedUnallocatedBytes = bytes(reservedUnallocated);
    if (o.reservedUnallocatedBytes >= 0 && o.allocatedBytes >= 0) {
        o.reservedBytes = o.allocatedBytes + o.reservedUnallocatedBytes;
    } else {
        o.reservedBytes = bytes(reservedOld);
        if (o.reservedBytes >= 0 && o.allocatedBytes >= 0) {
            o.reservedUnallocatedBytes = std::max<std::int64_t>(0, o.reservedBytes - o.allocatedBytes);
        }
    }
    if (auto g = firstGroup(w, gpu)) o.gpu = *g;
    o.processBytes = bytes(thisProcess);
    if (o.processBytes < 0) o.processBytes = bytes(anonymousProcess);
    // "Process 1234 has X memory in use", one per process on the GPU. Next to
    // "this process has", they are the others; alone (PyTorch 2.1) they
    // include this process: the one closest to PyTorch's reservation.
    std::vector<std::int64_t> processes;
    for (auto it = std::sregex_iterator(w.begin(), w.end(), process); it != std::sregex_iterator() && processes.size() < 64;
         ++it) {
        if (auto b = parseByteSize((*it)[2].str())) processes.push_back(*b);
    }
    if (!processes.empty()) {
        std::int64_t sum = 0;
        for (auto b : processes) sum += b;
        if (o.processBytes >= 0) {
            o.otherProcessBytes = sum;
        } else {
            std::size_t self = 0;
            const std::int64_t reference = o.reservedBytes >= 0 ? o.reservedBytes : sum;
            for (std::size_t i = 1; i < processes.size(); ++i) {
                if (std::llabs(processes[i] - reference) < std::llabs(processes[self] - reference)) self = i;
            }
            o.processBytes = processes[self];
            o.otherProcessBytes = sum - processes[self];
        }
    }
    // The verdict: what would make this allocation succeed.
    const auto r = o.requestedBytes;
    if (r > 0 && o.totalBytes > 0 && static_cast<double>(r) >= 0.9 * static_cast<double>(o.totalBytes)) {
        o.verdict = "request_exceeds_capacity";
    } else if (r > 0 && o.reservedUnallocatedBytes >= r) {
        o.verdict = "fragmentation";
    } else if (r > 0 && o.otherProcessBytes >= r && o.totalBytes > 0
               && static_cast<double>(o.otherProcessBytes) >= 0.05 * static_cast<double>(o.totalBytes)) {
        o.verdict = "other_process";
    } else {
        o.verdict = "over_budget";
    }
    return o;
}

std::string readTextTail(const std::string& path)
{
    std::ifstream in(path, std::ios::binary);
    if (!in) throw InputError("cannot read " + path + " (does it exist, and may this user read it?)");
    in.seekg(0, std::ios::end);
    const auto size = static_cast<std::size_t>(std::max<std::streamoff>(0, in.tellg()));
    in.seekg(static_cast<std::streamoff>(size > kExplainMaxBytes ? size - kExplainMaxBytes : 0));
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

ErrorExplainer ErrorExplainer::fromJson(const std::string& json, const std::string& source)
{
    ErrorExplainer e;
    try {
        const auto doc = nlohmann::json::parse(json);
        for (const auto& k : doc.at("kinds")) {
            Entry entry;
            entry.kind.kind = k.at("kind").get<std::string>();
            entry.kind.severity = severityFromName(k.at("severity").get<std::string>());
            entry.kind.title = k.at("title").get<std::string>();
            entry.kind.meaning = k.at("meaning").get<std::string>();
            entry.kind.cause = k.at("cause").get<std::string>();
            entry.kind.fix = k.at("fix").get<std::string>();
            entry.priority = k.value("priority", 0);
            for (const auto& p : k.at("patterns")) {
                Entry::Pattern pattern;
                pattern.contains = lower(p.at("contains").get<std::string>());
                if (p.contains("regex")) pattern.regex.emplace(p.at("regex").get<std::string>(), std::regex::ECMAScript | std::regex::optimize);
                if (p.contains("severity")) pattern.severity = severityFromName(p.at("severity").get<std::string>());
                entry.patterns.push_back(std::move(pattern));
            }
            if (k.contains("likely_causes")) {
                for (const auto& [name, cause] : k.at("likely_causes").items()) entry.likelyCauses[name] = cause.get<std::string>();
            }
            if (k.contains("verdicts")) {
                for (const auto& [name, fix] : k.at("verdicts").items()) entry.verdictFixes[name] = fix.get<std::string>();
            }
            e.m_kinds.push_back(entry.kind);
            e.m_entries.push_back(std::move(entry));
        }
    } catch (const std::exception& ex) {
        throw InputError(source + ": not a valid diagnostics catalogue (" + ex.what() + ")");
    }
    return e;
}

const ErrorExplainer& ErrorExplainer::bundled()
{
    static const ErrorExplainer catalogue = fromJson(bundledDiagnosticsJson(), "resources/diagnostics.json");
    return catalogue;
}

const FindingKind* ErrorExplainer::kind(const std::string& name) const
{
    for (const auto& k : m_kinds) {
        if (k.kind == name) return &k;
    }
    return nullptr;
}

std::vector<Finding> ErrorExplainer::explain(const std::string& text, const ExplainContext& context) const
{
    const auto lines = cleanLines(text);
    std::vector<std::string> lowered;
    lowered.reserve(lines.size());
    for (const auto& l : lines) lowered.push_back(lower(l));
    struct Hit {
        const Entry* entry = nullptr;
        std::size_t lastLine = 0;
        int count = 0;
        Severity severity = Severity::Info;
    };
    std::vector<Hit> hits(m_entries.size());
    for (std::size_t l = 0; l < lines.size(); ++l) {
        const auto& line = lowered[l];
        for (std::size_t e = 0; e < m_entries.size(); ++e) {
            for (const auto& p : m_entries[e].patterns) {
                if (line.find(p.contains) == std::string::npos) continue;
                if (p.regex && !std::regex_search(line, *p.regex)) continue;
                auto& h = hits[e];
                const Severity s = p.severity.value_or(m_entries[e].kind.severity);
                // The latest line of the most severe pattern is the one to read facts from.
                if (h.count == 0 || severityRank(s) >= severityRank(h.severity)) {
                    h.lastLine = l;
                    h.severity = s;
                }
                h.entry = &m_entries[e];
                ++h.count;
                break;
            }
        }
    }
    std::vector<Hit> found;
    for (const auto& h : hits) {
        if (h.entry) found.push_back(h);
    }
    std::stable_sort(found.begin(), found.end(), [](const Hit& a, const Hit& b) {
        if (a.severity != b.severity) return severityRank(a.severity) > severityRank(b.severity);
        if (a.entry->priority != b.entry->priority) return a.entry->priority > b.entry->priority;
        return a.lastLine > b.lastLine;
    });
    std::vector<Finding> findings;
    for (const auto& h : found) {
        Finding f;
        const auto& k = h.entry->kind;
        f.kind = k.kind;
        f.severity = h.severity;
        f.title = k.title;
        f.cause = k.cause;
        f.fix = k.fix;
        std::string line = lines[h.lastLine];
        if (line.size() > 300) line = line.substr(0, 300) + "...";
        f.text["line"] = line;
        f.numbers["line_number"] = static_cast<double>(h.lastLine + 1);
        f.numbers["occurrences"] = h.count;
        const std::string w = window(lines, h.lastLine);
        if (k.kind == "device_mismatch" || k.kind == "meta_tensor") deviceFacts(w, f);
        if (k.kind == "cuda_oom") {
            // The likely cause for these numbers, not every possible one.
            if (auto c = h.entry->likelyCauses.find(parseOomMessage(w).verdict); c != h.entry->likelyCauses.end()) {
                f.cause = c->second;
            }
            oomFacts(w, f);
            if (auto v = h.entry->verdictFixes.find(f.text["verdict"]); v != h.entry->verdictFixes.end()) {
                f.fix = v->second + " " + f.fix;
            }
        }
        if (k.kind == "device_side_assert") assertFacts(lines, lowered, f);
        addPlannerAnswer(f, context);
        findings.push_back(std::move(f));
    }
    if (findings.empty()) {
        Finding f;
        f.kind = "unknown";
        f.severity = lines.empty() ? Severity::Info : Severity::Error;
        f.title = lines.empty() ? "Nothing to explain" : "Not a failure Trainbench knows";
        f.cause = lines.empty() ? "The text is empty."
                                : "None of the known failure messages appears in this text.";
        f.fix = "Look for the last exception in the text (the line after \"Traceback\" or \"RuntimeError:\"); the "
                "Diagnostics panel lists the failures Trainbench recognises.";
        findings.push_back(std::move(f));
    }
    return findings;
}

} // namespace tb
