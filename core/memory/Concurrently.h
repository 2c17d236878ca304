#pragma once
// Runs work side by side on the machine's cores (the planner's replays and
// compilers: arithmetic on their own copies, no LibTorch).

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <exception>
#include <system_error>
#include <thread>
#include <vector>

namespace tb {

// Runs f(i) for every i in [0, n) on up to one thread per core, this one
// included. The planner's replays are arithmetic on their own copies of the
// setup: the fit map's compiler traces and the allocator replays near the
// budget run side by side. An exception from any f is rethrown here.
template <typename F>
void forEachConcurrently(std::size_t n, F&& f)
{
    const std::size_t threads = std::min<std::size_t>(n, std::max(1u, std::thread::hardware_concurrency()));
    if (threads <= 1) {
        for (std::size_t i = 0; i < n; ++i) f(i);
        return;
    }
    std::atomic<std::size_t> next{0};
    std::exception_ptr failure;
    std::atomic<bool> failed{false};
    const auto work = [&] {
        for (std::size_t i; !failed && (i = next++) < n;) {
            try {
                f(i);
            } catch (...) {
                if (!failed.exchange(true)) failure = std::current_exception();
            }
        }
    };
    std::vector<std::thread> helpers;
    helpers.reserve(threads - 1);
    for (std::size_t t = 1; t < threads; ++t) {
        try {
            helpers.emplace_back(work);
        } catch (const std::system_error&) {
            break; // no thread to be had: fewer do the work
        }
    }
    work();
    for (auto& h : helpers) h.join();
    if (failure) std::rethrow_exception(failure);
}

} // namespace tb
