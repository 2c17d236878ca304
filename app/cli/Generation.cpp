#include "Generation.h"

#include "common/Errors.h"

namespace tb::cli {
namespace {

double numberOf(const Args& args, const char* name, double fallback, double lo, double hi, const char* range)
{
    const auto t = args.value(name);
    if (!t) return fallback;
    std::size_t used = 0;
    double v = lo - 1;
    try {
        v = std::stod(*t, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    if (used != t->size() || !(v >= lo && v <= hi)) {
        throw InputError(std::string("option ") + name + " must be a number " + range + ", got \"" + t->substr(0, 40) + "\"");
    }
    return v;
}

} // namespace

GenerationSettings generationSettingsOf(const Args& args, int defaultNewTokens, int minNewTokens, double defaultTemperature)
{
    GenerationSettings s;
    s.maxNewTokens = static_cast<int>(args.integer("--max-tokens", minNewTokens, 100000).value_or(defaultNewTokens));
    s.temperature = numberOf(args, "--temperature", defaultTemperature, 0.0, 100.0, "from 0 (greedy) to 100");
    s.topP = numberOf(args, "--top-p", 1.0, 1e-9, 1.0, "above 0 and at most 1 (1: off)");
    s.topK = static_cast<int>(args.integer("--top-k", 0, 1000000).value_or(0));
    s.repetitionPenalty = numberOf(args, "--repetition-penalty", 1.0, 1e-9, 100.0, "above 0 and at most 100 (1: off)");
    s.seed = static_cast<std::uint64_t>(args.integer("--seed", 0, 1LL << 62).value_or(1));
    validateGenerationSettings(s, minNewTokens);
    return s;
}

std::vector<OptionSpec> generationOptions(const std::string& maxTokensHelp, const std::string& temperatureDefault)
{
    return {{"--max-tokens", true, maxTokensHelp, "N"},
            {"--temperature", true, "0 = greedy, default " + temperatureDefault, "T"},
            {"--top-p", true, "sample from the most likely tokens whose probabilities add up to P (default 1 = all)", "P"},
            {"--top-k", true, "sample from the K most likely tokens only (0 = all)", "K"},
            {"--repetition-penalty", true,
             "divide the positive logits (multiply the negative) of every token already in the text by R (default 1 = off)", "R"},
            {"--seed", true, "random seed (default 1)", "S"}};
}

} // namespace tb::cli
