#!/usr/bin/env bash
# Installs exactly the Debian 12 packages Trainbench needs that are missing.
# Idempotent and non-interactive; runs 'apt-get update' once, only when
# something must be installed. Usage: packaging/install-deps.sh [--tests | --bench]
set -euo pipefail

packages=(
  cmake g++ make ccache pkg-config
  libtorch-dev libopenblas0-pthread     # LibTorch 1.13 (CPU); OpenBLAS: ~8x faster than reference BLAS
  qt6-base-dev libqcustomplot-dev libqcustomplot2.1-qt6
  libsqlite3-dev nlohmann-json3-dev
  libonig-dev libicu-dev                # tokenizers: the regex engine of Hugging Face's tokenizers; Unicode normalisation
  libsentencepiece-dev                  # tokenizers: model folders that ship only a SentencePiece tokenizer.model
  libdnnl-dev                           # the memory planner: the scratch oneDNN (LibTorch's, the same 2.6) takes for bf16 products
  libgloo-dev                           # data parallel: the Gloo backend of c10d (LibTorch ships its headers, not the library)
  xvfb xauth                            # GUI tests and screenshots under a real X server
  util-linux                            # setpriv: tests drop root to check read-only databases
  debootstrap                           # the Debian 13 chroot of the LibTorch 2.x tree (scripts/torch2.sh)
)
if [[ "${1:-}" == "--tests" || "${1:-}" == "--bench" ]]; then
  packages+=(python3-torch)             # test-only: the plain-PyTorch references (tests/reference/, bench/)
  packages+=(python3-jinja2)            # test-only: chat templates rendered as transformers renders them
  packages+=(python3-sentencepiece)     # test-only: the SentencePiece library, the reference for tokenizer.model folders
  packages+=(openssh-server)            # test-only: remote runs against a real sshd on loopback (tests start their own)
  packages+=(slurmctld slurmd slurm-client) # test-only: data parallel on a single-node Slurm on loopback (tests start their own)
fi
if [[ "${1:-}" == "--bench" ]]; then
  packages+=(valgrind)                  # callgrind, for bench/overhead_instructions
fi

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
sudo=()
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install ${missing[*]}" >&2; exit 1; }
  sudo=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
