#!/usr/bin/env bash
# Writes the King James Bible as plain text (about 4.3 MB) for
# examples/char_lm.c and examples/ref/char_lm.py, from Debian's bible-kjv
# package (scripts/deps.sh installs it).
#   bash scripts/bible-text.sh [out-file]     (default: bible-kjv.txt)
set -eu
out=${1:-bible-kjv.txt}
if ! command -v bible >/dev/null 2>&1; then
    echo "bible-text.sh: the 'bible' program is missing: apt-get install bible-kjv" >&2
    exit 1
fi
tmp=$out.tmp.$$
bible -l 200 "gen1:1-rev22:21" > "$tmp"
mv "$tmp" "$out"
echo "bible-text.sh: wrote $out ($(wc -c < "$out") bytes)"
