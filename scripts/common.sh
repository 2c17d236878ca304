# Shared by scripts/run and scripts/test: dependencies, ccache and the build.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

export CCACHE_BASEDIR="$ROOT"
export CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
export CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-5G}
# Qt Test defines each test's source and build folder (absolute paths, for
# QFINDTESTDATA, which no test uses: tests/TestPaths.h gives the paths). Left
# in the hash, they make every test miss the cache in another clone.
export CCACHE_IGNOREOPTIONS="-DQT_TESTCASE_BUILDDIR=* -DQT_TESTCASE_SOURCEDIR=*"

# Configure and build one tree: tb_build DIR [cmake args...]
tb_build() {
  local dir=$1; shift
  cmake -S "$ROOT" -B "$dir" -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
  cmake --build "$dir" -j "$(nproc)"
}
