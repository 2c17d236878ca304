#pragma once
// The bundled public-domain sample text, without LibTorch (the GUI's data
// preview reads it too).

#include <string>

namespace tb {

// The text, compiled into the binary.
std::string bundledSampleText();
// The text as a file under `root` (the token cache folder), written once, so
// the sample is tokenized and cached like any data file. Throws RunError when
// it cannot be written.
std::string bundledSampleFile(const std::string& root);

} // namespace tb
