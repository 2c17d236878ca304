#pragma once
// The process group of a data-parallel run, on PyTorch's own c10d: a
// TCPStore for the rendezvous, ProcessGroupGloo for CPU tensors and the
// control plane (the concrete backend class, whose constructor and
// collectives are the same in LibTorch 1.13 and 2.x), and on a CUDA run in a
// LibTorch built with NCCL, ProcessGroupNCCL for CUDA tensors: each
// collective goes to the backend of its tensor's device, as PyTorch's
// "cuda:nccl,cpu:gloo" does. Only core/train includes this header.
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "dist/DistLaunch.h"

namespace tb {

enum class Reduce { Sum, Max, Min };

class DistGroup final {
public:
    // Meets the other ranks: rank 0 serves the store unless torchrun's agent
    // does, every rank checks in (a missing or duplicated rank is an error
    // naming WORLD_SIZE or RANK), then the Gloo group connects. Throws
    // InputError for what the user can fix (a port in use, a wrong
    // WORLD_SIZE, rank 0 unreachable), with the variable and its value.
    // cudaRun: the run trains on a CUDA device; where NCCL is built in, its
    // CUDA tensors' collectives then go through NCCL (created here, its
    // communicators at the first collective).
    DistGroup(const DistLaunch& launch, bool cudaRun);
    ~DistGroup();
    DistGroup(const DistGroup&) = delete;
    DistGroup& operator=(const DistGroup&) = delete;

    // Whether this LibTorch has ProcessGroupNCCL (a CUDA build's c10d).
    static bool ncclBuilt();
    // The backend a tensor's collectives use: "nccl" for a CUDA tensor on a
    // CUDA run where NCCL is built in, else "gloo".
    std::string backendFor(bool cudaTensor) const;
    std::string backendFor(const at::Tensor& tensor) const;
    // The NCCL group's timeout (the launch's train.dist_timeout_s); 0 without one.
    std::chrono::milliseconds ncclTimeout() const;

    int rank() const;
    int size() const;
    const DistLaunch& launch() const;

    // Every rank gets rank 0's values of these tensors, in place.
    void broadcastFromRankZero(const std::vector<at::Tensor>& tensors);
    // Blocking all-reduce of one tensor, in place (no AVG: sum and divide).
    void allreduce(at::Tensor& tensor, Reduce op);
    // Starts a sum all-reduce of `tensor` in place and returns at once; the
    // collectives must be started in the same order on every rank.
    void startSum(at::Tensor& tensor);
    // Waits for every started all-reduce; returns the seconds spent waiting.
    double waitStarted();

    // Small strings shared through the store (rank 0 publishes, the others wait).
    void publish(const std::string& key, const std::string& value);
    std::string fetch(const std::string& key);

    // At the end of a run: rank 0 says it is done (its checkpoint written);
    // the other ranks wait for that, up to the timeout.
    void endTogether();

    // Where each rank's output goes: rank K writes DIR/rank-K.log.
    void setRunFolder(const std::string& folder);
    // A collective failed with `error`: the sentence that says which rank is
    // gone (its pid, when it ran on this machine) and its last message.
    std::string explain(const std::string& error) const;
    // Whether a failure's text comes from Gloo, NCCL or the store (a lost
    // or hung rank), not from the model or the data.
    static bool looksLikeCollectiveFailure(const std::string& error);
private:
    struct Impl;
    std::unique_ptr<Impl> m;
};

} // namespace tb
