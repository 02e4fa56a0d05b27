#!/bin/bash
# The install, as a user meets it (CTest "install", cmake/install.cmake):
#   bash tests/install/install_test.sh BUILD CMAKE CC
# installs BUILD to a temporary prefix, builds tests/install/project four
# ways (pkg-config shared and static, find_package oar::oar and
# oar::oar_static) and runs each with an empty environment (env -i: no
# LD_LIBRARY_PATH, no OAR_* variables), checking its autograd values; the
# shared programs and the installed `oar devices` must find the installed
# plugins, and, with MPI, the installed MPI module, while a program without
# dtensors loads no libmpi. Each failed check prints what it saw.
set -u
build=${1:?usage: install_test.sh BUILD CMAKE CC}
cmake=${2:?usage: install_test.sh BUILD CMAKE CC}
cc=${3:?usage: install_test.sh BUILD CMAKE CC}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/oar-install.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
failed=0
fail() { echo "FAIL: $*"; failed=1; }
ok() { echo "ok: $*"; }

if ! "$cmake" --install "$build" --prefix "$prefix" >"$tmp/install.log" 2>&1; then
    cat "$tmp/install.log"
    echo "FAIL: cmake --install $build --prefix $prefix (is the build complete?)"
    exit 1
fi
pc=$(find "$prefix" -name oar.pc -path '*/pkgconfig/*' | head -n 1)
[ -n "$pc" ] || { find "$prefix"; echo "FAIL: no oar.pc installed"; exit 1; }
libdir=$(dirname "$(dirname "$pc")")
for f in "$libdir/liboar.so" "$libdir/liboar.a" "$prefix/bin/oar" "$prefix/include/oar/oar.h" \
         "$libdir/cmake/oar/oarConfig.cmake" "$libdir/cmake/oar/oarConfigVersion.cmake"; do
    [ -e "$f" ] || fail "not installed: $f"
done
echo "--- oar.pc"
cat "$pc"
export PKG_CONFIG_PATH=$libdir/pkgconfig
expected="f 33 df 29 d2f 18"

# Runs PROG with an empty environment and checks its output.
check_run() {
    local name=$1 prog=$2 out
    out=$(env -i "$prog" 2>&1)
    if [ "$out" = "$expected" ]; then ok "$name prints \"$expected\""; else fail "$name printed: $out"; fi
}

# Whether PROG (shared) or not (static) loads the installed liboar.so.
check_linkage() {
    local name=$1 prog=$2 want=$3 libs
    libs=$(env -i LD_DEBUG=libs "$prog" 2>&1 >/dev/null | grep 'calling init' | grep 'liboar\.so')
    case $want in
    shared) case $libs in *"$libdir/liboar.so"*) ok "$name runs the installed liboar.so" ;;
            *) fail "$name does not load $libdir/liboar.so: $libs" ;; esac ;;
    static) [ -z "$libs" ] && ok "$name has liboar linked in" || fail "$name loads a liboar.so: $libs" ;;
    esac
}

# pkg-config, shared
if "$cc" -o "$tmp/pc_shared" "$here/project/main.c" $(pkg-config --cflags --libs oar); then
    check_run "pkg-config shared" "$tmp/pc_shared"
    check_linkage "pkg-config shared" "$tmp/pc_shared" shared
else
    fail "cc with pkg-config --cflags --libs oar: $(pkg-config --cflags --libs oar)"
fi
# pkg-config, static: the archive named (-l:liboar.a), since -loar picks the
# shared library where both are installed
static_libs=$(pkg-config --static --libs oar | sed 's/-loar\( \|$\)/-l:liboar.a\1/')
if "$cc" -o "$tmp/pc_static" "$here/project/main.c" $(pkg-config --cflags oar) $static_libs; then
    check_run "pkg-config static" "$tmp/pc_static"
    check_linkage "pkg-config static" "$tmp/pc_static" static
else
    fail "cc with pkg-config --static --libs oar: $static_libs"
fi
# find_package(oar): oar::oar and oar::oar_static
for kind in shared static; do
    b=$tmp/cmake_$kind
    static=OFF
    [ $kind = static ] && static=ON
    if "$cmake" -S "$here/project" -B "$b" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_C_COMPILER="$cc" \
           -DOAR_CHECK_STATIC=$static >"$b.log" 2>&1 && "$cmake" --build "$b" >>"$b.log" 2>&1; then
        check_run "find_package $kind" "$b/check"
        check_linkage "find_package $kind" "$b/check" $kind
    else
        cat "$b.log"
        fail "find_package(oar) $kind: configure or build failed"
    fi
done

# Plugins: the shared program and the installed oar find the installed ones
# (next to liboar, and <bin>/../<libdir> for the statically linked oar).
plugins=$(ls "$libdir"/oar/plugins/*.so 2>/dev/null)
out=$(env -i "$prefix/bin/oar" --help 2>&1)
rc=$?
case "$rc:$out" in
[02]:*usage*) ok "oar --help prints its usage" ;;
*) fail "oar --help exited $rc: $out" ;;
esac
devices=$(env -i "$prefix/bin/oar" devices 2>&1) || fail "oar devices exited $?: $devices"
report=$(env -i "$tmp/pc_shared" --devices 2>&1) || fail "pc_shared --devices: $report"
echo "--- oar devices"
echo "$devices"
for p in $plugins; do
    case $devices in *"plugin $p "*) ok "oar devices finds $p" ;; *) fail "oar devices does not list $p" ;; esac
    case $report in *"plugin $p "*) ok "a shared program finds $p" ;; *) fail "a shared program does not list $p: $report" ;; esac
done
[ -n "$plugins" ] || echo "(no plugin built: nothing to find)"

# MPI: the module next to liboar; a program without dtensors loads no libmpi
if [ -e "$libdir/liboar_mpi.so" ]; then
    mpi=$(env -i LD_DEBUG=libs "$tmp/pc_shared" 2>&1 >/dev/null | grep 'calling init' | grep libmpi)
    [ -z "$mpi" ] && ok "a program without dtensors loads no libmpi" || fail "libmpi loaded: $mpi"
    # (PATH kept: a singleton Open MPI process starts its daemon, orted, from it)
    out=$(env -i PATH="$PATH" timeout 120 "$tmp/pc_shared" --dist 2>&1)
    case $out in *"rank 0 of 1"*) ok "oar_dist_init opens the installed MPI module" ;;
    *) fail "oar_dist_init through the installed module: $out" ;; esac
else
    echo "(built without MPI: no module to check)"
fi
[ $failed = 0 ] && echo "install_test.sh: all checks passed"
exit $failed
