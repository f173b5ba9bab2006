# What run.sh and costs.sh share (sourced from the repository root): the paths, the choice of
# programs named on the command line, the programs, and the work directory's set-up.

# corpus_init ARGS...: ROOT, ST (the release binary), W (the work directory), and `want NAME`
# (true when NAME was named, or when nothing was).
corpus_init() {
  ROOT=$(pwd)
  ST=$ROOT/target/release/steptrace
  W=/tmp/corpus
  ONLY=" ${*:-} "
}

# corpus_scratch DIR: W=DIR, emptied, with a copy of nanoGPT in it (scripts that run nanoGPT
# outside the corpus work directory: budget_sweep.sh, exit_hang.sh).
corpus_scratch() {
  W=$1
  rm -rf "$W" && mkdir -p "$W"
  cp -r "$ROOT/.corpus/src/nanoGPT" "$W/"
}
want() { [ "$ONLY" = "  " ] || [[ "$ONLY" == *" $1 "* ]]; }

# The corpus programs, one line each:
#   each NAME KIND(py|cpp|ddp) DIR FLOPS(1|0) UNITS_PER_STEP -- COMMAND...
# FLOPS: whether FlopCounterMode runs as a reference (not under torch.compile);
# UNITS_PER_STEP: progress-line units per optimizer step (mnist's lines count samples).
# `each` is the caller's function.
corpus_programs() {
  local E=$W/examples N=$W/nanoGPT
  each py_mnist py $E/mnist 1 64 -- python3 main.py --epochs 2
  each py_word_lm py $E/word_language_model 1 1 -- python3 main.py --accel --epochs 1
  each py_dcgan py $E/dcgan 1 1 -- python3 main.py --dataset fake --accel --niter 8 --batchSize 50 --outf $W/dcgan_out
  each nanogpt_bench py $N 1 1 -- python3 bench.py --real_data=False --compile=False
  each nanogpt_bench_compile py $N 0 1 -- python3 bench.py --real_data=False --compile=True
  # Small enough to commit as a sample (sample_traces/corpus/nanogpt_compile).
  each nanogpt_compile_small py $N 0 1 -- python3 bench.py --real_data=False --compile=True --batch_size=4 --block_size=256
  each nanogpt_train_fp16_accum py $N 1 1 -- python3 train.py --dataset=openwebtext --compile=False --dtype=float16 \
    --gradient_accumulation_steps=4 --batch_size=8 --block_size=256 --n_layer=6 --n_head=6 --n_embd=384 \
    --max_iters=200 --lr_decay_iters=200 --eval_interval=100000 --eval_iters=2 --log_interval=1 --warmup_iters=10 \
    --out_dir=$W/ngout
  # Two processes under torchrun (the two-GPU machine only). The program resumes from the
  # snapshot.pt it saves at epoch 0, so every run starts without one, through a shell as a
  # user's launch script would.
  each ddp_torchrun ddp $E/distributed/ddp-tutorial-series 0 1 -- \
    sh -c 'rm -f snapshot.pt; exec torchrun --standalone --nproc-per-node 2 multigpu_torchrun.py 200 1000'
  # Framework programs (issue: the frameworks users train with). fw/ holds capture/corpus/programs.
  each fw_lightning py $W/fw 1 1 -- python3 lightning_transformer.py
  each fw_hf_trainer py $W/fw 1 1 -- python3 hf_trainer_gpt2.py
  # The same, small enough to commit (sample_traces/corpus/fw_hf_trainer).
  each fw_hf_trainer_small py $W/fw 1 1 -- python3 hf_trainer_gpt2.py --n-layer 4 --seq-len 256
  # LBFGS with a closure, no framework (CPU only). torch 2.11 loads traindata.pt (a numpy array,
  # as generate_sine_wave.py saves it) only with weights_only off: torch's own switch for that.
  each fw_lbfgs py $E/time_sequence_prediction 1 1 -- env TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 python3 train.py --steps 30
  # libtorch ResNet on CIFAR-10, DataLoader in the main thread; 20 epochs take minutes, so
  # each run is ended with SIGINT after STOP_AFTER_S, as a user stops a long run with Ctrl-C
  # (the window is long written by then).
  STOP_AFTER_S=${DRN_S:-45} each cpp_drn cpp $W/cppdrn/a/b/c/d 1 1 -- $W/build/drn/drn/deep-residual-network
  each cpp_mnist cpp $W/cppdata 1 64 -- $W/build/mnist/mnist
  each cpp_dcgan cpp $W/cppdata 1 1 -- $W/build/dcgan/dcgan --epochs 1
  each cpp_regression cpp $W/cppdata 1 1 -- $W/build/regression/regression
}

# Sets up $W (sources, stand-in data; the C++ builds and the shim cache are kept between runs
# on a warm machine) and, when C++ programs are wanted, builds them and warms the shim cache,
# so that no program's capture time includes that one-time build. Needs $ROOT, $ST, $W.
corpus_setup() {
  mkdir -p $W && find $W -mindepth 1 -maxdepth 1 ! -name build ! -name cache -exec rm -rf {} +
  mkdir -p $W/logs $W/runs $W/an $W/ref
  cp -r $ROOT/.corpus/src $W/src
  cp -r $ROOT/.corpus/src/examples $ROOT/.corpus/src/nanoGPT $W/
  mkdir -p $W/fw && cp $ROOT/capture/corpus/programs/*.py $W/fw/
  python3 $ROOT/capture/corpus/make_data.py $W
  export STEPTRACE_CACHE=$W/cache PYTHONUNBUFFERED=1
  # The first process on a fresh machine reads torch's libraries from disk and starts CUDA
  # cold: done once here, or whichever run comes first (the plain one) pays it (mnist's plain
  # run took 20.4 s cold against 12.5 s warm, and looked slower than its capture).
  local t0=$(date +%s)
  python3 -c 'import torch, torchvision; torch.zeros(1, device="cuda").sum().item()' >/dev/null 2>&1
  echo "== torch and CUDA warmed: $(( $(date +%s) - t0 )) s"
  if [ "${1:-}" = cpp ]; then
    if [ ! -x $W/build/drn/drn/deep-residual-network ] || [ -n "${BUILD_ONLY:-}" ]; then
      local t0=$(date +%s); bash $ROOT/capture/corpus/build_cpp.sh $W; echo "== C++ builds: $(( $(date +%s) - t0 )) s"
    fi
    if [ -x $W/build/regression/regression ]; then
      local t0=$(date +%s)
      (cd $W && $ST capture --out $W/shim_warm --force --no-trace --no-memory --no-et \
        -- $W/build/regression/regression >$W/logs/shim_warm.out 2>&1)
      echo "== shim cache warmed: $(( $(date +%s) - t0 )) s"
    fi
  fi
}
