#include "memory/Verdict.h"

namespace tb {

namespace {
// Tight above 9/10 of the budget, decided in integers so that
// roomyPeakBytes(b) is exactly the last Fits peak.
constexpr std::int64_t kRoomNumerator = 9, kRoomDenominator = 10;
} // namespace

std::int64_t roomyPeakBytes(std::int64_t budgetBytes)
{
    if (budgetBytes <= 0) return 0;
    // budget * 9 / 10 without overflow for any int64 budget.
    return budgetBytes / kRoomDenominator * kRoomNumerator + budgetBytes % kRoomDenominator * kRoomNumerator / kRoomDenominator;
}

MemoryVerdict memoryVerdict(std::int64_t peakBytes, std::int64_t budgetBytes, const std::string& precisionError)
{
    if (!precisionError.empty()) return MemoryVerdict::DoesNotRun;
    if (peakBytes > budgetBytes) return MemoryVerdict::DoesNotFit;
    if (peakBytes > roomyPeakBytes(budgetBytes)) return MemoryVerdict::Tight;
    return MemoryVerdict::Fits;
}

const char* verdictKey(MemoryVerdict verdict)
{
    switch (verdict) {
    case MemoryVerdict::Fits: return "fits";
    case MemoryVerdict::Tight: return "tight";
    case MemoryVerdict::DoesNotFit: return "does_not_fit";
    case MemoryVerdict::DoesNotRun: return "does_not_run";
    }
    return "unknown";
}

const char* verdictWords(MemoryVerdict verdict)
{
    switch (verdict) {
    case MemoryVerdict::Fits: return "fits";
    case MemoryVerdict::Tight: return "fits with under 10% to spare";
    case MemoryVerdict::DoesNotFit: return "does not fit";
    case MemoryVerdict::DoesNotRun: return "does not run";
    }
    return "unknown";
}

} // namespace tb
