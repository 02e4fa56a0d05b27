#!/bin/bash
# Every name a public header declares OAR_API is exported by liboar.so
# (CTest "exports"): a definition compiled without the declaration in
# sight gets the build's hidden visibility, links inside oar and in static
# programs, and is missing for every C user of the shared library.
#   bash tests/install/exports.sh INCLUDE_DIR LIBOAR_SO
set -u
inc=${1:?usage: exports.sh INCLUDE_DIR LIBOAR_SO}
lib=${2:?usage: exports.sh INCLUDE_DIR LIBOAR_SO}
command -v nm >/dev/null || { echo "SKIP: no nm"; exit 77; }
exported=$(nm -D --defined-only "$lib" | awk '{print $3}' | sort -u) || exit 1
[ -n "$exported" ] || { echo "FAIL: nm lists no symbols of $lib"; exit 1; }
# A declaration starts at a line beginning OAR_API and may span lines up to
# its first "(" (a function) or "[" / ";" (data): the name is the last word
# before it.
declared=$(awk '
    /^OAR_API/ { decl = ""; open = 1 }
    open {
        decl = decl " " $0
        if (match(decl, /[(\[;]/)) {
            head = substr(decl, 1, RSTART - 1)
            n = split(head, w, /[^A-Za-z0-9_]+/)
            while (n > 0 && w[n] == "") n--
            if (n > 0) print w[n]
            open = 0
        }
    }' "$inc"/oar/*.h | sort -u)
count=$(echo "$declared" | wc -l)
[ "$count" -gt 100 ] || { echo "FAIL: found only $count OAR_API declarations under $inc/oar"; exit 1; }
missing=$(comm -23 <(echo "$declared") <(echo "$exported"))
if [ -n "$missing" ]; then
    echo "FAIL: declared OAR_API in $inc/oar but not exported by $lib:"
    echo "$missing" | sed 's/^/  /'
    exit 1
fi
echo "ok: the $count OAR_API names of $inc/oar are exported by $lib"
