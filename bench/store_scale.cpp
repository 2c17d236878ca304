// bench_store_scale [DB]: builds (once) an experiment database with 10,000
// runs and one run of 1,000,000 loss points, then times what the history
// views do: listing every run (with tags and estimates), a filtered listing,
// and the 1,000,000-point series downsampled for display (first, last, and
// min/max of 2,000 buckets). Targets: list <= 100 ms, series <= 200 ms.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "store/RunStore.h"
#include "store/Sqlite.h"

namespace {

template <typename F>
double medianMs(int rounds, F&& f)
{
    std::vector<double> t;
    for (int i = 0; i < rounds; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        f();
        t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

} // namespace

int main(int argc, char** argv)
{
    const std::string path = argc > 1 ? argv[1] : "/tmp/trainbench-store-scale.db";
    if (!std::filesystem::exists(path)) {
        std::printf("building %s ...\n", path.c_str());
        tb::RunStore store(path);
        {
            tb::Transaction tx(store.database());
            for (int i = 0; i < 10000; ++i) {
                const auto id = store.createRun({"run " + std::to_string(i),
                                                 R"({"name":"r","train":{"batch_size":)" + std::to_string(8 << (i % 4)) + "}}",
                                                 "cpu", "fp32", "0", "1.13", 100});
                store.markEnded(id, i % 10 == 0 ? tb::RunStatus::Failed : tb::RunStatus::Finished,
                                {100, 2.0 + (i % 7) * 0.1, std::nullopt, std::nullopt, ""});
                if (i % 5 == 0) store.addTag(id, "baseline");
            }
            tx.commit();
        }
        const auto big = store.createRun({"long run", R"({"name":"long"})", "cpu", "fp32", "0", "1.13", 1000000});
        std::vector<tb::MetricPoint> batch;
        for (int step = 1; step <= 1000000; ++step) {
            double loss = 2.0 + std::exp(-step / 200000.0) + 0.05 * std::sin(step * 0.37);
            if (step % 99991 == 0) loss += 50.0; // spikes that must survive downsampling
            batch.push_back({big, step, "loss", loss, static_cast<double>(step)});
            if (batch.size() == 50000) {
                store.appendMetrics(batch);
                batch.clear();
            }
        }
        store.markEnded(big, tb::RunStatus::Finished, {1000000, 2.0, std::nullopt, std::nullopt, ""});
    }
    tb::RunStore store(path, tb::RunStore::Mode::ReadOnly);
    std::size_t listed = 0, filtered = 0, points = 0, spikes = 0;
    const double listMs = medianMs(5, [&] { listed = store.listRuns().size(); });
    const double filterMs = medianMs(5, [&] { filtered = store.listRuns("train.batch_size>=32 tag:baseline").size(); });
    const auto bigId = store.listRuns("\"long run\"").front().id;
    std::vector<tb::MetricPoint> series;
    const double seriesMs = medianMs(5, [&] { series = store.metricSeries(bigId, "loss", 2000); });
    points = series.size();
    for (const auto& p : series) spikes += p.value > 40.0;
    std::printf("list %zu runs: %.1f ms\n", listed, listMs);
    std::printf("filtered list (train.batch_size>=32 tag:baseline, %zu runs): %.1f ms\n", filtered, filterMs);
    std::printf("1,000,000-point series -> %zu points for display: %.1f ms (%zu of 10 spikes kept)\n", points, seriesMs,
                spikes);
    return 0;
}
