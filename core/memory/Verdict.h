#pragma once
// The planner's one answer to "will this run fit there?": fits, fits with
// under 10% to spare, does not fit, or does not run (the precision asked for
// cannot run on that device, whatever the memory). Every panel, command and
// preflight check decides it here, so one config on one target gets one
// verdict everywhere. No LibTorch here.

#include <cstdint>
#include <string>

namespace tb {

enum class MemoryVerdict { Fits, Tight, DoesNotFit, DoesNotRun };

// peak against budget bytes (budget > 0). precisionError: why the precision
// cannot run there (precisionError in diagnose/TargetPlan.h); non-empty
// decides DoesNotRun. A peak over 90% of the budget is Tight: allocator
// fragmentation or another process can push it over.
MemoryVerdict memoryVerdict(std::int64_t peakBytes, std::int64_t budgetBytes, const std::string& precisionError = {});

// The largest peak that is still Fits (not Tight) on this budget: what a fix
// aims at, so applying it leaves no new warning.
std::int64_t roomyPeakBytes(std::int64_t budgetBytes);

// "fits", "tight", "does_not_fit", "does_not_run": the JSON key.
const char* verdictKey(MemoryVerdict verdict);
// "fits", "fits with under 10% to spare", "does not fit", "does not run":
// the words every surface shows (a sentence may capitalise the first).
const char* verdictWords(MemoryVerdict verdict);

} // namespace tb
