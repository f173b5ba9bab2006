#!/usr/bin/env bash
# A real snapshot (nanoGPT's train.py unchanged, SECONDS of training) read plain and gzipped
# (gzip -6, as `gzip snapshot.pickle` leaves it), steptrace's default command 3 times each,
# alternating, against Python reading the same .pickle.gz (gzip.open + pickle.load, once).
set -euo pipefail
SECS=${1:-60}
ROOT=$(pwd)
VARIANTS=${VARIANTS:-cur}
source "$ROOT/benches/snapshot_ab_common.sh"
W=/tmp/real_snapshot
bash "$ROOT/capture/corpus/nanogpt_snapshot.sh" "$W" "$SECS" 2>&1 | tail -3 | tee $OUT/train.txt
SNAP=$W/snapshot.pickle
( time gzip -6 -k "$SNAP" ) 2>&1 | tail -3 | tee $OUT/gzip_time.txt
ls -l "$SNAP" "$SNAP.gz" | tee $OUT/files.txt
nproc | tee $OUT/nproc.txt
for i in 1 2 3; do
  for f in "$SNAP" "$SNAP.gz"; do
    /usr/bin/time -f "$(basename $f) run $i: %e s %M KB %U user %S sys" "$B/steptrace_cur" analyze "$f" --out "$W/o_$(basename $f)_$i" -q --timings 2>&1 | grep -v "done at" | tee -a $OUT/timings.txt
  done
done
diff -r "$W/o_snapshot.pickle_1" "$W/o_snapshot.pickle.gz_1" > $OUT/diff.txt && echo "outputs identical (.pickle vs .pickle.gz)" | tee -a $OUT/timings.txt
cp "$W/o_snapshot.pickle_1/summary.json" $OUT/summary.json
/usr/bin/time -f "python gzip.open + pickle.load: %e s %M KB" python3 -c "import gzip, pickle; pickle.load(gzip.open('$SNAP.gz', 'rb'))" 2>&1 | tail -1 | tee -a $OUT/timings.txt
/usr/bin/time -f "python pickle.load (plain): %e s %M KB" python3 -c "import pickle; pickle.load(open('$SNAP', 'rb'))" 2>&1 | tail -1 | tee -a $OUT/timings.txt
python3 -c "
import torch, pickle
s = pickle.load(open('$SNAP', 'rb'))
n = sum(len(t) for t in s['device_traces'])
print('trace entries', n, 'segments', len(s['segments']))
" | tee -a $OUT/timings.txt
