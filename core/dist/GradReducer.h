#pragma once
// Gradient all-reduce for data parallel, as PyTorch's DDP Reducer does it:
// parameters are put in buckets once, in reverse order (the order backward
// produces their gradients), the first small and the rest about 25 MB; an
// autograd hook copies each gradient into its bucket, and a bucket is
// all-reduced as soon as it is full, in bucket order, so communication runs
// while backward goes on. With gradient accumulation only the last
// micro-batch's backward is armed (DDP's no_sync for the others); its hooks
// add the gradient accumulated so far.
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include <ATen/core/Tensor.h>

namespace tb {

class DistGroup;

class GradReducer final {
public:
    struct Options {
        std::int64_t firstBucketBytes = 1 << 20;
        std::int64_t bucketBytes = 25 << 20;
        // Off: every bucket starts after backward (the non-overlapped
        // baseline bench/ compares against).
        bool overlap = true;
    };
    GradReducer(DistGroup& group, std::vector<at::Tensor> parameters, Options options);
    ~GradReducer();
    GradReducer(const GradReducer&) = delete;
    GradReducer& operator=(const GradReducer&) = delete;

    // The next backward is the step's last: reduce as its gradients arrive.
    void arm();
    // After that backward: starts what is left, waits for every bucket and
    // writes the sums into the parameters' .grad. Returns the seconds spent
    // waiting for communication here.
    double finish();
    int bucketCount() const { return static_cast<int>(m_buckets.size()); }

private:
    struct Slot {
        std::size_t bucket = 0;
        std::int64_t offset = 0;
        bool ready = false;
    };
    struct Bucket {
        at::Tensor flat;
        std::vector<std::size_t> parameters;
        std::size_t pending = 0;
        bool started = false;
    };
    void onGradient(std::size_t index, const at::Tensor& grad);
    void fill(std::size_t index, const at::Tensor* grad);
    void startReady();

    DistGroup& m_group;
    std::vector<at::Tensor> m_parameters;
    std::vector<unsigned> m_hooks;
    std::vector<Slot> m_slots;
    std::vector<Bucket> m_buckets;
    Options m_options;
    std::mutex m_mutex;
    bool m_armed = false;
    std::size_t m_nextToStart = 0;
};

} // namespace tb
