#include "run/RunPace.h"

#include <algorithm>

namespace tb {

void RunPace::observe(int step, int totalSteps, double elapsedSeconds)
{
    if (m_firstStep < 0) m_firstStep = step - 1;
    m_step = step;
    m_total = totalSteps;
    m_elapsed = elapsedSeconds;
}

void RunPace::reset() { *this = RunPace(); }

double RunPace::etaSeconds() const
{
    if (m_firstStep < 0 || m_step >= m_total) return 0;
    const double perStep = m_elapsed / std::max(1, m_step - m_firstStep);
    return perStep * (m_total - m_step);
}

} // namespace tb
