#include "train/HostHeap.h"

#include <climits>
#include <mutex>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace tb {
namespace {
std::mutex g_mutex;
int g_scopes = 0;
} // namespace

HostHeapScope::HostHeapScope()
{
#if defined(__GLIBC__)
    const std::lock_guard lock(g_mutex);
    if (g_scopes++ == 0) {
        // Setting either value turns glibc's own adjustment off for good, so set both.
        mallopt(M_MMAP_THRESHOLD, static_cast<int>(kMmapThreshold));
        mallopt(M_TRIM_THRESHOLD, INT_MAX);
    }
#endif
}

HostHeapScope::~HostHeapScope()
{
#if defined(__GLIBC__)
    const std::lock_guard lock(g_mutex);
    if (--g_scopes == 0) {
        // Between runs, give back what a run freed and trim again past 64 MiB free.
        malloc_trim(0);
        mallopt(M_TRIM_THRESHOLD, static_cast<int>(2 * kMmapThreshold));
    }
#endif
}

} // namespace tb
