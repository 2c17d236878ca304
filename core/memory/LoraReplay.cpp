// One training step with LoRA: the base weights, norms and embeddings are
// frozen, so autograd keeps a tensor only where something downstream requires
// grad (a frozen projection keeps nothing of its own for backward, an adapted
// one keeps its input and its rank-r product), and a block whose input
// carries no gradient (the first one, after a frozen embedding) saves nothing
// before its first adapter. Measured with trainbench-cli measure --trace; the
// backward pass is modelled per block (gradients in flight, then the block's
// saved tensors released), slightly on the safe side.
//
// Under autocast (fp16/bf16 mixed) the projections, attention products and
// their saved inputs are in the low dtype, norms and the residual stream fp32
// (see MixedPrecisionReplay.cpp). A frozen weight's cast is made for every
// use: it is saved only when the projection's input requires grad, since the
// input's gradient needs it. The adapters' weights require grad, so their
// casts are cached until the forward ends and saved where their input needs a
// gradient; an adapter makes its own cast of an fp32 input and saves it for
// A's gradient, while the frozen product's cast is a temporary.

#include <algorithm>
#include <initializer_list>
#include <utility>

#include "memory/Replay.h"

namespace tb::memory_detail {

void replayLoraStep(Replay& r, const ArchitectureSpec& A, const TrainingSetup& S, const LoraShape& d,
                    GradientLife& grads)
{
    const bool llama = A.family == "llama";
    const bool rope = llama || A.positional == "rope";
    const bool drop = S.dropout > 0.0;
    const bool mixed = d.mixed;
    // Pure bf16 on a Llama-family model (train/Llama.cpp, as transformers
    // computes it): RMSNorm works on an fp32 copy of its input and saves that
    // copy (with its square while mean saves it, 1.13, and rsqrt) instead of
    // the bf16 input, so no norm keeps the residual stream: a block's input
    // and its mid-block sum go when it returns (a checkpoint keeps the input).
    // The softmax (and the dropout of the probabilities) runs in fp32 and is
    // cast back.
    const bool pureLlama = d.pure && llama;
    // fp32 softmax, probabilities cast down: the Llama family and GPT-NeoX ask
    // for it, CUDA's autocast does it anyway.
    const bool softmax32 = (mixed && (llama || A.fp32Softmax || S.gpu)) || (d.pure && (llama || A.fp32Softmax));
    // GPT-NeoX's layer: the attention output is a local until the layer
    // returns, and the parallel one feeds ln2 the layer's input.
    const bool neox = A.neoxLayer, parallel = neox && A.parallelResidual;
    const std::int64_t a32 = 2 * d.a;                                // pure: a bf16 tensor's fp32 copy
    const std::int64_t sq32 = meanSavesInput(S) ? a32 : 0;
    const std::int64_t normSaved = pureLlama ? a32 + sq32 + d.m : 0; // what a pure norm saves for its input's gradient
    const std::int64_t rng = rngStateBytes(S);
    const std::int64_t sq = meanSavesInput(S) ? d.a : 0; // RMSNorm's x^2 while saved (1.13)
    const std::int64_t C = A.hidden, F = A.intermediate, V = A.vocabSize, KV = A.kvHeads * A.headDim();
    const std::int64_t rank = S.loraRank;
    // Bytes per element of the projections' outputs: fp32, or fp16/bf16 under
    // autocast and in pure bf16.
    const std::int64_t lowBytes = d.ah / (d.bt * C);
    // SDPA's fused kernel (FusedAttention.h), or its math fallback (Replay.h).
    const auto fused = fusedAttentionBytes(A, S, lowBytes, !r.recording());
    const bool math = fused.math;
    auto mathShape = mathAttention(A, S, lowBytes);
    const bool eager = !fused.fused && !math; // the eager path's maps and products
    // Grouped-query keys and values expanded as copies (the math fallback
    // takes one key/value head's stride-0 view to fp32 as it is).
    const bool expands = math ? llama && A.kvHeads < A.heads && A.kvHeads > 1 : gqaExpandCopies(A, S.batch, !fused.fused);
    // In fp32 the math fallback's bmm may save v itself: qkv (GPT), the
    // expanded values, or the v projection (Llama) stay with it.
    mathShape.callerValues = !llama ? 3 * d.ah : expands ? d.ah : d.akvh;
    // (Kept when the attention needs a gradient.)
    const std::int64_t extraAttention = sdpaExtraModuleBytes(A, fused, mathShape);
    const bool folds = eager && matmulFoldsViews(S.batch, A.heads); // head-split views go to bmm uncopied
    // Logits in fp16/bf16 (mixed and pure bf16) are cast up for the fp32 loss.
    const bool lowLogits = d.lgh != d.lg;
    const auto has = [&](const char* name) {
        return std::find(S.loraTargets.begin(), S.loraTargets.end(), name) != S.loraTargets.end();
    };
    const auto act = [&](std::int64_t b) { r.add(Activations, b); };
    const auto tmp = [&](std::int64_t b) { r.add(Workspace, b); };
    const auto untmp = [&](std::int64_t b) { r.sub(Workspace, b); };
    const auto keep = [&](std::int64_t b) { // a temporary that autograd turns out to save
        r.sub(Workspace, b);
        r.add(Activations, b);
    };
    const auto keepOrFree = [&](bool saved, std::int64_t b) { saved ? keep(b) : untmp(b); };
    // Further attention modules' share (extraAttention), kept when the
    // attention needs a gradient.
    const auto keepExtraAttention = [&](bool gAttn) {
        tmp(extraAttention);
        keepOrFree(gAttn, extraAttention);
    };
    // The fused kernel's output and log-sum-exp (the inputs' gradient needs
    // them), and the heads merged after it (a copy where the output is [B,
    // H, T, D]); the output projection's input otherwise is the output itself.
    // Leaves the merged heads in the workspace.
    const auto fusedForward = [&] {
        tmp(fused.out);
        tmp(fused.lse);
        r.scratch(fused.forwardScratch);
        if (fused.mergeCopies) tmp(d.ah);
    };
    // After the output projection: the output kept by the kernel (when the
    // attention needs a gradient) or as the projection's input, the merged
    // copy by an adapted projection. Returns what the projection alone keeps.
    const auto fusedSaved = [&](bool gAttn, bool adapted) {
        if (fused.mergeCopies) keepOrFree(adapted, d.ah);
        const bool outByProj = !fused.mergeCopies && adapted && !gAttn;
        keepOrFree(gAttn || outByProj, fused.out);
        keepOrFree(gAttn, fused.lse);
        return adapted ? (fused.mergeCopies ? d.ah : outByProj ? fused.out : 0) + d.xa : 0;
    };
    // The maps one attention module holds: fp32 softmax and its cast down
    // (and fp32 noise), or the softmax (and noise and dropped copy) as computed.
    // (Dropout's noise: of an fp32 map, or of one in the weights' dtype, and
    // of an activation; on a GPU one-byte masks.)
    const std::int64_t noiseMap = dropoutNoiseBytes(S, softmax32 ? d.s : d.sh, softmax32 ? 4 : lowBytes),
                       noiseAh = dropoutNoiseBytes(S, d.ah, lowBytes), noiseA = dropoutNoiseBytes(S, d.a, d.a / (d.bt * C));
    const std::int64_t mapsLive = softmax32 ? d.s + d.sh + (drop ? noiseMap : 0) : d.sh + (drop ? noiseMap + d.sh : 0);
    // With dropout and no gradient for the scores nothing saves the softmax
    // or the noise: both go once dropout returns, leaving the probabilities
    // as used (the cast down, or the dropped copy).
    const auto mapsLiveFor = [&](bool gScores) { return drop && !gScores ? d.sh : mapsLive; };
    // Scores, softmax (and, with dropout, its noise and dropped copy): the
    // probabilities stay in the workspace until releaseMaps. copiesGo: the
    // copies of q and k the product made, which go after it when nothing
    // saved them.
    const auto attentionMaps = [&](bool gScores, std::int64_t copiesGo) {
        if (!eager) return;
        tmp(d.sh); // q k^T
        untmp(copiesGo);
        tmp(d.sh); // scaled
        untmp(d.sh);
        tmp(d.sh); // masked
        untmp(d.sh);
        if (softmax32) {
            tmp(2 * d.s); // cast up, softmax
            untmp(d.s + d.sh);
            if (drop) tmp(noiseMap), tmp(d.s); // noise, dropped
            if (drop && !gScores) untmp(noiseMap + d.s); // the noise, the softmax
            tmp(d.sh);              // cast down
            if (drop) untmp(d.s);
            return;
        }
        tmp(d.sh); // softmax
        untmp(d.sh);
        if (drop) tmp(noiseMap), tmp(d.sh); // noise, dropped
        if (drop && !gScores) untmp(noiseMap + d.sh); // the noise, the softmax
    };
    // The probabilities as used (the cast down, or the dropped copy) are
    // saved for the values' gradient; the rest (the softmax, fp32 where it
    // runs in fp32, and the noise) for the scores'. Without dropout or an
    // fp32 softmax the probabilities are the softmax itself.
    const bool usedIsSoftmax = !softmax32 && !drop;
    const auto mapsSaved = [&](bool gScores, bool gValues) {
        return !eager ? 0
               : gScores ? A.attentionModules * (gValues || usedIsSoftmax ? mapsLive : mapsLive - d.sh)
               : gValues ? A.attentionModules * d.sh
                         : 0;
    };
    const auto releaseMaps = [&](bool gScores, bool gValues) {
        if (!eager) return;
        untmp(mapsLiveFor(gScores));
        r.add(AttentionMaps, mapsSaved(gScores, gValues));
    };
    // Weight casts under autocast: adapter casts cached until the forward's
    // end (released then unless saved), and what each block saved.
    std::int64_t cachedOnly = 0, adapterCasts = 0;
    // A checkpointed block's first forward runs without grad: nothing it
    // makes requires grad, the adapters included, so nothing is saved and
    // what an adapter keeps with grad (x A^T, its input's cast) goes with
    // the projection's statement.
    bool noGrad = false;
    // A projection (in -> out features): the frozen product, plus x A^T (saved
    // for B's gradient), its product with B, the scaling and the sum. Leaves
    // the output in the workspace; returns whether it requires grad.
    const ProjectionProducts projection{d.bt, A.conv1d}; // the frozen base's (Conv1D: GPT-2's)
    const auto linear = [&](const char* name, std::int64_t in, std::int64_t outFeatures, bool bias, bool fp32In,
                            bool gIn) {
        const auto out = d.bt * outFeatures * lowBytes;
        // The frozen product x W^T (+ b; GPT-2's Conv1D: x W + b): addmm with
        // a bias, else mm (in bf16 on the CPU each takes oneDNN's scratch
        // while it runs).
        const GemmCall frozen = projection.forward(in, outFeatures, bias);
        if (mixed) {
            // A base already stored in half precision needs no cast.
            const auto w = d.halfBase ? 0 : in * outFeatures * 2, b = bias && !d.halfBase ? outFeatures * 2 : 0,
                       cast = fp32In ? d.bt * in * 2 : 0;
            tmp(b + w + cast);
            tmp(out);
            r.product(frozen);
            untmp(b + cast);
            untmp(w);
            if (gIn) r.add(WeightCopies, w); // saved for the input's gradient
        } else {
            tmp(out);
            r.product(frozen);
        }
        if (!has(name)) return gIn;
        if (mixed) {
            const auto a = rank * in * 2;
            r.add(WeightCopies, a + rank * outFeatures * 2); // A and B cast, cached
            adapterCasts += a + rank * outFeatures * 2;
            if (!gIn) cachedOnly += a;                       // A is saved only for the input's gradient
        }
        const auto own = (mixed && fp32In ? d.bt * in * 2 : 0) + d.xa; // the adapter's own input cast; x A^T
        noGrad ? tmp(own) : act(own); // saved for A's and B's gradients
        r.product({0, d.bt, in, rank, false, true, false}); // x A^T
        // (x A^T) B^T, the scaling, the sum; the product's scratch after the first.
        if (r.productsTracked()) {
            tmp(out);
            r.product({0, d.bt, rank, outFeatures, false, true, false});
            tmp(2 * out);
        } else {
            tmp(3 * out);
        }
        untmp(3 * out);
        if (noGrad) untmp(own);
        return !noGrad;
    };
    // The weight casts a projection saves for backward (the adapter casts
    // that are only cached go when the forward ends).
    const auto savedCasts = [&](auto&& project) {
        const auto copies = r.live(WeightCopies), cached = cachedOnly;
        const bool g = project();
        return std::pair{g, r.live(WeightCopies) - copies - (cachedOnly - cached)};
    };
    // A norm's output (in the weights' dtype: fp32, or bf16 when pure) in the
    // workspace; what its backward needs kept when its input requires grad.
    const auto norm = [&](bool gIn) {
        if (pureLlama) {
            tmp(2 * a32);   // x.to(fp32), x32^2
            tmp(3 * d.m);   // mean, + eps, rsqrt
            tmp(a32);       // normalised, fp32
            untmp(2 * d.m); // mean, + eps
            if (gIn) {
                keep(sq32 + d.m); // x32^2 (saved by mean in 1.13) and rsqrt
                untmp(a32 - sq32);
            } else {
                untmp(a32 + d.m);
            }
            tmp(2 * d.a);   // cast to bf16, * weight
            untmp(d.a);     // the cast (the weight is frozen)
            untmp(a32);     // the fp32 normalised
            keepOrFree(gIn, a32); // x32, saved for the input's gradient
            return;
        }
        if (llama) {
            tmp(d.a + 3 * d.m); // x^2, mean, + eps, rsqrt
            tmp(d.a);           // normalised
            untmp(2 * d.m + d.a - sq);
            gIn ? keep(sq + d.m) : untmp(sq + d.m); // x^2 (saved by mean in 1.13) and rsqrt
            tmp(d.a);           // * weight
            untmp(d.a);         // the normalised tensor (the weight is frozen)
        } else {
            tmp(d.a + 2 * d.m); // output, mean, rstd
            gIn ? keep(2 * d.m) : untmp(2 * d.m);
        }
    };
    // The norm output as the adapters read it: saved by them, or (mixed) a
    // temporary, each adapter having saved its own cast.
    const auto normOutputDone = [&](bool adapted) { keepOrFree(adapted && !mixed, d.a); };
    // h = x + branch: a low-precision branch output is cast up first.
    const auto residualSum = [&](std::int64_t branch) {
        if (mixed) tmp(d.a);
        tmp(d.a);
        if (mixed) untmp(d.a);
        untmp(branch);
    };
    // RoPE's cos and sin cast to the low dtype, saved when q (or k) requires grad.
    const auto ropeTables = [&](bool saved) {
        if (!mixed) return;
        saved ? act(2 * d.rope) : (tmp(2 * d.rope), untmp(2 * d.rope));
    };

    struct Saved {
        std::int64_t attention = 0, maps = 0, mlp = 0; // the input, when a norm saves it (`input`), counts as attention
        std::int64_t copiesAttention = 0, copiesMlp = 0; // weight casts saved for backward
        std::int64_t copiesOut = 0; // of them, the MLP's output projection's (released first)
        std::int64_t copiesProj = 0; // and the attention's output projection's (released with its backward)
        std::int64_t values = 0;    // the values, released by the probabilities x values backward
        std::int64_t projInput = 0; // an adapted output projection's input and rank-r product, released by its backward
        std::int64_t h = 0;         // h (x + attention), saved by the second norm, released by its backward
        std::int64_t mlpNoise = 0;  // the built-in GPT's MLP dropout noise (counted in mlp), released by its backward
        bool scores = false;        // a gradient flows through the attention scores
        bool qGrad = false, kGrad = false; // ... to q, to k (the math fallback saves for each)
        bool valuesGrad = false;    // ... and through the values
        bool attentionGrad = false; // the attention branch's output requires grad
        // The gradient of the block's output is needed past the MLP branch
        // (h, or for a parallel layer x or the attention branch, requires
        // grad). Not so in a first block whose attention is frozen.
        bool hGrad = true;
        bool inGrad = true; // the block's input requires grad (not so in a first block without checkpointing)
        std::int64_t input = 0;     // the block's input, saved by the first norm (counted in attention)
        std::int64_t normIn = 0, normH = 0; // pure: what the first and second norms saved (counted in attention, mlp)
    };
    // Forward of one block. The input x (a) is live: in Activations when it
    // requires grad, else (the first block's, the embedding output) in the
    // workspace, where the model's forward holds it until the final norm
    // returns (pure: a grad-requiring input is released when the block
    // returns, unless a checkpoint holds it). Leaves the output in the
    // workspace; returns whether it requires grad and what was saved.
    const auto block = [&](bool gIn, Saved& saved) {
        const auto before = r.live(Activations), mapsBefore = r.live(AttentionMaps);
        const auto copiesBefore = r.live(WeightCopies), cachedBefore = cachedOnly;
        saved.input = gIn && !pureLlama ? d.a : 0;
        saved.inGrad = gIn;
        saved.normIn = gIn ? normSaved : 0;
        saved.mlpNoise = 0;
        const auto attentionDone = [&] {
            saved.attention = r.live(Activations) - before + saved.input;
            saved.maps = r.live(AttentionMaps) - mapsBefore;
            saved.copiesAttention = r.live(WeightCopies) - copiesBefore - (cachedOnly - cachedBefore);
        };
        const auto mlpDone = [&] {
            saved.mlp = r.live(Activations) - before - saved.attention + saved.input - saved.h;
            saved.copiesMlp = r.live(WeightCopies) - copiesBefore - (cachedOnly - cachedBefore) - saved.copiesAttention;
        };
        bool gAttn = false;
        if (llama) {
            norm(gIn);
            const bool gq = linear("q_proj", C, C, A.qkvBias, true, gIn),
                       gk = linear("k_proj", C, KV, A.qkvBias, true, gIn),
                       gv = linear("v_proj", C, KV, A.qkvBias, true, gIn);
            // RoPE on q and k: products of half width, then cat; the projections are released.
            ropeTables(gq);
            tmp(3 * d.ah);
            tmp(d.ah);
            untmp(3 * d.ah);
            untmp(d.ah);
            ropeTables(gk);
            tmp(3 * d.akvh);
            tmp(d.akvh);
            untmp(3 * d.akvh);
            untmp(d.akvh);
            const bool gScores = gq || gk;
            gAttn = gScores || gv;
            // Keys and values expanded to every head, with several key/value
            // heads both before the scores (the rotated k stays until return).
            const bool valuesFirst = gqaValuesCopiedFirst(A, S.batch, eager);
            if (math) {
                // The math fallback saves none of q, k and v (but in fp32 the v bmm takes as it is).
                if (expands) tmp(d.ah), tmp(d.ah); // the expanded keys and values (locals)
                auto m = mathShape;
                m.needs(gq, gk, gv);
                saved.qGrad = gq;
                saved.kGrad = gk;
                replayMathAttentionForward(r, m);
                keepExtraAttention(gAttn);
                if (m.mergeCopies) tmp(d.ah); // heads merged
                const auto [go, oCasts] = savedCasts([&] { return linear("o_proj", C, C, false, false, gAttn); });
                saved.copiesProj = oCasts;
                if (m.mergeCopies) untmp(d.ah); // the attention's output
                keepOrFree(has("o_proj"), d.ah);
                saved.projInput = has("o_proj") ? d.ah + d.xa : 0;
                untmp(d.ah); // locals: the rotated q and k,
                untmp(d.akvh);
                if (expands) untmp(d.ah), untmp(d.akvh); // the expanded k and the v projection,
                keepOrFree(m.keepsCallersValues(), expands ? d.ah : d.akvh); // the values (fp32: bmm may keep them)
                saved.scores = gScores;
                saved.valuesGrad = gv;
                saved.values = 0;
                gAttn = go;
            } else if (fused.fused) {
                // Fused: with several key/value heads the expanded keys and
                // values (copies) first. The kernel saves q, the keys and the
                // values (else the rotated k and the v projection themselves)
                // when any needs a gradient.
                if (expands) tmp(d.ah), tmp(d.ah);
                fusedForward();
                keepExtraAttention(gAttn);
                const auto [go, oCasts] = savedCasts([&] { return linear("o_proj", C, C, false, false, gAttn); });
                saved.copiesProj = oCasts;
                saved.projInput = fusedSaved(gAttn, has("o_proj"));
                keepOrFree(gAttn, d.ah); // q, the keys and the values
                keepOrFree(gAttn, expands ? d.ah : d.akvh);
                keepOrFree(gAttn, expands ? d.ah : d.akvh);
                if (expands) untmp(d.akvh), untmp(d.akvh); // locals released on return: the rotated k, the v projection
                saved.scores = gScores;
                saved.valuesGrad = gv;
                saved.values = 0;
                gAttn = go;
            } else {
            if (expands) tmp(valuesFirst ? 2 * d.ah : d.ah);
            attentionMaps(gScores, 0);
            const bool vItself = folds && !expands; // the v projection goes to the product uncopied
            if (!vItself && !valuesFirst) tmp(d.ah); // values expanded or made contiguous
            tmp(d.ah); // probabilities x values
            // The rotated q, saved by q k^T when k requires grad, else a local
            // of the attention until it returns (after o_proj); the rotated k
            // likewise, saved when q requires grad (an expanded copy of the
            // keys is a local of the attention's core, gone before o_proj).
            if (gk) keep(d.ah);
            if (gq || expands) keepOrFree(gq, expands ? d.ah : d.akvh);
            std::int64_t unsavedLocals = (gk ? 0 : d.ah) + (gq || expands ? 0 : d.akvh);
            releaseMaps(gScores, gv);
            saved.scores = gScores;
            saved.valuesGrad = gv;
            // The values (or v itself), saved when the probabilities require
            // grad; else a copy goes with the product, and v itself, a local,
            // when the attention returns.
            const auto values = vItself ? d.akvh : d.ah;
            if (gScores) keep(values);
            else if (vItself) unsavedLocals += values;
            else untmp(values);
            saved.values = gScores ? values : 0;
            tmp(d.ah); // heads merged
            const auto [go, oCasts] = savedCasts([&] { return linear("o_proj", C, C, false, false, gAttn); });
            saved.copiesProj = oCasts;
            untmp(d.ah); // probabilities x values
            keepOrFree(has("o_proj"), d.ah);
            saved.projInput = has("o_proj") ? d.ah + d.xa : 0;
            untmp(unsavedLocals);
            if (!vItself) untmp(expands ? 2 * d.akvh : d.akvh); // locals released on return: rotated k (expanded), v projection
            gAttn = go;
            }
            // h = x + attn(norm(x)): the temporaries live until the sum exists.
            residualSum(d.ah); // o
            normOutputDone(has("q_proj") || has("k_proj") || has("v_proj"));
            const bool gH = gIn || gAttn;
            saved.hGrad = gH;
            attentionDone();
            saved.h = gH && !pureLlama ? d.a : 0;
            saved.normH = gH ? normSaved : 0;
            keep(saved.h);
            norm(gH);
            const bool gg = linear("gate_proj", C, F, false, true, gH), gu = linear("up_proj", C, F, false, true, gH);
            tmp(d.fh); // silu(gate)
            tmp(d.fh); // silu x up
            const auto [gd, downCasts] = savedCasts([&] { return linear("down_proj", F, C, false, false, gg || gu); });
            saved.copiesOut = downCasts;
            // down(silu(gate(x)) * up(x)): the temporaries live until down returns.
            keepOrFree(gg, d.fh); // gate, saved by silu
            keepOrFree(gu, d.fh); // silu, saved by the product when up requires grad
            keepOrFree(gg, d.fh); // up, saved by the product when silu requires grad
            keepOrFree(has("down_proj"), d.fh); // the product
            residualSum(d.ah); // out = h + down
            normOutputDone(has("gate_proj") || has("up_proj"));
            if (saved.h == 0) untmp(d.a); // h
            const bool gOut = gH || gd;
            mlpDone();
            // Pure: no norm saved the block's input (a checkpoint still holds it).
            if (pureLlama && gIn && !S.checkpointing) r.sub(Activations, d.a);
            return gOut;
        }
        // GPT block
        norm(gIn);
        const bool gqkv = linear("qkv", C, 3 * C, true, true, gIn);
        if (rope) {
            // A partial rotary (GPT-NeoX) rotates the leading part of each
            // head and cats the rest back on.
            const auto rw = d.ah / A.headDim() * A.ropeDims();
            for (int i = 0; i < 2; ++i) {
                ropeTables(gqkv);
                tmp(3 * rw);
                tmp(rw); // rotated q (then k)
                untmp(3 * rw);
                if (rw != d.ah) {
                    tmp(d.ah);
                    untmp(rw);
                }
            }
        } else if (!folds && eager) {
            tmp(2 * d.ah); // q and k made contiguous
        }
        if (math) {
            // The math fallback saves none of q, k and v (but in fp32 the v bmm takes as it is).
            auto m = mathShape;
            m.needs(gqkv, gqkv, gqkv);
            saved.qGrad = saved.kGrad = gqkv;
            replayMathAttentionForward(r, m);
            keepExtraAttention(gqkv);
            saved.scores = saved.valuesGrad = gqkv;
            saved.values = 0;
            if (m.mergeCopies) tmp(d.ah); // heads merged
            const auto [go, projCasts] = savedCasts([&] { return linear("proj", C, C, true, false, gqkv); });
            saved.copiesProj = projCasts;
            saved.attentionGrad = go;
            if (m.mergeCopies) untmp(d.ah); // the attention's output
            keepOrFree(has("proj"), d.ah);
            saved.projInput = has("proj") ? d.ah + d.xa : 0;
            if (rope) untmp(d.ah), untmp(d.ah); // locals: the rotated q and k, qkv (fp32: bmm may keep it)
            keepOrFree(m.keepsCallersValues(), 3 * d.ah);
        } else if (fused.fused) {
            // Fused: the kernel saves q, k and v (views of qkv, which they
            // keep, and the rotated q and k) when they need a gradient.
            fusedForward();
            keepExtraAttention(gqkv);
            saved.scores = saved.valuesGrad = gqkv;
            saved.values = 0;
            const auto [go, projCasts] = savedCasts([&] { return linear("proj", C, C, true, false, gqkv); });
            saved.copiesProj = projCasts;
            saved.attentionGrad = go;
            saved.projInput = fusedSaved(gqkv, has("proj"));
            if (rope) keepOrFree(gqkv, d.ah), keepOrFree(gqkv, d.ah); // the rotated q and k, qkv
            keepOrFree(gqkv, 3 * d.ah);
        } else {
        // (Copies of q and k that nothing saves go after their product.)
        const std::int64_t copiesGo = !gqkv && !folds && !rope ? 2 * d.ah : 0;
        attentionMaps(gqkv, copiesGo);
        if (!folds) tmp(d.ah); // v made contiguous
        tmp(d.ah); // probabilities x values
        // q, k and v, saved when they require grad; views of qkv are not copies
        keepOrFree(gqkv, (!folds ? 3 * d.ah : rope ? 2 * d.ah : 0) - copiesGo);
        // released by the values' backward: their copy, or qkv once q and k no longer hold it
        saved.values = !gqkv ? 0 : !folds ? d.ah : rope ? 3 * d.ah : 0;
        releaseMaps(gqkv, gqkv);
        saved.scores = saved.valuesGrad = gqkv;
        tmp(d.ah); // heads merged
        const auto [go, projCasts] = savedCasts([&] { return linear("proj", C, C, true, false, gqkv); });
        saved.copiesProj = projCasts;
        saved.attentionGrad = go;
        untmp(d.ah);
        keepOrFree(has("proj"), d.ah);
        saved.projInput = has("proj") ? d.ah + d.xa : 0;
        keepOrFree(gqkv && folds, 3 * d.ah); // qkv: kept by the views the products saved
        }
        const bool go = saved.attentionGrad;
        if (drop) {
            tmp(noiseAh); // noise
            tmp(d.ah);    // dropped
            keepOrFree(go, noiseAh);
            untmp(d.ah); // the projection output, replaced by the dropped copy
        }
        if (neox) {
            // attn = attention(ln1(x)): its temporaries go with the statement,
            // the attention output stays a local; the sequential layer's
            // h = x + attn (after its cast up).
            normOutputDone(has("qkv"));
            if (!parallel) {
                if (mixed) tmp(d.a);
                tmp(d.a);
                if (mixed) untmp(d.a);
            }
        } else {
            // h = x + attn(ln1(x)): the temporaries live until the sum exists.
            residualSum(d.ah); // o
            normOutputDone(has("qkv"));
        }
        const bool gH = parallel ? gIn : gIn || go; // what ln2 reads requires grad
        saved.hGrad = gIn || go;
        attentionDone();
        if (gH && !parallel) keep(d.a);
        saved.h = gH && !parallel ? d.a : 0;
        norm(gH);
        const bool gfc = linear("fc", C, F, true, true, gH);
        tmp(d.fh); // gelu
        const auto [gout, outCasts] = savedCasts([&] { return linear("out", F, C, true, false, gfc); });
        saved.copiesOut = outCasts;
        // Dropout of the MLP's output: its noise (saved when out requires
        // grad) and the dropped copy.
        const auto mlpDropout = [&] {
            if (!drop) return;
            tmp(noiseAh);
            tmp(d.ah);
            keepOrFree(gout, noiseAh);
        };
        if (A.mlpModule) {
            // The MLP is a module of its own: when it returns, fc's output
            // (saved by gelu) and gelu's (saved by an adapted out) go unless
            // saved. GPT-2's dropout is its last step, so out's own output
            // goes too; GPT-NeoX's comes after it, and the parallel layer's
            // named branch ends its statement there (the ln2 output and,
            // dropped, out's output go).
            if (!neox) mlpDropout();
            keepOrFree(gfc, d.fh);
            keepOrFree(has("out"), d.fh);
            if (drop && !neox) untmp(d.ah); // out
            if (neox) mlpDropout();
            if (parallel) {
                normOutputDone(has("fc"));
                if (drop) untmp(d.ah); // out
            }
        } else if (drop) {
            tmp(noiseAh); // noise
            tmp(d.ah);    // dropped
        }
        // h + mlp(ln2(h)): the statement's temporaries live until the sum
        // exists. The parallel layer first makes x + attn (attn cast up).
        if (parallel) {
            if (mixed) tmp(d.a);
            tmp(d.a);
            if (mixed) untmp(d.a);
        }
        residualSum(d.ah); // the MLP's output (or its dropped copy)
        if (parallel) untmp(d.a); // x + attn
        if (!A.mlpModule) {
            // The built-in GPT's block is one expression: its MLP's
            // temporaries go after the sum.
            if (drop) {
                keepOrFree(gout, noiseAh); // noise
                if (gout && !noGrad) saved.mlpNoise = noiseAh;
                untmp(d.ah);               // out
            }
            keepOrFree(gfc, d.fh);        // fc output, saved by gelu
            keepOrFree(has("out"), d.fh); // gelu output
        }
        if (drop && neox && !parallel) untmp(d.ah); // out
        if (!parallel) normOutputDone(has("fc"));
        if (!gH && !parallel) untmp(d.a); // h
        if (neox) untmp(d.ah);            // the attention output
        mlpDone();
        return gH || go || gout;
    };

    // ---- forward ----
    r.phase("forward");
    tmp(d.idx);
    tmp(d.a); // token embedding (frozen: no grad)
    untmp(d.idx);
    if (!llama && A.positional == "learned") {
        tmp(d.pos + d.a);
        untmp(d.pos + d.a);
    } else if (!llama && A.positional == "sinusoidal") {
        tmp(d.a);
        untmp(d.a);
    }
    if (drop && !llama) {
        tmp(noiseA + d.a); // noise, dropped (the embedding is frozen: nothing saved)
        untmp(noiseA + d.a);
    }
    causalMask(r, A, S, d.mask);
    std::vector<Saved> saved(static_cast<std::size_t>(A.layers));
    // With checkpointing every block's input is made a grad-requiring leaf and
    // the block runs without grad: only its output stays.
    bool g = S.checkpointing;
    if (g) keep(d.a); // the embedding output, made a leaf that requires grad
    for (std::int64_t l = 0; l < A.layers; ++l) {
        auto& sv = saved[static_cast<std::size_t>(l)];
        const auto cachedBefore = cachedOnly, adapterBefore = adapterCasts;
        if (S.checkpointing) act(rng); // the generator's state, saved with the block before it runs
        noGrad = S.checkpointing;
        const bool gOut = block(g && !noGrad, sv);
        noGrad = false;
        if (S.checkpointing) {
            // Nothing but the input (the checkpoint) outlives a block run
            // without grad: the frozen casts go, the adapter casts stay cached
            // until the forward ends.
            r.sub(Activations, sv.attention - sv.input + sv.h + sv.mlp);
            r.sub(AttentionMaps, sv.maps);
            const auto adapters = adapterCasts - adapterBefore;
            r.sub(WeightCopies, sv.copiesAttention + sv.copiesMlp + (cachedOnly - cachedBefore) - adapters);
            cachedOnly = cachedBefore + adapters;
            sv = {};
            keep(d.a); // the output: the next block's checkpoint
            g = true;
        } else {
            if (gOut) keep(d.a);
            g = gOut;
        }
    }
    // Final norm (its output is not saved: the head is frozen), head, loss.
    norm(g);
    if (!S.checkpointing) untmp(d.a); // the embedding output
    // The causal mask outlives the forward where a checkpoint holds it or a
    // block's masked scores need a gradient (masked_fill saves it); else it
    // goes with the model's forward, once the final norm has run.
    const bool eagerMask = S.attention != "fused"; // (fused attention takes none)
    const bool maskKept = eagerMask
        && (S.checkpointing || std::any_of(saved.begin(), saved.end(), [](const Saved& sv) { return sv.scores; }));
    if (eagerMask && !maskKept) r.sub(Activations, d.mask);
    // Its statistics and the last block's output (pure: its fp32 copies, not the output).
    const std::int64_t finalSaved = !g ? 0 : pureLlama ? normSaved : (llama ? sq + d.m : 2 * d.m) + d.a;
    if (!g) untmp(d.a); // the last block's output
    else if (pureLlama) r.sub(Activations, d.a);
    const std::int64_t headCast = mixed && !d.halfBase ? V * C * 2 : 0;
    if (mixed) tmp(headCast + d.ah); // the head's weight cast (none for a half-precision base) and input cast
    r.add(Logits, d.lgh);            // logits
    if (lowLogits) r.product({0, d.bt, C, V, false, true, false});
    if (mixed) {
        untmp(d.ah + headCast);
        if (g) r.add(WeightCopies, headCast); // saved for the input's gradient
    }
    untmp(d.a);          // the norm output
    act(d.idx); // targets made contiguous
    if (lowLogits) r.add(Logits, d.lg); // cast up for the loss
    r.add(Logits, d.lg); // log-softmax, saved
    tmp(d.m);
    if (hasLossMask(S)) tmp(d.m);
    untmp(hasLossMask(S) ? 2 * d.m : d.m);
    r.sub(Logits, lowLogits ? d.lg + d.lgh : d.lg);
    r.sub(WeightCopies, cachedOnly); // the autocast scope ends

    // ---- backward ----
    r.phase("backward");
    // Where zero_grad freed the adapters' gradients, each adapter's (A's and
    // B's, in the trainable parameters' dtype) appears as its backward runs:
    // a projection's with that projection's, the attention's four as its
    // backward starts (on the safe side of q's, k's and v's).
    const std::int64_t gradBytes = d.pure ? 2 : 4;
    // An adapter's backward, from the gradient of its scaled output: B's
    // gradient, then that of x A^T, then A's and (where the projection's
    // input needs one) x's, each a product in the adapters' compute dtype.
    // On the CPU in bf16 each takes oneDNN's scratch, on top of the
    // gradients of that moment; the largest of the four moments is planned
    // (the gradients are small, the scratch need not be: oneDNN's blocking
    // for an odd number of rows can ask for far more than the product's
    // output). adapterGradients makes the gradients appear and plans that
    // moment; the attention's q, k and v adapters' moments come later, with
    // their projections' input gradients (adapterScratch).
    struct Adapted {
        const char* name;
        std::int64_t in, out;
        bool inputGrad; // the projection's input needs a gradient
    };
    const auto adapterAppear = [&](std::initializer_list<Adapted> projections) {
        for (const auto& p : projections) {
            if (has(p.name)) grads.appear(rank * (p.in + p.out) * gradBytes);
        }
    };
    const auto adapterScratch = [&](std::initializer_list<Adapted> projections) {
        for (const auto& p : projections) {
            if (!has(p.name) || !r.productsTracked()) continue;
            const std::int64_t gs = d.bt * p.out * lowBytes, hg = d.bt * rank * lowBytes,
                               gb = p.out * rank * lowBytes, ga = rank * p.in * lowBytes, xg = d.bt * p.in * lowBytes;
            std::int64_t top = std::max(gs + gb + r.productScratch({0, p.out, d.bt, rank, true, false, false}),
                                        gs + gb + hg + r.productScratch({0, d.bt, p.out, rank, false, false, false}));
            top = std::max(top, hg + ga + r.productScratch({0, rank, d.bt, p.in, true, false, false}));
            if (p.inputGrad) top = std::max(top, hg + ga + xg + r.productScratch({0, d.bt, rank, p.in, false, false, false}));
            r.scratch(top);
        }
    };
    const auto adapterGradients = [&](std::initializer_list<Adapted> projections) {
        adapterAppear(projections);
        adapterScratch(projections);
    };
    r.add(Logits, d.lg); // grad of log-softmax output
    r.sub(Activations, d.idx);
    r.add(Logits, d.lg); // grad of logits
    r.sub(Logits, 2 * d.lg);
    if (lowLogits) {
        r.add(Logits, d.lgh); // cast down
        r.sub(Logits, d.lg);
        tmp(d.ah); // grad of the head's input
        r.product({0, d.bt, V, C, false, false, false});
        r.sub(Logits, d.lgh);
        if (g) r.sub(WeightCopies, headCast);
    }
    if (mixed) {
        tmp(d.a); // grad of the final norm output, cast up
        untmp(d.ah);
    } else if (!lowLogits) {
        tmp(d.a); // grad of the final norm output
        r.sub(Logits, d.lg);
    }
    // A pure norm's backward, from the gradient of its output (in the
    // workspace, released) to its input's, left as the running gradient;
    // it releases what the norm saved.
    const auto pureNormBackward = [&] {
        tmp(d.a);   // g * weight
        untmp(d.a); // g
        replayPureRmsBackward(r, d.a, d.m, sq32);
    };
    if (pureLlama && g) {
        pureNormBackward();
    } else if (llama && g) {
        // g * weight replaces g (the weight is frozen), then the gradients
        // through x * rsqrt, then x^2's.
        tmp(2 * d.a);
        untmp(2 * d.a);
        replayFinalRmsSquareBackward(r, d.a, sq);
        r.sub(Activations, finalSaved - sq);
    } else {
        tmp(3 * d.a); // norm backward
        untmp(3 * d.a);
        r.sub(Activations, finalSaved);
    }
    // A block norm's backward with the residual sum, in fp32 (a frozen
    // weight), as one lump of activations at once: three, as measured on
    // 1.13; five for an RMSNorm on 2.x, as measured (measure --trace: the
    // gradient through x * rsqrt held beside mean's gradient and pow's three
    // temporaries, the norm's input still saved). Where an MLP as wide as the
    // model or wider makes the step's peak elsewhere, the lump does not show.
    const std::int64_t normLump = (llama && !meanSavesInput(S) ? 5 : 3) * d.a;
    bool runningLive = true;
    for (std::int64_t l = A.layers - 1; l >= 0; --l) {
        auto sv = saved[static_cast<std::size_t>(l)];
        if (S.checkpointing) {
            tmp(rng);        // the generator's state, held while it recomputes
            // Recomputed with grad from its checkpoint (its input requires
            // grad, so every adapter cast it makes is saved, none only cached).
            block(true, sv);
            keep(d.a);       // the recomputed output, held until the block's backward returns
        }
        // MLP: the gradient of the output projection's input (with an adapter:
        // through the frozen weight, through the adapter, and their sum; the
        // adapter's saved input goes first), then the gradients through the
        // nonlinearity (SwiGLU: of silu and of up; GELU: of its input).
        // GPT-NeoX's parallel layer: the node of x + attn runs before the MLP
        // branch's, so under autocast the attention branch's gradient, cast
        // down, waits through that branch.
        const std::int64_t heldAttentionGrad = mixed && parallel && sv.attentionGrad ? d.ah : 0;
        tmp(heldAttentionGrad);
        // Without a gradient for h (never under checkpointing, where every
        // block's input requires grad), the gradient of the block's output
        // goes once the branch's first node has used it: the cast down under
        // autocast, else the dropout, else the output projection's backward.
        // Nothing of the block runs after the MLP's.
        const bool runningGoes = !sv.hGrad;
        if (mixed) tmp(d.ah); // the running gradient cast down for the branch
        if (mixed && runningGoes) untmp(d.a);
        // The MLP's dropout (the built-in GPT's): the gradient through it
        // replaces the branch's, and its noise goes as its node has run.
        const bool dropped = sv.mlpNoise > 0;
        if (dropped) {
            tmp(d.ah);
            if (mixed) untmp(d.ah);
            else if (runningGoes) untmp(d.a);
            r.sub(Activations, sv.mlpNoise);
        }
        const bool lastUse = runningGoes && !mixed && !dropped;
        const bool adapted = has(llama ? "down_proj" : "out");
        const auto projInput = adapted ? d.fh : 0;
        const bool mlpInnerGrad = sv.hGrad || (llama ? has("gate_proj") || has("up_proj") : has("fc"));
        adapterGradients({{llama ? "down_proj" : "out", F, C, mlpInnerGrad}});
        tmp(d.fh); // the gradient of its input through the frozen weight: grad . W (mm; Conv1D: grad . W^T)
        r.product(projection.inputGradient(F, C));
        if (mixed || dropped) untmp(d.ah);
        r.sub(WeightCopies, sv.copiesOut); // the output projection's casts
        if (adapted) {
            r.sub(Activations, projInput);
            tmp(d.fh); // through the adapter
            if (lastUse) untmp(d.a);
            tmp(d.fh); // their sum
            untmp(2 * d.fh);
        } else if (lastUse) {
            untmp(d.a);
        }
        tmp(llama ? 2 * d.fh : d.fh);
        untmp(llama ? 3 * d.fh : 2 * d.fh);
        if (llama) adapterGradients({{"gate_proj", C, F, sv.hGrad}, {"up_proj", C, F, sv.hGrad}});
        else adapterGradients({{"fc", C, F, sv.hGrad}});
        r.sub(Activations, sv.mlp - projInput - sv.normH - sv.mlpNoise);
        r.sub(WeightCopies, sv.copiesMlp - sv.copiesOut);
        if (runningGoes) {
            // Neither h nor the block's input requires grad: the norm and
            // the attention saved nothing, and their backward does not run.
            runningLive = false;
            continue;
        }
        // The frozen input projections' input gradients, grad . W (Conv1D:
        // grad . W^T), each a bf16 product on the CPU (its scratch counted on
        // top of what the lump below holds: on the safe side).
        const auto inputProducts = [&](std::initializer_list<std::pair<std::int64_t, std::int64_t>> projections) {
            for (const auto& [out, in] : projections) r.product(projection.inputGradient(in, out));
        };
        const auto mlpInputProducts = [&] {
            if (parallel && !sv.inGrad) return; // a parallel layer's MLP reads the block's input
            if (llama) inputProducts({{F, C}, {F, C}});
            else inputProducts({{F, C}});
        };
        if (sv.normH > 0) {
            tmp(2 * d.a); // the gradients of gate's and up's input
            mlpInputProducts();
            tmp(d.a);     // summed
            untmp(2 * d.a);
            pureNormBackward();
            tmp(d.a);     // the residual sum
            untmp(2 * d.a);
        } else {
            tmp(normLump); // norm backward and the residual sum
            mlpInputProducts();
            untmp(normLump);
        }
        r.sub(Activations, sv.h);
        // Under checkpointing the node still holds the gradient of the block's
        // output, which that sum replaced.
        if (S.checkpointing) tmp(d.a);
        // Attention: the output projection, gradients of probabilities and
        // scores, then of q, k, v and the norm.
        untmp(heldAttentionGrad); // consumed by the output projection's backward
        const bool headsGrad = sv.scores || sv.valuesGrad; // the output projection's input needs a gradient
        // q's, k's and v's adapters (or qkv's), to a step (appear, scratch).
        const auto inputAdapters = [&](const auto& step) {
            if (llama) step({{"q_proj", C, C, sv.inGrad}, {"k_proj", C, KV, sv.inGrad}, {"v_proj", C, KV, sv.inGrad}});
            else step({{"qkv", C, 3 * C, sv.inGrad}});
        };
        adapterGradients({{llama ? "o_proj" : "proj", C, C, headsGrad}});
        inputAdapters(adapterAppear);
        // Its input's gradient through the frozen weight, where the
        // attention's inputs need one.
        if (sv.scores || sv.valuesGrad) inputProducts({{C, C}});
        r.sub(Activations, sv.projInput);
        r.sub(WeightCopies, sv.copiesProj); // its casts
        // Without a gradient for the block's input (the first block, its
        // embedding frozen), the gradient of h goes once the output
        // projection's backward has used it, and the input norm's backward
        // and the residual sum never run.
        const bool inputGoes = !sv.inGrad;
        if (inputGoes) {
            untmp(d.a);
            runningLive = false;
        }
        if (eager && sv.maps > 0 && !sv.scores) {
            tmp(d.ah); // the values' gradient; the probabilities need none
            r.sub(AttentionMaps, sv.maps);
        } else if (eager && sv.maps > 0) {
            // Each saved map goes as soon as its node has run: the dropped copy
            // (or the cast down) after probabilities x values, the noise after
            // dropout, the probabilities after softmax.
            // Without a gradient for the values the probabilities as used
            // were not saved, and only theirs is computed.
            const auto g1 = softmax32 ? d.s : d.sh; // the gradient through softmax
            const auto usedSaved = sv.valuesGrad && !usedIsSoftmax ? d.sh : 0;
            tmp((sv.valuesGrad ? d.ah : 0) + d.sh); // grads of the values and of the probabilities as used
            r.sub(Activations, sv.values);
            if (softmax32) {
                r.sub(AttentionMaps, usedSaved);
                tmp(d.s);
                untmp(d.sh);
            }
            if (drop) {
                if (!softmax32) r.sub(AttentionMaps, usedSaved);
                tmp(g1);
                untmp(g1);
                r.sub(AttentionMaps, noiseMap);
            }
            tmp(g1); // softmax backward
            untmp(g1);
            // The softmax (and every further module's maps).
            r.sub(AttentionMaps, sv.maps - usedSaved - (drop ? noiseMap : 0));
            if (softmax32) {
                tmp(d.sh);
                untmp(d.s);
            }
            tmp(d.sh); // masked_fill, then the scale
            untmp(d.sh);
            tmp(d.sh);
            untmp(d.sh);
            untmp(d.sh);
        }
        // q, k, v gradients and their projections (the values' gradient is
        // already live when the maps were back-propagated).
        auto mathBlock = mathShape;
        mathBlock.needs(sv.qGrad, sv.kGrad, sv.valuesGrad);
        if (math && (sv.scores || sv.valuesGrad)) {
            // The math fallback's backward, from the output's gradient; what
            // it saved goes with its nodes, and the lump below stands for
            // the gradients of q, k and v and their projections.
            tmp(d.ah);
            replayMathAttentionBackward(r, mathBlock);
            for (const bool g : {mathBlock.gValues, mathBlock.gK, mathBlock.gQ}) {
                if (g) untmp(d.ah);
            }
        }
        const bool mapsDone = eager && sv.maps > 0;
        tmp((mapsDone ? 3 : 4) * d.ah);
        if (fused.fused && (sv.scores || sv.valuesGrad)) {
            // The fused kernel's backward: its blocks while it runs.
            tmp(fused.backwardTemps);
            r.scratch(fused.backwardScratch);
            untmp(fused.backwardTemps);
        }
        inputAdapters(adapterScratch);
        if (sv.inGrad && llama) inputProducts({{C, C}, {KV, C}, {KV, C}}); // q, k, v: their input's gradients
        else if (sv.inGrad) inputProducts({{3 * C, C}});                 // qkv
        untmp((mapsDone && !sv.valuesGrad ? 3 : 4) * d.ah);
        const std::int64_t mathSaved = math ? mathBlock.savedBytes() : 0; // gone with the math fallback's nodes
        r.sub(Activations, sv.attention - sv.projInput - (mapsDone ? sv.values : 0) - sv.normIn - mathSaved);
        r.sub(WeightCopies, sv.copiesAttention - sv.copiesProj);
        if (sv.normIn > 0) {
            tmp(d.a);     // the projections' input gradients, summed
            pureNormBackward();
            tmp(d.a);     // the residual sum
            untmp(2 * d.a);
        } else if (!pureLlama && !inputGoes) {
            tmp(normLump);
            untmp(normLump);
        }
        if (pureLlama && S.checkpointing) r.sub(Activations, d.a); // the block's input, its checkpoint
        if (S.checkpointing) {
            untmp(rng + d.a);
            r.sub(Activations, d.a); // the recomputed output
        }
    }
    if (runningLive) untmp(d.a); // the running gradient
    // What the blocks' autograd nodes hold goes with the graph: their saved
    // generator states and the mask.
    r.sub(Activations, A.layers * rng);
    if (maskKept) r.sub(Activations, d.mask);
}

} // namespace tb::memory_detail
