#pragma once

#include <cstddef>

namespace tb {

// CPU training frees and reallocates the same large tensors on every step.
// glibc's malloc, left to its defaults, serves blocks above a moving threshold
// (128 KiB, rising to at most 32 MiB) with mmap and hands the top of the heap
// back to the kernel once more than twice that is free, so a step can fault
// its activations in afresh, page by page, every time (bench/train_throughput:
// about 430 page faults a step on the tiny workload, 2,500 to 3,500 on
// the GPT one).
//
// While a HostHeapScope lives, blocks up to 32 MiB come from the heap and freed
// memory stays with the process; when the last scope ends, the free memory is
// given back (malloc_trim), so an idle GUI does not keep a run's heap. Does
// nothing where the C library is not glibc.
class HostHeapScope {
public:
    HostHeapScope();
    ~HostHeapScope();
    HostHeapScope(const HostHeapScope&) = delete;
    HostHeapScope& operator=(const HostHeapScope&) = delete;

    static constexpr std::size_t kMmapThreshold = std::size_t(32) << 20; // glibc's largest
};

} // namespace tb
