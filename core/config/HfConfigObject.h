#pragma once
// A Hugging Face config.json's text as its one JSON object, or one
// InputError naming the file: read so by the trainer's reader
// (HfArchitecture.h) and by the planner's (memory/Architectures.h).
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace tb {

nlohmann::json hfConfigObject(const std::string& content, const std::string& source);

} // namespace tb
