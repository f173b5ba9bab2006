#!/usr/bin/env bash
# The pictures in docs/reports.md: a batch-size sweep of the ResNet-18 example and a
# baseline / checkpointing / AMP / both comparison of a larger GPT. Results in $OUT/demo.tar.gz.
set -u
ST=$(pwd)/target/release/steptrace
W=/tmp/demo; rm -rf $W; mkdir -p $W
export STEPTRACE_CACHE=$W/cache PYTHONUNBUFFERED=1
cd capture/examples
$ST sweep --values 4,8,16,32,64 --name batch_size --out $W/sweep -- python3 train_cnn.py --batch {value} --steps 7 2>&1 | grep -v Warning | tail -n 12
G="--batch 8 --seq 1024 --d 512 --layers 8 --steps 7"
for c in "baseline --fp32" "checkpointing --fp32 --ckpt" "amp" "amp_checkpointing --ckpt"; do
  set -- $c; name=$1; shift
  $ST capture --out $W/cmp/$name -- python3 train_gpt.py $G "$@" >/dev/null 2>$W/$name.err; echo "$name exit $?"
done
$ST compare $W/cmp/baseline $W/cmp/checkpointing $W/cmp/amp $W/cmp/amp_checkpointing --out $W/compare
mkdir -p $W/pack/sweep $W/pack/compare
cp $W/sweep/*.csv $W/sweep/*.png $W/pack/sweep/; cp $W/compare/* $W/pack/compare/
tar czf $OUT/demo.tar.gz -C $W/pack . && ls -la $OUT
