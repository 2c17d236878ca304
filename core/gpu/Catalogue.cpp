#include "gpu/Catalogue.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <regex>

#include <nlohmann/json.hpp>

#include "common/Errors.h"
#include "config/RunConfig.h"

namespace tb {
namespace {

// Lower case, without spaces, dashes, underscores: "Tesla T4" -> "teslat4".
std::string normalise(const std::string& text)
{
    std::string out;
    for (char c : text) {
        if (std::isalnum(static_cast<unsigned char>(c))) out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
    return out;
}

} // namespace

GpuCatalogue GpuCatalogue::fromJson(const std::string& text, const std::string& source)
{
    GpuCatalogue c;
    try {
        const auto root = nlohmann::json::parse(text);
        for (const auto& g : root.at("gpus")) {
            CatalogueGpu e;
            e.id = g.at("id").get<std::string>();
            e.name = g.at("name").get<std::string>();
            e.aliases = g.value("aliases", std::vector<std::string>{});
            e.defaultFor = g.value("default_for", std::vector<std::string>{});
            const auto cc = ComputeCapability::parse(g.at("compute_capability").get<std::string>());
            if (!cc) throw InputError(source + ": " + e.id + ": compute_capability must look like \"7.5\"");
            e.cc = *cc;
            e.memoryGib = g.at("memory_gib").get<double>();
            e.memoryBytes = static_cast<std::int64_t>(std::llround(e.memoryGib * 1073741824.0));
            e.specMemoryGb = g.at("spec_memory_gb").get<double>();
            e.bandwidthGbs = g.at("bandwidth_gbs").get<double>();
            e.fp32Tflops = g.at("fp32_tflops").get<double>();
            e.fp16Tflops = g.at("fp16_tflops").get<double>();
            e.bf16Tflops = g.at("bf16_tflops").get<double>();
            e.source = g.at("source").get<std::string>();
            c.m_entries.push_back(std::move(e));
        }
    } catch (const nlohmann::json::exception& e) {
        throw InputError(source + ": malformed GPU catalogue (" + std::string(e.what()) + ")");
    }
    return c;
}

const GpuCatalogue& GpuCatalogue::bundled()
{
    static const GpuCatalogue catalogue = fromJson(bundledGpuCatalogueJson(), "resources/gpus.json");
    return catalogue;
}

std::vector<const CatalogueGpu*> GpuCatalogue::matching(const std::string& name) const
{
    const std::string key = normalise(name);
    std::vector<const CatalogueGpu*> matches;
    for (const auto& e : m_entries) {
        bool hit = normalise(e.name) == key || normalise(e.id) == key;
        for (const auto& a : e.aliases) hit = hit || normalise(a) == key;
        if (hit) matches.push_back(&e);
    }
    return matches;
}

GpuTarget GpuCatalogue::resolve(const std::string& text) const
{
    // The whole text as a name first ("RTX 3060" is not "RT" x 3060), then
    // with a count in front or behind: "2xT4", "2 x T4", "T4x2", "T4 x 2".
    std::string name = text;
    int count = 1;
    auto matches = matching(name);
    if (matches.empty()) {
        static const std::regex front(R"(^\s*(\d+)\s*[xX*]\s*(.+?)\s*$)"), back(R"(^\s*(.+?)\s*[xX*]\s*(\d+)\s*$)");
        std::smatch m;
        if (std::regex_match(text, m, front) || std::regex_match(text, m, back)) {
            const bool countFirst = std::isdigit(static_cast<unsigned char>(m.str(1).front())) && std::regex_match(text, front);
            const std::string countText = countFirst ? m.str(1) : m.str(2);
            const std::string rest = countFirst ? m.str(2) : m.str(1);
            if (auto found = matching(rest); !found.empty()) {
                count = countText.size() > 3 ? 0 : std::stoi(countText);
                if (count < 1 || count > 64) {
                    throw InputError("GPU count must be from 1 to 64, got " + countText + " (in \"" + text + "\")");
                }
                name = rest;
                matches = std::move(found);
            }
        }
    }
    GpuTarget target;
    target.count = count;
    if (matches.size() == 1) {
        target.gpu = *matches.front();
        return target;
    }
    if (matches.size() > 1) {
        const std::string key = normalise(name);
        for (const auto* e : matches) {
            for (const auto& d : e->defaultFor) {
                if (normalise(d) == key) {
                    target.gpu = *e;
                    target.note = "\"" + name + "\" fits " + std::to_string(matches.size()) + " entries; chose " + e->name
                        + " (the default for that name); name one exactly to choose another";
                    return target;
                }
            }
        }
        target.gpu = *matches.front();
        target.note = "\"" + name + "\" fits several entries; chose " + target.gpu.name;
        return target;
    }
    const std::string key = normalise(text);
    std::vector<std::pair<int, std::string>> scored;
    for (const auto& e : m_entries) {
        int best = editDistance(key, normalise(e.name));
        for (const auto& a : e.aliases) best = std::min(best, editDistance(key, normalise(a)));
        scored.emplace_back(best, e.name);
    }
    std::sort(scored.begin(), scored.end());
    std::string closest;
    for (std::size_t i = 0; i < std::min<std::size_t>(4, scored.size()); ++i) closest += (i ? ", " : "") + scored[i].second;
    throw InputError("unknown GPU \"" + text + "\"; closest: " + closest + " ('trainbench-cli devices --catalog' lists all)");
}

} // namespace tb
