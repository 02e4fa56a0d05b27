#!/usr/bin/env bash
# Builds and runs ew_check.c (the CUDA plugin's elementwise kernels on a
# GPU against the CPU's formulas), with nvcc and cc only: no liboar and
# none of its dependencies. Run from anywhere; ARCH defaults to sm_90.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$here/../..
out=${TMPDIR:-/tmp}/oar_ew_check
mkdir -p "$out"
cuda=${CUDA_HOME:-/usr/local/cuda}
"$cuda"/bin/nvcc -O2 -arch="${ARCH:-sm_90}" -I"$root/src/ops" -c "$here/cuda_kernels.cu" -o "$out/cuda_kernels.o"
cc -O2 -std=gnu11 -Wall -Wextra -Wno-unused-parameter -I"$root/src" -I"$root/src/ops" -I"$root/tests" \
   -I"$cuda/include" "$here/ew_check.c" "$out/cuda_kernels.o" -L"$cuda/lib64" -L"$cuda/lib" -lcudart -lstdc++ -lm \
   -Wl,-rpath,"$cuda/lib64" -o "$out/ew_check"
"$out/ew_check"
