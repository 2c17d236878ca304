#pragma once
// A model's layers as one more dimension of its step program
// (memory/StepProgram.h). Each layer repeats what the one before it
// allocates and releases: the step with three layers is the step with two
// with one more layer's events in each place where the layers' events run
// (the blocks live as the step starts, the forward, the backward, the
// optimizer), and the same for four. A LayerRepeat is found from the step
// recorded with two layers and with three at the same widths: the runs
// (two layers' worth of items that repeat, in each of the record's three
// lists), each release's block as a function of its layer and the layer
// count, and the few numbers that grow with the layer count (the gradient
// clip's stack of one norm a parameter). It then writes the step, or the
// program, with any number of layers, so that a 7B model's 32 layers are
// never run: a step of three layers and one of four at small widths check
// it (train/DerivedPlan.cpp). No LibTorch here.

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "memory/StepProgram.h"

namespace tb {

class LayerRepeat {
public:
    // From the same model's step recorded with two layers and with three at
    // the same widths; nullopt (why says where) where the three-layer step is
    // not the two-layer step with one layer's items repeated.
    static std::optional<LayerRepeat> find(const RecordedStep& two, const RecordedStep& three, std::string& why);

    // The step with `layers` layers (at least 2), from `two` (the step the
    // repeat was found on, or the same model's at other widths): numbers are
    // copied from the item each repeats; a number that grows with the layers
    // grows as it did from two layers to three.
    RecordedStep expand(const RecordedStep& two, int layers) const;

    // The program with `layers` layers from the two-layer program (whose
    // shape is the step the repeat was found on): each number takes the
    // formula of the number it repeats. nullopt (why) where a number that
    // grows with the layers also moves with a width (no formula for both).
    std::optional<StepProgram> expand(const StepProgram& two, int layers, std::string& why) const;

    // Items a layer adds: residents, events, parameters.
    std::array<std::size_t, 3> itemsPerLayer() const;

    // In the two-layer record: `copies` layers' items from `start`, each
    // `length` long (1 where the layers' items differ in the layer nearest
    // the embeddings: its backward frees what the model's layers share).
    struct Run {
        std::size_t start = 0, length = 0;
        int copies = 2;
        std::size_t end() const { return start + static_cast<std::size_t>(copies) * length; }
    };
    // Which block a release frees (by the layer it is in and the layer
    // count): a block outside the runs, or a run's item at layer
    // alpha * layer + beta * layers + gamma (outside the run: the block
    // outside it that the step releases there).
    struct Target {
        bool inRun = false;
        int list = 0;                 // 0 the residents, 1 the events
        std::int64_t plain = -1;      // not in a run: the block's item in the two-layer record (-1: made before recording)
        std::size_t run = 0, offset = 0;
        int alpha = 0, beta = 0, gamma = 0;
        std::int64_t below = -1, above = -1; // the item released where the layer falls before or after the run
    };

private:
    std::array<std::vector<Run>, 3> runs_;
    // Per event of the two-layer record that releases a block (a run's:
    // its first layer's): which block.
    std::vector<Target> targets_;
    // Per item of the two-layer record outside the runs (residents, events,
    // parameters): how much each of its numbers grows a layer (empty: none).
    std::array<std::vector<std::vector<std::int64_t>>, 3> growth_;
};

} // namespace tb
