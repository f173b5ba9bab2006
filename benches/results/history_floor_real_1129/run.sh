#!/usr/bin/env bash
# The GPU machine (one H200, 16 cores; 2026-11-29 19:58-20:02 UTC), carrying .corpus/src/nanoGPT
# and .corpus/hf (benches/history_floor's build of c4b7e46, and steptrace 3ca7566 without
# Parquet): a real snapshot of nanoGPT's train.py run unchanged for 150 s
# (capture/corpus/nanogpt_snapshot.sh), then history_floor plain / template / split twice each,
# then steptrace analyze on it.
bash capture/corpus/nanogpt_snapshot.sh /tmp/w 150 > $OUT/train.log 2>&1
H=.corpus/hf/history_floor; S=/tmp/w/snapshot.pickle; cat $S > /dev/null
for r in 1 2; do for m in plain template split; do
  /usr/bin/time -f "$m wall %e s, %M KB" $H $S 1 $( [ $m = plain ] || echo $m ) 2>&1
done; done > $OUT/history_floor.txt 2>&1
/usr/bin/time -f "steptrace %e s %M KB" .corpus/hf/steptrace_np analyze $S -o /tmp/o_st -q 2>&1 | tail -1 >> $OUT/history_floor.txt
