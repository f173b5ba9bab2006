# Sourced by plan_step_time.sh, plan_step_repeat.sh and plan_ab_lightning.sh (issue 75): the
# three programs they run, each with its own checkpointing switch, and the stand-in text
# Lightning's demo reads.

# The command of program NAME (hf, pl, plb, timm), run from the folder holding programs/*.py.
prog() {
  case $1 in
    hf) echo "python3 hf_trainer_gpt2.py --max-steps 70" ;;
    pl) echo "python3 lightning_transformer.py --max-steps 200" ;;
    # The same program at a batch a user would train with: the GPU, not the host, bounds the step.
    plb) echo "python3 lightning_transformer.py --max-steps 200 --batch-size 512" ;;
    timm) echo "python3 timm_vit_train.py --steps 90" ;;
  esac
}

# The program's own switch for the same checkpointing as the every-block plan.
switch() {
  case $1 in
    hf) echo "--gradient-checkpointing" ;;
    pl|plb) echo "--checkpoint-decoder-layers" ;;
    timm) echo "--grad-checkpointing" ;;
  esac
}

# Lightning's demo WikiText2 reads ./data/wikitext-2.txt (no network): random words from a
# vocabulary of wikitext-2's size, the same on every run, into FILE.
write_wikitext() {
  python3 - "$1" <<'PY'
import random, sys
r = random.Random(0)
words = ["w%d" % i for i in range(33278)]
with open(sys.argv[1], "w") as f:
    for _ in range(36000):
        f.write(" ".join(r.choice(words) for _ in range(60)) + "\n")
PY
}
