// bench_plot_stream: appends 1,000,000 loss points in batches of 1,000 to the
// live loss plot and times each update (append + EMA + axis fit + replot).
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
    const int total = argc > 1 ? std::atoi(argv[1]) : 1000000;
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
        plot.rescaleAxes(true);
        plot.replot(QCustomPlot::rpImmediateRefresh);
        times.push_back(timer.nsecsElapsed() / 1e6);
    }
    std::vector<double> sorted = times;
    std::sort(sorted.begin(), sorted.end());
    const double median = sorted[sorted.size() / 2];
    const double p99 = sorted[static_cast<std::size_t>(sorted.size() * 0.99)];
    std::printf("plot_stream: %d points in %zu batches of %d on platform '%s'\n", plot.trainingPointCount(),
                times.size(), batch, qPrintable(QGuiApplication::platformName()));
    std::printf("replot time per batch: median %.2f ms, p99 %.2f ms, worst %.2f ms (first %.2f ms, last %.2f ms)\n",
                median, p99, sorted.back(), times.front(), times.back());
    std::printf("goal: median <= 16 ms, worst <= 50 ms: %s\n", median <= 16 && sorted.back() <= 50 ? "met" : "NOT met");
    return 0;
}
