#!/bin/bash
# The core build (CTest "core_build"): oar configured with every optional
# part off (MPI, ONNX, oneDNN, the OpenCL and CUDA plugins; FFTW is off by
# default), as on a machine that has only a C compiler, CBLAS, LAPACKE, OpenMP,
# cJSON and zlib:
#   bash tests/install/core_build.sh SOURCE CMAKE CC
# builds liboar, first_program and `oar` in a temporary folder and checks
# that first_program runs, that liboar.so links none of the optional
# libraries, and that the left-out parts fail saying so (oar_dist_init,
# oar_onnx_load) instead of being missing at link time.
set -u
src=${1:?usage: core_build.sh SOURCE CMAKE CC}
cmake=${2:?usage: core_build.sh SOURCE CMAKE CC}
cc=${3:?usage: core_build.sh SOURCE CMAKE CC}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/oar-core.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
failed=0
fail() { echo "FAIL: $*"; failed=1; }
ok() { echo "ok: $*"; }

# Debug (-O0): what builds, links and fails here does not depend on the
# optimiser, and -O0 compiles the library in a quarter of -O2's time (on 2
# cores 19 s against 75 s, and this test runs beside the rest of the suite).
if ! "$cmake" -S "$src" -B "$tmp/build" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_COMPILER="$cc" \
        -DOAR_WITH_MPI=OFF -DOAR_WITH_ONNX=OFF -DOAR_WITH_DNNL=OFF -DOAR_PLUGIN_OPENCL=OFF -DOAR_PLUGIN_CUDA=OFF \
        -DOAR_FFTW=OFF -DOAR_BUILD_TESTS=OFF -DOAR_BUILD_BENCH=OFF >"$tmp/configure.log" 2>&1; then
    cat "$tmp/configure.log"; echo "FAIL: configure with the optional parts off"; exit 1
fi
if ! "$cmake" --build "$tmp/build" -j "$(nproc)" --target oar first_program oar_cli >"$tmp/build.log" 2>&1; then
    tail -n 40 "$tmp/build.log"; echo "FAIL: build with the optional parts off"; exit 1
fi
ok "liboar, first_program and oar build with MPI, ONNX, oneDNN and the plugins off"

b=$tmp/build
out=$("$b/first_program" 2>&1) && case $out in *"dloss/dw = tensor("*) ok "first_program runs" ;;
    *) fail "first_program printed: $out" ;; esac || fail "first_program exited $?: $out"
libs=$(ldd "$b/liboar.so") || fail "ldd liboar.so"
for lib in libmpi libprotobuf-c libdnnl libOpenCL libcuda libfftw3; do
    case $libs in *"$lib"*) fail "liboar.so links $lib:"$'\n'"$libs" ;; *) ok "liboar.so does not link $lib" ;; esac
done
[ -e "$b/liboar_mpi.so" ] && fail "the MPI module was built"
ls "$b"/plugins/*.so >/dev/null 2>&1 && fail "plugins were built: $(ls "$b"/plugins)"

# The left-out parts keep their functions, which fail saying why.
cat >"$tmp/off.c" <<'EOF'
#include <oar/oar.h>
#include <stdio.h>
int main(int argc, char **argv) {
    int rc = oar_dist_init(&argc, &argv);
    printf("dist %d: %s\n", rc, oar_last_error());
    oar_graph *g = oar_onnx_load("model.onnx");
    printf("onnx %s: %s\n", g ? "loaded" : "NULL", oar_last_error());
    return 0;
}
EOF
if "$cc" -o "$tmp/off" "$tmp/off.c" -I"$src/include" -L"$b" -loar -Wl,-rpath,"$b"; then
    out=$("$tmp/off" 2>&1)
    case $out in *"dist -"*"built without MPI"*) ok "oar_dist_init fails: built without MPI" ;;
        *) fail "oar_dist_init in a build without MPI: $out" ;; esac
    case $out in *"onnx NULL"*"built without ONNX"*) ok "oar_onnx_load fails: built without ONNX" ;;
        *) fail "oar_onnx_load in a build without ONNX: $out" ;; esac
else
    fail "a program calling the left-out parts does not link"
fi
out=$("$b/oar" devices 2>&1) && case $out in *"device cpu"*) ok "oar devices lists the CPU" ;;
    *) fail "oar devices printed: $out" ;; esac || fail "oar devices exited $?: $out"
[ $failed = 0 ] && echo "core_build.sh: all checks passed"
exit $failed
