#pragma once
// The generation options sample and chat share, read one way.

#include "Command.h"
#include "train/ModelTools.h"

namespace tb::cli {

// --max-tokens (from minNewTokens, default defaultNewTokens), --temperature,
// --top-p, --top-k, --repetition-penalty and --seed, each checked with its
// range named.
GenerationSettings generationSettingsOf(const Args& args, int defaultNewTokens, int minNewTokens, double defaultTemperature);

// Their help lines, for a command's option list.
std::vector<OptionSpec> generationOptions(const std::string& maxTokensHelp, const std::string& temperatureDefault);

} // namespace tb::cli
