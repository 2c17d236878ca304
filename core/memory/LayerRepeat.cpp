#include "memory/LayerRepeat.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <utility>

namespace tb {
namespace {

enum List : int { Residents = 0, Events = 1, Parameters = 2 };
using Runs = std::vector<LayerRepeat::Run>;

std::size_t listSize(const RecordedStep& s, int list)
{
    return list == Residents ? s.resident.size() : list == Events ? s.events.size() : s.parameterElements.size();
}

// An item's numbers, in a fixed order (an event: bytes, the product's batch,
// m, k, n, the query's four sizes; a parameter: elements, trainable bytes).
std::vector<std::int64_t> itemNumbers(const RecordedStep& s, int list, std::size_t i)
{
    if (list == Residents) return {s.resident[i]};
    if (list == Parameters) return {s.parameterElements[i], s.trainableBytes[i]};
    const auto& e = s.events[i];
    return {e.bytes, e.gemm.batch, e.gemm.m, e.gemm.k, e.gemm.n, e.shape[0], e.shape[1], e.shape[2], e.shape[3]};
}

void setItemNumbers(RecordedStep& s, int list, std::size_t i, const std::vector<std::int64_t>& v)
{
    if (list == Residents) {
        s.resident[i] = v[0];
    } else if (list == Parameters) {
        s.parameterElements[i] = v[0];
        s.trainableBytes[i] = v[1];
    } else {
        auto& e = s.events[i];
        e.bytes = v[0];
        e.gemm.batch = v[1];
        e.gemm.m = v[2];
        e.gemm.k = v[3];
        e.gemm.n = v[4];
        for (std::size_t d = 0; d < 4; ++d) e.shape[d] = v[5 + d];
    }
}

// The same kind of item, numbers aside (which block a release frees aside too).
bool alike(const RecordedStep& a, std::size_t i, const RecordedStep& b, std::size_t j, int list)
{
    if (list != Events) return itemNumbers(a, list, i) == itemNumbers(b, list, j);
    const auto &x = a.events[i], &y = b.events[j];
    return (x.bytes > 0) == (y.bytes > 0) && (x.bytes < 0) == (y.bytes < 0) && x.phase == y.phase && a.opName(x) == b.opName(y)
        && x.elementBytes == y.elementBytes && x.firstInOp == y.firstInOp && x.opDtype == y.opDtype && x.autocast == y.autocast
        && x.opDropout == y.opDropout && x.hasShape == y.hasShape && x.rule == y.rule && (x.gemm.m != 0) == (y.gemm.m != 0)
        && (x.gemm.batch != 0) == (y.gemm.batch != 0) && x.gemm.srcTransposed == y.gemm.srcTransposed
        && x.gemm.weightsTransposed == y.gemm.weightsTransposed && x.gemm.accumulate == y.gemm.accumulate;
}

bool same(const RecordedStep& a, std::size_t i, const RecordedStep& b, std::size_t j, int list)
{
    return alike(a, i, b, j, list) && itemNumbers(a, list, i) == itemNumbers(b, list, j);
}

// The runs of one list: walking both records, where they part the
// three-layer one holds one more layer's items, `c` of them, the same as the
// c before that point in the two-layer record: of the c for which that
// holds, the one after which the records go on alike the longest (a layer
// holds short stretches that repeat within it). Items alike with other
// numbers are a number that grows with the layers.
std::optional<Runs> findRuns(const RecordedStep& two, const RecordedStep& three, int list, std::string& why)
{
    const auto n2 = listSize(two, list), n3 = listSize(three, list);
    Runs runs;
    std::size_t i = 0, j = 0;
    // How far the records go on alike after c items inserted (past both ends: more than any).
    const auto alikeAfter = [&](std::size_t c) {
        for (std::size_t t = 0; t < c; ++t) {
            if (!same(two, i - c + t, three, j + t, list)) return std::size_t{0};
        }
        std::size_t m = 0;
        while (i + m < n2 && j + c + m < n3 && alike(two, i + m, three, j + c + m, list)) ++m;
        return i + m == n2 && j + c + m == n3 ? n2 + n3 + 1 : m;
    };
    while (i < n2 || j < n3) {
        if (i < n2 && j < n3 && same(two, i, three, j, list)) {
            ++i, ++j;
            continue;
        }
        std::size_t best = 0, bestAfter = 0;
        for (std::size_t c = 1; c <= i && j + c <= n3; ++c) {
            if (const auto m = alikeAfter(c); m > bestAfter) best = c, bestAfter = m;
        }
        if (best > 0) {
            const auto c = best;
            bool twice = 2 * c <= i;
            for (std::size_t t = 0; t < c && twice; ++t) twice = same(two, i - 2 * c + t, two, i - c + t, list);
            const int copies = twice ? 2 : 1;
            auto start = i - static_cast<std::size_t>(copies) * c;
            const std::size_t floor = runs.empty() ? 0 : runs.back().end();
            if (start >= floor) {
                // As early as the repetition allows (the point where the
                // records part can be a few items into the layer after).
                while (start > floor && same(two, start - 1, two, start - 1 + c, list)) --start;
                runs.push_back({start, c, copies});
                j += c;
                continue;
            }
        }
        if (i < n2 && j < n3 && alike(two, i, three, j, list)) {
            ++i, ++j;
            continue;
        }
        static const char* names[] = {"block live as the step starts", "event", "parameter"};
        why = std::string("the step with three layers is not the step with two with one more layer's items: ") + names[list] + " "
            + std::to_string(j) + " of " + std::to_string(n3) + " (" + std::to_string(i) + " of " + std::to_string(n2)
            + " with two) repeats nothing";
        return std::nullopt;
    }
    return runs;
}

// Where an item of the record with `layers` layers is: outside every run
// (plain: its item in the two-layer record), or a run's item at a layer.
struct Coord {
    bool inRun = false;
    std::size_t plain = 0, run = 0, offset = 0;
    int layer = 0;
    bool operator==(const Coord&) const = default;
};

Coord coordOf(const Runs& runs, std::size_t pos, int layers)
{
    std::size_t shift = 0;
    for (std::size_t r = 0; r < runs.size(); ++r) {
        const auto start = runs[r].start + shift, c = runs[r].length;
        if (pos < start) break;
        if (pos < start + static_cast<std::size_t>(runs[r].copies + layers - 2) * c) {
            return {true, 0, r, (pos - start) % c, static_cast<int>((pos - start) / c)};
        }
        shift += static_cast<std::size_t>(layers - 2) * c;
    }
    return {false, pos - shift, 0, 0, 0};
}

std::size_t posOf(const Runs& runs, const Coord& at, int layers)
{
    std::size_t shift = 0;
    for (std::size_t r = 0; r < runs.size(); ++r) {
        if (at.inRun ? r == at.run : runs[r].start > at.plain) {
            return at.inRun ? runs[r].start + shift + static_cast<std::size_t>(at.layer) * runs[r].length + at.offset : at.plain + shift;
        }
        shift += static_cast<std::size_t>(layers - 2) * runs[r].length;
    }
    return at.plain + shift;
}

// A record's items in order, each with its coordinates and the two-layer
// item it repeats.
template <typename Visit>
void walk(const Runs& runs, std::size_t n2, int layers, Visit&& visit)
{
    std::size_t p = 0;
    for (const auto& run : runs) {
        for (; p < run.start; ++p) visit(Coord{false, p, 0, 0, 0}, p);
        const auto index = static_cast<std::size_t>(&run - runs.data());
        for (int q = 0; q < run.copies + layers - 2; ++q) {
            const auto from = run.start + static_cast<std::size_t>(std::min(q, run.copies - 1)) * run.length;
            for (std::size_t o = 0; o < run.length; ++o) visit(Coord{true, 0, index, o, q}, from + o);
        }
        p = run.end();
    }
    for (; p < n2; ++p) visit(Coord{false, p, 0, 0, 0}, p);
}

// The block a release frees, as a list and coordinates (list -1: made before recording).
struct BlockAt {
    int list = -1;
    Coord at;
};

std::vector<std::size_t> allocationEvents(const RecordedStep& s)
{
    std::vector<std::size_t> out;
    for (std::size_t i = 0; i < s.events.size(); ++i) {
        if (s.events[i].bytes > 0) out.push_back(i);
    }
    return out;
}

BlockAt blockAt(const std::array<Runs, 3>& runs, const RecordedStep& s, const std::vector<std::size_t>& allocations,
                std::int32_t block, int layers)
{
    if (block < 0) return {};
    const auto b = static_cast<std::size_t>(block);
    if (b < s.resident.size()) return {Residents, coordOf(runs[Residents], b, layers)};
    // (A block past the record's own is none of them: the check of the result fails.)
    if (b - s.resident.size() >= allocations.size()) return {};
    return {Events, coordOf(runs[Events], allocations[b - s.resident.size()], layers)};
}

} // namespace

std::array<std::size_t, 3> LayerRepeat::itemsPerLayer() const
{
    std::array<std::size_t, 3> out{};
    for (int l = 0; l < 3; ++l) {
        for (const auto& r : runs_[static_cast<std::size_t>(l)]) out[static_cast<std::size_t>(l)] += r.length;
    }
    return out;
}

std::optional<LayerRepeat> LayerRepeat::find(const RecordedStep& two, const RecordedStep& three, std::string& why)
{
    LayerRepeat out;
    for (int list = 0; list < 3; ++list) {
        auto runs = findRuns(two, three, list, why);
        if (!runs) return std::nullopt;
        out.runs_[static_cast<std::size_t>(list)] = std::move(*runs);
    }
    // What grows: each item outside the runs against the same item with three layers.
    for (int list = 0; list < 3; ++list) {
        const auto& runs = out.runs_[static_cast<std::size_t>(list)];
        auto& growth = out.growth_[static_cast<std::size_t>(list)];
        growth.assign(listSize(two, list), {});
        bool fits = listSize(three, list) == listSize(two, list) + out.itemsPerLayer()[static_cast<std::size_t>(list)];
        std::size_t k = 0;
        walk(runs, listSize(two, list), 3, [&](const Coord& at, std::size_t from) {
            const auto pos = k++;
            if (!fits || pos >= listSize(three, list)) return void(fits = false);
            if (at.inRun) return void(fits = fits && same(two, from, three, pos, list));
            if (!alike(two, from, three, pos, list)) return void(fits = false);
            const auto a = itemNumbers(two, list, from), b = itemNumbers(three, list, pos);
            if (a == b) return;
            auto& g = growth[from];
            for (std::size_t f = 0; f < a.size(); ++f) g.push_back(b[f] - a[f]);
        });
        if (!fits) {
            why = "the step with three layers is not the step with two with one more layer's items repeated in place";
            return std::nullopt;
        }
    }
    // Each release's block by its layer and the layer count, from both records.
    struct Seen {
        int layers, layer;
        BlockAt target;
    };
    std::map<std::size_t, std::vector<Seen>> seen; // by the release's key: its item, or its run's first layer's item
    const auto& evRuns = out.runs_[Events];
    for (const auto* s : {&two, &three}) {
        const int layers = s == &two ? 2 : 3;
        const auto allocations = allocationEvents(*s);
        for (std::size_t i = 0; i < s->events.size(); ++i) {
            const auto& e = s->events[i];
            if (e.bytes >= 0) continue;
            const auto at = coordOf(evRuns, i, layers);
            const auto key = at.inRun ? evRuns[at.run].start + at.offset : at.plain;
            seen[key].push_back({layers, at.layer, blockAt(out.runs_, *s, allocations, e.block, layers)});
        }
    }
    out.targets_.assign(two.events.size(), {});
    for (const auto& [key, obs] : seen) {
        Target t;
        const auto run = std::find_if(obs.begin(), obs.end(), [](const Seen& o) { return o.target.at.inRun; });
        if (run == obs.end()) {
            const auto& first = obs.front().target;
            t.list = first.list;
            t.plain = first.list < 0 ? -1 : static_cast<std::int64_t>(first.at.plain);
            const bool fixed = std::all_of(obs.begin(), obs.end(), [&](const Seen& o) { return o.target.list == first.list && o.target.at == first.at; });
            if (!fixed) {
                why = "a release frees other blocks with two layers and with three (event " + std::to_string(key) + ")";
                return std::nullopt;
            }
            out.targets_[key] = t;
            continue;
        }
        const bool inRunKey = coordOf(evRuns, key, 2).inRun;
        bool found = false;
        for (const int alpha : {1, -1, 0}) {
            if (!inRunKey && alpha != 0) continue;
            // Counted from the run's start (alpha 1: the same layer, or a
            // fixed distance on) or its end (alpha -1: the backward's order).
            for (const int beta : {0, 1}) {
                if ((alpha == 1 && beta == 1) || (alpha == -1 && beta == 0)) continue;
                for (const int gamma : {0, -1, 1, -2, 2, -3, 3}) {
                    Target c;
                    c.inRun = true;
                    c.list = run->target.list;
                    c.run = run->target.at.run;
                    c.offset = run->target.at.offset;
                    c.alpha = alpha, c.beta = beta, c.gamma = gamma;
                    c.below = c.above = -2;
                    bool fits = true;
                    const int copies = out.runs_[static_cast<std::size_t>(c.list)][c.run].copies;
                    for (const auto& o : obs) {
                        const int q = alpha * o.layer + beta * o.layers + gamma;
                        if (q >= 0 && q < copies + o.layers - 2) {
                            fits = fits && o.target.list == c.list && o.target.at == Coord{true, 0, c.run, c.offset, q};
                            continue;
                        }
                        auto& edge = q < 0 ? c.below : c.above;
                        const auto plain = o.target.list < 0 ? -1 : static_cast<std::int64_t>(o.target.at.plain);
                        fits = fits && (o.target.list < 0 || (o.target.list == c.list && !o.target.at.inRun)) && (edge == -2 || edge == plain);
                        edge = plain;
                    }
                    if (fits) {
                        t = c;
                        found = true;
                        break;
                    }
                }
                if (found) break;
            }
            if (found) break;
        }
        if (!found) {
            why = "a release in the layers frees a block that follows no layer (event " + std::to_string(key) + ")";
            return std::nullopt;
        }
        out.targets_[key] = t;
    }
    // The step with three layers written from the step with two must be it.
    const auto again = out.expand(two, 3);
    StepProgram check;
    check.shape = again;
    for (const auto v : stepNumbers(again)) check.numbers.push_back(DimFormula{v, {}});
    if (auto diff = programDifference(check, three, {}); !diff.empty()) {
        why = "the step with three layers written from the step with two is not the one recorded: " + diff;
        return std::nullopt;
    }
    return out;
}

RecordedStep LayerRepeat::expand(const RecordedStep& two, int layers) const
{
    RecordedStep out;
    out.ops = two.ops;
    const auto grow = [&](int list, std::size_t from, std::vector<std::int64_t> v) {
        const auto& g = growth_[static_cast<std::size_t>(list)][from];
        for (std::size_t f = 0; f < g.size(); ++f) v[f] += static_cast<std::int64_t>(layers - 2) * g[f];
        return v;
    };
    walk(runs_[Residents], two.resident.size(), layers, [&](const Coord& at, std::size_t from) {
        out.resident.push_back(at.inRun ? two.resident[from] : grow(Residents, from, {two.resident[from]})[0]);
    });
    walk(runs_[Parameters], two.parameterElements.size(), layers, [&](const Coord& at, std::size_t from) {
        auto v = itemNumbers(two, Parameters, from);
        if (!at.inRun) v = grow(Parameters, from, v);
        out.parameterElements.push_back(v[0]);
        out.trainableBytes.push_back(v[1]);
    });
    std::vector<BlockAt> targets;
    walk(runs_[Events], two.events.size(), layers, [&](const Coord& at, std::size_t from) {
        out.events.push_back(two.events[from]);
        if (!at.inRun) setItemNumbers(out, Events, out.events.size() - 1, grow(Events, from, itemNumbers(two, Events, from)));
        BlockAt target;
        if (two.events[from].bytes < 0) {
            const auto& t = targets_[at.inRun ? runs_[Events][at.run].start + at.offset : from];
            if (!t.inRun) {
                if (t.plain >= 0) target = {t.list, Coord{false, static_cast<std::size_t>(t.plain), 0, 0, 0}};
            } else {
                const int q = t.alpha * at.layer + t.beta * layers + t.gamma;
                const auto edge = q < 0 ? t.below : t.above;
                if (q >= 0 && q < runs_[static_cast<std::size_t>(t.list)][t.run].copies + layers - 2) {
                    target = {t.list, Coord{true, 0, t.run, t.offset, q}};
                } else if (edge >= 0) {
                    target = {t.list, Coord{false, static_cast<std::size_t>(edge), 0, 0, 0}};
                }
            }
        }
        targets.push_back(target);
    });
    std::vector<std::int32_t> blockOfEvent(out.events.size(), -1);
    auto next = static_cast<std::int32_t>(out.resident.size());
    for (std::size_t i = 0; i < out.events.size(); ++i) {
        if (out.events[i].bytes > 0) blockOfEvent[i] = next++;
    }
    for (std::size_t i = 0; i < out.events.size(); ++i) {
        auto& e = out.events[i];
        if (e.bytes >= 0) continue;
        const auto& t = targets[i];
        if (t.list < 0) {
            e.block = -1;
        } else {
            const auto pos = posOf(runs_[static_cast<std::size_t>(t.list)], t.at, layers);
            e.block = t.list == Residents ? static_cast<std::int32_t>(pos) : pos < blockOfEvent.size() ? blockOfEvent[pos] : -1;
        }
    }
    return out;
}

std::optional<StepProgram> LayerRepeat::expand(const StepProgram& two, int layers, std::string& why) const
{
    // Which of the two-layer program's numbers each number repeats: the
    // program with each number's index (+1, keeping its sign; 0 stays 0) in
    // place of its formula, expanded with nothing grown.
    const auto base = two.at(two.base);
    const auto values = stepNumbers(base);
    StepProgram tagged;
    tagged.shape = base;
    for (std::size_t k = 0; k < values.size(); ++k) {
        const auto tag = values[k] == 0 ? 0 : static_cast<std::int64_t>(k + 1);
        tagged.numbers.push_back(DimFormula{values[k] < 0 ? -tag : tag, {}});
    }
    LayerRepeat noGrowth = *this;
    for (auto& list : noGrowth.growth_) {
        for (auto& g : list) g.clear();
    }
    const auto tags = stepNumbers(noGrowth.expand(tagged.at(two.base), layers));
    StepProgram out;
    out.base = two.base;
    out.shape = expand(base, layers);
    const auto grown = stepNumbers(out.shape);
    if (grown.size() != tags.size()) {
        why = "the program with " + std::to_string(layers) + " layers has other numbers than its step";
        return std::nullopt;
    }
    out.numbers.reserve(tags.size());
    for (std::size_t k = 0; k < tags.size(); ++k) {
        const auto from = tags[k] == 0 ? std::size_t{0} : static_cast<std::size_t>(std::abs(tags[k]) - 1);
        if (tags[k] == 0) {
            out.numbers.push_back(DimFormula{0, {}});
            continue;
        }
        const auto& f = two.numbers[from];
        if (grown[k] == values[from]) {
            out.numbers.push_back(f);
        } else if (f.axes.empty()) {
            out.numbers.push_back(DimFormula{grown[k], {}});
        } else {
            why = "a number that grows with the layers moves with a width too";
            return std::nullopt;
        }
    }
    out.indexFormulas();
    return out;
}

} // namespace tb
