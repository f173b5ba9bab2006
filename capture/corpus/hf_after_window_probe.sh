#!/usr/bin/env bash
# Whether steps after capture's window run at the program's own speed on the HF Trainer GPT-2
# driver (capture/corpus/programs/hf_trainer_gpt2.py, 60 steps): plain runs and captures
# alternately on one GPU, the program's printed step times compared over the same steps
# (timing phase: steps 2-20; after the window: 32-60), with the manifest's figures.
set -u
ROOT=$PWD; ST=$ROOT/target/release/steptrace
nvidia-smi -L
W=$(mktemp -d); cp $ROOT/capture/corpus/programs/*.py $W; cd $W
for k in 1 2 3; do
  timeout 300 python3 hf_trainer_gpt2.py > plain$k.log 2>&1
  rm -rf run$k; timeout 300 $ST capture --out run$k -- python3 hf_trainer_gpt2.py > cap$k.log 2>&1
done
python3 - <<'PY'
import re, json, statistics as S
def steps(f):
    return dict((int(a), float(b)) for a, b in re.findall(r'iter (\d+): loss 0, time ([\d.]+)ms', open(f).read()))
def med(d, lo, hi):
    return S.median([d[i] for i in d if lo <= i <= hi])
for k in (1, 2, 3):
    p, c = steps('plain%d.log' % k), steps('cap%d.log' % k)
    t = json.load(open('run%d/manifest.json' % k))['ranks'][0]['timing']
    print(json.dumps({"k": k, "plain_2_20": med(p, 2, 20), "plain_32_60": med(p, 32, 60),
        "captured_2_20": med(c, 2, 20), "captured_32_60": med(c, 32, 60),
        "source": t["source"], "reported_ms": t["step_time_s"] * 1e3,
        "phase_ms": t["timing_phase"]["step_time_s"] * 1e3,
        "after_ms": (t.get("after_window") or {}).get("step_time_s", 0) * 1e3,
        "plain_steps": [round(p[i], 1) for i in sorted(p)], "captured_steps": [round(c[i], 1) for i in sorted(c)]}))
PY
