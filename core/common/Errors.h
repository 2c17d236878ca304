#pragma once

#include <stdexcept>
#include <string>

namespace tb {

// Something the user gave us is wrong (config, file, database, device name):
// the front ends exit with status 2 and print what() as one sentence.
class InputError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// Something failed while running (I/O during a run, a diverged loss, LibTorch
// errors). The run is marked failed with this message.
class RunError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// The first line of an error's text (LibTorch appends its C++ backtrace to what()).
inline std::string firstLine(const std::string& text)
{
    const auto end = text.find('\n');
    return end == std::string::npos ? text : text.substr(0, end);
}

} // namespace tb
