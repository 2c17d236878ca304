# Writes a .cpp that defines `std::string tb::FUNCTION()` returning a file's bytes.
# cmake -DINPUT=... -DOUTPUT=... -DFUNCTION=... -P EmbedText.cmake
file(READ "${INPUT}" hex HEX)
string(LENGTH "${hex}" hexLength)
math(EXPR byteCount "${hexLength} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "((0x..,){32})" "\\1\n" bytes "${bytes}")
file(WRITE "${OUTPUT}" "// Generated from ${INPUT}; do not edit.\n#include <string>\nnamespace tb {\nstatic const unsigned char kBytes[] = {\n${bytes}\n};\nstd::string ${FUNCTION}() { return std::string(reinterpret_cast<const char*>(kBytes), ${byteCount}); }\n}\n")
