#!/usr/bin/env bash
# The planner's predictions against the GPU (issue 20). For each program: capture it, plan at
# 90% and 70% of its measured peak and at the smallest budget the plan reaches, plus every
# block checkpointed; capture the program again with each plan applied (`capture --plan`) and
# compare the predicted peak and step time with what torch and the timing phase measured.
# One JSON line per (program, plan) in $OUT/plan_proof.jsonl; the run directories in
# $OUT/plan_runs.tar.gz.
#
#   bash capture/corpus/plan_proof.sh [NAMES...]   # needs target/release/steptrace and .corpus/
set -u
ROOT=$(pwd)
ST=$ROOT/target/release/steptrace
W=/tmp/planproof
rm -rf $W && mkdir -p $W/runs $W/plans $W/logs
cp -r .corpus/src/nanoGPT $W/
export PYTHONUNBUFFERED=1 STEPTRACE_REFERENCE=1 STEPTRACE_REFERENCE_FLOPS=0
ONLY=" ${*:-} "
want() { [ "$ONLY" = "  " ] || [[ "$ONLY" == *" $1 "* ]]; }

# capture NAME DIR PLAN(or -) -- COMMAND...
capture() {
  local name=$1 dir=$2 plan=$3; shift 4
  local extra=()
  [ "$plan" != - ] && extra=(--plan "$plan")
  # A longer timing phase than the default: the step times compared are medians of 20 to 40
  # steps with nothing recorded (the plan applied from each module's second call on).
  # (nanoGPT's bench.py runs 30 steps in all: it keeps the default phase.)
  (cd $dir && timeout 300 $ST capture --force --out $W/runs/$name "${extra[@]}" \
    ${TIMING---timing-steps 20 --timing-max-steps 40 --timing-max-s 20} -- "$@" \
    >$W/logs/$name.out 2>$W/logs/$name.err)
  echo "capture $name: $?"
}

# prove NAME DIR -- COMMAND...
prove() {
  local name=$1 dir=$2; shift 3
  want $name || return 0
  capture ${name}_base $dir - -- "$@"
  $ST plan $W/runs/${name}_base --out $W/plans/${name}_curve -q
  local smallest
  smallest=$(python3 -c "import json;print(json.load(open('$W/plans/${name}_curve/plan.json'))['smallest_feasible_bytes'])")
  $ST plan $W/runs/${name}_base --budget 90% --out $W/plans/${name}_p90 -q
  $ST plan $W/runs/${name}_base --budget 70% --out $W/plans/${name}_p70 -q
  $ST plan $W/runs/${name}_base --budget $smallest --out $W/plans/${name}_min -q
  $ST plan $W/runs/${name}_base --modules every-block --out $W/plans/${name}_every -q
  local seen=""
  for p in p90 p70 min every; do
    [ -f $W/plans/${name}_$p/plan.json ] || continue
    # A plan with the same decisions as one already run is not run again.
    local key
    key=$(python3 -c "import json;print(sorted(d['instance']+d['action'] for d in json.load(open('$W/plans/${name}_$p/plan.json'))['decisions']))" | md5sum | cut -c1-8)
    if [[ "$seen" == *"$key"* ]]; then echo "plan $name $p: same decisions as one run already"; continue; fi
    seen="$seen $key"
    capture ${name}_$p $dir $W/plans/${name}_$p/plan.json -- "$@"
    $ST analyze $W/runs/${name}_$p --out $W/runs/${name}_$p.an -q --no-annotated-trace >/dev/null 2>&1
    python3 - "$name" "$p" "$W" <<'PY' >>$OUT/plan_proof.jsonl
import json, sys
name, p, w = sys.argv[1:]
plan = json.load(open(f"{w}/plans/{name}_{p}/plan.json"))
base = json.load(open(f"{w}/runs/{name}_base/manifest.json"))
run = json.load(open(f"{w}/runs/{name}_{p}/manifest.json"))
shim = {}
try:
    shim = json.load(open(f"{w}/runs/{name}_{p}/shim.json"))
except Exception:
    pass
def peak(m):
    v = [x for x in (m["ranks"][0].get("reference") or {}).get("window_step_peaks_bytes", []) if x]
    return max(v) if v else None
row = {
    "program": name, "plan": p, "budget_bytes": plan["budget_bytes"],
    "decisions": [d["instance"] for d in plan["decisions"]],
    "base_peak_bytes": peak(base), "base_step_s": base.get("step_time_s"),
    "predicted_peak_bytes": plan["predicted_peak_bytes"],
    "predicted_step_s": plan["predicted_step_time_s"],
    "measured_peak_bytes": peak(run), "measured_step_s": run.get("step_time_s"),
    "every_block": plan.get("every_block"),
    "applied": (shim.get("plan") or {}).get("applied"), "missing": (shim.get("plan") or {}).get("missing"),
    "capture_exit": run["exit"]["code"], "notes": run.get("notes"),
}
if p == "every":
    row["predicted_peak_bytes"] = plan["predicted_peak_bytes"]
if row["measured_peak_bytes"] and row["predicted_peak_bytes"]:
    row["peak_error_pct"] = 100 * (row["predicted_peak_bytes"] / row["measured_peak_bytes"] - 1)
if row["measured_step_s"] and row["predicted_step_s"]:
    row["step_error_pct"] = 100 * (row["predicted_step_s"] / row["measured_step_s"] - 1)
print(json.dumps(row))
PY
    tail -n 1 $OUT/plan_proof.jsonl | cut -c1-400
    mkdir -p $OUT/an/${name}_$p
    cp $W/runs/${name}_$p.an/{summary.json,node_stats.csv,iterations.csv} $W/plans/${name}_$p/plan.json $OUT/an/${name}_$p/ 2>/dev/null
  done
  # The base capture (small programs only) and its plans, to be studied and committed.
  if [ "$name" != nanogpt ]; then
    (cd $W/runs && tar czf $OUT/base_$name.tar.gz ${name}_base)
  fi
}

E=$ROOT/capture/examples
# nanoGPT's bench.py (karpathy/nanoGPT, unchanged): GPT-2 124M, bf16, eager, batch 12x1024.
TIMING="" prove nanogpt $W/nanoGPT -- python3 bench.py --real_data=False --compile=False
# This project's examples: a CNN (torchvision ResNet-18) and a GPT, with activations larger
# than parameters and optimizer state.
prove resnet18 $E -- python3 train_cnn.py --batch 256 --steps 70
prove gpt $E -- python3 train_gpt.py --batch 16 --seq 512 --d 512 --layers 8 --steps 70
# Framework programs as their users write them (capture/corpus/programs/): a HuggingFace
# Trainer on GPT-2 from its config (bf16, gradient accumulation 4), 4 layers x 256 tokens.
mkdir -p $W/fw && cp $ROOT/capture/corpus/programs/*.py $W/fw/
# The stand-in data the corpus's programs read (Lightning's demo reads fw/data/wikitext-2.txt;
# with none there it tries to download it and exits on the GPU machine).
if want lightning; then
  cp -r $ROOT/.corpus/src/examples $W/ && python3 $ROOT/capture/corpus/make_data.py $W >$W/logs/make_data.log 2>&1
fi
prove hf_small $W/fw -- python3 hf_trainer_gpt2.py --n-layer 4 --seq-len 256 --max-steps 80
# Lightning's own demo LightningTransformer under Trainer.fit (bf16-mixed, closure).
prove lightning $W/fw -- python3 lightning_transformer.py

cd $W
tar czf $OUT/plan_logs.tar.gz logs 2>/dev/null
ls -la $OUT
