// JSON <-> RunConfig. Parsing checks types and unknown keys; ranges and
// combinations are checked by validateConfig() so that the GUI's form shares them.
#include "config/RunConfig.h"
#include "config/HfArchitecture.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

namespace tb {
namespace {

using nlohmann::json;

// A config nests three levels; anything this deep is not a config, and
// parsing, walking or printing it could exhaust the stack.
constexpr int kMaxNesting = 32;

// The first place where `text` nests arrays or objects deeper than
// kMaxNesting, as a byte offset; npos when it does not.
std::size_t tooDeep(const std::string& text)
{
    int depth = 0;
    bool inString = false;
    for (std::size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (inString) {
            if (c == '\\') ++i;
            else if (c == '"') inString = false;
        } else if (c == '"') {
            inString = true;
        } else if (c == '[' || c == '{') {
            if (++depth > kMaxNesting) return i;
        } else if (c == ']' || c == '}') {
            --depth;
        }
    }
    return std::string::npos;
}

// A value for a message: never more than about 60 characters.
std::string brief(const json& v)
{
    std::string text = v.dump(-1, ' ', false, json::error_handler_t::replace);
    if (text.size() > 60) text = text.substr(0, 57) + "...";
    return text;
}

std::string describe(const json& v)
{
    switch (v.type()) {
    case json::value_t::string: return "the string " + brief(v);
    case json::value_t::boolean: return v.get<bool>() ? "true" : "false";
    case json::value_t::null: return "null";
    case json::value_t::object: return "an object";
    case json::value_t::array: return "an array";
    default: return brief(v);
    }
}

// Reads one JSON object section into a struct, recording every problem.
// While set, every section reader lists the dotted paths of the fields it
// reads (configFieldPaths()): the list comes from the parser itself.
thread_local std::vector<std::string>* g_fieldCatalog = nullptr;

class SectionReader {
public:
    SectionReader(std::string prefix, std::vector<ConfigIssue>& issues, std::set<std::string>& bad)
        : m_prefix(std::move(prefix)), m_issues(issues), m_bad(bad)
    {
    }

    void integer(const char* key, int& out) { m_fields[key] = [this, &out, key](const json& v) {
        if (v.is_number_integer() || v.is_number_unsigned()) {
            const auto wide = v.get<long long>();
            if (v.is_number_unsigned() && v.get<unsigned long long>() > 0x7fffffffULL) {
                fail(key, "must be an integer no larger than 2147483647, got " + brief(v));
            } else if (wide < -2147483647LL || wide > 2147483647LL) {
                fail(key, "must be an integer within ±2147483647, got " + brief(v));
            } else {
                out = static_cast<int>(wide);
            }
        } else if (v.is_number_float() && std::isfinite(v.get<double>())
                   && std::floor(v.get<double>()) == v.get<double>()
                   && std::fabs(v.get<double>()) < 2147483647.0) {
            out = static_cast<int>(v.get<double>());
        } else {
            fail(key, "must be an integer, got " + describe(v));
        }
    }; }

    void unsignedInteger(const char* key, std::uint64_t& out) { m_fields[key] = [this, &out, key](const json& v) {
        if (v.is_number_unsigned()) out = v.get<std::uint64_t>();
        else if (v.is_number_integer() && v.get<long long>() >= 0) out = static_cast<std::uint64_t>(v.get<long long>());
        else fail(key, "must be a non-negative integer, got " + describe(v));
    }; }

    void number(const char* key, double& out) { m_fields[key] = [this, &out, key](const json& v) {
        if (v.is_number() && std::isfinite(v.get<double>())) out = v.get<double>();
        else if (v.is_number()) fail(key, "must be a finite number, got " + brief(v));
        else fail(key, "must be a number, got " + describe(v));
    }; }

    void text(const char* key, std::string& out) { m_fields[key] = [this, &out, key](const json& v) {
        if (v.is_string()) out = v.get<std::string>();
        else fail(key, "must be a string, got " + describe(v));
    }; }

    void boolean(const char* key, bool& out) { m_fields[key] = [this, &out, key](const json& v) {
        if (v.is_boolean()) out = v.get<bool>();
        else fail(key, "must be true or false, got " + describe(v));
    }; }

