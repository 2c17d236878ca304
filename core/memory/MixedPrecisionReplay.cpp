// One training step under autocast (fp16/bf16 mixed precision with fp32
// master weights) of a GPT-family (built-in, GPT-2, GPT-NeoX) or
// Llama-family model, without LoRA.
//
// What autocast changes, read from `trainbench-cli measure --trace` on
// LibTorch 1.13 (CPU, bf16):
// - Each linear layer casts its weight (and bias) to the autocast dtype. The
//   weight copies are cached for the whole forward pass and saved for
//   backward, where each is released by its layer's backward; bias copies
//   go when the forward's autocast scope ends.
// - Each linear layer saves its own cast of an fp32 input (a norm's output),
//   so the three projections that read one norm output keep three copies; the
//   fp32 norm output itself is a temporary until the residual sum.
// - Projections, the attention products, GELU/SiLU and their saved inputs are
//   in the autocast dtype; norms, the residual stream, embeddings and the
//   loss stay fp32. A residual sum casts its low-precision operand to fp32.
// - Softmax runs in the autocast dtype on the CPU, but in fp32 where the model
//   asks for it (Llama, GPT-NeoX) or the device's autocast does (CUDA), and
//   then the probabilities are cast down for the product with the values.
// - Backward makes each weight's gradient in the autocast dtype, converts it
//   to fp32 and accumulates it; a cast input's gradient is converted back too.

#include <initializer_list>

#include "memory/Replay.h"

