#!/usr/bin/env bash
# Installs the pinned test-only npm references (package-lock.json beside this
# script) into a cache outside the source tree, once per lockfile, and prints
# the node_modules folder. Hugging Face's Rust tokenizers ship their native
# Linux binary inside the npm tarball: nothing is downloaded at run time.
# Uses the machine's npm; installs Debian's nodejs and npm only where there is none.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${TB_NPM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/trainbench/npm}
key=$(cat "$here/package.json" "$here/package-lock.json" | sha256sum | cut -c1-16)
dir="$cache/$key"
if [[ ! -f "$dir/.complete" ]]; then
  if ! command -v npm >/dev/null || ! command -v node >/dev/null; then
    echo "setup: installing Debian's nodejs and npm" >&2
    sudo=()
    [[ $(id -u) -eq 0 ]] || sudo=(sudo)
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends nodejs npm >&2
  fi
  echo "setup: npm ci into $dir" >&2
  rm -rf "$dir.tmp"
  mkdir -p "$dir.tmp"
  cp "$here/package.json" "$here/package-lock.json" "$dir.tmp/"
  (cd "$dir.tmp" && npm ci --no-audit --no-fund --loglevel=error >&2)
  touch "$dir.tmp/.complete"
  rm -rf "$dir"
  mv "$dir.tmp" "$dir"
fi
echo "$dir/node_modules"
