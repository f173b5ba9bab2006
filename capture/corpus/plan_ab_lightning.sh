#!/usr/bin/env bash
# Issue 75: Lightning's demo swept with --plan-ab on the H200: what each plan adds to a step,
# measured in one process (steps with and without it, alternating) against its prediction.
#   bash capture/corpus/plan_ab_lightning.sh   # needs target/release/steptrace; writes $OUT/
set -u
ROOT=$(pwd); ST=$ROOT/target/release/steptrace; W=/tmp/plab
mkdir -p $W/fw/data && cp $ROOT/capture/corpus/programs/*.py $W/fw/
. "$ROOT/capture/corpus/plan_programs.sh"
write_wikitext $W/fw/data/wikitext-2.txt
export PYTHONUNBUFFERED=1 STEPTRACE_CACHE=$W/cache
(cd $W/fw && timeout 280 $ST sweep --plan-ab --budgets every-block,90% --timing-steps 30 --timing-max-steps 80 --timing-max-s 20 --out $W/sw -- python3 lightning_transformer.py --max-steps 300 > $W/sweep.out 2> $W/sweep.err)
echo "rc $?"; tail -12 $W/sweep.out; tail -3 $W/sweep.err
cp $W/sweep.out $OUT/; cp $W/sw/sweep_budgets.csv $OUT/ 2>/dev/null
for d in $W/sw/base $W/sw/budget_*; do n=$(basename $d); mkdir -p $OUT/$n; cp $d/manifest.json $d/shim.json $OUT/$n/ 2>/dev/null; done