    void numberPair(const char* key, std::array<double, 2>& out) { m_fields[key] = [this, &out, key](const json& v) {
        if (v.is_array() && v.size() == 2 && v[0].is_number() && v[1].is_number()
            && std::isfinite(v[0].get<double>()) && std::isfinite(v[1].get<double>())) {
            out = {v[0].get<double>(), v[1].get<double>()};
        } else {
            fail(key, "must be an array of two numbers such as [0.9, 0.99], got " + brief(v));
        }
    }; }

    void textList(const char* key, std::vector<std::string>& out) { m_fields[key] = [this, &out, key](const json& v) {
        if (!v.is_array()) { fail(key, "must be an array of strings, got " + describe(v)); return; }
        std::vector<std::string> items;
        for (const auto& item : v) {
            if (!item.is_string()) { fail(key, "must be an array of strings, got " + brief(v)); return; }
            items.push_back(item.get<std::string>());
        }
        out = std::move(items);
    }; }

    void section(const char* key, std::function<void(const json&, const std::string&)> reader)
    {
        m_sections.insert(key);
        m_fields[key] = [this, key, reader](const json& v) {
            if (!v.is_object()) { fail(key, "must be an object, got " + describe(v)); return; }
            reader(v, path(key));
        };
    }

    void read(const json& object)
    {
        if (g_fieldCatalog) {
            for (const auto& [name, _] : m_fields) {
                if (!m_sections.count(name)) g_fieldCatalog->push_back(path(name));
            }
        }
        std::vector<std::string> known;
        for (const auto& [name, _] : m_fields) known.push_back(name);
        for (const auto& [key, value] : object.items()) {
            const auto field = m_fields.find(key);
            if (field != m_fields.end()) {
                field->second(value);
                continue;
            }
            const std::string suggestion = closestName(key, known);
            std::string message = "unknown key";
            if (!suggestion.empty()) {
                message += "; did you mean \"" + suggestion + "\"?";
            } else {
                message += "; known keys here are";
                for (std::size_t i = 0; i < known.size(); ++i) message += (i ? ", " : " ") + known[i];
            }
            m_issues.push_back({path(key), message});
            m_bad.insert(path(key));
        }
    }

private:
    std::string path(const std::string& key) const { return m_prefix.empty() ? key : m_prefix + "." + key; }
    void fail(const std::string& key, std::string message)
    {
        m_issues.push_back({path(key), std::move(message)});
        m_bad.insert(path(key));
    }

