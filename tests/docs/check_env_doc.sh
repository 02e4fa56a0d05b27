#!/bin/sh
# docs/environment.md against the sources: every "OAR_..." string literal in
# src/ and tools/ (the variables liboar and the oar command read) must be
# listed in the page as `OAR_...`, and every `OAR_...` the page lists must
# be read somewhere (src/, tools/, or the generated kernels' text).
#   sh tests/docs/check_env_doc.sh SOURCE_DIR
set -u
root=${1:?usage: check_env_doc.sh SOURCE_DIR}
doc=$root/docs/environment.md
[ -f "$doc" ] || { echo "no $doc"; exit 1; }
read_vars=$(grep -rhoE '"OAR_[A-Z0-9_]+"' "$root/src" "$root/tools" | tr -d '"' | sort -u)
doc_vars=$(grep -oE '^\| `OAR_[A-Z0-9_]+`(, `OAR_[A-Z0-9_]+`)*' "$doc" | grep -oE 'OAR_[A-Z0-9_]+' | sort -u)
[ -n "$read_vars" ] || { echo "found no OAR_ variables in $root/src"; exit 1; }
bad=0
for v in $read_vars; do
    echo "$doc_vars" | grep -qx "$v" || { echo "$v is read by the sources but not listed in docs/environment.md"; bad=1; }
done
for v in $doc_vars; do
    echo "$read_vars" | grep -qx "$v" || { echo "docs/environment.md lists $v, which nothing reads"; bad=1; }
done
[ $bad = 0 ] && echo "docs/environment.md lists the $(echo "$read_vars" | wc -l) OAR_ variables the sources read"
exit $bad
