#pragma once
// The error explainer: any text a training failure leaves behind (a Python
// traceback, a LibTorch c10::Error, a whole training log) turned into
// findings, the primary one first. The catalogue of kinds, the message
// fragments that identify them, causes and fixes is data
// (resources/diagnostics.json, compiled in); the facts a message carries
// (devices, the operator, out-of-memory figures) are extracted here.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config/ByteSizes.h" // parseByteSize, which OOM messages are read with

#include "diagnose/Finding.h"

namespace tb {

// One catalogue entry, for the Diagnostics panel's "what it means" and for docs.
struct FindingKind {
    std::string kind;
    Severity severity = Severity::Error;
    std::string title;
    std::string meaning;
    std::string cause;
    std::string fix;
};

// The figures of one CUDA out-of-memory message; -1 where the message lacks one.
struct OomFacts {
    std::int64_t requestedBytes = -1;
    std::int64_t totalBytes = -1;
    std::int64_t freeBytes = -1;
    std::int64_t allocatedBytes = -1;         // by PyTorch's tensors
    std::int64_t reservedBytes = -1;          // held by PyTorch's caching allocator
    std::int64_t reservedUnallocatedBytes = -1;
    std::int64_t processBytes = -1;           // this process, including non-PyTorch memory
    std::int64_t otherProcessBytes = -1;      // other processes on the GPU
    std::string gpu;                          // "0"
    // request_exceeds_capacity | fragmentation | other_process | over_budget
    std::string verdict;
};

// The figures of an OOM message in any of PyTorch's generations of wording.
OomFacts parseOomMessage(const std::string& text);

// What the explainer knows beyond the text: when the run's config is known, an
// OOM finding gains the batch the memory planner says fits.
struct ExplainContext {
    std::int64_t largestFittingBatch = -1; // -1 unknown, 0 none fits
    std::int64_t configuredBatch = -1;
};

// An out-of-memory finding gains the memory planner's answer (no change to others).
void addPlannerAnswer(Finding& finding, const ExplainContext& context);

// The explainer reads at most this much of a text: its end, where a failure is.
inline constexpr std::size_t kExplainMaxBytes = 4u << 20;
// The last kExplainMaxBytes of a file. Throws InputError naming the file when it cannot be read.
std::string readTextTail(const std::string& path);

class ErrorExplainer final {
public:
    // The bundled catalogue. Throws InputError when it is malformed (a build problem).
    static const ErrorExplainer& bundled();
    static ErrorExplainer fromJson(const std::string& json, const std::string& source);

    // Findings for a text, the primary first; one "unknown" finding when
    // nothing matches. Bounded: reads at most the last kExplainMaxBytes of the text and
    // at most 2,000 characters of each line; any bytes are accepted.
    std::vector<Finding> explain(const std::string& text, const ExplainContext& context = {}) const;
    const std::vector<FindingKind>& kinds() const { return m_kinds; }
    const FindingKind* kind(const std::string& name) const;

    struct Entry;
    ~ErrorExplainer();
    ErrorExplainer(ErrorExplainer&&) noexcept;
    ErrorExplainer& operator=(ErrorExplainer&&) noexcept;

private:
    ErrorExplainer();
    std::vector<FindingKind> m_kinds;
    std::vector<Entry> m_entries;
};

std::string bundledDiagnosticsJson();

} // namespace tb
