// Anchors the precompiled LibTorch header that torch translation units reuse.
#include <torch/torch.h>
