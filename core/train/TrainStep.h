#pragma once
// The pieces of one optimisation step, shared by the Trainer and the tests
// that check equivalences (accumulation, checkpointing) on real gradients.

#include <vector>

#include <torch/torch.h>

#include "train/Datasets.h"
#include "train/Layers.h"

namespace tb {

// Sum of masked token cross-entropies divided by `normalizer` (the number of
// masked tokens over every micro-batch of the step, so that accumulating
// micro-batch gradients equals the gradient of the whole batch).
torch::Tensor maskedLossSum(const torch::Tensor& logits, const Batch& batch, double normalizer);

// Masked token count of a set of micro-batches.
double maskedTokenCount(const std::vector<Batch>& microBatches);

// The model a config describes for a dataset (its vocabulary and sequence
// length): config/ModelSpec.h modelSpecFor.
ModelOptions modelOptionsFor(const RunConfig& config, const Dataset& data);
// The model a config describes (GPT or Llama family), freshly initialised, or
// the TorchScript model in options.scriptPath (loaded; throws InputError).
std::shared_ptr<CausalLmImpl> makeModel(const ModelOptions& options);

// Clips the global L2 norm of the gradients to maxNorm (no clipping when
// maxNorm is infinite) and returns the norm before clipping as a tensor: no
// host synchronisation, unlike clip_grad_norm_'s returned double.
torch::Tensor clipGradNorm(const std::vector<torch::Tensor>& parameters, double maxNorm);

} // namespace tb
