#!/bin/sh
# The layer check (docs/architecture.md, "Layers"): reads the layer order
# from the doc's "Layer order:" line, lowest first, and fails when an
# object of the library calls a function or reads a variable that an object
# of a higher layer defines. An object's layer is its folder under the last
# src/ of its path (src/backends/<name> counts as backends/<name>);
# objects outside src/ (generated code) are not checked.
#
#   sh scripts/check-layers.sh DOC OBJECT...
#   sh scripts/check-layers.sh --expect "FROM -> TO" DOC OBJECT...
#     (succeeds only if the check fails and names that edge: the check's
#     own test, with a deliberate upward call among the objects)
set -u
expect=
if [ "${1:-}" = --expect ]; then expect=$2; shift 2; fi
doc=$1; shift
order=$(sed -n 's/^Layer order: *//p' "$doc" | head -n 1 | tr -d '`' | sed 's/ *< */ /g')
if [ -z "$order" ]; then
    echo "check-layers: no 'Layer order:' line in $doc" >&2
    exit 2
fi
for o in "$@"; do
    case $o in */src/*) ;; *) continue ;; esac
    layer=${o##*/src/}
    case $layer in backends/*) layer=$(echo "$layer" | cut -d/ -f1-2) ;; *) layer=${layer%%/*} ;; esac
    echo "$layer $(basename "$o") OBJECT"
    if syms=$(nm -P "$o"); then
        printf '%s\n' "$syms" | sed "s|^|$layer $(basename "$o") |"
    else
        echo "$layer $(basename "$o") UNREADABLE"
    fi
done | awk -v order="$order" -v expect="$expect" '
    BEGIN { n = split(order, names, " "); for (i = 1; i <= n; i++) rank[names[i]] = i }
    $3 == "OBJECT" { nobj++; next }
    $3 == "UNREADABLE" { printf "check-layers: cannot read the symbols of %s\n", $2; broken++; next }
    # fields: layer object symbol type [value size]
    $4 ~ /^[TDBRVWCG]$/ { def[$3] = $1; next }
    $4 ~ /^[Uw]$/ { use[++nu] = $1 " " $2 " " $3 }
    END {
        if (broken || nobj < 2) { printf "check-layers: %d objects read, %d unreadable\n", nobj, broken; exit 2 }
        bad = 0
        for (i = 1; i <= nu; i++) {
            split(use[i], u, " ")
            if (!(u[1] in rank)) { unknown[u[1]] = 1; continue }
            if (!(u[3] in def)) continue
            to = def[u[3]]
            if (!(to in rank)) { unknown[to] = 1; continue }
            if (rank[to] > rank[u[1]]) {
                printf "layer %s calls up into %s: %s (%s)\n", u[1], to, u[3], u[2]
                edge[u[1] " -> " to] = 1
                bad++
            }
        }
        for (l in unknown) { printf "layer %s is not in the layer order\n", l; bad++ }
        if (expect != "") {
            if (bad && (expect in edge)) { print "check-layers: the expected edge " expect " was caught"; exit 0 }
            print "check-layers: expected the edge " expect " to be reported"; exit 1
        }
        if (bad) { printf "check-layers: %d edges against the order %s\n", bad, order; exit 1 }
        printf "check-layers: the calls of %d objects follow the order %s\n", nobj, order
    }'
