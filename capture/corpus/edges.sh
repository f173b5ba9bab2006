#!/usr/bin/env bash
# Issue 74's programs on the GPU machine: public programs and framework programs whose steps
# leave the usual shape, each captured once as users run it (with STEPTRACE_REFERENCE=1:
# torch's max_memory_allocated per window step), analysed, and set beside a ground truth
# measured in its own run with nothing of steptrace loaded.
#
#   cpp_dcgan   pytorch/examples cpp/dcgan: three backward passes and two optimizers a step
#   cpp_lm      prabhuomkar/pytorch-cpp language_model: an LSTM whose loop reads the loss
#               (`loss.item()`) before its backward pass
#   hf_bert     programs/hf_bert_mlm.py: BertForMaskedLM, which makes its loss module in every
#               forward call, under the HF Trainer with accumulation 4
#   pl_resnet50 programs/lightning_resnet50.py: Lightning, 16-mixed, accumulation 2, the batch
#               copied from pageable memory
#   vit_graphs  programs/timm_vit_compile.py: timm ViT-B/16 under torch.compile
#               mode="reduce-overhead" (CUDA graphs); its --reference run (eager
#               FlopCounterMode, memory_reserved, the pools of torch.cuda.memory_snapshot())
#
#   bash capture/corpus/edges.sh [NAMES...]
# Needs the steptrace binary at $ST (default target/release/steptrace) and the C++ sources
# fetch.sh copies, at $CORPUS_SRC (default .corpus/src). Writes $OUT/edges_<name>.tar.gz (run
# directory, analysis, logs) and $OUT/vit_reference.json.
set -u
ROOT=$(pwd)
ST=${ST:-$ROOT/target/release/steptrace}
W=/tmp/edges
ONLY=" ${*:-} "
want() { [ "$ONLY" = "  " ] || [[ "$ONLY" == *" $1 "* ]]; }
rm -rf $W && mkdir -p $W/logs $W/runs $W/an $W/fw $W/cppdata $W/cpp/a/b/c/d $W/cpp/data/penntreebank
cp $ROOT/capture/corpus/programs/*.py $W/fw/
export STEPTRACE_CACHE=$W/cache PYTHONUNBUFFERED=1 STEPTRACE_TIMING_MAX_S=${STEPTRACE_TIMING_MAX_S:-4}
# Stand-in data: MNIST for cpp/dcgan (its ./mnist), random words for the language model.
python3 - "$W" <<'PY'
import os, sys
import numpy as np
sys.path.insert(0, "capture/corpus")
import make_data
w = sys.argv[1]
rng = np.random.default_rng(0)
make_data.mnist(os.path.join(w, "cppdata", "data"), 60000, 10000, rng)
os.symlink("data", os.path.join(w, "cppdata", "mnist"))
words = np.array(["w%d" % i for i in range(10000)])
with open(os.path.join(w, "cpp", "data", "penntreebank", "train.txt"), "w") as f:
    for _ in range(8000):
        f.write(" ".join(words[rng.integers(0, 10000, size=25)]) + "\n")
PY
if want cpp_dcgan || want cpp_lm; then
  t0=$(date +%s)
  BUILD_ONLY="dcgan lm" bash $ROOT/capture/corpus/build_cpp.sh $W || exit 1
  echo "== C++ builds: $(( $(date +%s) - t0 )) s"
fi
# edge NAME DIR FLOPS LIMIT_S -- COMMAND...
edge() {
  local name=$1 dir=$2 flops=$3 limit=$4; shift 5
  want $name || return 0
  local t0=$(date +%s)
  (cd $dir && STEPTRACE_REFERENCE=1 STEPTRACE_REFERENCE_FLOPS=$flops timeout $limit \
    $ST capture --out $W/runs/$name -- "$@" >$W/logs/$name.capture.out 2>$W/logs/$name.capture.err)
  echo "== $name: capture rc $? in $(( $(date +%s) - t0 )) s"
  $ST analyze $W/runs/$name --out $W/an/$name --no-plots --no-annotated-trace >$W/logs/$name.analyze.out 2>&1
  echo "== $name: analyze rc $?"; tail -n 12 $W/logs/$name.analyze.out
  tar czf $OUT/edges_$name.tar.gz -C $W runs/$name logs/$name.capture.out logs/$name.capture.err \
    logs/$name.analyze.out 2>/dev/null
}
edge cpp_dcgan $W/cppdata 1 120 -- $W/build/dcgan/dcgan --epochs 1
edge cpp_lm $W/cpp/a/b/c/d 1 120 -- $W/build/lm/lm/language-model
edge hf_bert $W/fw 1 150 -- python3 hf_bert_mlm.py
edge pl_resnet50 $W/fw 1 150 -- python3 lightning_resnet50.py
edge vit_graphs $W/fw 0 240 -- python3 timm_vit_compile.py --steps 30
if want vit_graphs; then
  t0=$(date +%s)
  (cd $W/fw && timeout 200 python3 timm_vit_compile.py --steps 12 --reference $OUT/vit_reference.json \
    >$W/logs/vit_reference.out 2>&1)
  echo "== vit reference rc $? in $(( $(date +%s) - t0 )) s"; tail -n 3 $W/logs/vit_reference.out
fi
