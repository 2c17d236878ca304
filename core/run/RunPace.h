#pragma once
// A run's pace as both front ends show it: elapsed time and the time left,
// from the steps trained since this process started watching (a resumed run
// counts from its first new step, so the ETA is not skewed by the steps an
// earlier process trained).

namespace tb {

class RunPace final {
public:
    // Each step's number, the run's total, and the seconds since it started here.
    void observe(int step, int totalSteps, double elapsedSeconds);
    void reset();
    double elapsedSeconds() const { return m_elapsed; }
    // Seconds left at the pace so far; 0 before the first step and after the last.
    double etaSeconds() const;

private:
    int m_firstStep = -1; // the step before the first one observed
    int m_step = 0;
    int m_total = 0;
    double m_elapsed = 0;
};

} // namespace tb
