#include "tune/TuneMeasure.h"

#include <algorithm>
#include <chrono>
#include <exception>

#include <torch/torch.h>

#include "common/ByteSize.h"
#include "train/Threads.h"
#include "train/Trainer.h"

namespace tb {
namespace {

using Clock = std::chrono::steady_clock;

void synchronize(const torch::Device& device)
{
#ifdef TB_TORCH_CUDA
    if (device.is_cuda()) torch::cuda::synchronize();
#else
    (void)device;
#endif
}

// Seconds per call of f, repeated until about `budget` seconds have passed
// (after one untimed call).
template <typename F>
double secondsPerCall(F&& f, const torch::Device& device, double budget)
{
    f();
    synchronize(device);
    int calls = 0;
    const auto start = Clock::now();
    double elapsed = 0;
    do {
        f();
        ++calls;
        synchronize(device);
        elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    } while (elapsed < budget && calls < 100000);
    return elapsed / calls;
}

} // namespace

ThroughputMachine probeThroughput(const RunConfig& config, const std::string& deviceName)
{
    torch::NoGradGuard noGrad;
    const torch::Device device(deviceName == "cuda" ? torch::kCUDA : torch::kCPU);
    if (device.is_cpu()) applyThreadCount(config.train.threads);
    const std::int64_t d = std::clamp<std::int64_t>(config.model.dModel, 64, 1024);
    const auto options = torch::TensorOptions().device(device);
    const std::int64_t small = 64, large = 1024;
    // Seconds of one [rows, d] x [d, 4d] product.
    auto product = [&](torch::ScalarType dtype, std::int64_t rows) {
        const auto w = torch::randn({d, 4 * d}, options.dtype(dtype));
        const auto x = torch::randn({rows, d}, options.dtype(dtype));
        return secondsPerCall([&] { (void)torch::matmul(x, w); }, device, 0.04);
    };
    // The rate of the work that grows with the rows: the slope between two
    // sizes (the fixed cost of a call is the dispatch, counted apart).
    auto rate = [&](torch::ScalarType dtype) {
        const double a = product(dtype, small), b = product(dtype, large);
        const double flops = 2.0 * static_cast<double>(large - small) * static_cast<double>(d) * static_cast<double>(4 * d);
        return flops / std::max(b - a, 1e-9);
    };
    ThroughputMachine m;
    m.source = std::string("a probe of this machine's ") + (device.is_cpu() ? "CPU" : "GPU")
        + " (products, an activation and operator dispatch, about 0.3 s)";
    m.fp32Flops = rate(torch::kFloat32);
    m.halfFlops = rate(device.is_cpu() ? torch::kBFloat16 : torch::kFloat16);
    m.halfRowsFlops = 0;
    // Elementwise work as a step does it (an activation reads and writes
    // each element, and computes): its bytes per second.
    const auto big = torch::randn({4 << 20}, options.dtype(torch::kFloat32));
    const double geluSeconds = secondsPerCall([&] { (void)torch::gelu(big); }, device, 0.04);
    m.bytesPerSecond = 2.0 * static_cast<double>(big.numel()) * 4 / geluSeconds;
    // An operator of a training step also records autograd's node and runs
    // its backward: about three dispatches of a bare one.
    const auto a = torch::ones({8}, options), b = torch::ones({8}, options);
    m.opSeconds = 3 * secondsPerCall([&] { (void)torch::add(a, b); }, device, 0.02);
    return m;
}

void measureCandidates(TuneResult& result, const RunConfig& base, const std::vector<int>& which, int steps,
                       const TuneMeasureProgress& progress)
{
    (void)base;
    int done = 0;
    for (const int index : which) {
        if (progress.cancel && progress.cancel->load()) break;
        auto& k = result.candidates.at(static_cast<std::size_t>(index));
        if (progress.onCandidate) progress.onCandidate(index, done, static_cast<int>(which.size()));
        RunConfig c = k.config;
        c.train.steps = steps + 1;
        c.optim.warmupSteps = std::min(c.optim.warmupSteps, c.train.steps);
        c.train.evalEvery = c.train.steps;
        c.train.evalBatches = 1;
        c.train.checkpointEvery = 0;
        c.train.logEvery = 1;
        double tokens = 0, seconds = 0;
        std::int64_t peak = 0;
        try {
            TrainerOptions options;
            options.measureMemory = true;
            Trainer trainer(c, options);
            TrainerCallbacks callbacks;
            callbacks.onStep = [&](const StepMetrics& s) {
                peak = std::max(peak, s.memPeakBytes);
                if (s.step < 2) return; // the first step warms caches and allocators
                tokens += s.tokensPerSecond * s.stepMs / 1000.0;
                seconds += s.stepMs / 1000.0;
            };
            const auto r = trainer.run(callbacks);
            if (r.status == TrainResult::Status::Failed) k.measureError = r.message;
        } catch (const std::exception& e) {
            k.measureError = e.what();
        }
        if (k.measureError.empty() && seconds > 0) {
            k.measuredTokensPerSecond = tokens / seconds;
            k.measuredPeakBytes = peak;
            if (peak > result.budgetBytes) {
                k.measureError = "measured peak " + byteSizeText(peak) + " is over the budget of " + byteSizeText(result.budgetBytes);
            }
        }
        ++done;
    }
    calibratePredictions(result);
    chooseWinner(result, base);
}

} // namespace tb
