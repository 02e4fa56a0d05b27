#!/bin/sh
# After ctest: lists the tests that skipped (exit 77) and fails when one
# skipped although the Debian package it needs, one that scripts/deps.sh
# installs, is installed here. A skip must be explained below; a new test
# that can skip gets a line here.
#   sh scripts/check-skips.sh JUNIT.xml     (ctest --output-junit JUNIT.xml)
set -u
junit=${1:?usage: check-skips.sh JUNIT.xml}
[ -r "$junit" ] || { echo "check-skips.sh: cannot read $junit"; exit 1; }

# test name (a shell pattern) -> the packages deps.sh installs that it needs
# ("-": none of them; it skips for a reason deps.sh cannot fix: no GPU, no
# PyPI package, a build option).
needs() {
    case $1 in
    test_cuda_plugin | test_cuda_codegen | test_cuda_train | test_cuda_char_lm | test_dist_device_cuda) echo - ;; # the CUDA toolkit and a GPU
    test_cuda_fft_open* | test_cuda_native_dot*) echo - ;; # the CUDA headers (the fake cuda plugin)
    test_safetensors_hf) echo - ;;                 # safetensors from PyPI
    test_profiler) echo - ;;                        # only when built with OARI_PROF_DISABLED
    fuzz_*) echo "clang-14 libclang-rt-14-dev" ;;   # deps.sh's optional packages
    test_opencl_* | test_backend_ops* | test_device_autograd_opencl | test_dist_device_opencl*) echo pocl-opencl-icd ;;
    test_onnx_conformance* | test_onnx_node_models) echo libonnx-testdata ;;
    test_onnx_export_checker) echo python3-onnx ;;
    test_safetensors_python) echo python3-numpy ;;
    guide) echo "libopenmpi-dev libprotobuf-c-dev" ;;  # the page uses MPI and ONNX
    test_data_fashion_mnist | demo_smoke | example_mlp | example_lenet5 | example_resnet) echo dataset-fashion-mnist ;;
    test_fft_fftw | test_fft_alloc_fftw) echo libfftw3-dev ;;
    test_jit | test_fusion* | test_ew_forms | test_compiled_train) echo build-essential ;; # a C compiler
    *) echo "?" ;;
    esac
}

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

# <testcase name="X" ... status="notrun"> followed by <skipped message=...>
skipped=$(awk '/<testcase / { match($0, /name="[^"]*"/); name = substr($0, RSTART + 6, RLENGTH - 7) }
               /<skipped/ && name != "" { print name; name = "" }' "$junit")
[ -n "$skipped" ] || { echo "check-skips.sh: no test skipped"; exit 0; }
bad=0
echo "check-skips.sh: tests skipped (exit 77):"
for t in $skipped; do
    pkgs=$(needs "$t")
    case $pkgs in
    -) echo "  $t: needs nothing deps.sh installs" ;;
    "?") echo "  $t: FAILED: no entry in scripts/check-skips.sh says why it may skip"; bad=1 ;;
    *)
        missing=
        for p in $pkgs; do installed "$p" || missing="$missing $p"; done
        if [ -z "$missing" ]; then
            echo "  $t: FAILED: skipped although what it needs is installed ($pkgs)"
            bad=1
        else
            echo "  $t: needs$missing (not installed: run scripts/deps.sh)"
        fi ;;
    esac
done
exit $bad
