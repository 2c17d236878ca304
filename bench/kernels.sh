# Sourced by the benchmarks: one name for each set of CPU kernels they can
# force, for OpenBLAS (matrix products) and ATen (elementwise work, softmax,
# layer norm). tb_bench_kernels NAME exports the variables both libraries read
# when they load, or fails for an unknown name.
#   native      what the libraries pick themselves (Debian 12's LibTorch 1.13
#               picks its AVX2 code even where the CPU has AVX-512, and
#               OpenBLAS 0.3.21 may pick Haswell kernels on an AMD EPYC with
#               AVX-512, so "native" can equal "avx2")
#   avx2        OpenBLAS Haswell, ATen AVX2
#   avx512      OpenBLAS SkylakeX, ATen AVX-512
#   cooperlake  OpenBLAS Cooperlake (AVX-512 with bf16: Sapphire and Emerald
#               Rapids, AMD Zen 4; what Trainbench selects where OpenBLAS does
#               not know the CPU), ATen AVX-512
TB_BENCH_KERNEL_SETS="native avx2 avx512 cooperlake"
tb_bench_kernels() {
  case "$1" in
    native) ;;
    avx2) export OPENBLAS_CORETYPE=Haswell ATEN_CPU_CAPABILITY=avx2 ;;
    avx512) export OPENBLAS_CORETYPE=SkylakeX ATEN_CPU_CAPABILITY=avx512 ;;
    cooperlake) export OPENBLAS_CORETYPE=Cooperlake ATEN_CPU_CAPABILITY=avx512 ;;
    *) echo "unknown kernel set '$1' (one of: $TB_BENCH_KERNEL_SETS)" >&2; return 2 ;;
  esac
}
# The kernels a Python with PyTorch ($1) runs here under the current
# environment: "OpenBLAS Haswell, ATen AVX2". Trainbench's own program loads
# the same libraries and reads the same variables.
tb_bench_kernels_in_use() {
  local out
  out=$(OPENBLAS_VERBOSE=2 "$1" -c '
import torch
torch.ones(2, 2) @ torch.ones(2, 2)
try:
    cap = torch.backends.cpu.get_cpu_capability()
except AttributeError:  # LibTorch 1.13
    cap = next((l.split(":", 1)[1].strip() for l in torch.__config__.show().splitlines() if "CPU capability" in l), "?")
print("ATen", cap)' 2>&1)
  echo "OpenBLAS $(sed -n "s/^Core: //p" <<<"$out"), ATen $(sed -n "s/^ATen //p" <<<"$out")"
}
