# Shared by benches/snapshot_ab.sh and capture/corpus/real_snapshot_ab.sh (sourced, on the GPU
# machine): the builds named in VARIANTS unpacked from ROOT/.corpus/bin/steptrace_<v>.xz to
# /tmp/b, then `ab_runs SNAP W RUNS`: each build's `steptrace analyze SNAP` timed RUNS times,
# alternating, with its peak RSS and user CPU, into $OUT/timings.txt; the first two builds'
# outputs compared (diff.txt); the first build's summary.json kept; with PICKLE_LOAD=1,
# Python's pickle.load of SNAP once.
# The device takes the repository's tracked files (61 MiB on 2026-11-29, of its 64 MiB limit)
# and the carried paths: carry builds without Parquet (stripped, xz: 2.3 MB each), and where
# that is still over, leave sample_traces/plan out of the index for the call
# (`git rm -r --cached -q sample_traces/plan`, `/sample_traces/plan/` in .git/info/exclude),
# undone after it (`git reset -q sample_traces/plan`, the exclude line removed).

B=/tmp/b
mkdir -p "$B"
for v in $VARIANTS; do
  xz -dc "$ROOT/.corpus/bin/steptrace_$v.xz" > "$B/steptrace_$v"
  chmod +x "$B/steptrace_$v"
done

ab_runs() {
  local snap=$1 w=$2 runs=$3 i v
  for i in $(seq 1 "$runs"); do for v in $VARIANTS; do
    /usr/bin/time -f "$v run $i: %e s %M KB %U user" "$B/steptrace_$v" analyze "$snap" --out "$w/o_${v}_$i" -q 2>&1 | tail -1 | tee -a "$OUT/timings.txt"
  done; done
  set -- $VARIANTS
  if [ $# -ge 2 ]; then
    diff -r "$w/o_${1}_1" "$w/o_${2}_1" > "$OUT/diff.txt" && echo "outputs identical ($1 vs $2)" | tee -a "$OUT/timings.txt"
  fi
  cp "$w/o_${1}_1/summary.json" "$OUT/summary_$1.json"
  if [ "${PICKLE_LOAD:-0}" = 1 ]; then
    /usr/bin/time -f "pickle.load: %e s %M KB" python3 -c "import pickle; pickle.load(open('$snap', 'rb'))" 2>&1 | tail -1 | tee -a "$OUT/timings.txt"
  fi
}
