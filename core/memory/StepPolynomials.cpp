#include "memory/StepPolynomials.h"

#include <algorithm>
#include <map>

namespace tb {
namespace {

using Quadratic = std::array<std::int64_t, 3>;

const std::vector<std::int64_t>& values(const StepTrace& t, bool transient)
{
    return transient && !t.transient.empty() ? t.transient : t.live;
}

// Per entry, the quadratic in u through the traces at u = 1, 2, 3 (nullopt
// where the values are not on one with integer coefficients). The traces
// must agree in length and phases.
using TraceRow = std::array<const StepTrace*, 3>;

std::optional<std::vector<std::optional<Quadratic>>> quadratics(const TraceRow& row, bool transient)
{
    const auto n = row[0]->live.size();
    for (const auto* t : row) {
        if (t->live.size() != n || t->phase != row[0]->phase || values(*t, transient).size() != n) return std::nullopt;
    }
    const auto &x1 = values(*row[0], transient), &x2 = values(*row[1], transient), &x3 = values(*row[2], transient);
    std::vector<std::optional<Quadratic>> out(n);
    for (std::size_t k = 0; k < n; ++k) {
        const auto v1 = x1[k], v2 = x2[k], v3 = x3[k];
        const auto d2 = v3 - 2 * v2 + v1;
        if (d2 % 2 != 0) continue;
        const auto c2 = d2 / 2, c1 = v2 - v1 - 3 * c2;
        out[k] = Quadratic{v1 - c1 - c2, c1, c2};
    }
    return out;
}

int phaseOf(const StepTrace& t, std::size_t k) { return t.phase.empty() ? 0 : std::min<int>(t.phase[k], kStepPhases - 1); }

// The polynomials no other one of the same phase dominates coefficient by
// coefficient (B, u >= 1, so every monomial is positive), largest first.
std::array<std::vector<StepPoly>, kStepPhases> undominated(const std::vector<StepPoly>& all, const StepTrace& tags,
                                                          std::int64_t bMax, std::int64_t uMax)
{
    // Each evaluated once (a 7B step has thousands), then sorted.
    std::vector<std::pair<std::int64_t, std::size_t>> order(all.size());
    for (std::size_t k = 0; k < all.size(); ++k) order[k] = {evaluateStepPoly(all[k], bMax, uMax), k};
    std::stable_sort(order.begin(), order.end(), [](const auto& x, const auto& y) { return x.first > y.first; });
    std::array<std::vector<StepPoly>, kStepPhases> kept;
    for (const auto& [value, k] : order) {
        auto& phase = kept[static_cast<std::size_t>(phaseOf(tags, k))];
        const bool dominated = std::any_of(phase.begin(), phase.end(), [&](const StepPoly& q) {
            for (int i = 0; i < kStepMonomials; ++i) {
                if (q[i] < all[k][i]) return false;
            }
            return true;
        });
        if (!dominated) phase.push_back(all[k]);
    }
    return kept;
}

} // namespace

GemmCall GemmSite::at(std::int64_t B, std::int64_t u) const
{
    return {evaluateStepPoly(dims[0], B, u), evaluateStepPoly(dims[1], B, u), evaluateStepPoly(dims[2], B, u),
            evaluateStepPoly(dims[3], B, u), srcTransposed, weightsTransposed, accumulate};
}

std::int64_t CompiledSegment::phasePeak(int phase, std::int64_t B, std::int64_t T, bool withScratch, int threads,
                                        bool exactProducts) const
{
    const bool isSmall = B < generalFrom;
    const auto& polys = isSmall ? peaksSmall[static_cast<std::size_t>(B - 1)] : peaks;
    std::int64_t most = 0;
    const auto u = T - t0 + 1;
    for (const auto& p : polys[static_cast<std::size_t>(phase)]) most = std::max(most, evaluateStepPoly(p, B, u));
    if (withScratch && (!gemmSites.empty() || !gemmSitesSmall.empty())) {
        static const std::vector<GemmSite> none;
        const auto& sites = !isSmall ? gemmSites
            : static_cast<std::size_t>(B - 1) < gemmSitesSmall.size() ? gemmSitesSmall[static_cast<std::size_t>(B - 1)]
                                                                      : none;
        // Where this CPU sends no bf16 product to oneDNN there is no such
        // scratch; where it does but oneDNN cannot be asked (another build
        // read the plan), the largest each product took while tracing.
        const bool uses = cpuBf16ProductsUseOneDnn(), ask = exactProducts && uses && cpuGemmScratchKnown();
        for (const auto& g : sites) {
            if (g.phase != phase || !uses) continue;
            const auto base = evaluateStepPoly(g.base, B, u);
            most = std::max(most, base + (ask ? cpuGemmScratchBytes(g.at(B, u), threads) : g.traced));
        }
    }
    if (withScratch && irregularScratch > 0) {
        const auto& bases = isSmall ? scratchBasesSmall[static_cast<std::size_t>(B - 1)] : scratchBases;
        for (const auto& p : bases[static_cast<std::size_t>(phase)]) {
            most = std::max(most, evaluateStepPoly(p, B, T - t0 + 1) + irregularScratch);
        }
    }
    return most;
}

std::int64_t CompiledSegment::peak(std::int64_t B, std::int64_t T, int threads, bool exactProducts) const
{
    std::int64_t most = 0;
    for (int i = 0; i < kStepPhases; ++i) most = std::max(most, phasePeak(i, B, T, true, threads, exactProducts));
    return most;
}

bool CompiledSegment::hasProducts() const
{
    return !gemmSites.empty()
        || std::any_of(gemmSitesSmall.begin(), gemmSitesSmall.end(), [](const auto& v) { return !v.empty(); });
}

std::int64_t CompiledSegment::start(std::int64_t B, std::int64_t T) const
{
    return evaluateStepPoly(B < generalFrom ? firstSmall[static_cast<std::size_t>(B - 1)] : first, B, T - t0 + 1);
}

std::vector<std::pair<std::int64_t, std::int64_t>> segmentChecks(std::int64_t t0, std::int64_t tLast, std::int64_t bMax)
{
    bMax = std::max<std::int64_t>(bMax, 3);
    return {{5, t0 + 6}, {bMax, t0}, {bMax, tLast}, {2, tLast}, {(2 + bMax) / 2, (t0 + tLast) / 2}, {1, tLast},
            {1, (t0 + tLast) / 2}};
}

namespace {

// One regime's polynomials (B >= g, or one small B) for live and transient
// bytes, and which transient entries follow them.
struct Regime {
    std::vector<StepPoly> live, transient;
    std::vector<char> regular; // per entry: the transient is on its polynomial
    // Per entry: a bf16 product's scratch, known at any shape (empty where
    // no trace recorded a product).
    std::vector<std::optional<GemmSite>> gemm;
    const StepTrace* tags = nullptr;
    bool site(std::size_t k) const { return k < gemm.size() && gemm[k]; }
};

const GemmCall* gemmOf(const StepTrace& t, std::size_t k)
{
    return k < t.gemm.size() && t.gemm[k].m > 0 ? &t.gemm[k] : nullptr;
}

// The traces record the product that took a scratch: its shape, fitted like
// the live bytes (quadratic in u per batch, linear in B from g on), and
// oneDNN's scratch for it must be what the trace saw. rows: the traces at
// u = 1, 2, 3 for one batch (a small B), or for B = g and g + 1.
std::optional<GemmSite> fitGemmSite(const std::vector<const TraceRow*>& rows, std::size_t k, std::int64_t g)
{
    const GemmCall* first = gemmOf(*(*rows[0])[0], k);
    if (!first) return std::nullopt;
    std::array<std::array<Quadratic, 4>, 2> q{};
    std::int64_t traced = 0;
    for (std::size_t r = 0; r < rows.size(); ++r) {
        std::array<std::array<std::int64_t, 3>, 4> v{};
        for (std::size_t u = 0; u < 3; ++u) {
            const auto& t = *(*rows[r])[u];
            const GemmCall* c = gemmOf(t, k);
            if (!c || c->srcTransposed != first->srcTransposed || c->weightsTransposed != first->weightsTransposed
                || c->accumulate != first->accumulate || (c->batch > 0) != (first->batch > 0)) {
                return std::nullopt;
            }
            if (cpuGemmScratchBytes(*c) + t.live[k] != values(t, true)[k]) return std::nullopt;
            traced = std::max(traced, values(t, true)[k] - t.live[k]);
            v[0][u] = c->batch, v[1][u] = c->m, v[2][u] = c->k, v[3][u] = c->n;
        }
        for (std::size_t d = 0; d < 4; ++d) {
            const auto d2 = v[d][2] - 2 * v[d][1] + v[d][0];
            if (d2 % 2 != 0) return std::nullopt;
            const auto c2 = d2 / 2, c1 = v[d][1] - v[d][0] - 3 * c2;
            q[r][d] = Quadratic{v[d][0] - c1 - c2, c1, c2};
        }
    }
    GemmSite site;
    site.traced = traced;
    site.srcTransposed = first->srcTransposed;
    site.weightsTransposed = first->weightsTransposed;
    site.accumulate = first->accumulate;
    for (std::size_t d = 0; d < 4; ++d) {
        if (rows.size() == 1) {
            site.dims[d] = {q[0][d][0], q[0][d][1], q[0][d][2], 0, 0, 0};
            continue;
        }
        for (std::size_t j = 0; j < 3; ++j) {
            const auto slope = q[1][d][j] - q[0][d][j];
            site.dims[d][j] = q[0][d][j] - g * slope;
            site.dims[d][3 + j] = slope;
        }
    }
    return site;
}

// Sites of one product shape and phase: those whose live bytes another's
// dominate add nothing (the same scratch on less).
std::vector<GemmSite> undominatedSites(std::vector<GemmSite> all)
{
    std::vector<GemmSite> kept;
    for (const auto& s : all) {
        const auto sameCall = [&](const GemmSite& o) {
            return o.phase == s.phase && o.dims == s.dims && o.srcTransposed == s.srcTransposed
                && o.weightsTransposed == s.weightsTransposed && o.accumulate == s.accumulate;
        };
        const auto dominates = [](const StepPoly& a, const StepPoly& b) {
            for (int i = 0; i < kStepMonomials; ++i) {
                if (a[i] < b[i]) return false;
            }
            return true;
        };
        if (std::any_of(kept.begin(), kept.end(), [&](const GemmSite& o) { return sameCall(o) && dominates(o.base, s.base); })) {
            continue;
        }
        std::erase_if(kept, [&](const GemmSite& o) { return sameCall(o) && dominates(s.base, o.base); });
        kept.push_back(s);
    }
    return kept;
}

StepPoly inT(const Quadratic& q) { return {q[0], q[1], q[2], 0, 0, 0}; }

// Entries whose scratch a recorded bf16 product took, with its shape on
// polynomials and oneDNN's answer what each trace saw, samples and checks
// (`checked`, the traces of `checks`): known at any shape. Also where the
// scratch looked regular: at the shapes traced it may follow a polynomial by
// chance (the same blocking at a few batches) and leave it further out.
// regimes[B - 1] for B < g, then B >= g; traces[B - 1] for B up to g + 1.
void fitGemmSites(std::vector<Regime>& regimes, const std::vector<TraceRow>& traces,
                  const std::vector<std::pair<std::int64_t, const StepTrace*>>& checked,
                  const std::vector<std::pair<std::int64_t, std::int64_t>>& checks, std::int64_t g, std::int64_t t0)
{
    const auto recordsProducts = [](const StepTrace* t) { return !t->gemm.empty(); };
    const bool products = std::any_of(traces.begin(), traces.end(), [&](const TraceRow& row) {
        return std::any_of(row.begin(), row.end(), recordsProducts);
    });
    if (!products) return;
    const auto G = static_cast<std::size_t>(g - 1);
    for (std::size_t r = 0; r < regimes.size(); ++r) {
        auto& R = regimes[r];
        R.gemm.assign(R.regular.size(), std::nullopt);
        std::vector<const TraceRow*> rows{&traces[r]};
        if (r == G) rows.push_back(&traces[G + 1]);
        for (std::size_t k = 0; k < R.regular.size(); ++k) {
            if (R.regular[k] && R.transient[k] == R.live[k]) continue; // no scratch after this entry
            auto site = fitGemmSite(rows, k, g);
            if (!site) continue;
            for (std::size_t i = 0; i < checked.size() && site; ++i) {
                const auto& B = checked[i].first;
                const auto& t = *checked[i].second;
                if (static_cast<std::size_t>(std::min(B, g) - 1) != r) continue; // another regime's check
                const GemmCall* c = gemmOf(t, k);
                if (!c || !(*c == site->at(B, checks[i].second - t0 + 1))
                    || cpuGemmScratchBytes(*c) + t.live[k] != values(t, true)[k]) {
                    site.reset();
                    continue;
                }
                site->traced = std::max(site->traced, values(t, true)[k] - t.live[k]);
            }
            if (site) site->phase = phaseOf(*R.tags, k);
            R.gemm[k] = std::move(site);
        }
    }
}

} // namespace

std::optional<CompiledSegment> compileSegment(const StepTracer& trace, std::int64_t t0, std::int64_t tLast,
                                              std::int64_t bMax,
                                              const std::vector<std::pair<std::int64_t, std::int64_t>>& checks,
                                              std::int64_t generalFrom, bool polynomialSizes)
{
    std::map<std::pair<std::int64_t, std::int64_t>, StepTrace> kept;
    const auto source = [&](std::int64_t B, std::int64_t T) -> const StepTrace* {
        const auto it = kept.find({B, T});
        if (it != kept.end()) return &it->second;
        return &kept.emplace(std::pair{B, T}, trace(B, T)).first->second;
    };
    return compileSegmentInPlace(source, t0, tLast, bMax, checks, generalFrom, polynomialSizes);
}

namespace {

// The regimes from the samples' polynomials in T: B < g each on its own
// (index B - 1), then B >= g (index g - 1): linear in B through B = g and
// g + 1. live[r][k] and transient[r][k]: entry k's at B = r + 1.
std::vector<Regime> regimesOf(const std::vector<TraceRow>& traces,
                              const std::vector<std::vector<std::optional<Quadratic>>>& live,
                              const std::vector<std::vector<std::optional<Quadratic>>>& transient, std::int64_t g)
{
    const auto G = static_cast<std::size_t>(g - 1);
    std::vector<Regime> regimes(static_cast<std::size_t>(g));
    for (std::size_t r = 0; r < regimes.size(); ++r) {
        auto& R = regimes[r];
        R.tags = traces[r][0];
        const auto n = live[r].size();
        R.live.resize(n);
        R.transient.resize(n);
        R.regular.assign(n, 1);
        for (std::size_t k = 0; k < n; ++k) {
            const auto& a = r < G ? transient[r][k] : transient[G][k];
            const auto& next = r < G ? a : transient[G + 1][k];
            if (r < G) {
                R.live[k] = inT(*live[r][k]);
                if (a) R.transient[k] = inT(*a);
                else R.regular[k] = 0;
                continue;
            }
            const auto linear = [&](const Quadratic& at, const Quadratic& atNext) {
                StepPoly p{};
                for (int j = 0; j < 3; ++j) {
                    const auto slope = atNext[j] - at[j];
                    p[j] = at[j] - g * slope; // B^0
                    p[3 + j] = slope;         // B^1
                }
                return p;
            };
            R.live[k] = linear(*live[G][k], *live[G + 1][k]);
            if (a && next) R.transient[k] = linear(*a, *next);
            else R.regular[k] = 0;
        }
    }
    return regimes;
}

// A regime's peaks: its live totals and regular transients, undominated per
// phase; its irregular entries' live totals as scratch bases; its products'
// sites.
void compileRegime(const Regime& R, std::int64_t bMax, std::int64_t uMax,
                   std::array<std::vector<StepPoly>, kStepPhases>& peaks,
                   std::array<std::vector<StepPoly>, kStepPhases>& bases, std::vector<GemmSite>& sites)
{
    std::vector<StepPoly> candidates = R.live;
    StepTrace tags, baseTags; // (their phases only)
    tags.phase = R.tags->phase;
    std::vector<StepPoly> irregular;
    for (std::size_t k = 0; k < R.live.size(); ++k) {
        if (R.site(k)) {
            sites.push_back(*R.gemm[k]);
            sites.back().base = R.live[k];
        } else if (R.regular[k]) {
            if (R.transient[k] == R.live[k]) continue; // no scratch after this entry
            candidates.push_back(R.transient[k]);
            if (!tags.phase.empty()) tags.phase.push_back(R.tags->phase[k]);
        } else {
            irregular.push_back(R.live[k]);
            if (!R.tags->phase.empty()) baseTags.phase.push_back(R.tags->phase[k]);
        }
    }
    peaks = undominated(candidates, tags, bMax, uMax);
    bases = undominated(irregular, baseTags, bMax, uMax);
    sites = undominatedSites(std::move(sites));
}

} // namespace

std::optional<CompiledSegment> compileSegmentInPlace(const StepTraceSource& trace, std::int64_t t0, std::int64_t tLast,
                                                     std::int64_t bMax,
                                                     const std::vector<std::pair<std::int64_t, std::int64_t>>& checks,
                                                     std::int64_t generalFrom, bool polynomialSizes)
{
    const auto g = std::max<std::int64_t>(generalFrom, 2);
    bMax = std::max<std::int64_t>(bMax, g + 1);
    CompiledSegment out;
    out.t0 = t0;
    out.tLast = tLast;
    out.generalFrom = g;
    // traces[B - 1][u - 1] for B from 1 to g + 1.
    std::vector<TraceRow> traces(static_cast<std::size_t>(g + 1));
    std::vector<std::vector<std::optional<Quadratic>>> live, transient;
    for (std::int64_t b = 1; b <= g + 1; ++b) {
        auto& row = traces[static_cast<std::size_t>(b - 1)];
        for (int u = 0; u < 3; ++u) row[static_cast<std::size_t>(u)] = trace(b, t0 + u);
        out.traces += 3;
        auto l = quadratics(row, false);
        auto t = quadratics(row, true);
        if (!l || !t) return std::nullopt;
        // Every live total must be on its polynomial; a transient may not be.
        if (std::any_of(l->begin(), l->end(), [](const auto& q) { return !q; })) return std::nullopt;
        live.push_back(std::move(*l));
        transient.push_back(std::move(*t));
    }
    const auto G = static_cast<std::size_t>(g - 1);
    if (live[G].size() != live[G + 1].size() || traces[G][0]->phase != traces[G + 1][0]->phase) return std::nullopt;
    auto regimes = regimesOf(traces, live, transient, g);
    // Checked where no sample was taken: a live total off its polynomial
    // fails the segment; a transient off its one is irregular scratch.
    // Except, where every size is a polynomial (polynomialSizes), where the
    // polynomial falls under the entry's live total and the transient is
    // that total: an entry's transient is then the larger of its live total
    // and a block allocated and freed after releases (the weight gradient's
    // fp32 copy after an activation's release, in mixed precision), which
    // the other can outgrow with the batch. Where every general sample's
    // transient was that block's (above the live total, no product's
    // scratch), the polynomial is the block's, and the larger of the two is
    // what the peak takes.
    std::vector<char> aboveLive(live[G].size(), polynomialSizes ? 1 : 0);
    for (const auto* row : {&traces[G], &traces[G + 1]}) {
        for (const auto* t : *row) {
            const auto& tv = values(*t, true);
            for (std::size_t k = 0; k < aboveLive.size(); ++k) {
                if (tv[k] <= t->live[k] || gemmOf(*t, k)) aboveLive[k] = 0;
            }
        }
    }
    const auto regimeOf = [&](std::int64_t B) -> Regime& { return regimes[static_cast<std::size_t>(std::min(B, g) - 1)]; };
    std::vector<std::pair<std::int64_t, const StepTrace*>> checked;
    for (const auto& [B, T] : checks) {
        checked.emplace_back(B, trace(B, T));
        const auto& t = *checked.back().second;
        ++out.traces;
        auto& R = regimeOf(B);
        if (t.live.size() != R.live.size() || t.phase != R.tags->phase) return std::nullopt;
        const auto& tv = values(t, true);
        const bool general = B >= g;
        for (std::size_t k = 0; k < R.live.size(); ++k) {
            if (evaluateStepPoly(R.live[k], B, T - t0 + 1) != t.live[k]) return std::nullopt;
            if (!R.regular[k]) continue;
            const auto predicted = evaluateStepPoly(R.transient[k], B, T - t0 + 1);
            const bool underLive = general && aboveLive[k] && predicted < t.live[k] && tv[k] == t.live[k];
            if (predicted != tv[k] && !underLive) R.regular[k] = 0;
        }
    }
    fitGemmSites(regimes, traces, checked, checks, g, t0);
    // The largest irregular scratch in the checks (once every check has said
    // which entries are irregular) and in the samples.
    for (const auto& [B, t] : checked) {
        const auto& R = regimeOf(B);
        const auto& tv = values(*t, true);
        for (std::size_t k = 0; k < R.regular.size(); ++k) {
            if (!R.regular[k] && !R.site(k)) out.irregularScratch = std::max(out.irregularScratch, tv[k] - t->live[k]);
        }
    }
    for (std::size_t r = 0; r < traces.size(); ++r) {
        const auto& R = regimes[std::min(r, G)];
        for (const auto* t : traces[r]) {
            const auto& tv = values(*t, true);
            for (std::size_t k = 0; k < R.regular.size() && k < tv.size(); ++k) {
                if (!R.regular[k] && !R.site(k)) out.irregularScratch = std::max(out.irregularScratch, tv[k] - t->live[k]);
            }
        }
    }
    const auto uMax = tLast - t0 + 1;
    compileRegime(regimes[G], bMax, uMax, out.peaks, out.scratchBases, out.gemmSites);
    if (!regimes[G].live.empty()) out.first = regimes[G].live.front();
    for (std::size_t r = 0; r < G; ++r) {
        out.peaksSmall.emplace_back();
        out.scratchBasesSmall.emplace_back();
        out.gemmSitesSmall.emplace_back();
        compileRegime(regimes[r], bMax, uMax, out.peaksSmall.back(), out.scratchBasesSmall.back(), out.gemmSitesSmall.back());
        out.firstSmall.push_back(regimes[r].live.empty() ? StepPoly{} : regimes[r].live.front());
    }
    if (out.irregularScratch == 0) {
        for (auto& b : out.scratchBases) b.clear();
        for (auto& s : out.scratchBasesSmall) for (auto& b : s) b.clear();
    }
    return out;
}

} // namespace tb
