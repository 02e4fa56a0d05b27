#!/usr/bin/env bash
# Installs the Debian packages oar needs to build, test and run its demo,
# only those that are missing. Idempotent. Without root it prints the
# apt-get command instead of running it.
set -eu

pkgs=(
    build-essential cmake pkg-config
    libopenblas-openmp-dev   # CBLAS GEMM, OpenMP build: one thread pool with ours
    liblapacke-dev           # LAPACKE: solve, det, cholesky, eigh (src/backends/cpu/cpu_lapack.c)
    zlib1g-dev               # gzip'd IDX files
    libcjson-dev             # JSON for graphs, safetensors headers, traces
    dataset-fashion-mnist    # the demo's data
    libopenmpi-dev openmpi-bin # distributed tensors over MPI (src/dist/)
    ocl-icd-opencl-dev opencl-headers pocl-opencl-icd  # the opencl device plugin (pocl: a CPU OpenCL device)
    bible-kjv                # text for examples/char_lm.c (scripts/bible-text.sh)
    protobuf-c-compiler libprotobuf-c-dev python3-onnx # ONNX import: protoc-c, libprotobuf-c, onnx.proto; onnx.checker for the exports
    python3-numpy            # the safetensors cross-check (tests/io/read_safetensors.py)
    libonnx-testdata         # the ONNX backend node tests (tests/onnx/test_onnx_conformance.c)
    libfftw3-dev             # optional FFT engine (GPL-2+): -DOAR_FFTW=ON, and test_fft_fftw
    libdnnl-dev              # oneDNN: f32 GEMM (cpu_gemm.c), bf16 matmul and conv2d on the CPU (cpu_dnnl.c)
)

# Optional: without them the parts that need them are skipped (exit 77).
optional=(
    clang-14 libclang-rt-14-dev  # libFuzzer harnesses (make fuzz, CTest fuzz_run_*; docs/fuzzing.md)
)

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

missing=()
for p in "${pkgs[@]}"; do
    installed "$p" || missing+=("$p")
done
missing_opt=()
for p in "${optional[@]}"; do
    installed "$p" || missing_opt+=("$p")
done
if [ ${#missing_opt[@]} -ne 0 ] && [ "$(id -u)" -eq 0 ]; then
    echo "deps.sh: installing optional ${missing_opt[*]}"
    (export DEBIAN_FRONTEND=noninteractive; apt-get install -y --no-install-recommends "${missing_opt[@]}" ||
        { apt-get update -qq && apt-get install -y --no-install-recommends "${missing_opt[@]}"; }) >/dev/null 2>&1 ||
        echo "deps.sh: optional ${missing_opt[*]} not installed (their tests are skipped)"
elif [ ${#missing_opt[@]} -ne 0 ]; then
    echo "oar can also use (optional): ${missing_opt[*]}"
fi

if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi

cmd="apt-get install -y --no-install-recommends ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
    echo "oar needs: ${missing[*]}"
    echo "run as root: apt-get update && $cmd"
    exit 1
fi
echo "deps.sh: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
$cmd
