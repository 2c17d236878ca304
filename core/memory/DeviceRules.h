#pragma once
// What a CUDA device's training step allocates where the step recorded on
// the CPU (memory/StepProgram.h, recorded by train/DerivedPlan.cpp) differs,
// applied to the record by operator. Each rule is written from LibTorch's
// source (1.13 and 2.6 agree on all of them):
//
// - A bf16 matrix product's CPU scratch (oneDNN's, a marker in the record)
//   is not a GPU's: cuBLAS works in its workspace (the plan's fixed
//   cuBLAS term). Markers are dropped.
// - Dropout (aten::dropout, aten::feature_dropout): on the CPU the composite
//   path (native/Dropout.cpp _dropout_impl) draws its noise with
//   empty_like(input) in the input's dtype, its first allocation; on CUDA
//   the fused kernel (native/cuda/Dropout.cu native_dropout_cuda) keeps a
//   one-byte bool mask in its place. (CUDA allocates the output before the
//   mask; the record keeps the CPU's order, both are kept for backward.)
// - A generator's state (trainbench::generator_state, saved by activation
//   checkpointing, train/Layers.cpp): a CPU generator's is a tensor the CPU
//   step allocates; a CUDA generator's get_state (cuda/CUDAGeneratorImpl.cpp)
//   returns it in host memory. Dropped.
// - Every allocation is rounded up to the caching allocator's 512 bytes
//   (c10/cuda/CUDACachingAllocator.cpp kMinBlockSize).
//
// - scaled_dot_product_attention (LibTorch 2.x), by the kernel LibTorch
//   chooses for the card (memory/FusedAttention.h): with the flash kernel
//   the forward keeps the output (q's layout, as the CPU's flash kernel) and
//   the log-sum-exp, not the CPU kernel's per-thread blocks; its backward
//   keeps the q, k and v gradients and, while it runs, softmax_d and an fp32
//   dq accumulator.
//
// - The GPT family's attention softmax under autocast (a 16-bit map, no
//   dtype named): CUDA's autocast runs it in fp32 (autocast_mode.cpp's
//   fp32_set_opt_dtype; native/SoftMax.cpp: fp16 by the half_to_float
//   kernel, bf16 cast up first), its fp32 output saved for backward and a
//   16-bit copy saved by the product with the values; its backward casts
//   the gradient up (and for bf16 back down). Dropout on that fp32 map
//   (native/cuda/Dropout.cu's fused kernel): a one-byte mask and an fp32
//   output freed once the product's 16-bit copy is made; its backward in
//   fp32 on the product's gradient cast up. DeviceRules.cpp says how the
//   record's blocks become the GPU's.
//
// Not ruled (the plan says it is a lower bound there): scaled_dot_product_
// attention with dropout (the CPU's math path), by the memory-efficient
// kernel (its output is laid out otherwise, so the heads' merge after it
// does not copy) or by neither kernel (the math fallback); and
// an operator run under autocast (mixed precision's forward, a checkpointed
// block's recompute) on a 16-bit input that CUDA's
// autocast runs in fp32 and the CPU's does not (autocast_mode.cpp's CUDA
// fp32 lists: log_softmax, layer_norm, ...: a GPT's norms over a base kept
// in half precision, say; the Llama family's trainer computes those in fp32
// itself).

#include <string>

#include "memory/StepProgram.h"

namespace tb {

struct CudaStep {
    RecordedStep step;   // the step's tensors on a GPU (blocks of the allocator's granularity)
    std::string unruled; // an operator whose GPU kernel allocates otherwise, with no rule (empty: none)
};

// The card the step runs on. exact false: sizes that stay polynomials in
// batch and sequence (no 512-byte blocks, no rounded kernel rows), for a
// compiled step (the fit map's cells).
struct CudaTarget {
    int computeCapability = 0; // 0: unknown, taken as one that runs both fused kernels
    bool fp16 = false;         // fp16 rather than bf16 (the kernels' dtype rules)
    bool exact = true;
};

CudaStep cudaStepOf(const RecordedStep& cpu, const CudaTarget& target = {});

} // namespace tb