namespace tb::memory_detail {

void replayMixedStep(Replay& r, const ArchitectureSpec& A, const TrainingSetup& S, const MixedShape& d,
                     GradientLife& grads)
{
    const bool llama = A.family == "llama";
    constexpr std::int64_t kLow = 2; // bytes per element in fp16 and bf16
    // SDPA's fused kernel (FusedAttention.h), or its math fallback.
    const auto fused = fusedAttentionBytes(A, S, kLow, !r.recording());
    const bool eager = !fused.fused;
    // SDPA's math fallback: in bf16 it computes in fp32 (Replay.h).
    const bool math = fused.math;
    const auto mathShape = mathAttention(A, S, kLow);
    const std::int64_t extraAttention = sdpaExtraModuleBytes(A, fused, mathShape);
    const bool rope = llama || A.positional == "rope";
    const bool gqa = llama && A.kvHeads < A.heads;
    // The expanded keys and values are copies (the math fallback takes one
    // key/value head's stride-0 view to fp32 as it is).
    const bool expands = math ? gqa && A.kvHeads > 1 : gqaExpandCopies(A, S.batch, eager);
    const bool folds = eager && !math && matmulFoldsViews(S.batch, A.heads); // head-split views go to bmm uncopied
    const bool drop = S.dropout > 0.0;
    const bool softmax32 = llama || A.fp32Softmax || S.gpu;
    const bool neox = A.neoxLayer;
    const bool masked = hasLossMask(S);
    const std::int64_t C = A.hidden, F = A.intermediate, V = A.vocabSize, KV = A.kvHeads * A.headDim();

    // A checkpointed block's first forward runs without grad: what autograd
    // would save is freed once used. Modelled by holding it until the
    // attention (or MLP) output exists, then releasing it.
    bool noGrad = false;
    std::int64_t held = 0, heldMaps = 0;
    const auto act = [&](std::int64_t b) {
        r.add(Activations, b);
        if (noGrad) held += b;
    };
    const auto keepMap = [&](std::int64_t b) {
        r.add(AttentionMaps, b);
        if (noGrad) heldMaps += b;
    };
    const auto releaseHeld = [&] {
        r.sub(Activations, held);
        r.sub(AttentionMaps, heldMaps);
        held = heldMaps = 0;
    };
    const auto unact = [&](std::int64_t b) { r.sub(Activations, b); };
    // A temporary that a saved view turns out to keep (nothing is kept without grad).
    const auto keepTemporary = [&](std::int64_t b) {
        if (noGrad) r.sub(Workspace, b);
        else r.move(Workspace, Activations, b);
    };
    const auto tmp = [&](std::int64_t b) { r.add(Workspace, b); };
    const auto untmp = [&](std::int64_t b) { r.sub(Workspace, b); };
    std::int64_t biasCopies = 0; // live until the autocast scope ends
    const auto copy = [&](std::int64_t numel) { r.add(WeightCopies, numel * kLow); };
    const auto copyBias = [&](std::int64_t numel) {
        r.add(WeightCopies, numel * kLow);
        biasCopies += numel * kLow;
    };
    const auto endScope = [&] {
        r.sub(WeightCopies, biasCopies);
        biasCopies = 0;
    };
    // A weight's gradient: made in the autocast dtype, converted to fp32 and
    // accumulated into the parameter's gradient.
    const auto weightGradient = [&](std::int64_t numel) {
        tmp(numel * 4);
        untmp(numel * kLow);
        grads.done(numel * 4);
    };
    // What one attention module keeps for backward besides q, k and v.
    // Dropout's saved noise (on a GPU one-byte masks): of an fp32 or a
    // low-precision map, of a low-precision activation, of the fp32 embedding.
    const std::int64_t noiseS = dropoutNoiseBytes(S, d.s, 4), noiseSh = dropoutNoiseBytes(S, d.sh, kLow),
                       noiseAh = dropoutNoiseBytes(S, d.ah, kLow), noiseA = dropoutNoiseBytes(S, d.a, 4);
    const std::int64_t mapsPerModule = softmax32 ? d.s + d.sh + (drop ? noiseS : 0) : d.sh + (drop ? noiseSh + d.sh : 0);
    const std::int64_t extraMaps = (A.attentionModules - 1) * mapsPerModule;
    const std::int64_t rng = rngStateBytes(S);
    const std::int64_t blockWeights = llama ? 2 * C * C + 2 * C * KV + 3 * C * F : 4 * C * C + 2 * C * F;

    // ---- forward ----
    const std::int64_t sq = meanSavesInput(S) ? d.a : 0; // RMSNorm's x^2 while saved (1.13)
    const auto rmsForward = [&] {
        act(sq);         // x^2, saved by mean (1.13) ...
        tmp(d.a - sq);   // ... or a temporary
        tmp(d.m);  // mean
        tmp(d.m);  // + eps
        act(d.m);  // rsqrt
        act(d.a);  // normed
        untmp(2 * d.m + d.a - sq);
        tmp(d.a);  // * weight: a temporary, each projection saves its own cast
    };
    const auto attentionCore = [&] {
        if (!eager || math) return;
        tmp(d.sh); // q k^T
        tmp(d.sh); // * scale
        untmp(d.sh);
        tmp(d.sh); // masked_fill
        untmp(d.sh);
        if (softmax32) {
            tmp(d.s);                    // cast up
            keepMap(d.s);   // softmax, saved
            untmp(d.s + d.sh);
            if (drop) {
                keepMap(noiseS); // noise
                tmp(d.s);                  // dropped
            }
            keepMap(d.sh); // cast down, saved by the product with the values
            if (drop) untmp(d.s);
        } else {
            keepMap(d.sh); // softmax, saved
            untmp(d.sh);
            if (drop) keepMap(noiseSh), keepMap(d.sh); // noise, dropped
        }
        keepMap(extraMaps);
    };
    // RoPE on q or k (width w): the cos and sin tables cast (saved), four
    // products, a difference and a sum of half width, then cat. A partial
    // rotary (GPT-NeoX) rotates the leading part and cats the rest back.
    const auto ropeForward = [&](std::int64_t w, bool saved) {
        const auto rw = w / A.headDim() * A.ropeDims();
        act(2 * d.rope);
        tmp(3 * rw);
        if (rw != w) {
            tmp(rw);   // the rotated part
            untmp(3 * rw);
            saved ? act(w) : tmp(w);
            untmp(rw);
            return;
        }
        saved ? act(w) : tmp(w);
        untmp(3 * rw);
    };
    // A projection's forward product, in -> out features: addmm with a bias,
    // else mm (oneDNN's scratch on the CPU while it runs, its output just made).
    const std::int64_t rows = S.batch * S.seqLen;
    const ProjectionProducts projection{rows, A.conv1d}; // the block's (the head is nn.Linear's)
    const auto forwardProduct = [&](std::int64_t in, std::int64_t out, bool bias) {
        r.product(projection.forward(in, out, bias));
    };
    // The fused kernel: its output and log-sum-exp saved, its blocks while it
    // runs; the heads merged after it (a copy where the output is [B, H, T, D]).
    const auto fusedForward = [&] {
        act(fused.out);
        act(fused.lse);
        r.scratch(fused.forwardScratch);
        if (fused.mergeCopies) act(d.ah);
        keepMap(extraAttention); // further modules' outputs and log-sum-exps
    };
    // The attention's output projection (GPT's with a bias): its weight's
    // casts, its output, its product; then what a no-grad pass held goes.
    const auto outputProjection = [&](bool biased) {
        if (biased) copyBias(C);
        copy(C * C);
        tmp(d.ah);
        forwardProduct(C, C, biased);
        releaseHeld();
    };
    // A checkpointed block's first pass runs without grad: the math fallback
    // saves nothing then.
    const auto mathPass = [&] {
        auto m = mathShape;
        m.needs(!noGrad, !noGrad, !noGrad);
        return m;
    };
    // The math fallback's output, [B, H, T, D]: its heads merged are a copy
    // the projection saves, or (one head) the output itself.
    const auto mathMerged = [&] {
        if (mathShape.mergeCopies) act(d.ah);
        else keepTemporary(d.ah);
    };
    const auto blockForward = [&] {
        if (llama) {
            rmsForward();
            copy(C * C);
            act(d.ah);
            tmp(d.ah); // q
            forwardProduct(C, C, A.qkvBias);
            copy(C * KV);
            act(d.ah);
            tmp(d.akvh); // k
            forwardProduct(C, KV, A.qkvBias);
            copy(C * KV);
            act(d.ah);
            tmp(d.akvh); // v
            forwardProduct(C, KV, A.qkvBias);
            ropeForward(d.ah, !math); // (the math fallback saves none of the bf16 q, k, v)
            untmp(d.ah); // q projection released (q reassigned)
            ropeForward(d.akvh, !expands && !math);
            untmp(d.akvh); // k projection released
            // Keys and values expanded to every head: with several key/value
            // heads both copies come before the scores.
            const bool valuesFirst = gqaValuesCopiedFirst(A, S.batch, eager);
            if (math) {
                if (expands) tmp(d.ah), tmp(d.ah); // the expanded keys and values (locals)
                replayMathAttentionForward(r, mathPass());
                keepMap(extraAttention); // further modules' maps
                mathMerged();
                outputProjection(false); // o_proj
                if (mathShape.mergeCopies) untmp(d.ah); // the attention's output released
                untmp(d.ah); // locals: the rotated q and k, the v projection, the expanded k and v
                untmp(d.akvh);
                untmp(d.akvh);
                if (expands) untmp(d.ah), untmp(d.ah);
            } else if (!eager) {
                // Fused: the expanded keys and values (copies with several
                // key/value heads), else the v projection itself, saved.
                if (expands) act(d.ah), act(d.ah);
                fusedForward();
                outputProjection(false); // o_proj
                if (expands) untmp(2 * d.akvh); // locals k and v released on return
                else keepTemporary(d.akvh);     // v, saved by the kernel's view
            } else {
            if (expands) act(valuesFirst ? 2 * d.ah : d.ah);
            attentionCore();
            if (!valuesFirst && (expands || !folds)) act(d.ah); // values made contiguous (or expanded)
            tmp(d.ah);  // probabilities x values
            act(d.ah);  // heads merged
            outputProjection(false); // o_proj
            untmp(d.ah); // attention output released
            if (expands || !folds) untmp(expands ? 2 * d.akvh : d.akvh); // locals k (expanded) and v released on return
            else keepTemporary(d.akvh); // v, saved by the product itself
            }
            tmp(d.a);   // o cast up for the residual sum
            r.add(Activations, d.a); // residual h (the block holds it either way)
            untmp(d.a);
            untmp(d.ah + d.a); // o, the norm output
            rmsForward();
            copy(2 * C * F);
            act(d.ah + d.fh); // gate: input cast and output
            forwardProduct(C, F, false);
            act(d.ah + d.fh); // up
            forwardProduct(C, F, false);
            act(2 * d.fh);    // silu, product
            copy(F * C);
            tmp(d.ah); // down
            forwardProduct(F, C, false);
            releaseHeld();
            tmp(d.a);
            r.add(Activations, d.a); // residual out
            untmp(d.a);
            untmp(d.ah + d.a); // down, the norm output
            return;
        }
        tmp(d.a);
        act(2 * d.m); // ln1: output (a temporary), statistics
        copyBias(3 * C);
        copy(3 * C * C);
        act(d.ah);      // input cast
        tmp(3 * d.ah);  // qkv
        forwardProduct(C, 3 * C, true);
        if (rope) {
            ropeForward(d.ah, !math);
            ropeForward(d.ah, !math);
        } else if (!folds && eager && !math) {
            act(2 * d.ah); // q and k made contiguous for the batched product
        }
        if (math) {
            replayMathAttentionForward(r, mathPass());
            keepMap(extraAttention); // further modules' maps
            mathMerged();
            outputProjection(true); // proj
            if (mathShape.mergeCopies) untmp(d.ah); // the attention's output released
            if (rope) untmp(d.ah), untmp(d.ah); // locals: the rotated q and k, qkv
            untmp(3 * d.ah);
        } else if (!eager) {
            fusedForward();
            outputProjection(true); // proj
            keepTemporary(3 * d.ah); // qkv, kept by the v view the kernel saved
        } else {
        attentionCore();
        if (!folds) act(d.ah); // v made contiguous
        tmp(d.ah);  // probabilities x values
        act(d.ah);  // heads merged
        outputProjection(true); // proj
        untmp(d.ah); // attention output released
        // qkv released on return, or kept by the views the products saved
        if (folds) keepTemporary(3 * d.ah);
        else untmp(3 * d.ah);
        }
        if (drop) {
            act(noiseAh); // noise
            tmp(d.ah);    // dropped
            untmp(d.ah); // proj output
        }
        if (neox) {
            // GPT-NeoX: the attention output (or its dropped copy) is a local
            // until the layer returns; the ln1 output goes with its statement.
            untmp(d.a);
            if (!A.parallelResidual) {
                tmp(d.a); // the attention output cast up for h = x + attn
                r.add(Activations, d.a);
                untmp(d.a);
            }
        } else {
            tmp(d.a);
            r.add(Activations, d.a); // residual h (the block holds it either way)
            untmp(d.a);
            untmp(d.ah + d.a); // proj (or dropped) output, ln1 output
        }
        // ln2, of h (GPT-NeoX's parallel layer: of the layer's input)
        tmp(d.a);
        act(2 * d.m);
        // Without grad (a checkpointed block's first pass) nothing keeps the
        // norm's statistics, nor fc's input cast once its product has run.
        const std::int64_t unkeptStats = noGrad ? 2 * d.m : 0;
        r.sub(Activations, unkeptStats);
        held -= unkeptStats;
        copyBias(F);
        copy(C * F);
        if (noGrad) {
            act(d.ah); // input cast
            act(d.fh); // fc output
        } else {
            act(d.ah + d.fh); // input cast, fc output
        }
        forwardProduct(C, F, true);
        if (noGrad) {
            unact(d.ah);
            held -= d.ah;
        }
        act(d.fh);        // gelu
        copyBias(C);
        copy(F * C);
        tmp(d.ah); // out
        forwardProduct(F, C, true);
        // Without grad, the built-in GPT's fc and gelu outputs are
        // temporaries of the statement that makes the residual sum below:
        // they go after it (an MLP module's locals go when it returns;
        // GPT-NeoX's branch is a statement of its own).
        const std::int64_t statementLocals = noGrad && !A.mlpModule && !neox ? 2 * d.fh : 0;
        held -= statementLocals;
        releaseHeld();
        if (drop) {
            act(noiseAh); // noise
            tmp(d.ah);    // dropped
        }
        // h + dropout(out(...)): every temporary lives until the sum exists,
        // but for out's own output when its dropped copy is what comes back
        // (GPT-2's MLP module drops its output). GPT-NeoX's parallel layer
        // names its MLP branch, whose statement ends there (the ln2 output
        // and, dropped, out's output go), then makes x + attn (its cast up
        // first) and adds the branch.
        const bool parallel = neox && A.parallelResidual;
        const bool outGoesFirst = drop && (parallel || (A.mlpModule && !neox));
        if (outGoesFirst) untmp(d.ah);
        if (parallel) {
            untmp(d.a); // the ln2 output
            tmp(d.a);   // attn cast up
            tmp(d.a);   // x + attn
            untmp(d.a);
        }
        tmp(d.a);
        r.add(Activations, d.a); // residual out
        untmp(d.a);
        untmp((drop && !outGoesFirst ? 2 : 1) * d.ah + (parallel ? 0 : d.a)); // out (and dropped), ln2 output
        unact(statementLocals);
        if (neox) untmp((parallel ? d.a : 0) + d.ah); // x + attn, the attention output
    };

    r.phase("forward");
    tmp(d.idx);
    act(d.a); // token embedding (fp32 weights: not autocast)
    untmp(d.idx);
    if (!llama && A.positional == "learned") {
        tmp(d.pos);
        act(d.a);
        unact(d.a);
        untmp(d.pos);
    } else if (!llama && A.positional == "sinusoidal") {
        act(d.a);
        unact(d.a);
    }
    if (drop && !llama) {
        act(noiseA); // noise, saved; the dropped copy replaces the sum as the block input
        act(d.a);
        unact(d.a);
    }
    causalMask(r, A, S, d.mask);
    for (std::int64_t l = 0; l < A.layers; ++l) {
        if (!S.checkpointing) {
            blockForward();
            continue;
        }
        // The generator's state is saved with the block before it runs.
        // Without grad only the output stays; the weight copies stay cached
        // until the autocast scope ends.
        act(rng);
        const auto activations = r.live(Activations), maps = r.live(AttentionMaps);
        noGrad = true;
        blockForward();
        held = heldMaps = 0;
        noGrad = false;
        r.sub(AttentionMaps, r.live(AttentionMaps) - maps);
        unact(r.live(Activations) - activations - d.a);
    }
    // Final norm, head, loss.
    if (llama) {
        rmsForward();
    } else {
        tmp(d.a);
        act(2 * d.m);
    }
    copy(V * C);
    act(d.ah);            // the head's input cast
    r.add(Logits, d.lgh); // logits
    r.product(ProjectionProducts{rows, false}.forward(C, V, false));
    untmp(d.a);           // the norm output
    act(d.idx);           // targets made contiguous
    r.add(Logits, d.lg);  // cast up for the loss
    r.add(Logits, d.lg);  // log-softmax, saved
    tmp(d.m);             // per-token loss
    if (masked) tmp(d.m);
    untmp(masked ? 2 * d.m : d.m);
    r.sub(Logits, d.lg + d.lgh); // neither the cast nor the logits are saved
    endScope();
    if (S.checkpointing) r.sub(WeightCopies, A.layers * blockWeights * kLow); // cached only

    // ---- backward ----
    r.phase("backward");
    const bool tied = A.tieEmbeddings;
    const std::int64_t headW = V * C * 4;
    r.add(Logits, d.lg); // grad of the log-softmax output
    unact(d.idx);
    r.add(Logits, d.lg); // grad of the logits (fp32)
    r.sub(Logits, 2 * d.lg);
    r.add(Logits, d.lgh); // cast down
    r.sub(Logits, d.lg);
    tmp(V * C * kLow); // head weight gradient (bias-free: before the input's)
    r.product({0, V, S.batch * S.seqLen, C, true, false, false});
    tmp(d.ah); // grad of the head's input
    r.product({0, S.batch * S.seqLen, V, C, false, false, false});
    r.sub(Logits, d.lgh);
    unact(d.ah);
    r.sub(WeightCopies, V * C * kLow);
    tmp(d.a); // cast up: grad of the final norm output
    untmp(d.ah);
    tmp(headW); // in fp32 (tied: held until the embedding's gradient)
    untmp(V * C * kLow);
    if (!tied) grads.done(headW);
    // Final norm backward; the running gradient (a) stays in the workspace from here on.
    if (llama) {
        tmp(2 * d.a);       // g * weight, g * normed
        untmp(2 * d.a);
        unact(d.a + d.m);   // normed, rsqrt
        replayFinalRmsSquareBackward(r, d.a, sq);
        unact(d.a);         // the last block's output
    } else {
        tmp(d.a);
        untmp(d.a);
        unact(d.a + 2 * d.m); // the last block's output and the statistics
    }
    // Under checkpointing the gradient of a block's output is held by the
    // checkpoint node until the block's backward returns, so the block's first
    // residual sum does not free it.
    const std::int64_t heldGrad = S.checkpointing ? d.a : 0;
    const auto rmsBackward = [&](bool firstSum) {
        tmp(2 * d.a); // about two full-size products at a time
        untmp(2 * d.a);
        tmp(d.a);
        untmp(d.a);
        unact(d.a + sq + d.m);
        tmp(3 * d.a);
        untmp(3 * d.a);
        tmp(d.a); // the residual sum
        untmp(2 * d.a - (firstSum ? heldGrad : 0));
        unact(d.a); // the norm's input
    };
    // A projection's backward: the gradient of its input (in) and of its
    // weight in the autocast dtype; the gradient it received (gradOut), its
    // saved input (saved) and its weight copy go.
    // Each gradient is a bf16 product (oneDNN's scratch on the CPU): the
    // input's grad . W and the weight's grad^T . x (Conv1D's: grad . W^T and
    // x^T . grad). A biased projection's backward (addmm's) makes the input's
    // first, a bias-free one's (mm's) the weight's.
    const auto linearBackward = [&](std::int64_t in, std::int64_t weight, std::int64_t gradOut, std::int64_t saved,
                                    bool biased) {
        const std::int64_t inF = in / (rows * kLow), outF = weight / inF;
        const auto inputGradient = [&] {
            tmp(in);
            r.product(projection.inputGradient(inF, outF));
        };
        if (biased) inputGradient();
        tmp(weight * kLow);
        r.product(projection.weightGradient(inF, outF));
        if (!biased) inputGradient();
        untmp(gradOut);
        unact(saved);
        r.sub(WeightCopies, weight * kLow);
    };
    // A projection that read an fp32 input (a norm output) through its own
    // cast: its input's gradient is cast back up (and summed with those of the
    // projections before it that read the same input), then its weight's.
    const auto castInputBackward = [&](std::int64_t weight, std::int64_t gradOut, bool sum, bool biased) {
        linearBackward(d.ah, weight, gradOut, d.ah, biased);
        tmp(d.a);
        untmp(d.ah);
        if (sum) {
            tmp(d.a);
            untmp(2 * d.a);
        }
        weightGradient(weight);
    };
    // Softmax and what precedes it back to the scores; grad of the probabilities (sh) live.
    const auto softmaxBackward = [&] {
        if (softmax32) {
            tmp(d.s); // cast up
            untmp(d.sh);
            if (drop) {
                tmp(d.s);
                untmp(d.s);
                r.sub(AttentionMaps, noiseS); // noise
            }
            tmp(d.s);
            untmp(d.s);
            r.sub(AttentionMaps, d.s + extraMaps); // softmax output
            tmp(d.sh); // cast down
            untmp(d.s);
        } else {
            if (drop) {
                tmp(d.sh);
                untmp(d.sh);
                r.sub(AttentionMaps, d.sh + noiseSh); // dropped, noise
            }
            tmp(d.sh);
            untmp(d.sh);
            r.sub(AttentionMaps, d.sh + extraMaps);
        }
        tmp(d.sh); // masked_fill
        untmp(d.sh);
        tmp(d.sh); // scale
        untmp(d.sh);
    };
    // The fused kernel's backward, from the output's gradient (in the
    // workspace) to those of q, k and v (zeroed, full heads), then what it
    // saved released (`inputs`: q, k and v, or what keeps them) and the
    // output's gradient.
    const auto fusedBackward = [&](std::initializer_list<std::int64_t> inputs) {
        tmp(d.ah);
        tmp(d.ah);
        tmp(d.ah);
        tmp(fused.backwardTemps);
        r.scratch(fused.backwardScratch);
        untmp(fused.backwardTemps);
        untmp(d.ah);
        for (const auto b : inputs) unact(b);
        unact(fused.out);
        unact(fused.lse);
        r.sub(AttentionMaps, extraAttention);
    };
    // What the projection after the attention saved: the merged heads (the
    // fused kernel's output itself where merging is a view).
    const std::int64_t mergedHeads = eager || fused.mergeCopies ? d.ah : 0;
    // The attention's output projection (GPT's with a bias): the gradients
    // of its input and weight; the merged heads go.
    const auto outputProjectionBackward = [&](bool biased) {
        linearBackward(d.ah, C * C, d.ah, mergedHeads, biased);
        weightGradient(C * C);
    };
    const auto mathBackward = [&] {
        replayMathAttentionBackward(r, mathShape);
        r.sub(AttentionMaps, extraAttention);
    };
    for (std::int64_t l = A.layers - 1; l >= 0; --l) {
        if (S.checkpointing) {
            tmp(rng); // the generator's state, restored after the recomputation
            blockForward(); // recomputed with grad under its own autocast scope
            endScope();
        }
        grads.blockBackward();
        tmp(d.ah); // the running gradient cast down for the branch
        if (llama) {
            linearBackward(d.fh, F * C, d.ah, d.fh, false); // down; the product
            weightGradient(F * C);
            tmp(2 * d.fh); // product backward
            untmp(d.fh);
            unact(2 * d.fh); // silu output, up output
            tmp(d.fh); // silu backward
            untmp(d.fh);
            unact(d.fh); // gate output
            castInputBackward(C * F, d.fh, false, false); // gate
            castInputBackward(C * F, d.fh, true, false);  // up
            rmsBackward(true);
            tmp(d.ah); // the running gradient cast down for the attention branch
            outputProjectionBackward(false); // o_proj
            if (math) {
                mathBackward();
            } else if (eager) {
                tmp(d.ah); // heads split
                untmp(d.ah);
                tmp(d.ah); // grad of the values (every head)
                tmp(d.sh); // grad of the probabilities
                untmp(d.ah);
                r.sub(AttentionMaps, d.sh); // the probabilities as cast down
                unact(expands ? d.ah : d.akvh); // values (or v itself)
                softmaxBackward();
                tmp(2 * d.ah); // grads of q and of the keys (every head)
                untmp(d.sh);
                unact(d.ah + (expands ? d.ah : d.akvh)); // rotated q, keys (or the rotated k itself)
            } else {
                fusedBackward({d.ah, expands ? d.ah : d.akvh, expands ? d.ah : d.akvh}); // q, the keys and the values
            }
            if (gqa) { // expanded heads summed back
                tmp(d.akvh);
                untmp(d.ah);
                tmp(d.akvh);
                untmp(d.ah);
            }
            // RoPE backward, then the cos and sin casts go.
            tmp(2 * d.ah);
            untmp(2 * d.ah);
            unact(4 * d.rope);
            // v, k, q projections (each gradient reshaped first), their input gradients summed.
            tmp(d.akvh);
            untmp(d.akvh);
            castInputBackward(C * KV, d.akvh, false, A.qkvBias); // v
            tmp(d.akvh);
            untmp(d.akvh);
            castInputBackward(C * KV, d.akvh, true, A.qkvBias); // k
            tmp(d.ah);
            untmp(d.ah);
            castInputBackward(C * C, d.ah, true, A.qkvBias); // q
            rmsBackward(false);
            if (S.checkpointing) unact(d.a); // the recomputed output
            untmp(rng + heldGrad);
            continue;
        }
        // GPT block. In GPT-NeoX's parallel layer the node of x + attn is
        // next after the output's sum, before the MLP branch: the gradient
        // cast down for the attention branch waits through that branch.
        const bool parallel = neox && A.parallelResidual;
        if (parallel) tmp(d.ah);
        if (drop) {
            tmp(d.ah); // through the dropout
            untmp(d.ah);
            unact(noiseAh); // noise
        }
        linearBackward(d.fh, F * C, d.ah, d.fh, true); // out; gelu output
        weightGradient(F * C);
        tmp(d.fh); // gelu backward
        untmp(d.fh);
        unact(d.fh); // fc output
        castInputBackward(C * F, d.fh, false, true); // fc
        tmp(d.a); // ln2 backward
        untmp(d.a);
        unact((parallel ? 0 : d.a) + 2 * d.m); // h (no parallel layer saves one) and the statistics
        tmp(d.a); // summed with the running gradient
        untmp(2 * d.a - heldGrad);
        if (!parallel) tmp(d.ah); // cast down for the attention branch
        if (drop) {
            tmp(d.ah);
            untmp(d.ah);
            unact(noiseAh); // noise
        }
        outputProjectionBackward(true); // proj
        if (math) {
            mathBackward();
        } else if (eager) {
            tmp(d.ah); // heads split
            untmp(d.ah);
            tmp(d.ah); // grad of v
            tmp(d.sh); // grad of the probabilities
            untmp(d.ah);
            unact(!folds ? d.ah : rope ? 3 * d.ah : 0); // v (a view: qkv, unless q and k still hold it)
            if (softmax32) r.sub(AttentionMaps, d.sh); // the probabilities as cast down
            softmaxBackward();
            tmp(2 * d.ah); // grads of q and k
            untmp(d.sh);
            unact(folds && !rope ? 3 * d.ah : 2 * d.ah); // q and k (views: qkv)
        } else {
            fusedBackward({3 * d.ah, rope ? d.ah : 0, rope ? d.ah : 0}); // qkv, and the rotated q and k
        }
        if (rope) {
            tmp(2 * d.ah);
            untmp(2 * d.ah);
            unact(4 * d.rope);
        }
        tmp(3 * d.ah); // stack of the q, k, v gradients
        untmp(3 * d.ah);
        tmp(3 * d.ah); // reshaped
        untmp(3 * d.ah);
        castInputBackward(3 * C * C, 3 * d.ah, false, true); // qkv
        tmp(d.a); // ln1 backward
        untmp(d.a);
        unact(d.a + 2 * d.m); // block input and statistics
        tmp(d.a);
        untmp(2 * d.a);
        if (S.checkpointing) unact(d.a); // the recomputed output
        untmp(rng + heldGrad);
    }
    if (drop && !llama) unact(noiseA); // embedding dropout noise
    // Embeddings.
    if (!llama && A.positional == "learned") {
        tmp(d.pos);
        tmp(A.maxPositions * C * 4);
        untmp(d.pos);
        grads.done(A.maxPositions * C * 4);
    }
    tmp(headW); // dense embedding gradient
    tmp(d.idx);
    untmp(d.idx);
    untmp(d.a); // running gradient
    if (tied) {
        // The head's gradient (its fp32 cast, held since the head's backward)
        // and the dense one meet in the weight's input buffer: LibTorch 1.13
        // sums them into a new tensor; 2.x adds the second into the first in
        // place, the cast being a contiguous tensor of its own (fp32 and pure
        // bf16, whose head gradient is a transposed product's, still sum anew).
        if (S.torchMajor < 2) {
            tmp(headW);
            untmp(2 * headW);
        } else {
            untmp(headW); // the dense gradient, added in place
        }
        grads.done(headW);
    } else {
        grads.done(headW);
    }
    // What the blocks' autograd nodes hold goes with the graph: their saved
    // generator states and the mask.
    unact(A.layers * rng);
    if (S.attention != "fused") unact(d.mask);
    grads.backwardDone();
}

} // namespace tb::memory_detail
