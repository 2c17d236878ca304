#pragma once
// Counts the ATen operators dispatched on the constructing thread (a
// RecordFunction observer), so the training step can be compared op for op
// with the plain-PyTorch loop (bench/op_count.sh). No LibTorch in this header.

#include <cstdint>
#include <map>
#include <string>

namespace tb {

class OpCounter final {
public:
    OpCounter();  // starts counting on this thread
    ~OpCounter(); // stops
    OpCounter(const OpCounter&) = delete;
    OpCounter& operator=(const OpCounter&) = delete;
    // "aten::..." operator name -> calls so far.
    const std::map<std::string, std::int64_t>& counts() const { return m_counts; }
    std::int64_t total() const;

private:
    std::map<std::string, std::int64_t> m_counts;
    std::uint64_t m_handle = 0;
};

// Tracks the operators running on the constructing thread (innermost last),
// so an allocation can be attributed to the operator or autograd node that
// made it (trainbench-cli measure --trace).
class OpTracker final {
public:
    OpTracker();
    ~OpTracker();
    OpTracker(const OpTracker&) = delete;
    OpTracker& operator=(const OpTracker&) = delete;
    // "outermost>...>innermost" on this thread, or "-" outside any operator.
    static std::string current();

private:
    std::uint64_t m_handle = 0;
};

} // namespace tb
