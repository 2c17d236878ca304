#pragma once
// The learning-rate schedule: one function the trainer steps by and the
// experiment form draws (LibTorch-free, so the window can call it).

#include "config/RunConfig.h"

namespace tb {

// The learning rate of step `step` (1-based) of a run of `totalSteps`: a
// linear warmup from 0 to optim.lr over optim.warmup_steps, then optim.lr
// (constant), or a decay to optim.min_lr_ratio x optim.lr at the last step,
// along a half cosine (cosine) or a straight line (linear).
double learningRateAt(const OptimConfig& optim, int step, int totalSteps);

} // namespace tb
