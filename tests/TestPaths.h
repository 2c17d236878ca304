#pragma once
// Where the source tree and the built trainbench-cli are. The paths live in
// one generated file of the build tree (TestPaths.cpp, tests/CMakeLists.txt),
// not in the tests' compile commands: a command naming an absolute path makes
// ccache miss in every other clone, so each clean clone recompiled every test.
// Use these, not QFINDTESTDATA: scripts/common.sh keeps Qt Test's folder
// definitions out of ccache's hash, so a cached test may carry another clone's.
#include <string>

namespace tb::test {

const char* sourceDir();
// The trainbench-cli the tests run (the front; it hands LibTorch commands on).
const char* cliPath();

// A file of the source tree: sourcePath("resources/examples/default.json").
inline std::string sourcePath(const std::string& relative)
{
    return std::string(sourceDir()) + "/" + relative;
}

} // namespace tb::test

#define TB_CLI_PATH (tb::test::cliPath())
