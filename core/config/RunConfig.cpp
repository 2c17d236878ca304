#include "config/RunConfig.h"

#include <algorithm>
#include <filesystem>

namespace tb {

int editDistance(const std::string& a, const std::string& b)
{
    std::vector<int> row(b.size() + 1);
    for (std::size_t j = 0; j <= b.size(); ++j) row[j] = static_cast<int>(j);
    for (std::size_t i = 1; i <= a.size(); ++i) {
        int diagonal = row[0];
        row[0] = static_cast<int>(i);
        for (std::size_t j = 1; j <= b.size(); ++j) {
            const int above = row[j];
            const int cost = (std::tolower(a[i - 1]) == std::tolower(b[j - 1])) ? 0 : 1;
            row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + cost});
            diagonal = above;
        }
    }
    return row[b.size()];
}

std::string closestName(const std::string& name, const std::vector<std::string>& candidates)
{
    std::string best;
    int bestDistance = 1 << 30;
    for (const auto& candidate : candidates) {
        const int d = editDistance(name, candidate);
        if (d < bestDistance) {
            bestDistance = d;
            best = candidate;
        }
    }
    // Allow roughly one typo per three characters.
    const int allowed = std::max<int>(2, static_cast<int>(name.size()) / 3);
    if (bestDistance <= allowed) return best;
    // A longer or shorter spelling of a key ("optimiser" for "optim").
    for (const auto& candidate : candidates) {
        const auto shorter = std::min(name.size(), candidate.size());
        if (shorter >= 4 && editDistance(name.substr(0, shorter), candidate.substr(0, shorter)) == 0) return candidate;
    }
    return {};
}

std::string resolvedDataPath(const RunConfig& config)
{
    namespace fs = std::filesystem;
    if (config.data.path.empty()) return {};
    fs::path p(config.data.path);
    if (p.is_relative() && !config.baseDir.empty()) p = fs::path(config.baseDir) / p;
    return p.lexically_normal().string();
}

std::string resolvedModelPath(const RunConfig& config)
{
    namespace fs = std::filesystem;
    if (config.model.path.empty()) return {};
    fs::path p(config.model.path);
    if (p.is_relative() && !config.baseDir.empty()) p = fs::path(config.baseDir) / p;
    return p.lexically_normal().string();
}

int effectiveSeqLen(const RunConfig& config)
{
    if (config.data.seqLen > 0) return config.data.seqLen;
    if (config.data.source == "addition") return additionSequenceLength(config.data.digits);
    return 64;
}

std::vector<std::string> loraProjections(const std::string& modelType, const std::vector<std::string>& targets)
{
    const bool llama = modelType == "llama" || modelType == "hf";
    std::vector<std::string> out;
    const auto add = [&](std::initializer_list<const char*> names) {
        for (const char* n : names) {
            if (std::find(out.begin(), out.end(), n) == out.end()) out.emplace_back(n);
        }
    };
    const bool hf = modelType == "hf";
    for (const auto& t : targets) {
        // hf: every family's projections; a model has only its own family's. GPT-2's
        // c_proj is in both attn and mlp, so the groups name them qualified.
        if (t == "attn" && hf) {
            add({"q_proj", "k_proj", "v_proj", "qkv_proj", "o_proj", "attn.c_attn", "attn.c_proj", "attn.query_key_value",
                 "attn.dense"});
        } else if (t == "mlp" && hf) {
            add({"gate_proj", "up_proj", "gate_up_proj", "down_proj", "mlp.c_fc", "mlp.c_proj", "mlp.dense_h_to_4h",
                 "mlp.dense_4h_to_h"});
        } else if (t == "attn") {
            llama ? add({"q_proj", "k_proj", "v_proj", "o_proj"}) : add({"qkv", "proj"});
        } else if (t == "mlp") {
            llama ? add({"gate_proj", "up_proj", "down_proj"}) : add({"fc", "out"});
        } else {
            add({t.c_str()});
        }
    }
    return out;
}

} // namespace tb
