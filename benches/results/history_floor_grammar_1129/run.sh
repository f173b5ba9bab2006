#!/usr/bin/env bash
# history_floor's grammar modes (issue #44), 2026-11-29 21:10-21:35 UTC.
#
# 1. This 2-core machine (build of benches/history_floor at this commit): instructions an entry
#    by callgrind, and single-thread wall times, each mode against the plain machine, on
#    /tmp/snap100.pickle (60 MB, benches/gen_snapshot.py from the ResNet-18 sample, protocol 2,
#    662,796 entries), a 348 MB protocol-4 pickle (Python's pickler: MEMOIZE, FRAME) of
#    4,155,000 entries, 200 copies of the committed nanoGPT snapshot's 20,775 (a file an
#    earlier session left in /tmp/steptrace-bench/nano_p4_fresh.pickle), and the 1 GB
#    generated snapshot. Output: local.txt.
H=benches/history_floor/target/release/history_floor
for f in /tmp/snap100.pickle /tmp/steptrace-bench/nano_p4_fresh.pickle; do
  for m in plain grammar grammar2; do
    valgrind --tool=callgrind --callgrind-out-file=/tmp/cg_$m.out $H $f 1 $m 2>&1 | grep -E "Collected"
  done
done
for f in /tmp/snap100.pickle /tmp/steptrace-bench/nano_p4_200.pickle /tmp/steptrace-bench/nano_p4_fresh.pickle \
         /tmp/steptrace-bench/snapshot_1000mb_reuse.pickle; do
  for m in plain grammar grammar2; do echo "$(basename $f) $m $($H $f 1 $m)"; done
done
# 2. The GPU machine (one H200, 16 cores), carrying .corpus/src/nanoGPT and .corpus/hf
#    (history_floor as built above): a real snapshot of nanoGPT's train.py run unchanged for
#    150 s, dumped by torch (protocol 4), then plain and grammar2 three times each, then
#    steptrace analyze (the build of 3ca7566 without Parquet) on it. Output:
#    gpu_host_real_snapshot.txt, train.log.
bash capture/corpus/nanogpt_snapshot.sh /tmp/w 150 > $OUT/train.log 2>&1
H=.corpus/hf/history_floor; S=/tmp/w/snapshot.pickle; ls -la $S > $OUT/history_floor.txt; cat $S > /dev/null
for r in 1 2 3; do for m in plain grammar2; do
  /usr/bin/time -f "$m wall %e s, %M KB" $H $S 1 $( [ $m = plain ] || echo $m ) 2>&1
done; done >> $OUT/history_floor.txt 2>&1
/usr/bin/time -f "steptrace %e s %M KB" .corpus/hf/steptrace_np analyze $S -o /tmp/o_st -q 2>&1 | tail -1 >> $OUT/history_floor.txt
python3 -c "d=open('$S','rb').read(2); print('protocol', d[1])" >> $OUT/history_floor.txt
# 3. This machine, 21:55 UTC: `stream` against grammar2 and steptrace on the 1 GB file, three
#    rounds interleaved; then two rounds each on nano_p4_fresh.pickle. Output: the end of local.txt.
for r in 1 2 3; do
  for m in stream grammar2; do /usr/bin/time -f "   process %e s, %U user %S sys, %M KB" $H /tmp/steptrace-bench/snapshot_1000mb_reuse.pickle 1 $m; done
  /usr/bin/time -f "   steptrace %e s %M KB" target/release/steptrace analyze /tmp/steptrace-bench/snapshot_1000mb_reuse.pickle --out /tmp/o_snap -q
done
for m in plain grammar2 stream; do $H /tmp/steptrace-bench/nano_p4_fresh.pickle 2 $m; done
# 4. The GPU machine again, 21:45-21:50 UTC (history_floor with `stream`, as built above): a new
#    real snapshot of nanoGPT's train.py for 150 s, then stream / grammar2 / plain and steptrace
#    analyze, three rounds interleaved. Output: gpu_host_real_snapshot_stream.txt, train_stream.log.
bash capture/corpus/nanogpt_snapshot.sh /tmp/w 150 > $OUT/train.log 2>&1
H=.corpus/hf/history_floor; S=/tmp/w/snapshot.pickle; ls -la $S > $OUT/stream.txt; cat $S > /dev/null
for r in 1 2 3; do
  for m in stream grammar2 plain; do
    /usr/bin/time -f "   $m process %e s, %U user %S sys, %M KB" $H $S 1 $( [ $m = plain ] || echo $m ) 2>&1
  done
  /usr/bin/time -f "   steptrace %e s %M KB" .corpus/hf/steptrace_np analyze $S -o /tmp/o_st -q 2>&1 | tail -1
done >> $OUT/stream.txt 2>&1
grep -m1 peak_allocated /tmp/o_st/summary.json >> $OUT/stream.txt
grep -m1 start_allocated /tmp/o_st/summary.json >> $OUT/stream.txt
# 5. This machine: the stream mode's two threads counted apart. Output: the end of local.txt.
for f in /tmp/snap100.pickle /tmp/steptrace-bench/nano_p4_fresh.pickle; do
  valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file=/tmp/cgs.out $H $f 1 stream
  grep -H '^totals:' /tmp/cgs.out-*
done
# 6. 22:10 UTC, grammar2 with its keys looked up by their place first: step 5 again, and one
#    round each of plain and stream on snap100, nano_p4_fresh and the 1 GB file.
for f in /tmp/snap100.pickle /tmp/steptrace-bench/nano_p4_fresh.pickle /tmp/steptrace-bench/snapshot_1000mb_reuse.pickle; do
  for m in plain stream; do $H $f 1 $m; done
done
# 7. 23:10 UTC, after the review's refactor: every mode on every file of step 1 (the records'
#    hash and peak), then callgrind of plain, grammar, grammar2 on snap100 and of stream's
#    threads on snap100 and nano_p4_fresh. Output: the end of local.txt.
for f in /tmp/snap100.pickle /tmp/steptrace-bench/nano_p4_fresh.pickle /tmp/steptrace-bench/nano_p4_200.pickle /tmp/steptrace-bench/snapshot_1000mb_reuse.pickle; do
  for m in plain split template grammar grammar2 stream; do $H $f 1 $m; done
done
for m in plain grammar grammar2; do valgrind --tool=callgrind --callgrind-out-file=/tmp/cgr.out $H /tmp/snap100.pickle 1 $m; done
for f in /tmp/snap100.pickle /tmp/steptrace-bench/nano_p4_fresh.pickle; do
  rm -f /tmp/cgs.out*; valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file=/tmp/cgs.out $H $f 1 stream
  grep -H '^totals:' /tmp/cgs.out-*
done
