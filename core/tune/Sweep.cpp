#include "tune/Sweep.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/Errors.h"

namespace tb {
namespace {

using json = nlohmann::ordered_json;

// A uniform double in [0, 1) from the engine's raw output: the same on every
// standard library (std::uniform_real_distribution is not).
double unit(std::mt19937_64& random) { return static_cast<double>(random() >> 11) * 0x1.0p-53; }

std::string fieldText(const std::string& source, const std::string& field)
{
    return source + ": " + field + ": ";
}

} // namespace

const std::vector<std::string>& sweepMetricNames()
{
    static const std::vector<std::string> names{"val_loss", "val_accuracy", "loss", "tokens_per_s"};
    return names;
}

SweepSpec parseSweep(const std::string& text, const std::string& source)
{
    json root;
    try {
        root = json::parse(text);
    } catch (const json::exception& e) {
        std::string reason = e.what();
        if (const auto pos = reason.find("] "); pos != std::string::npos) reason = reason.substr(pos + 2);
        throw InputError(source + ": not valid JSON (" + reason + ")");
    }
    if (!root.is_object()) throw InputError(source + ": a sweep file is a JSON object {\"method\": ..., \"parameters\": ...}");
    static const std::vector<std::string> known{"name", "method", "metric", "parameters", "run_cap", "seed", "early_terminate",
                                                "description", "program", "command"};
    for (const auto& [key, value] : root.items()) {
        if (std::find(known.begin(), known.end(), key) == known.end()) {
            const auto near = closestName(key, known);
            throw InputError(source + ": unknown field \"" + key + "\"" + (near.empty() ? "" : "; did you mean \"" + near + "\"?")
                             + " (a sweep has name, method, metric, parameters, run_cap, seed, early_terminate)");
        }
    }
    SweepSpec s;
    if (root.contains("name")) {
        if (!root["name"].is_string()) throw InputError(fieldText(source, "name") + "must be a string");
        s.name = root["name"].get<std::string>();
    }
    if (root.contains("method")) {
        if (!root["method"].is_string()) throw InputError(fieldText(source, "method") + "must be \"grid\" or \"random\"");
        s.method = root["method"].get<std::string>();
        if (s.method == "bayes") {
            throw InputError(fieldText(source, "method") + "\"bayes\" is not supported; use \"grid\" or \"random\"");
        }
        if (s.method != "grid" && s.method != "random") {
            throw InputError(fieldText(source, "method") + "must be \"grid\" or \"random\", got \"" + s.method + "\"");
        }
    }
    if (root.contains("metric")) {
        const auto& m = root["metric"];
        if (!m.is_object()) throw InputError(fieldText(source, "metric") + "must be {\"name\": \"val_loss\", \"goal\": \"minimize\"}");
        if (m.contains("name")) {
            if (!m["name"].is_string()) throw InputError(fieldText(source, "metric.name") + "must be a string");
            s.metric = m["name"].get<std::string>();
        }
        const auto& names = sweepMetricNames();
        if (std::find(names.begin(), names.end(), s.metric) == names.end()) {
            throw InputError(fieldText(source, "metric.name") + "\"" + s.metric
                             + "\" is not a metric a run stores; use val_loss, val_accuracy, loss or tokens_per_s");
        }
        for (const auto& [key, unused] : m.items()) {
            (void)unused;
            if (key != "name" && key != "goal") throw InputError(fieldText(source, "metric") + "unknown key \"" + key + "\" (a metric has name and goal)");
        }
        if (m.contains("goal") && !m["goal"].is_string()) throw InputError(fieldText(source, "metric.goal") + "must be \"minimize\" or \"maximize\"");
        const std::string goal = m.contains("goal") ? m["goal"].get<std::string>()
                                 : s.metric == "val_accuracy" || s.metric == "tokens_per_s" ? "maximize"
                                                                                           : "minimize";
        if (goal != "minimize" && goal != "maximize") {
            throw InputError(fieldText(source, "metric.goal") + "must be \"minimize\" or \"maximize\", got \"" + goal + "\"");
        }
        s.maximize = goal == "maximize";
    }
    if (!root.contains("parameters") || !root["parameters"].is_object() || root["parameters"].empty()) {
        throw InputError(fieldText(source, "parameters")
                         + "give at least one config field to vary, e.g. {\"optim.lr\": {\"values\": [0.001, 0.003]}}");
    }
    const auto fields = configFieldPaths();
    for (const auto& [path, p] : root["parameters"].items()) {
        const std::string where = "parameters." + path;
        if (std::find(fields.begin(), fields.end(), path) == fields.end()) {
            const auto near = closestName(path, fields);
            throw InputError(fieldText(source, where) + "\"" + path + "\" is not a config field"
                             + (near.empty() ? std::string() : "; did you mean \"" + near + "\"?"));
        }
        if (path == "name") throw InputError(fieldText(source, where) + "a sweep names its trials itself; vary another field");
        if (!p.is_object()) throw InputError(fieldText(source, where) + "give {\"values\": [...]}, {\"value\": ...} or {\"min\": ..., \"max\": ...}");
        static const std::vector<std::string> parameterKeys{"values", "value", "min", "max", "distribution", "q"};
        for (const auto& [key, unused] : p.items()) {
            (void)unused;
            if (std::find(parameterKeys.begin(), parameterKeys.end(), key) == parameterKeys.end()) {
                const auto near = closestName(key, parameterKeys);
                throw InputError(fieldText(source, where) + "unknown key \"" + key + "\""
                                 + (near.empty() ? "" : "; did you mean \"" + near + "\"?")
                                 + " (a parameter has values, value, or min, max, distribution and q)");
            }
        }
        const int forms = (p.contains("values") ? 1 : 0) + (p.contains("value") ? 1 : 0)
            + (p.contains("min") || p.contains("max") ? 1 : 0);
        if (forms > 1) throw InputError(fieldText(source, where) + "give one of values, value, or min and max");
        if (p.contains("distribution") && !p["distribution"].is_string()) {
            throw InputError(fieldText(source, where + ".distribution") + "must be a string such as \"log_uniform_values\"");
        }
        if ((p.contains("distribution") || p.contains("q")) && !p.contains("min")) {
            throw InputError(fieldText(source, where) + "distribution and q go with min and max (a range)");
        }
        if (p.contains("q") && (!p.contains("distribution") || p["distribution"] != "q_uniform")) {
            throw InputError(fieldText(source, where + ".q") + "goes with \"distribution\": \"q_uniform\"");
        }
        SweepParameter param;
        param.path = path;
        if (p.contains("values")) {
            if (!p["values"].is_array() || p["values"].empty()) throw InputError(fieldText(source, where + ".values") + "must be a non-empty list");
            for (const auto& v : p["values"]) param.values.push_back(v.dump());
        } else if (p.contains("value")) {
            param.values.push_back(p["value"].dump());
        } else if (p.contains("min") && p.contains("max")) {
            if (!p["min"].is_number() || !p["max"].is_number()) throw InputError(fieldText(source, where) + "min and max must be numbers");
            param.min = p["min"].get<double>();
            param.max = p["max"].get<double>();
            const bool integers = p["min"].is_number_integer() && p["max"].is_number_integer();
            param.distribution = p.contains("distribution") && p["distribution"].is_string()
                                     ? p["distribution"].get<std::string>()
                                     : integers ? "int_uniform" : "uniform";
            static const std::vector<std::string> kinds{"uniform", "log_uniform_values", "int_uniform", "q_uniform"};
            if (std::find(kinds.begin(), kinds.end(), param.distribution) == kinds.end()) {
                throw InputError(fieldText(source, where + ".distribution") + "must be uniform, log_uniform_values, int_uniform or "
                                 "q_uniform, got \"" + param.distribution + "\"");
            }
            if (!(param.min <= param.max)) throw InputError(fieldText(source, where) + "min must not be above max");
            if (param.distribution == "log_uniform_values" && param.min <= 0) {
                throw InputError(fieldText(source, where) + "log_uniform_values needs min above 0");
            }
            if (param.distribution == "int_uniform" && std::ceil(param.min) > std::floor(param.max)) {
                throw InputError(fieldText(source, where) + "int_uniform needs a whole number between min and max");
            }
            if (param.distribution == "int_uniform" && std::floor(param.max) - std::ceil(param.min) > 1e15) {
                throw InputError(fieldText(source, where) + "the int_uniform range is too wide (at most 1e15 values)");
            }
            if (param.distribution == "q_uniform") {
                param.q = p.contains("q") && p["q"].is_number() ? p["q"].get<double>() : 1.0;
                if (!(param.q > 0)) throw InputError(fieldText(source, where + ".q") + "must be above 0");
            }
            if (s.method == "grid") {
                throw InputError(fieldText(source, where) + "a grid needs values (\"values\": [...]); a range is for "
                                 "\"method\": \"random\"");
            }
        } else {
            throw InputError(fieldText(source, where) + "give values, value, or min and max");
        }
        s.parameters.push_back(std::move(param));
    }
    if (root.contains("run_cap")) {
        if (!root["run_cap"].is_number_integer() || root["run_cap"].get<long long>() < 1 || root["run_cap"].get<long long>() > 10000) {
            throw InputError(fieldText(source, "run_cap") + "must be a whole number from 1 to 10000");
        }
        s.runCap = root["run_cap"].get<int>();
    }
    if (s.method == "random" && s.runCap == 0) {
        throw InputError(fieldText(source, "run_cap") + "a random search needs the number of trials, e.g. \"run_cap\": 10");
    }
    if (root.contains("seed")) {
        if (!root["seed"].is_number_unsigned()) throw InputError(fieldText(source, "seed") + "must be a whole number from 0");
        s.seed = root["seed"].get<std::uint64_t>();
    }
    if (root.contains("early_terminate")) {
        const auto& e = root["early_terminate"];
        if (!e.is_object() || !e.contains("type") || e["type"] != "median") {
            throw InputError(fieldText(source, "early_terminate")
                             + "must be {\"type\": \"median\", \"min_step\": N}: a trial worse than the median of the "
                               "others at the same step is stopped (hyperband is not supported)");
        }
        s.earlyTerminate = true;
        for (const auto& [key, unused] : e.items()) {
            (void)unused;
            if (key != "type" && key != "min_step") {
                throw InputError(fieldText(source, "early_terminate") + "unknown key \"" + key
                                 + "\" (the median rule has type and min_step)");
            }
        }
        if (e.contains("min_step")) {
            if (!e["min_step"].is_number_unsigned() || e["min_step"].get<std::uint64_t>() > 100000000) {
                throw InputError(fieldText(source, "early_terminate.min_step") + "must be a whole number from 0 to 100000000");
            }
            s.minStep = e["min_step"].get<int>();
        }
    }
    return s;
}

SweepSpec loadSweepFile(const std::string& path)
{
    std::ifstream in(path, std::ios::binary);
    if (!in) throw InputError("sweep file not found: " + path);
    std::stringstream text;
    text << in.rdbuf();
    return parseSweep(text.str(), path);
}

std::string SweepTrial::describe() const
{
    std::string out;
    for (const auto& [path, value] : values) out += (out.empty() ? "" : " ") + path + "=" + value;
    return out;
}

std::string SweepTrial::toJson() const
{
    json out = json::object();
    for (const auto& [path, value] : values) out[path] = json::parse(value);
    return out.dump();
}

std::vector<SweepTrial> sweepTrials(const SweepSpec& spec)
{
    std::vector<SweepTrial> trials;
    if (spec.method == "grid") {
        double count = 1;
        for (const auto& p : spec.parameters) count *= static_cast<double>(p.values.size());
        if (count > 10000) {
            throw InputError("the grid has " + std::to_string(static_cast<long long>(count))
                             + " trials, more than 10000; give fewer values, or use \"method\": \"random\" with a run_cap");
        }
        std::vector<std::size_t> at(spec.parameters.size(), 0);
        for (int n = 0; n < static_cast<int>(count); ++n) {
            SweepTrial t;
            t.index = n;
            for (std::size_t i = 0; i < spec.parameters.size(); ++i) {
                t.values.emplace_back(spec.parameters[i].path, spec.parameters[i].values[at[i]]);
            }
            trials.push_back(std::move(t));
            // The last parameter varies fastest.
            for (std::size_t i = spec.parameters.size(); i-- > 0;) {
                if (++at[i] < spec.parameters[i].values.size()) break;
                at[i] = 0;
            }
            if (spec.runCap > 0 && static_cast<int>(trials.size()) >= spec.runCap) break;
        }
        return trials;
    }
    std::mt19937_64 random(spec.seed);
    for (int n = 0; n < spec.runCap; ++n) {
        SweepTrial t;
        t.index = n;
        for (const auto& p : spec.parameters) {
            std::string value;
            if (!p.values.empty()) {
                value = p.values[static_cast<std::size_t>(unit(random) * static_cast<double>(p.values.size()))];
            } else if (p.distribution == "int_uniform") {
                const auto lo = static_cast<long long>(std::ceil(p.min)), hi = static_cast<long long>(std::floor(p.max));
                value = std::to_string(lo + static_cast<long long>(unit(random) * static_cast<double>(hi - lo + 1)));
            } else {
                double x = p.distribution == "log_uniform_values"
                               ? std::exp(std::log(p.min) + unit(random) * (std::log(p.max) - std::log(p.min)))
                               : p.min + unit(random) * (p.max - p.min);
                if (p.distribution == "q_uniform") x = std::clamp(std::round(x / p.q) * p.q, p.min, p.max);
                value = json(x).dump();
            }
            t.values.emplace_back(p.path, value);
        }
        trials.push_back(std::move(t));
    }
    return trials;
}

RunConfig trialConfig(const RunConfig& base, const SweepTrial& trial)
{
    json root = json::parse(configToJson(base));
    for (const auto& [path, value] : trial.values) {
        json* node = &root;
        std::stringstream parts(path);
        std::string part;
        std::vector<std::string> keys;
        while (std::getline(parts, part, '.')) keys.push_back(part);
        for (std::size_t i = 0; i + 1 < keys.size(); ++i) {
            if (!node->contains(keys[i]) || !(*node)[keys[i]].is_object()) (*node)[keys[i]] = json::object();
            node = &(*node)[keys[i]];
        }
        (*node)[keys.back()] = json::parse(value);
    }
    RunConfig c = parseConfig(root.dump(), "trial " + std::to_string(trial.index + 1) + " (" + trial.describe() + ")",
                              base.baseDir);
    if (auto issues = validateConfig(c, false); !issues.empty()) {
        throw ConfigError("trial " + std::to_string(trial.index + 1) + " (" + trial.describe() + ")", std::move(issues));
    }
    return c;
}

bool worseThanMedian(double value, std::vector<double> others, bool maximize)
{
    others.erase(std::remove_if(others.begin(), others.end(), [](double v) { return std::isnan(v); }), others.end());
    if (others.size() < 2) return false;
    if (std::isnan(value)) return true;
    std::sort(others.begin(), others.end());
    const std::size_t n = others.size();
    const double median = n % 2 ? others[n / 2] : 0.5 * (others[n / 2 - 1] + others[n / 2]);
    return maximize ? value < median : value > median;
}

} // namespace tb
