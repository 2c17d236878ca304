// bench_plot_stream [POINTS]: appends POINTS (default 10,000,000) loss points
// in batches of 1,000 to the live loss plot and times each update (append +
// EMA + axis fit + replot), as the Run panel does. The per-frame cost must not
// grow with the run: the first and last 100 batches are compared.
// Run under Xvfb or QT_QPA_PLATFORM=offscreen (software rendering).
#include <QApplication>
#include <QElapsedTimer>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "LossPlot.h"

int main(int argc, char** argv)
{
    QApplication app(argc, argv);
    const int total = argc > 1 ? std::atoi(argv[1]) : 10000000;
    const int batch = 1000;
    tb::ui::LossPlot plot;
    plot.resize(1000, 450);
    plot.show();
    QApplication::processEvents();

    std::vector<double> times;
    QElapsedTimer timer;
    double noise = 0.0;
    for (int start = 0; start < total; start += batch) {
        QVector<double> steps(batch), losses(batch);
        for (int i = 0; i < batch; ++i) {
            const double step = start + i + 1;
            noise = 0.9 * noise + 0.1 * std::sin(step * 12.9898) * 0.5;
            steps[i] = step;
            losses[i] = 2.0 + 3.0 * std::exp(-step / 200000.0) + noise;
        }
        timer.start();
        plot.appendTraining(steps, losses);
        if (start % 50000 == 0) plot.appendValidation({double(start + batch)}, {losses.back()});
        plot.fitToData();
        plot.replot(QCustomPlot::rpImmediateRefresh);
        times.push_back(timer.nsecsElapsed() / 1e6);
    }
    const auto medianOf = [](std::vector<double> v) {
        std::sort(v.begin(), v.end());
        return v[v.size() / 2];
    };
    const std::size_t edge = std::min<std::size_t>(100, times.size());
    const double firstMedian = medianOf({times.begin(), times.begin() + edge});
    const double lastMedian = medianOf({times.end() - edge, times.end()});
    std::vector<double> sorted = times;
    std::sort(sorted.begin(), sorted.end());
    const double median = sorted[sorted.size() / 2];
    const double p99 = sorted[static_cast<std::size_t>(sorted.size() * 0.99)];
    std::printf("plot_stream: %lld points in %zu batches of %d on platform '%s'; %d points drawn\n",
                static_cast<long long>(plot.trainingPointCount()), times.size(), batch,
                qPrintable(QGuiApplication::platformName()), plot.drawnPointCount());
    std::printf("median of the first 100 batches %.2f ms, of the last 100 %.2f ms\n", firstMedian, lastMedian);
    std::printf("replot time per batch: median %.2f ms, p99 %.2f ms, worst %.2f ms (first %.2f ms, last %.2f ms)\n",
                median, p99, sorted.back(), times.front(), times.back());
    std::printf("goal: median <= 16 ms, worst <= 50 ms: %s\n", median <= 16 && sorted.back() <= 50 ? "met" : "NOT met");
    return 0;
}
