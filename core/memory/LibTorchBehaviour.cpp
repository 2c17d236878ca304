// What the planner must know of the LibTorch this build runs.
#include <torch/version.h>

#include "memory/Estimator.h"

namespace tb {

int builtTorchMajor() { return TORCH_VERSION_MAJOR; }

} // namespace tb
