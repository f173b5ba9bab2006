#!/usr/bin/env bash
# A real snapshot read by the reader with the entries' grammar and by the one before it, on
# the GPU machine (one H200 host, 16 cores; 2026-11-30 01:51-01:57 UTC, one device call).
# The snapshot: nanoGPT's train.py (github.com/karpathy/nanoGPT, run unchanged from the ignored
# .corpus/src/nanoGPT) under torch's memory history for 150 s, dumped by torch's own
# _dump_snapshot (capture/corpus/nanogpt_snapshot.sh): 1,983,976,901 bytes, 11,388,652 entries.
# steptrace_new: 8b67c24 (the reader as 9b30474's and e35655c's), built here with
# `cargo build --release --no-default-features` and stripped; steptrace_np: 3ca7566 built the
# same way, whose src/ingest is 2c461e7's (the reader before the grammar). Both carried in the
# ignored .corpus/hf/. Output: runs.txt; summary_new.json (byte for byte the base's).
bash capture/corpus/nanogpt_snapshot.sh /tmp/w 150 > make.log 2>&1
for i in 1 2 3; do for b in steptrace_new steptrace_np; do
  /usr/bin/time -f "$b 16cores %e s %U u %S s %M KB" .corpus/hf/$b analyze /tmp/w/snapshot.pickle --out /tmp/o16_$b -q
  /usr/bin/time -f "$b 2cores %e s %U u %S s %M KB" taskset -c 0,1 .corpus/hf/$b analyze /tmp/w/snapshot.pickle --out /tmp/o2_$b -q
done; done 2>> runs.txt
diff -r /tmp/o16_steptrace_new /tmp/o16_steptrace_np && diff -r /tmp/o2_steptrace_new /tmp/o16_steptrace_np
/usr/bin/time -f "pickle.load 16cores %e s %M KB" python3 -c "import pickle; pickle.load(open('/tmp/w/snapshot.pickle','rb'))"
/usr/bin/time -f "pickle.load 2cores %e s %M KB" taskset -c 0,1 python3 -c "import pickle; pickle.load(open('/tmp/w/snapshot.pickle','rb'))"
