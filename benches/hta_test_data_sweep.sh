#!/usr/bin/env bash
# `steptrace analyze` over every file and folder of HolisticTraceAnalysis's test data
# (tests/data of github.com/facebookresearch/HolisticTraceAnalysis): each must exit 0 or fail
# with one line naming what is wrong. Usage: benches/hta_test_data_sweep.sh HTA_TESTS_DATA [ST]
# Prints one line per input: FILE|DIR, exit code, stderr lines, the first 200 characters of
# stderr. Files stored as Git LFS pointers or left empty by the checkout are skipped.
set -u
DATA=$1; ST=${2:-$(dirname "$0")/../target/release/steptrace}
OUT=$(mktemp -d); trap 'rm -rf "$OUT"' EXIT
cd "$DATA"
for f in $(find . -type f -size +0 | sort); do
  timeout 120 "$ST" analyze -q --no-plots --out "$OUT/o" "$f" > /dev/null 2> "$OUT/err"; rc=$?
  echo "FILE rc=$rc lines=$(wc -l < "$OUT/err") $f :: $(head -c 200 "$OUT/err" | tr '\n' '|')"
done
for d in $(find . -type d | sort); do
  timeout 120 "$ST" analyze -q --no-plots --out "$OUT/o" "$d" > /dev/null 2> "$OUT/err"; rc=$?
  echo "DIR rc=$rc lines=$(wc -l < "$OUT/err") $d :: $(head -c 200 "$OUT/err" | tr '\n' '|')"
done
