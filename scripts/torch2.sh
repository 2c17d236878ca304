# The LibTorch 2.x tree, sourced by scripts/test: core, trainbench-cli and the
# core tests built with the GUI off against Debian 13's LibTorch 2.6 in a
# trixie chroot (by scripts/gpu-build), and the tests labelled "torch2" run there.
#
# The chroot and its build tree live in a cache folder outside the source tree
# ($TRAINBENCH_CACHE, default ~/.cache/trainbench) and are reused between runs.
# Creating it is idempotent: debootstrap writes to a .partial folder that is
# renamed only when complete, and the package set is recorded in a stamp, so an
# interrupted run starts that step again. Every mount is undone on exit, on
# failure too. Needs root (mount, chroot), which CI and the development
# machines have.

TB_CACHE=${TRAINBENCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/trainbench}
TB_CHROOT=$TB_CACHE/trixie
TB_MIRROR=${TRAINBENCH_MIRROR:-http://deb.debian.org/debian}
# Build dependencies from trixie. No QCustomPlot and no GUI: the tree also
# proves that core, the CLI and the core tests need neither. LibTorch is the
# CUDA build GPU users run (contrib: libtorch-cuda-dev, with the CUDA 12.4
# toolkit, NCCL and Gloo's CUDA build), compiled and tested here on the CPU;
# it replaces the CPU-only libtorch-dev and libgloo-dev, which conflict with
# it. python3-torch-cuda is the 2.6 reference of bench/train_throughput.sh
# --torch2. binutils-gold: the linker CMakeLists.txt picks (a clean clone
# relinks every program).
TB_CHROOT_SOURCES="main contrib non-free"
TB_CHROOT_PACKAGES=(g++ binutils-gold cmake make ccache pkg-config libtorch-cuda-dev nvidia-cuda-toolkit libnccl-dev
  libgloo-cuda-dev libopenblas0-pthread qt6-base-dev libonig-dev libicu-dev libdnnl-dev
  libsqlite3-dev nlohmann-json3-dev python3-torch-cuda)

# Unmounts everything at or below a folder, deepest first.
tb_unmount_below() {
  local dir
  dir=$(realpath -m "$1")
  findmnt -rn -o TARGET | awk -v d="$dir" 'index($0, d "/") == 1 || $0 == d' | sort -r |
    while read -r target; do umount -l "$target" 2>/dev/null || true; done
}

# Removes a folder without crossing into anything still mounted below it.
tb_remove_tree() {
  [[ -e $1 ]] || return 0
  tb_unmount_below "$1"
  rm -rf --one-file-system "$1"
}

tb_chroot_mount() {
  local root=$1
  mkdir -p "$root/src" "$root/build" "$root/ccache" "$TB_CACHE/build-torch2" "$TB_CACHE/ccache-torch2"
  mountpoint -q "$root/proc" || mount -t proc proc "$root/proc"
  mountpoint -q "$root/dev" || mount --bind /dev "$root/dev"
  if ! mountpoint -q "$root/src"; then
    # Read-only: a test that writes into the source tree fails here.
    mount --bind "$ROOT" "$root/src"
    mount -o remount,bind,ro "$root/src"
  fi
  mountpoint -q "$root/build" || mount --bind "$TB_CACHE/build-torch2" "$root/build"
  mountpoint -q "$root/ccache" || mount --bind "$TB_CACHE/ccache-torch2" "$root/ccache"
  cp -L /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
}

# Runs a command in the chroot with a clean environment.
tb_in_chroot() {
  chroot "$TB_CHROOT" /usr/bin/env -i HOME=/root LANG=C.UTF-8 PATH=/usr/sbin:/usr/bin:/sbin:/bin \
    DEBIAN_FRONTEND=noninteractive CCACHE_DIR=/ccache CCACHE_BASEDIR=/src CCACHE_MAXSIZE=2G \
    CCACHE_SLOPPINESS="$CCACHE_SLOPPINESS" QT_QPA_PLATFORM=offscreen "$@"
}

# Creates or completes the chroot. Runs with the mounts already in place
# (the caller's trap undoes them).
tb_chroot_ensure() {
  local want="${TB_CHROOT_PACKAGES[*]}"
  if [[ -f $TB_CHROOT/.trainbench-packages && "$(cat "$TB_CHROOT/.trainbench-packages")" == "$want" ]]; then
    return 0
  fi
  if [[ ! -f $TB_CHROOT/.trainbench-base ]]; then
    command -v debootstrap >/dev/null || { echo "torch2: debootstrap is missing (packaging/install-deps.sh installs it)" >&2; return 1; }
    echo "torch2: creating the Debian 13 chroot in $TB_CHROOT (about 2 minutes)"
    tb_remove_tree "$TB_CHROOT.partial"
    mkdir -p "$TB_CACHE"
    debootstrap --variant=minbase trixie "$TB_CHROOT.partial" "$TB_MIRROR" >"$TB_CACHE/debootstrap.log" 2>&1 || {
      tail -5 "$TB_CACHE/debootstrap.log" >&2
      echo "torch2: debootstrap failed; the log is $TB_CACHE/debootstrap.log" >&2
      return 1
    }
    touch "$TB_CHROOT.partial/.trainbench-base"
    tb_remove_tree "$TB_CHROOT"
    mv "$TB_CHROOT.partial" "$TB_CHROOT"
  fi
  echo "torch2: installing the build dependencies in the chroot (about 4 minutes the first time, with 2.5 GB of CUDA packages)"
  tb_chroot_mount "$TB_CHROOT"
  echo "deb $TB_MIRROR trixie $TB_CHROOT_SOURCES" >"$TB_CHROOT/etc/apt/sources.list"
  # nvidia-cudnn is an installer: its post-install script downloads cuDNN
  # from NVIDIA once its licence is agreed to. Declined here, so it installs
  # nothing and needs no network beyond the mirror; tb_cudnn_stub stands in.
  echo "nvidia-cudnn nvidia-cudnn/question select I Decline" | tb_in_chroot debconf-set-selections
  tb_in_chroot apt-get update -qq
  tb_in_chroot apt-get install -y -qq --no-install-recommends "${TB_CHROOT_PACKAGES[@]}" >"$TB_CACHE/apt.log" 2>&1 || {
    tail -5 "$TB_CACHE/apt.log" >&2
    echo "torch2: apt-get install failed in the chroot; the log is $TB_CACHE/apt.log" >&2
    return 1
  }
  tb_in_chroot apt-get autoremove -y -qq >>"$TB_CACHE/apt.log" 2>&1
  tb_in_chroot apt-get clean
  tb_cudnn_stub
  echo "$want" >"$TB_CHROOT/.trainbench-packages"
}

# TEST-ONLY: a stand-in libcudnn.so.9 in the chroot (scripts/cudnn-test-stub
# says what it is and why); the chroot must be mounted.
tb_cudnn_stub() {
  tb_in_chroot /src/scripts/cudnn-test-stub
}

# Creates or completes the chroot and nothing else, in a subshell whose trap
# undoes the mounts. scripts/test runs it in the background while the 1.13
# tree builds: on a fresh machine that overlaps about 4 minutes of download and
# unpacking with the compile; with the chroot kept it returns at once.
tb_torch2_prepare() (
  set -euo pipefail
  trap 'tb_unmount_below "$TB_CHROOT"' EXIT
  [[ $(id -u) -eq 0 ]] || exit 0 # tb_torch2 says why it cannot run
  local started
  started=$(date +%s)
  tb_chroot_ensure
  echo "torch2: chroot ready in the background ($(( $(date +%s) - started )) s)"
)

# Builds the 2.x tree and runs its tests with scripts/gpu-build, the command a
# GPU machine runs, so every run of the suite checks that script too: in the
# chroot it finds no CUDA, says so and skips the CUDA smoke. Runs in a
# subshell so that its trap undoes the mounts however it ends.
tb_torch2() (
  set -euo pipefail
  trap 'tb_unmount_below "$TB_CHROOT"' EXIT
  [[ $(id -u) -eq 0 ]] || { echo "torch2: needs root for chroot and mount (CI and the development machines run as root)" >&2; exit 1; }
  local started
  started=$(date +%s)
  tb_chroot_ensure
  tb_chroot_mount "$TB_CHROOT"
  echo "torch2: chroot ready ($(( $(date +%s) - started )) s); LibTorch $(tb_in_chroot dpkg-query -W -f='${Version}' libtorch-cuda-dev) (CUDA build)"
  tb_in_chroot /src/scripts/gpu-build --build /build
)
