#!/bin/sh
# Runs an example the way a user would and judges it by what it reports:
#   sh tests/run_example.sh [check ...] -- program [args ...]
# checks, each applied to the program's output (the last line that matches):
#   --at-least 'PREFIX' MIN   the number right after PREFIX is >= MIN
#   --at-most  'PREFIX' MAX   the number right after PREFIX is <= MAX
#   --line     'TEXT'         some line contains TEXT
# The test fails when the program exits non-zero (77, a skip, passes through),
# when a metric line is missing, or when a number is outside its bound. It
# prints the output, then one line per check, so a failure says which.
set -u
checks_file=$(mktemp) || exit 1
out=$(mktemp) || exit 1
trap 'rm -f "$checks_file" "$out"' EXIT
while [ $# -gt 0 ] && [ "$1" != -- ]; do
    case $1 in
    --at-least | --at-most)
        [ $# -ge 3 ] || { echo "run_example.sh: $1 needs a prefix and a bound" >&2; exit 2; }
        printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$checks_file"
        shift 3 ;;
    --line)
        [ $# -ge 2 ] || { echo "run_example.sh: --line needs a text" >&2; exit 2; }
        printf '%s\t%s\t-\n' "$1" "$2" >>"$checks_file"
        shift 2 ;;
    *) echo "run_example.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
[ $# -ge 2 ] || { echo "run_example.sh: no program after --" >&2; exit 2; }
shift
"$@" >"$out" 2>&1
rc=$?
cat "$out"
if [ $rc -ne 0 ]; then
    echo "run_example.sh: $1 exited with status $rc"
    exit $rc
fi
[ -s "$checks_file" ] || { echo "run_example.sh: no check given for $1" >&2; exit 2; }
failed=0
while IFS="$(printf '\t')" read -r kind text bound; do
    if [ "$kind" = --line ]; then
        if grep -qF -- "$text" "$out"; then
            echo "run_example.sh: ok: a line contains '$text'"
        else
            echo "run_example.sh: FAILED: no line contains '$text'"
            failed=1
        fi
        continue
    fi
    # the number right after the last occurrence of the prefix
    value=$(awk -v p="$text" 'index($0, p) { s = substr($0, index($0, p) + length(p));
        if (match(s, /^[-+]?[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?/)) v = substr(s, 1, RLENGTH) }
        END { print v }' "$out")
    if [ -z "$value" ]; then
        echo "run_example.sh: FAILED: no number after '$text'"
        failed=1
    elif awk -v v="$value" -v b="$bound" -v k="$kind" \
        'BEGIN { exit !((k == "--at-least") ? (v + 0 >= b + 0) : (v + 0 <= b + 0)) }'; then
        echo "run_example.sh: ok: '$text' $value (bound ${kind#--} $bound)"
    else
        echo "run_example.sh: FAILED: '$text' $value, wanted ${kind#--} $bound"
        failed=1
    fi
done <"$checks_file"
exit $failed
