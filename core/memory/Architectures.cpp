#include "memory/Architectures.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include <stdlib.h>

#include "common/Errors.h"
#include "config/HfArchitecture.h"
#include "config/ModelSpec.h"

namespace tb {

std::string bundledArchitecturesJson();

namespace {

using nlohmann::json;

std::string lower(std::string s)
{
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
    return s;
}

} // namespace

ModelSpec modelFromHfConfig(const std::string& content, const std::string& source)
{
    // The trainer's reading of a config.json (config/HfArchitecture.h), in its
    // planning mode: one parser for folders, --hf-config and the presets.
    const auto hf = hfArchitectureFromJson(content, source, HfReading::Plan);
    auto model = modelSpecFromHf(hf, "", static_cast<int>(std::min<std::int64_t>(hf.maxPositions, 1 << 30)));
    model.hfFamily = hf.lookAlike ? hf.declaredType : hf.modelType;
    return model;
}

ArchitectureSpec architectureFromHfConfig(const std::string& content, const std::string& source)
{
    return architectureFromHfModel(modelFromHfConfig(content, source), source);
}

ArchitectureSpec architectureFromHfModel(const ModelSpec& model, const std::string& source)
{
    try {
        auto a = architectureOf(model);
        a.name = model.hfFamily;
        return a;
    } catch (const InputError& e) {
        throw InputError(source + ": " + e.what() + "; a folder with this config.json is planned from its own step");
    }
}

PublishedExperiment publishedExperiment(const std::string& content, const std::string& source)
{
    PublishedExperiment out;
    out.model = modelFromHfConfig(content, source);
    try {
        // What the trainer refuses has no step to trace: said of the user's
        // file (the scratch folder's name would mean nothing to them).
        (void)hfArchitectureFromJson(content, source, HfReading::Train);
    } catch (const InputError& e) {
        throw InputError(std::string(e.what()) + "; its step cannot be traced (the trainer does not build it), and a "
                         "model is planned from its step");
    }
    std::string pattern = (std::filesystem::temp_directory_path() / "trainbench-plan-XXXXXX").string();
    if (!::mkdtemp(pattern.data())) {
        throw InputError("cannot make a scratch folder in " + std::filesystem::temp_directory_path().string()
                         + " to plan " + source + " from its step");
    }
    out.folder = std::shared_ptr<const std::string>(new std::string(pattern), [](const std::string* p) {
        std::error_code ec;
        std::filesystem::remove_all(*p, ec);
        delete p;
    });
    const std::filesystem::path folder(pattern);
    std::ofstream(folder / "config.json", std::ios::binary) << content;
    // Eight ids of the narrowest width: the probes draw their own.
    const bool wide = out.model.vocabSize > 65536;
    std::ofstream(folder / "tokens.bin", std::ios::binary) << std::string(wide ? 32 : 16, '\0');
    if (!std::filesystem::is_regular_file(folder / "tokens.bin")) {
        throw InputError("cannot write a scratch folder in " + folder.parent_path().string() + " to plan " + source);
    }
    // Parsed as a config file is, so the folder's architecture fills the model's fields.
    const json config = {{"name", std::filesystem::path(source).stem().string()},
                         {"device", "cpu"},
                         {"model", {{"type", "hf"}, {"path", pattern}}},
                         {"data",
                          {{"source", "tokens"},
                           {"path", (folder / "tokens.bin").string()},
                           {"token_dtype", wide ? "uint32" : "uint16"},
                           {"seq_len", std::min(512, out.model.maxLen)}}},
                         {"train", {{"batch_size", 1}, {"precision", "fp32"}}}};
    out.config = parseConfig(config.dump(), source);
    auto& c = out.config;
    c.lora.targets = {"attn"};
    return out;
}

std::string readHfConfigText(const std::string& path)
{
    std::ifstream in(path, std::ios::binary);
    if (!in) throw InputError(path + ": cannot read the file (does it exist?)");
    std::stringstream buffer;
    buffer << in.rdbuf();
    return buffer.str();
}

ArchitectureSpec loadHfConfigFile(const std::string& path)
{
    return architectureFromHfConfig(readHfConfigText(path), path);
}

const std::vector<ArchitecturePreset>& bundledArchitectures()
{
    static const std::vector<ArchitecturePreset> presets = [] {
        std::vector<ArchitecturePreset> out;
        const auto all = json::parse(bundledArchitecturesJson());
        for (const auto& entry : all) {
            const auto& meta = entry.at("_trainbench");
            ArchitecturePreset p;
            p.id = meta.at("id").get<std::string>();
            p.title = meta.at("title").get<std::string>();
            p.source = meta.at("source").get<std::string>();
            const auto where = "resources/architectures/" + p.id + ".json";
            auto published = entry;
            published.erase("_trainbench");
            p.configJson = published.dump(2);
            p.model = modelFromHfConfig(p.configJson, where);
            p.arch = architectureFromHfModel(p.model, where);
            p.arch.name = p.title;
            p.arch.publishedParameters = meta.at("published_parameters").get<std::int64_t>();
            out.push_back(std::move(p));
        }
        // By family (the title's first word: GPT-2, Llama, Pythia, ...), then size.
        const auto family = [](const ArchitecturePreset& p) { return lower(p.title.substr(0, p.title.find(' '))); };
        std::sort(out.begin(), out.end(), [&](const auto& x, const auto& y) {
            const auto fx = family(x), fy = family(y);
            if (fx != fy) return fx < fy;
            return x.arch.publishedParameters < y.arch.publishedParameters;
        });
        return out;
    }();
    return presets;
}

const ArchitecturePreset& findArchitecture(const std::string& name)
{
    const auto wanted = lower(name);
    std::string names;
    for (const auto& p : bundledArchitectures()) {
        if (lower(p.id) == wanted || lower(p.title) == wanted) return p;
        names += (names.empty() ? "" : ", ") + p.id;
    }
    throw InputError("unknown preset \"" + name + "\"; the presets are: " + names
                     + " (or describe the model with --hf-config FILE)");
}

void loadBaseAsPublished(RunConfig& config)
{
    const auto& precision = config.train.precision;
    if (config.lora.rank > 0 && config.model.quantize == "none" && (precision == "bf16" || precision == "fp16")) {
        config.train.weightsDtype = precision;
    }
}

} // namespace tb
