// bench_planner_repaint: the memory planner panel's slider-to-repaint time.
// For each model below, once its plans in the three precisions are derived
// (not timed: the panel traces each step once, in the background), it drags
// the batch and the sequence slider over 60 positions each (estimate, both
// fit answers, bar, marker, repaint of the window) and changes the precision
// 10 times (which also recomputes the 128 x 128 heat map), and prints the
// median and worst times.
// Target: slider to repaint <= 30 ms. Run under Xvfb or QT_QPA_PLATFORM=offscreen.
#include <QApplication>
#include <QComboBox>
#include <QElapsedTimer>
#include <QSlider>
#include <QThread>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "ConfigDocument.h"
#include "MemoryPlannerPanel.h"

namespace {

struct Stats {
    double median = 0, worst = 0;
};

Stats stats(std::vector<double> t)
{
    std::sort(t.begin(), t.end());
    return {t[t.size() / 2], t.back()};
}

template <typename F>
double timed(tb::ui::MemoryPlannerPanel& panel, F&& change)
{
    QElapsedTimer timer;
    timer.start();
    change();
    panel.window()->repaint(); // paint now, not at the next event loop turn
    QApplication::processEvents();
    return static_cast<double>(timer.nsecsElapsed()) / 1e6;
}

// Until the panel shows a plan (its step derived in the background), at
// most two minutes; false at once where it could not be derived.
bool planned(tb::ui::MemoryPlannerPanel& panel)
{
    QElapsedTimer waited;
    waited.start();
    while (!panel.estimate() && waited.elapsed() < 120000 && !panel.verdictText().contains("could not be derived")) {
        QApplication::processEvents();
        QThread::msleep(20);
    }
    return panel.estimate().has_value();
}

} // namespace

int main(int argc, char** argv)
{
    // The panel records plans with trainbench-cli: this build's, unless one is named.
    if (qEnvironmentVariableIsEmpty("TRAINBENCH_CLI")) qputenv("TRAINBENCH_CLI", TB_BENCH_CLI);
    std::setvbuf(stdout, nullptr, _IOLBF, 0); // (rows as they are measured)
    QApplication app(argc, argv);
    tb::ui::ConfigDocument document;
    document.loadText(R"({"name": "bench", "model": {"n_layer": 4, "d_model": 256, "n_head": 8},
                          "data": {"source": "text", "seq_len": 256}, "train": {"batch_size": 16}})",
                      "bench.json");
    tb::ui::MemoryPlannerPanel panel(&document);
    panel.resize(1100, 760);
    panel.show();
    QApplication::processEvents();
    std::printf("%-22s %22s %22s %26s\n", "model", "batch slider (ms)", "sequence slider (ms)", "precision + map (ms)");
    for (const char* source : {"experiment", "gpt2", "pythia-2.8b", "llama-2-7b", "mistral-7b"}) {
        if (!panel.selectSource(source)) {
            std::printf("%-22s not offered by the panel\n", source);
            continue;
        }
        QApplication::processEvents();
        bool ready = true;
        for (int i = 0; i < 3 && ready; ++i) {
            auto* p = panel.precisionBox();
            p->setCurrentIndex((p->currentIndex() + 1) % 3);
            ready = planned(panel);
        }
        if (!ready) {
            std::printf("%-22s no plan in two minutes: %s\n", source, panel.verdictText().toUtf8().constData());
            continue;
        }
        std::vector<double> batch, seq, inputs;
        for (int i = 0; i < 60; ++i) {
            auto* s = panel.batchSlider();
            batch.push_back(timed(panel, [&] { s->setValue(1 + (i * 7919) % s->maximum()); }));
        }
        for (int i = 0; i < 60; ++i) {
            auto* s = panel.seqSlider();
            seq.push_back(timed(panel, [&] { s->setValue(1 + (i * 7919) % s->maximum()); }));
        }
        for (int i = 0; i < 10; ++i) {
            auto* p = panel.precisionBox();
            inputs.push_back(timed(panel, [&] { p->setCurrentIndex((p->currentIndex() + 1) % 3); }));
        }
        const auto b = stats(batch), q = stats(seq), m = stats(inputs);
        std::printf("%-22s %10.2f (max %6.2f) %10.2f (max %6.2f) %12.2f (max %6.2f)\n", source, b.median, b.worst,
                    q.median, q.worst, m.median, m.worst);
    }
    return 0;
}
