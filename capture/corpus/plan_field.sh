#!/usr/bin/env bash
# Issue 43: the planner on programs this project did not write, with the command users type:
# `steptrace sweep --budgets 90%,smallest,every-block -- PROGRAM` captures each program without
# a plan, plans at each budget, captures it again with each plan applied (its timing phase
# alternating steps with and without the plan) and measures. One program per GPU, all at once
# (each sweep sees one GPU through CUDA_VISIBLE_DEVICES; the host's cores are shared).
#
#   bash capture/corpus/plan_field.sh [NAMES...]   # needs target/release/steptrace and .corpus/
#
# Programs, each unchanged:
#   hf_small   capture/corpus/programs/hf_trainer_gpt2.py: a HuggingFace Trainer program (GPT-2
#              from its config, 4 layers x 256 tokens, bf16, gradient accumulation 4)
#   lightning  capture/corpus/programs/lightning_transformer.py: Lightning's own demo
#              LightningTransformer under Trainer.fit, bf16-mixed
#   nanogpt    karpathy/nanoGPT bench.py (GPT-2 124M, bf16, 12 x 1024)
#   imagenet   pytorch/examples imagenet/main.py --dummy, torchvision ResNet-50, batch 64, fp32
#              (20,000 steps an epoch: ended 20 steps after the window, --stop-after-window)
# STEPTRACE_REFERENCE=1: each run's manifest carries torch.cuda.max_memory_allocated per step.
# Outputs: $OUT/NAME.tar.gz (the capture without a plan whole; of each planned run its plan,
# manifest, shim status and memory snapshot; the sweep's table and plans) and the consoles.
set -u
. capture/corpus/programs.sh
corpus_init "$@"
corpus_scratch /tmp/planfield
export PYTHONUNBUFFERED=1 STEPTRACE_REFERENCE=1 STEPTRACE_REFERENCE_FLOPS=0
mkdir -p $W/fw && cp capture/corpus/programs/*.py $W/fw/
cp -r .corpus/src/examples/imagenet $W/
# Lightning's demo reads fw/data/wikitext-2.txt (with none it tries to download it): a
# stand-in, word_language_model's valid text (make_data.py adds its test text; only valid.txt
# fits beside the binary in what travels to the GPU machine).
WT=.corpus/src/examples/word_language_model/data/wikitext-2
mkdir -p $W/fw/data && cat $WT/valid.txt >$W/fw/data/wikitext-2.txt
BUDGETS=${BUDGETS:-90%,smallest,every-block}
TIMING=(--timing-steps 20 --timing-max-steps 40 --timing-max-s 20)
nvidia-smi -L
# On a host with fewer GPUs than programs, sweeps share them (GPU index modulo the count).
NGPU=$(nvidia-smi -L | grep -c '^GPU')

# sweep NAME GPU DIR [sweep options...] -- COMMAND...   (in the background)
sweep() {
  local name=$1 gpu=$(($2 % ${NGPU:-1})) dir=$3; shift 3
  want $name || return 0
  (
    t0=$SECONDS
    cd $dir && CUDA_VISIBLE_DEVICES=$gpu timeout ${SWEEP_TIMEOUT:-500} $ST sweep --out $W/$name \
      --budgets $BUDGETS "$@" >$W/$name.out 2>$W/$name.err
    echo "sweep $name: exit $? in $((SECONDS - t0)) s" >>$W/$name.out
  ) &
}

sweep hf_small 0 $W/fw "${TIMING[@]}" --stop-after-window 10 -- \
  python3 hf_trainer_gpt2.py --n-layer 4 --seq-len 256 --max-steps 400
sweep lightning 1 $W/fw "${TIMING[@]}" --stop-after-window 10 -- \
  python3 lightning_transformer.py --max-steps 400
# bench.py runs 30 steps in all: 4 steps each way (16 in pairs) after the 5 settling ones.
sweep nanogpt 2 $W/nanoGPT --timing-steps 4 --timing-max-steps 4 -- \
  python3 bench.py --real_data=False --compile=False
sweep imagenet 3 $W/imagenet "${TIMING[@]}" --stop-after-window 20 -- \
  python3 main.py -a resnet50 --dummy -b 64 -j 8 -p 20 --epochs 1
wait

cd $W
for n in hf_small lightning nanogpt imagenet; do
  [ -d $n ] || continue
  echo "=== $n"; cat $n.out; grep -E "steptrace|Error|error" $n.err | tail -n 6
  # The measured peaks (torch's max_memory_allocated over the window's steps) of each run.
  for m in $n/*/manifest.json; do
    python3 -c "import json,sys; m=json.load(open(sys.argv[1])); r=m['ranks'][0]; v=[x for x in (r.get('reference') or {}).get('window_step_peaks_bytes',[]) if x]; print(sys.argv[1], 'max_memory_allocated', max(v) if v else None, 'step', m.get('step_time_s'), 'exit', m['exit']['code'])" $m
  done
  cp $n.out $n.err $n/ 2>/dev/null
  # The planned runs' traces of the programs whose step times are studied (KEEP_TRACES).
  keep=" ${KEEP_TRACES:-imagenet lightning} "
  ex=(--exclude='budget_*/exec_trace*' --exclude='budget_*/memory_timeline_torch*')
  [[ "$keep" == *" $n "* ]] || ex+=(--exclude='budget_*/trace*.json*')
  tar czf $OUT/$n.tar.gz --exclude='*.png' --exclude='*.svg' "${ex[@]}" $n
done
ls -la $OUT
