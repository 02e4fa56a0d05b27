#!/usr/bin/env bash
# Installs the Debian packages oar needs to build, test and run its demo,
# only those that are missing. Idempotent. Without root it prints the
# apt-get command instead of running it.
set -eu

pkgs=(
    build-essential cmake pkg-config
    libopenblas-openmp-dev   # CBLAS GEMM, OpenMP build: one thread pool with ours
    zlib1g-dev               # gzip'd IDX files
    libcjson-dev             # JSON for graphs, safetensors headers, traces
    dataset-fashion-mnist    # the demo's data
    libopenmpi-dev openmpi-bin # distributed tensors over MPI (src/dist/)
    ocl-icd-opencl-dev opencl-headers pocl-opencl-icd  # the opencl device plugin (pocl: a CPU OpenCL device)
    bible-kjv                # text for examples/char_lm.c (scripts/bible-text.sh)
    protobuf-c-compiler libprotobuf-c-dev python3-onnx # ONNX import: protoc-c, libprotobuf-c, onnx.proto
    libonnx-testdata         # the ONNX backend node tests (tests/onnx/test_onnx_conformance.c)
    libfftw3-dev             # optional FFT engine (GPL-2+): -DOAR_FFTW=ON, and test_fft_fftw
)

missing=()
for p in "${pkgs[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$p")
    fi
done

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
