# Writes a .cpp that defines tb::bundledSampleText() from a text file.
file(READ "${INPUT}" hex HEX)
string(LENGTH "${hex}" hexLength)
math(EXPR byteCount "${hexLength} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "((0x..,){32})" "\\1\n" bytes "${bytes}")
file(WRITE "${OUTPUT}" "// Generated from ${INPUT}; do not edit.\n#include <string>\nnamespace tb {\nstatic const unsigned char kSample[] = {\n${bytes}\n};\nstd::string bundledSampleText() { return std::string(reinterpret_cast<const char*>(kSample), ${byteCount}); }\n}\n")
