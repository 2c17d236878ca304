// Range and combination checks shared by every front end. Messages state the
// allowed range so the user can fix the value without opening the docs.
#include "config/RunConfig.h"
#include "common/Errors.h"
#include "config/HfArchitecture.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <sstream>

namespace tb {
namespace {

// Well-formed UTF-8 (RFC 3629): no overlong forms, surrogates or values past U+10FFFF.
bool isValidUtf8(const std::string& text)
{
    const auto* p = reinterpret_cast<const unsigned char*>(text.data());
    const auto* end = p + text.size();
    while (p < end) {
        const unsigned c = *p++;
        if (c < 0x80) continue;
        int more;
        unsigned cp;
        if ((c & 0xe0) == 0xc0) { more = 1; cp = c & 0x1f; }
        else if ((c & 0xf0) == 0xe0) { more = 2; cp = c & 0x0f; }
        else if ((c & 0xf8) == 0xf0) { more = 3; cp = c & 0x07; }
        else return false;
        if (end - p < more) return false;
        for (int k = 0; k < more; ++k) {
            if ((p[k] & 0xc0) != 0x80) return false;
            cp = (cp << 6) | (p[k] & 0x3f);
        }
        p += more;
        static constexpr unsigned kMin[] = {0, 0x80, 0x800, 0x10000};
        if (cp < kMin[more] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    }
    return true;
}


std::string number(double v)
{
    std::ostringstream out;
    out << v;
    return out.str();
}

class Checker {
public:
    explicit Checker(std::vector<ConfigIssue>& issues) : m_issues(issues) {}

    void intRange(const std::string& path, long long value, long long lo, long long hi,
                  const char* what = "an integer")
    {
        if (value < lo || value > hi) {
            std::string range;
            if (lo == 1) {
                range = "a positive integer";
                if (hi < 1000000000) range += " up to " + std::to_string(hi);
            } else {
                range = std::string(what) + " from " + std::to_string(lo) + " to " + std::to_string(hi);
            }
            add(path, "must be " + range + ", got " + std::to_string(value));
        }
    }
    void realRange(const std::string& path, double value, double lo, double hi, bool loOpen, bool hiOpen)
    {
        const bool ok = std::isfinite(value) && (loOpen ? value > lo : value >= lo)
            && (hiOpen ? value < hi : value <= hi);
        if (!ok) {
            add(path, "must be a number in " + std::string(loOpen ? "(" : "[") + number(lo) + ", " + number(hi)
                    + (hiOpen ? ")" : "]") + ", got " + number(value));
        }
    }
    void oneOf(const std::string& path, const std::string& value, std::vector<std::string> allowed)
    {
        for (const auto& a : allowed) {
            if (a == value) return;
        }
        std::string list;
        for (std::size_t i = 0; i < allowed.size(); ++i) list += (i ? ", " : "") + ("\"" + allowed[i] + "\"");
        std::string message = "must be one of " + list + ", got \"" + value + "\"";
        if (const auto guess = closestName(value, allowed); !guess.empty()) {
            message += "; did you mean \"" + guess + "\"?";
        }
        add(path, message);
    }
    void add(const std::string& path, std::string message) { m_issues.push_back({path, std::move(message)}); }

private:
    std::vector<ConfigIssue>& m_issues;
};

// A file the config names must exist and be a regular file.
void checkFile(Checker& check, const std::string& key, const std::string& path, const std::string& hint = {})
{
    namespace fs = std::filesystem;
    std::error_code ec;
    if (!fs::exists(path, ec)) check.add(key, "file not found: " + path + hint);
    else if (!fs::is_regular_file(path, ec)) check.add(key, "is not a regular file: " + path);
}

bool validDevice(const std::string& device)
{
    if (device == "auto" || device == "cpu" || device == "cuda") return true;
    if (device.rfind("cuda:", 0) != 0 || device.size() == 5 || device.size() > 7) return false;
    for (std::size_t i = 5; i < device.size(); ++i) {
        if (!std::isdigit(static_cast<unsigned char>(device[i]))) return false;
    }
    return true;
}

// LoRA's target names: every model's, and each family's own projections.
const std::vector<std::string> kBlockTargets{"attn", "mlp"};
const std::vector<std::string> kLlamaTargets{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
const std::vector<std::string> kGpt2Targets{"c_attn", "c_proj", "c_fc"};
const std::vector<std::string> kNeoxTargets{"query_key_value", "dense", "dense_h_to_4h", "dense_4h_to_h"};
const std::vector<std::string> kPhi3Targets{"qkv_proj", "o_proj", "gate_up_proj", "down_proj"};

std::vector<std::string> targetNames(std::initializer_list<const std::vector<std::string>*> families)
{
    std::vector<std::string> names = kBlockTargets;
    for (const auto* f : families) {
        for (const auto& n : *f) {
            if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
        }
    }
    return names;
}

// A Hugging Face folder's names.
std::vector<std::string> hfTargetNames(const HfArchitecture& arch)
{
    if (arch.fusedProjections) return targetNames({&kPhi3Targets});
    if (arch.llamaFamily()) return targetNames({&kLlamaTargets});
    if (arch.modelType == "gpt2") return targetNames({&kGpt2Targets});
    return targetNames({&kNeoxTargets});
}

// A Hugging Face folder's config.json against the run: its LoRA targets
// and its positions.
void checkHfFolder(Checker& check, const RunConfig& c)
{
    try {
        const auto arch = readHfArchitecture(resolvedModelPath(c));
        // A LoRA target must be one of the family's own projections.
        const auto own = hfTargetNames(arch);
        for (std::size_t i = 0; c.lora.rank > 0 && i < c.lora.targets.size(); ++i) {
            if (std::find(own.begin(), own.end(), c.lora.targets[i]) == own.end()) {
                std::string list;
                for (const auto& name : own) {
                    if (!list.empty()) list += ", ";
                    list += name;
                }
                check.add("lora.targets[" + std::to_string(i) + "]", "\"" + c.lora.targets[i] + "\" is not a projection of a "
                          + arch.modelType + " model; use one of " + list);
            }
        }
        if (effectiveSeqLen(c) > arch.maxPositions) {
            check.add("data.seq_len", std::to_string(effectiveSeqLen(c)) + " tokens is more than the model's "
                                          + std::to_string(arch.maxPositions) + " positions (max_position_embeddings)");
        }
    } catch (const InputError& e) {
        check.add("model.path", e.what());
    }
}

void checkModel(Checker& check, const RunConfig& c, bool checkFiles)
{
    const auto& m = c.model;
    check.oneOf("model.type", m.type, {"gpt", "llama", "torchscript", "hf"});
    if (m.type == "hf") {
        if (m.path.empty()) {
            check.add("model.path", "an hf model needs its Hugging Face model folder (config.json and safetensors "
                                    "files), e.g. \"models/TinyLlama-1.1B\"");
        } else if (checkFiles) {
            checkHfFolder(check, c);
        }
        if (c.data.source == "addition") {
            check.add("data.source", "an hf model trains on its own tokenizer's ids: use \"text\", \"jsonl\" or \"chat\" "
                                     "(tokenized with the folder's tokenizer) or \"tokens\" (ids already made); addition "
                                     "is for the built-in models");
        } else if ((c.data.source == "text" || c.data.source == "jsonl" || c.data.source == "chat") && checkFiles && !m.path.empty()) {
            namespace fs = std::filesystem;
            std::error_code ec;
            const fs::path folder = resolvedModelPath(c);
            if (fs::is_directory(folder, ec) && !fs::is_regular_file(folder / "tokenizer.json", ec)
                && !fs::is_regular_file(folder / "tokenizer.model", ec))
                check.add("data.source", "\"" + c.data.source + "\" is tokenized with the model folder's tokenizer.json (or "
                                             "SentencePiece tokenizer.model), and " + folder.string()
                                             + " has neither; add one, or give token ids with \"tokens\"");
        }
    } else if (m.type == "torchscript") {
        if (m.path.empty()) {
            check.add("model.path", "a torchscript model needs the file of the saved module (torch.jit.save), e.g. "
                                    "\"model.pt\"");
        } else if (checkFiles) {
            checkFile(check, "model.path", resolvedModelPath(c));
        }
        if (c.lora.rank > 0) check.add("lora.rank", "LoRA adapters are for the built-in models; use 0 with a torchscript model");
        if (c.train.activationCheckpointing) {
            check.add("train.activation_checkpointing", "is for the built-in models; a torchscript model runs its own forward");
        }
        if (!c.train.initFrom.empty()) check.add("train.init_from", "is for the built-in models; a torchscript model brings its weights");
    }
    if (m.type != "hf" && m.vocabSize != 0) {
        check.add("model.vocab_size", "is only used with model.type \"hf\" (the folder's vocabulary); the built-in "
                                      "models take the dataset's");
    }
    if (m.type != "hf" && m.type != "torchscript" && !m.path.empty()) {
        check.add("model.path", "is only used with model.type \"torchscript\" or \"hf\"; remove it or set the type");
    }
    if (m.path.size() > 4096) check.add("model.path", "must be at most 4096 characters");
    check.intRange("model.n_layer", m.nLayer, 1, 256);
    check.intRange("model.d_model", m.dModel, 8, 16384);
    check.intRange("model.n_head", m.nHead, 1, 256);
    check.intRange("model.d_ff", m.dFf, 0, 262144, "an integer (0 = 4 x d_model)");
    check.oneOf("model.positional_encoding", m.positionalEncoding, {"learned", "sinusoidal", "rope"});
    if (m.type == "llama" && m.positionalEncoding != "rope") {
        check.add("model.positional_encoding", "a llama model always uses \"rope\"; leave it out, got \""
                                                   + m.positionalEncoding + "\"");
    }
    check.realRange("model.rope_theta", m.ropeTheta, 1.0, 1e9, false, false);
    check.realRange("model.rms_norm_eps", m.rmsNormEps, 0.0, 0.1, true, false);
    check.intRange("model.n_kv_head", m.nKvHead, 0, 256, "an integer (0 = n_head)");
    if (m.nKvHead > 0 && m.nHead >= 1 && (m.nKvHead > m.nHead || m.nHead % m.nKvHead != 0)) {
        check.add("model.n_kv_head", "must divide model.n_head (" + std::to_string(m.nHead) + "), got "
                                         + std::to_string(m.nKvHead));
    } else if (m.nKvHead > 0 && m.type != "llama" && m.type != "hf") {
        check.add("model.n_kv_head", "grouped-query attention is for model.type \"llama\"; leave it out or 0");
    }
    check.realRange("model.dropout", m.dropout, 0.0, 1.0, false, true);
    check.oneOf("model.attention", m.attention, {"eager", "sdpa"});
    check.oneOf("model.quantize", m.quantize, {"none", "nf4", "int8"});
    if (m.quantize == "nf4" || m.quantize == "int8") {
        if (m.type != "llama" && m.type != "hf") {
            check.add("model.quantize", "quantized base weights are for model.type \"llama\" and Hugging Face folders "
                                        "(\"hf\"); use \"none\" with a " + m.type + " model");
        } else if (c.lora.rank <= 0) {
            check.add("model.quantize", "\"" + m.quantize + "\" stores the frozen base weights quantized, and only LoRA "
                                        "adapters train on such a base (QLoRA): set lora.rank (e.g. 16); to train every "
                                        "weight, use plain weights with quantize \"none\"");
        }
        if (c.train.weightsDtype != "fp32") {
            check.add("train.weights_dtype", "describes unquantized weights; with model.quantize \"" + m.quantize
                                                 + "\" the base is stored quantized: leave weights_dtype at \"fp32\"");
        }
    }
    if (m.type == "hf") {
        // The folder's config.json was checked when it was read (head_dim may differ from d_model / n_head).
    } else if (m.nHead >= 1 && m.dModel >= 8 && m.dModel % m.nHead != 0) {
        check.add("model.n_head", "must divide model.d_model (" + std::to_string(m.dModel) + "), got "
                                      + std::to_string(m.nHead));
    } else if (m.positionalEncoding == "rope" && m.nHead >= 1 && (m.dModel / m.nHead) % 2 != 0) {
        check.add("model.positional_encoding", "rope needs an even head size (d_model / n_head), got "
                                                   + std::to_string(m.dModel / std::max(1, m.nHead)));
    }

}

void checkData(Checker& check, const RunConfig& c, bool checkFiles)
{
    const auto& m = c.model;
    const auto& d = c.data;
    check.oneOf("data.source", d.source, {"addition", "text", "jsonl", "chat", "tokens"});
    if (d.source != "jsonl" && d.field != "text") check.add("data.field", "is only used with data.source \"jsonl\"");
    if (d.skipBadLines && d.source != "text" && d.source != "jsonl" && d.source != "chat")
        check.add("data.skip_bad_lines", "is only used with data.source \"text\", \"jsonl\" or \"chat\"");
    check.realRange("data.val_fraction", d.valFraction, 0.0, 0.5, true, false);
    if (d.source == "addition") {
        check.intRange("data.digits", d.digits, 1, 18);
        if (!d.path.empty()) check.add("data.path", "is only used with data.source \"text\"; remove it or set source to \"text\"");
        const int needed = additionSequenceLength(d.digits);
        if (d.digits >= 1 && d.digits <= 18 && d.seqLen != 0 && d.seqLen != needed) {
            check.add("data.seq_len", "addition with " + std::to_string(d.digits) + " digits uses sequences of "
                                          + std::to_string(needed) + " tokens; leave seq_len out or set it to "
                                          + std::to_string(needed) + ", got " + std::to_string(d.seqLen));
        }
    } else if (d.source == "tokens") {
        check.intRange("data.seq_len", d.seqLen, 0, 65536, "an integer (0 = 64)");
        check.oneOf("data.token_dtype", d.tokenDtype, {"uint16", "uint32"});
        if (m.type != "hf") {
            check.add("data.source", "token ids need the model they were made for: use model.type \"hf\" with its folder");
        }
        if (d.path.empty()) {
            check.add("data.path", "\"tokens\" needs the file of little-endian token ids (e.g. nanoGPT's train.bin)");
        } else if (checkFiles) {
            checkFile(check, "data.path", resolvedDataPath(c));
        }
    } else if (d.source == "jsonl" || d.source == "chat") {
        check.intRange("data.seq_len", d.seqLen, 0, 65536, "an integer (0 = 64)");
        if (m.type != "hf") {
            check.add("data.source", "\"" + d.source + "\" is tokenized with a model folder's tokenizer: use model.type \"hf\", or "
                                     "\"text\" for a built-in model");
        }
        if (d.source == "jsonl" && d.field.empty()) check.add("data.field", "must name the JSON field that holds each document, e.g. \"text\"");
        if (d.path.empty()) {
            check.add("data.path", "\"" + d.source + "\" needs the file of JSON records, one per line");
        } else if (checkFiles) {
            checkFile(check, "data.path", resolvedDataPath(c));
        }
    } else if (d.source == "text") {
        check.intRange("data.seq_len", d.seqLen, 0, 65536, "an integer (0 = 64)");
        if (checkFiles && !d.path.empty()) {
            checkFile(check, "data.path", resolvedDataPath(c), " (give an existing text file, or leave path out for the bundled sample)");
        }
    }

}

void checkOptimization(Checker& check, const RunConfig& c)
{
    const auto& o = c.optim;
    check.oneOf("optim.optimizer", o.optimizer, {"adamw", "sgd"});
    if (c.train.precision == "bf16-pure" && o.optimizer == "sgd") {
        check.add("optim.optimizer", "\"sgd\" with train.precision \"bf16-pure\" rounds each update to bf16 and loses the "
                                     "small ones; use \"adamw\" (its updates are rounded stochastically) or bf16 mixed precision");
    }
    check.realRange("optim.lr", o.lr, 0.0, 10.0, true, false);
    check.realRange("optim.weight_decay", o.weightDecay, 0.0, 1.0, false, false);
    check.realRange("optim.betas[0]", o.betas[0], 0.0, 1.0, false, true);
    check.realRange("optim.betas[1]", o.betas[1], 0.0, 1.0, false, true);
    check.realRange("optim.momentum", o.momentum, 0.0, 1.0, false, true);
    check.oneOf("optim.schedule", o.schedule, {"cosine", "linear", "constant"});
    check.realRange("optim.min_lr_ratio", o.minLrRatio, 0.0, 1.0, false, false);
    check.realRange("optim.grad_clip", o.gradClip, 0.0, 1e6, false, false);

    const auto& t = c.train;
    check.intRange("train.batch_size", t.batchSize, 1, 65536);
    check.intRange("train.grad_accum", t.gradAccum, 1, 4096);
    check.intRange("train.steps", t.steps, 1, 1000000000);
    check.oneOf("train.precision", t.precision, {"auto", "fp32", "fp16", "bf16", "bf16-pure"});
    check.intRange("train.eval_every", t.evalEvery, 0, 1000000000, "an integer (0 = ten evaluations per run)");
    check.intRange("train.eval_batches", t.evalBatches, 1, 10000);
    check.intRange("train.dist_timeout_s", t.distTimeoutS, 1, 86400);
    check.intRange("train.dist_bucket_mb", t.distBucketMb, 1, 4096);
    check.intRange("train.world_size", t.worldSize, 1, 1024);
    check.intRange("train.log_every", t.logEvery, 1, 1000000000);
    check.intRange("train.checkpoint_every", t.checkpointEvery, 0, 1000000000, "an integer (0 = at the end only)");
    check.intRange("train.keep_checkpoints", t.keepCheckpoints, 0, 1000000, "an integer (0 = keep all)");
    check.intRange("train.threads", t.threads, 0, 256, "an integer (0 = automatic)");
    if (t.steps >= 1) check.intRange("optim.warmup_steps", o.warmupSteps, 0, t.steps, "an integer (at most train.steps)");
    if (t.precision == "fp16" && c.device == "cpu") {
        check.add("train.precision", "fp16 needs a CUDA device; on the CPU use \"fp32\" or \"bf16\"");
    }

}

void checkLora(Checker& check, const RunConfig& c)
{
    const auto& m = c.model;
    const auto& t = c.train;
    const auto& l = c.lora;
    check.intRange("lora.rank", l.rank, 0, 4096, "an integer (0 = off)");
    if (l.rank > 0 && m.dModel >= 8 && l.rank >= m.dModel) {
        check.add("lora.rank", "must be smaller than model.d_model (" + std::to_string(m.dModel) + "), got "
                                   + std::to_string(l.rank));
    }
    check.realRange("lora.alpha", l.alpha, 0.0, 1e6, true, false);
    check.realRange("lora.dropout", l.dropout, 0.0, 1.0, false, true);
    if (l.dropout > 0 && l.rank <= 0) check.add("lora.dropout", "drops the adapters' input: it needs lora.rank > 0");
    if (l.rank > 0 && l.targets.empty()) check.add("lora.targets", "must name at least one of \"attn\", \"mlp\" when lora.rank > 0");
    // Any family's names for a folder (checkHfFolder holds it to its own).
    const auto targets = m.type == "hf" ? targetNames({&kGpt2Targets, &kNeoxTargets, &kLlamaTargets, &kPhi3Targets}) : loraTargetNames(c);
    for (std::size_t i = 0; i < l.targets.size(); ++i) {
        check.oneOf("lora.targets[" + std::to_string(i) + "]", l.targets[i], targets);
    }
    check.oneOf("train.weights_dtype", t.weightsDtype, {"fp32", "fp16", "bf16"});
    check.oneOf("train.offload", t.offload, {"none", "cpu"});
    if (t.initFrom.size() > 4096) check.add("train.init_from", "must be at most 4096 characters");
}

} // namespace

std::vector<ConfigIssue> validateConfig(const RunConfig& c, bool checkFiles)
{
    std::vector<ConfigIssue> issues;
    Checker check(issues);

    if (c.name.empty() || c.name.size() > 200) check.add("name", "must be 1 to 200 characters long");
    else if (!isValidUtf8(c.name)) check.add("name", "is not valid UTF-8 text; use a name your terminal shows as letters");
    if (!validDevice(c.device)) {
        check.add("device", "must be \"auto\", \"cpu\", \"cuda\" or \"cuda:N\" (N a device index), got \""
                                + c.device + "\"");
    }

    checkModel(check, c, checkFiles);
    checkData(check, c, checkFiles);
    checkOptimization(check, c);
    checkLora(check, c);
    return issues;
}

std::vector<std::string> loraTargetNames(const RunConfig& config)
{
    if (config.model.type == "hf") {
        try {
            return hfTargetNames(readHfArchitecture(resolvedModelPath(config)));
        } catch (const InputError&) {
            return kBlockTargets;
        }
    }
    if (config.model.type == "llama") return targetNames({&kLlamaTargets});
    return kBlockTargets;
}

std::string halfBaseProblem(const RunConfig& config, const std::string& precision)
{
    const auto& dtype = config.train.weightsDtype;
    if (dtype == "fp32" || config.lora.rank <= 0) return {};
    if (precision == "fp32") {
        return "train.weights_dtype \"" + dtype + "\" stores the frozen base in " + dtype
            + ", and its products need autocast: train.precision is fp32" + (config.train.precision == "auto" ? " here (auto)" : "")
            + ". Set train.precision to \"bf16\" (\"fp16\" on a GPU without bf16), or train.weights_dtype to \"fp32\"";
    }
    if (precision == "bf16-pure" && dtype != "bf16") {
        return "train.precision \"bf16-pure\" keeps every weight in bf16, so a base in " + dtype
            + " is not kept: set train.weights_dtype to \"bf16\" (or \"fp32\")";
    }
    return {};
}

} // namespace tb
