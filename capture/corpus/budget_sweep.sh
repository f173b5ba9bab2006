#!/usr/bin/env bash
# The measured budget curve against the predicted one (issue 20), with the command users type:
# `steptrace sweep --budgets ...` captures the program without a plan, plans at each budget,
# captures it again with each plan applied and measures. Recompute and swap plans.
# Outputs under $OUT/NAME/ (sweep_budgets.csv, the curve plot, the plans) and the run
# directories of the small programs in $OUT/NAME_runs.tar.gz.
#
#   bash capture/corpus/budget_sweep.sh [NAMES...]   # needs target/release/steptrace, .corpus/
#
# Programs: nanoGPT's bench.py (karpathy/nanoGPT, unchanged, from .corpus/src/nanoGPT), and
# this project's train_gpt.py and train_cnn.py (torchvision ResNet-18). Each recompute sweep
# also captures every block checkpointed (`every-block`), the plan its budgets are set against.
set -u
. capture/corpus/programs.sh
corpus_init "$@"
corpus_scratch /tmp/budgetsweep
export PYTHONUNBUFFERED=1
# Longer timing phases than the default: each step time compared is the median of 20 to 40
# steps with nothing recorded. A planned capture's phase runs steps in pairs with and without
# its plan, timing the second of each pair (20 to 40 each way: 80 to 160 steps after 5 settling
# ones): the programs run 200 steps so that the window (6 steps) still comes after the longest.
TIMING=(--timing-steps 20 --timing-max-steps 40 --timing-max-s 20)

# sweep NAME DIR [sweep options...] -- COMMAND...
sweep() {
  local name=$1 dir=$2; shift 2
  want $name || return 0
  local t0=$SECONDS
  # Its console output goes straight to $OUT, so that a run cut short still says how far it got.
  # stderr lines stamped with the time they arrived, to see where a long sweep spends it.
  (cd $dir && timeout ${SWEEP_TIMEOUT:-540} $ST sweep --out $W/$name "$@" \
    > >(while IFS= read -r l; do printf '%(%H:%M:%S)T %s\n' -1 "$l"; done >$OUT/$name.out) \
    2> >(while IFS= read -r l; do printf '%(%H:%M:%S)T %s\n' -1 "$l"; done >$OUT/$name.err))
  sleep 1
  echo "sweep $name: exit $? in $((SECONDS - t0)) s"
  cat $OUT/$name.out
  grep "steptrace" $OUT/$name.err | tail -n 8
  du -sh $W/$name/* 2>/dev/null
}

E=$ROOT/capture/examples
GPT=(python3 train_gpt.py --batch 16 --seq 512 --d 512 --layers 8 --steps 200)
sweep gpt $E --budgets 90%,70%,smallest,every-block "${TIMING[@]}" -- "${GPT[@]}"
# Swap plans, from the same capture without a plan.
if want gpt_swap && [ -d $W/gpt/base ]; then
  sweep gpt_swap $E --budgets 90%,70% --policy swap --base $W/gpt/base "${TIMING[@]}" -- "${GPT[@]}"
fi
sweep resnet18 $E --budgets 90%,80%,smallest,every-block "${TIMING[@]}" -- python3 train_cnn.py --batch 256 --steps 200
# bench.py runs 30 steps in all: 4 steps each way (16 in pairs) after the 5 settling ones leave
# the window (6 steps) inside them.
NANOGPT=(python3 bench.py --real_data=False --compile=False)
sweep nanogpt $W/nanoGPT --budgets ${NANOGPT_BUDGETS:-90%,80%,smallest,every-block} --timing-steps 4 --timing-max-steps 4 \
  -- "${NANOGPT[@]}"
# Swap plans of the public program, from the same capture without a plan.
if want nanogpt_swap && [ -d $W/nanogpt/base ]; then
  sweep nanogpt_swap $W/nanoGPT --budgets 90%,80% --policy swap --base $W/nanogpt/base \
    --timing-steps 4 --timing-max-steps 4 -- "${NANOGPT[@]}"
fi

# The small programs' run directories, to commit as samples; of nanoGPT's, the capture without
# a plan whole (a few MB: the sample its measured peaks are re-predicted from) and of the planned
# runs their results, plans, manifests and shim status only.
cd $W
for n in gpt gpt_swap resnet18; do
  [ -d $n ] && tar czf $OUT/${n}_runs.tar.gz --exclude='*.png' --exclude='*.svg' $n
done
for n in nanogpt nanogpt_swap; do
  [ -d $n ] && tar czf $OUT/${n}_sweep.tar.gz --exclude='*.png' --exclude='*.svg' \
    --exclude='budget_*/*.pickle*' --exclude='budget_*/*trace*.json*' --exclude='plan_*' $n
done
ls -la $OUT