    std::string m_prefix;
    std::vector<ConfigIssue>& m_issues;
    std::set<std::string>& m_bad;
    std::map<std::string, std::function<void(const json&)>> m_fields;
    std::set<std::string> m_sections;
};

std::pair<int, int> lineAndColumn(const std::string& text, std::size_t byte)
{
    int line = 1, column = 1;
    for (std::size_t i = 0; i < text.size() && i + 1 < byte; ++i) {
        if (text[i] == '\n') { ++line; column = 1; } else { ++column; }
    }
    return {line, column};
}

} // namespace

ConfigError::ConfigError(std::string source, std::vector<ConfigIssue> issues)
    : InputError([&] {
          std::string text = source + ": " + std::to_string(issues.size())
              + (issues.size() == 1 ? " problem" : " problems");
          for (const auto& issue : issues) text += "\n  " + issue.text();
          return text;
      }()),
      m_source(std::move(source)), m_issues(std::move(issues))
{
}

// model.type "hf": the size fields come from the folder's config.json. A field
// the config sets itself must agree (a saved config repeats them); one that
// differs is an issue naming both values. An unreadable folder leaves the
// fields as they are: validation with files reports it on model.path, and a
// stored run's config still reads after its folder is gone.
static void applyHfArchitecture(RunConfig& c, const std::set<std::string>& given, std::vector<ConfigIssue>& issues,
                         std::set<std::string>& bad)
{
    if (c.model.path.empty()) return;
    HfArchitecture a;
    try {
        a = readHfArchitecture(resolvedModelPath(c));
    } catch (const InputError&) {
        return;
    }
    auto& m = c.model;
    const auto folderValue = [&](const char* key, auto& field, auto value, const char* hfKey) {
        const std::string path = std::string("model.") + key;
        if (given.count(key) && !bad.count(path) && field != value) {
            std::ostringstream mine, theirs;
            mine << field;
            theirs << value;
            issues.push_back({path, mine.str() + " differs from " + hfKey + " " + theirs.str() + " in " + a.source
                                        + "; the architecture is the folder's: leave " + key + " out"});
            bad.insert(path);
        }
        field = value;
    };
    folderValue("n_layer", m.nLayer, static_cast<int>(a.layers), "num_hidden_layers");
    folderValue("d_model", m.dModel, static_cast<int>(a.hiddenSize), "hidden_size");
    folderValue("n_head", m.nHead, static_cast<int>(a.heads), "num_attention_heads");
    folderValue("n_kv_head", m.nKvHead, static_cast<int>(a.kvHeads), "num_key_value_heads");
    folderValue("d_ff", m.dFf, static_cast<int>(a.intermediateSize), "intermediate_size");
    folderValue("rope_theta", m.ropeTheta, a.ropeTheta, "rope_theta");
    folderValue("rms_norm_eps", m.rmsNormEps, a.rmsNormEps, "rms_norm_eps");
    folderValue("tie_embeddings", m.tieEmbeddings, a.tieEmbeddings, "tie_word_embeddings");
    folderValue("positional_encoding", m.positionalEncoding, std::string("rope"), "the family's positions");
    folderValue("vocab_size", m.vocabSize, static_cast<int>(a.vocabSize), "vocab_size");
    // A bitsandbytes folder is read as it is stored: its format is the base's.
    // (A folder of plain weights takes any model.quantize: it is quantized as it loads.)
    if (!a.quantization.empty()) {
        folderValue("quantize", m.quantize, a.quantization, "quantization_config");
        if (a.quantization == "nf4") folderValue("double_quant", m.doubleQuant, a.doubleQuant, "bnb_4bit_use_double_quant");
    }
}

RunConfig parseConfig(const std::string& jsonText, const std::string& sourceName,
                      const std::string& baseDir)
{
    json root;
    if (const auto at = tooDeep(jsonText); at != std::string::npos) {
        const auto [line, column] = lineAndColumn(jsonText, at + 1);
        throw ConfigError(sourceName, {{"", "nested deeper than " + std::to_string(kMaxNesting) + " levels at line "
                                                + std::to_string(line) + ", column " + std::to_string(column)
                                                + "; a config is an object of sections, each of plain values"}});
    }
    try {
        root = json::parse(jsonText);
    } catch (const json::parse_error& e) {
        const auto [line, column] = lineAndColumn(jsonText, e.byte);
        std::string reason = e.what();
        if (const auto pos = reason.find("syntax error"); pos != std::string::npos) reason = reason.substr(pos);
        throw ConfigError(sourceName, {{"", "not valid JSON at line " + std::to_string(line) + ", column "
                                                + std::to_string(column) + " (" + reason + ")"}});
    } catch (const json::exception& e) {
        // e.g. a number too large for a double ("1e400"): not representable, so not valid here.
        std::string reason = e.what();
        if (const auto pos = reason.find("] "); pos != std::string::npos) reason = reason.substr(pos + 2);
        throw ConfigError(sourceName, {{"", "not valid JSON (" + reason + "); numbers must be finite"}});
    }
    if (!root.is_object()) throw ConfigError(sourceName, {{"", "the config must be a JSON object {...}"}});

    RunConfig c;
    c.baseDir = baseDir;
    std::vector<ConfigIssue> issues;
    std::set<std::string> bad; // paths with a type error: no range check on them
    SectionReader top("", issues, bad);
    top.text("name", c.name);
    top.text("device", c.device);
    std::set<std::string> hfGiven; // model fields the config sets itself (type hf)
    bool doubleQuantGiven = false;
    top.section("model", [&](const json& v, const std::string& p) {
        SectionReader r(p, issues, bad);
        r.text("type", c.model.type);
        r.text("path", c.model.path);
        r.integer("n_layer", c.model.nLayer);
        r.integer("d_model", c.model.dModel);
        r.integer("n_head", c.model.nHead);
        r.integer("n_kv_head", c.model.nKvHead);
        r.integer("d_ff", c.model.dFf);
        r.text("positional_encoding", c.model.positionalEncoding);
        r.number("rope_theta", c.model.ropeTheta);
        r.number("rms_norm_eps", c.model.rmsNormEps);
        r.number("dropout", c.model.dropout);
        r.text("attention", c.model.attention);
        r.boolean("tie_embeddings", c.model.tieEmbeddings);
        r.integer("vocab_size", c.model.vocabSize);
        r.text("quantize", c.model.quantize);
        r.boolean("double_quant", c.model.doubleQuant);
        r.read(v);
        if (v.is_object() && v.contains("double_quant")) doubleQuantGiven = true;
        if (c.model.type == "hf" && v.is_object()) {
            for (const auto& [key, value] : v.items()) hfGiven.insert(key);
        }
        // A Llama-family model defaults to RoPE and an untied output head.
        if (c.model.type == "llama") {
            if (!v.contains("positional_encoding")) c.model.positionalEncoding = "rope";
            if (!v.contains("tie_embeddings")) c.model.tieEmbeddings = false;
        }
    });
    bool seqLenGiven = false;
    top.section("data", [&](const json& v, const std::string& p) {
        SectionReader r(p, issues, bad);
        r.text("source", c.data.source);
        r.integer("digits", c.data.digits);
        r.text("path", c.data.path);
        r.text("token_dtype", c.data.tokenDtype);
        r.text("field", c.data.field);
        r.boolean("skip_bad_lines", c.data.skipBadLines);
        r.integer("seq_len", c.data.seqLen);
        r.number("val_fraction", c.data.valFraction);
        r.read(v);
        seqLenGiven = v.contains("seq_len");
    });
    top.section("optim", [&](const json& v, const std::string& p) {
        SectionReader r(p, issues, bad);
        r.text("optimizer", c.optim.optimizer);
        r.number("lr", c.optim.lr);
        r.number("weight_decay", c.optim.weightDecay);
        r.numberPair("betas", c.optim.betas);
        r.number("momentum", c.optim.momentum);
        r.integer("warmup_steps", c.optim.warmupSteps);
        r.text("schedule", c.optim.schedule);
        r.number("min_lr_ratio", c.optim.minLrRatio);
        r.number("grad_clip", c.optim.gradClip);
        r.boolean("decay_embeddings", c.optim.decayEmbeddings);
        r.read(v);
    });
    top.section("train", [&](const json& v, const std::string& p) {
        SectionReader r(p, issues, bad);
        r.integer("batch_size", c.train.batchSize);
        r.integer("grad_accum", c.train.gradAccum);
        r.integer("steps", c.train.steps);
        r.unsignedInteger("seed", c.train.seed);
        r.text("precision", c.train.precision);
        r.boolean("activation_checkpointing", c.train.activationCheckpointing);
        r.integer("eval_every", c.train.evalEvery);
        r.integer("eval_batches", c.train.evalBatches);
        r.integer("dist_timeout_s", c.train.distTimeoutS);
        r.integer("dist_bucket_mb", c.train.distBucketMb);
        r.integer("world_size", c.train.worldSize);
        r.integer("log_every", c.train.logEvery);
        r.integer("checkpoint_every", c.train.checkpointEvery);
        r.integer("keep_checkpoints", c.train.keepCheckpoints);
        r.integer("threads", c.train.threads);
        r.text("init_from", c.train.initFrom);
        r.text("weights_dtype", c.train.weightsDtype);
        r.text("offload", c.train.offload);
        r.read(v);
    });
    top.section("lora", [&](const json& v, const std::string& p) {
        SectionReader r(p, issues, bad);
        r.integer("rank", c.lora.rank);
        r.number("alpha", c.lora.alpha);
        r.number("dropout", c.lora.dropout);
        r.textList("targets", c.lora.targets);
        r.read(v);
    });
    top.read(root);

    if (c.model.type == "hf") applyHfArchitecture(c, hfGiven, issues, bad);
    // An explicit seq_len of 0 is an error; absence means "the dataset's default".
    if (seqLenGiven && c.data.seqLen == 0 && !bad.count("data.seq_len")) {
        issues.push_back({"data.seq_len", "must be a positive integer, got 0"});
        bad.insert("data.seq_len");
    }
    if (doubleQuantGiven && c.model.quantize != "nf4" && !bad.count("model.double_quant")) {
        issues.push_back({"model.double_quant", "is only used with model.quantize \"nf4\" (the 4-bit blocks' scales); "
                                                "remove it or set quantize to \"nf4\""});
    }
    for (auto& issue : validateConfig(c)) {
        if (!bad.count(issue.path)) issues.push_back(std::move(issue));
    }
    if (!issues.empty()) throw ConfigError(sourceName, std::move(issues));
    return c;
}

const std::vector<std::string>& configFieldPaths()
{
    static const std::vector<std::string> paths = [] {
        std::vector<std::string> out;
        g_fieldCatalog = &out;
        try {
            parseConfig(R"({"model": {}, "data": {}, "optim": {}, "train": {}, "lora": {}})");
        } catch (...) {
            g_fieldCatalog = nullptr;
            throw;
        }
        g_fieldCatalog = nullptr;
        std::sort(out.begin(), out.end());
        return out;
    }();
    return paths;
}

RunConfig loadConfigFile(const std::string& path)
{
    namespace fs = std::filesystem;
    std::error_code ec;
    if (!fs::exists(path, ec)) {
        throw InputError("config file not found: " + path
                         + " (check the path; bundled examples are in resources/examples/)");
    }
    if (fs::is_directory(path, ec)) throw InputError("config path is a folder, not a file: " + path);
    std::ifstream in(path, std::ios::binary);
    if (!in) throw InputError("cannot read config file " + path + " (check its permissions)");
    std::stringstream buffer;
    buffer << in.rdbuf();
    return parseConfig(buffer.str(), path, fs::absolute(fs::path(path), ec).parent_path().string());
}

namespace {

void flattenJson(const nlohmann::json& j, const std::string& prefix, std::map<std::string, std::string>& out)
{
    if (j.is_object() && !j.empty()) {
        for (const auto& [key, value] : j.items()) flattenJson(value, prefix.empty() ? key : prefix + "." + key, out);
    } else {
        out[prefix] = j.dump();
    }
}

} // namespace

std::vector<ConfigDifference> configDifferences(const std::vector<std::string>& configJsons)
{
    std::vector<std::map<std::string, std::string>> flat(configJsons.size());
    std::set<std::string> paths;
    for (std::size_t i = 0; i < configJsons.size(); ++i) {
        const auto j = nlohmann::json::parse(configJsons[i], nullptr, false);
        if (j.is_discarded()) throw InputError("config " + std::to_string(i + 1) + " of the comparison is not valid JSON");
        flattenJson(j, "", flat[i]);
        for (const auto& [path, value] : flat[i]) paths.insert(path);
    }
    std::vector<ConfigDifference> out;
    for (const auto& path : paths) {
        if (path == "name") continue;
        ConfigDifference d{path, {}};
        for (const auto& f : flat) {
            const auto it = f.find(path);
            d.values.push_back(it == f.end() ? std::string() : it->second);
        }
        if (std::any_of(d.values.begin(), d.values.end(), [&](const auto& v) { return v != d.values.front(); })) {
            out.push_back(std::move(d));
        }
    }
    return out;
}

namespace {

// Whether two runs train the same model on the same data. Only then does a
// name say what one changed from the other: "experiment" (a new config's
// name) was diffed against whatever ran under that name last, a GPT on
// addition against a Llama folder on chat data.
bool sameModelAndData(const std::string& a, const std::string& b, const std::vector<ConfigDifference>& differences)
{
    try {
        const RunConfig x = parseConfig(a, "run"), y = parseConfig(b, "run");
        return x.model.type == y.model.type && x.model.path == y.model.path && x.data.source == y.data.source
            && x.data.path == y.data.path;
    } catch (const std::exception&) {
        // A stored config that no longer parses (its folder gone): the fields as written.
        return std::none_of(differences.begin(), differences.end(), [](const ConfigDifference& d) {
            return d.path == "model.type" || d.path == "model.path" || d.path == "data.source" || d.path == "data.path";
        });
    }
}

} // namespace

std::string defaultRunName(const std::string& name, std::int64_t id, const std::string& configJson,
                           const std::string& previousConfigJson)
{
    const std::string base = name + " #" + std::to_string(id);
    if (previousConfigJson.empty()) return base;
    std::vector<ConfigDifference> differences;
    try {
        differences = configDifferences({configJson, previousConfigJson});
    } catch (const InputError&) {
        return base; // an unreadable earlier config: nothing to compare with
    }
    if (!sameModelAndData(configJson, previousConfigJson, differences)) return base;
    std::string out = base;
    std::size_t shown = 0;
    for (const auto& d : differences) {
        if (shown == 3) break;
        if (d.values[0].empty()) continue; // a field only the earlier run had
        std::string value = d.values[0];
        if (value.size() >= 2 && value.front() == '"' && value.back() == '"') value = value.substr(1, value.size() - 2);
        if (value.size() > 24) value = value.substr(0, 21) + "...";
        const std::string part = " " + d.path.substr(d.path.rfind('.') + 1) + "=" + value;
        if (out.size() + part.size() > 180) break;
        out += part;
        ++shown;
    }
    if (differences.size() > shown && shown > 0) out += " +" + std::to_string(differences.size() - shown) + " more";
    return out.size() <= 200 ? out : base.substr(0, 200);
}

std::string configToJson(const RunConfig& c)
{
    json j;
    j["name"] = c.name;
    j["device"] = c.device;
    j["model"] = {{"type", c.model.type},
                  {"n_layer", c.model.nLayer},
                  {"d_model", c.model.dModel},
                  {"n_head", c.model.nHead},
                  {"n_kv_head", c.model.nKvHead},
                  {"d_ff", c.model.dFf},
                  {"positional_encoding", c.model.positionalEncoding},
                  {"rope_theta", c.model.ropeTheta},
                  {"rms_norm_eps", c.model.rmsNormEps},
                  {"dropout", c.model.dropout},
                  {"attention", c.model.attention},
                  {"tie_embeddings", c.model.tieEmbeddings}};
    json data = {{"source", c.data.source}, {"val_fraction", c.data.valFraction}};
    if (c.data.source == "addition") data["digits"] = c.data.digits;
    if (!c.model.path.empty()) j["model"]["path"] = c.model.path;
    if (c.model.quantize != "none") j["model"]["quantize"] = c.model.quantize;
    if (c.model.quantize == "nf4") j["model"]["double_quant"] = c.model.doubleQuant;
    if (c.model.type == "hf") j["model"]["vocab_size"] = c.model.vocabSize;
    if (!c.data.path.empty()) data["path"] = c.data.path;
    if (c.data.source == "tokens") data["token_dtype"] = c.data.tokenDtype;
    if (c.data.source == "jsonl") data["field"] = c.data.field;
    if (c.data.skipBadLines) data["skip_bad_lines"] = true;
    if (c.data.seqLen > 0) data["seq_len"] = c.data.seqLen;
    j["data"] = data;
    j["optim"] = {{"optimizer", c.optim.optimizer},
                  {"lr", c.optim.lr},
                  {"weight_decay", c.optim.weightDecay},
                  {"betas", {c.optim.betas[0], c.optim.betas[1]}},
                  {"momentum", c.optim.momentum},
                  {"warmup_steps", c.optim.warmupSteps},
                  {"schedule", c.optim.schedule},
                  {"min_lr_ratio", c.optim.minLrRatio},
                  {"grad_clip", c.optim.gradClip},
                  {"decay_embeddings", c.optim.decayEmbeddings}};
    j["train"] = {{"batch_size", c.train.batchSize},
                  {"grad_accum", c.train.gradAccum},
                  {"steps", c.train.steps},
                  {"seed", c.train.seed},
                  {"precision", c.train.precision},
                  {"activation_checkpointing", c.train.activationCheckpointing},
                  {"eval_every", c.train.evalEvery},
                  {"eval_batches", c.train.evalBatches},
                  {"log_every", c.train.logEvery},
                  {"checkpoint_every", c.train.checkpointEvery},
                  {"keep_checkpoints", c.train.keepCheckpoints},
                  {"threads", c.train.threads}};
    if (!c.train.initFrom.empty()) j["train"]["init_from"] = c.train.initFrom;
    // Planning-only fields appear when set, so stored configs stay as they were.
    if (c.train.weightsDtype != "fp32") j["train"]["weights_dtype"] = c.train.weightsDtype;
    if (c.train.offload != "none") j["train"]["offload"] = c.train.offload;
    if (c.train.distTimeoutS != 300) j["train"]["dist_timeout_s"] = c.train.distTimeoutS;
    if (c.train.distBucketMb != 25) j["train"]["dist_bucket_mb"] = c.train.distBucketMb;
    if (c.train.worldSize != 1) j["train"]["world_size"] = c.train.worldSize;
    j["lora"] = {{"rank", c.lora.rank}, {"alpha", c.lora.alpha}, {"targets", c.lora.targets}};
    if (c.lora.dropout > 0) j["lora"]["dropout"] = c.lora.dropout;
    return j.dump(2);
}

} // namespace tb
