#!/bin/sh
# Runs docs/guide.md, so the guide cannot rot:
#   sh tests/guide/run_guide.sh GUIDE.md INCLUDE_DIR LIB_DIR BIN_DIR [MPIEXEC]
# Every ```c block is a complete program: compiled with $CC (default cc,
# -Wall -Wextra -Werror) against the library in LIB_DIR, run in one scratch
# folder in the order of the page (later programs read what earlier ones
# wrote), and it must exit 0 within 300 s. A block opened as ```c mpi=N runs under
# MPIEXEC with N ranks. An ```output block right after a program holds its
# exact standard output. Each ```sh block runs in the same folder with
# BIN_DIR (the `oar` command) first on PATH, and must exit 0. Nothing else
# in the page runs.
set -u
guide=${1:?usage: run_guide.sh GUIDE.md INCLUDE_DIR LIB_DIR BIN_DIR [MPIEXEC]}
abs() { (cd "$1" && pwd); }
inc=$(abs "$2") lib=$(abs "$3") bin=$(abs "$4") mpiexec=${5:-}
cc=${CC:-cc}
work=$(mktemp -d) || exit 1
trap 'rm -rf "$work"' EXIT

# Split the page into numbered files: block_<k>.<kind> (kind c, sh, output)
# and block_<k>.ranks for mpi=N programs.
awk -v dir="$work" '
    /^```/ && !open {
        info = substr($0, 4); kind = info; sub(/ .*/, "", kind)
        if (kind == "c" || kind == "sh" || kind == "output") {
            open = 1; k++; file = dir "/block_" sprintf("%03d", k) "." kind
            printf "" > file
            if (match(info, /mpi=[0-9]+/)) print substr(info, RSTART + 4, RLENGTH - 4) > (dir "/block_" sprintf("%03d", k) ".ranks")
            next
        }
        skip = 1; next
    }
    /^```/ && open { open = 0; close(file); next }
    /^```/ && skip { skip = 0; next }
    open { print >> file }
' "$guide"

cd "$work" || exit 1
n_c=0 n_sh=0 n_out=0 failed=0
prev_out=
for f in $(ls block_* | grep -v '\.ranks$' | sort); do
    k=${f%.*} kind=${f##*.}
    case $kind in
    c)
        n_c=$((n_c + 1))
        if ! $cc -std=c11 -D_POSIX_C_SOURCE=200809L -Wall -Wextra -Werror -I"$inc" "$f" -o "$k" \
                -L"$lib" -loar -Wl,-rpath,"$lib" -lm 2>"$k.cc"; then
            echo "FAILED: program $n_c ($k) does not compile:"; cat "$k.cc"
            failed=1; prev_out=; continue
        fi
        if [ -f "$k.ranks" ]; then
            if [ -z "$mpiexec" ]; then
                echo "FAILED: program $n_c needs MPI (mpi=$(cat "$k.ranks")) and no mpiexec was given"
                failed=1; prev_out=; continue
            fi
            timeout 300 "$mpiexec" -n "$(cat "$k.ranks")" --oversubscribe "./$k" >"$k.out" 2>"$k.err"
        else
            timeout 300 "./$k" >"$k.out" 2>"$k.err"
        fi
        rc=$?
        if [ $rc -ne 0 ]; then
            echo "FAILED: program $n_c ($k) exited with status $rc:"; cat "$k.out" "$k.err"
            failed=1; prev_out=; continue
        fi
        echo "ok: program $n_c ran"
        prev_out=$k.out ;;
    output)
        n_out=$((n_out + 1))
        [ -n "$prev_out" ] || continue # its program failed, and said so
        if diff -u "$f" "$prev_out" >"$k.diff"; then
            echo "ok: its output is the page's"
        else
            echo "FAILED: the output of $prev_out differs from the page (- page, + program):"
            cat "$k.diff"; failed=1
        fi
        prev_out= ;;
    sh)
        n_sh=$((n_sh + 1))
        if PATH="$bin:$PATH" sh -e "$f" >"$k.out" 2>&1; then
            echo "ok: shell block $n_sh ran"
        else
            echo "FAILED: shell block $n_sh:"; cat "$f" "$k.out"; failed=1
        fi
        prev_out= ;;
    esac
done
echo "$n_c programs, $n_out outputs checked, $n_sh shell blocks"
[ $n_c -gt 0 ] || { echo "FAILED: no program found in $guide"; exit 1; }
exit $failed
