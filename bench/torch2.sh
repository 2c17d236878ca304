# Sourced by the benchmarks that also run on the LibTorch 2.6 tree.
# tb_bench_rerun_in_torch2 SCRIPT ARGS... runs bench/SCRIPT --in-chroot ARGS in
# the Debian 13 chroot of scripts/test (its trainbench-cli is
# /build/app/trainbench-cli there, the source /src, read-only) and exits with
# its status; the chroot's mounts are undone on the way out.
tb_bench_rerun_in_torch2() {
  local script=$1
  shift
  source scripts/common.sh
  source scripts/torch2.sh
  [[ -x $TB_CACHE/build-torch2/app/trainbench-cli ]] || { echo "build the 2.x tree first: scripts/test --torch2" >&2; exit 1; }
  trap 'tb_unmount_below "$TB_CHROOT"' EXIT
  tb_chroot_mount "$TB_CHROOT"
  tb_in_chroot "/src/bench/$script" --in-chroot "$@"
  exit $?
}
