#!/bin/sh
# scripts/check-skips.sh passes a skip it can explain and fails one it
# cannot (an unlisted test); the dpkg-dependent case is exercised by every
# `make test` on a machine where deps.sh ran.
here=$(dirname "$0")
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
junit() { # junit FILE TEST...
    f=$1
    shift
    { echo '<testsuite>'
      for t in "$@"; do
          printf '\t<testcase name="%s" classname="%s" time="0.1" status="notrun">\n' "$t" "$t"
          printf '\t\t<skipped message="SKIP_RETURN_CODE=77"/>\n\t</testcase>\n'
      done
      printf '\t<testcase name="test_core" classname="test_core" time="0.1" status="run"/>\n'
      echo '</testsuite>'; } >"$f"
}
junit "$tmp/ok.xml" test_safetensors_hf test_dist_device_cuda
junit "$tmp/bad.xml" test_safetensors_hf test_never_listed
sh "$here/../scripts/check-skips.sh" "$tmp/ok.xml" || { echo "WRONG: explained skips failed"; exit 1; }
if sh "$here/../scripts/check-skips.sh" "$tmp/bad.xml"; then
    echo "WRONG: an unexplained skip passed"
    exit 1
fi
echo "ok: explained skips pass, an unexplained one fails"
