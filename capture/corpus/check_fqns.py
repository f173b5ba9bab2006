"""Checks a capture's module names against the model itself: every (instance, qualified name)
pair the shim recorded in manifest.json names, under the model built as the program builds it,
a module of the instance's class; prints one JSON line. For the HF Trainer driver
(capture/corpus/programs/hf_trainer_gpt2.py), GPT-2 from its config:

    python3 check_fqns.py RUN_DIR N_LAYER
"""

import json
import sys

from transformers import GPT2Config, GPT2LMHeadModel

run, n_layer = sys.argv[1], int(sys.argv[2])
m = json.load(open(run + "/manifest.json"))
fqns = m["ranks"][0].get("module_fqns", {})
model = GPT2LMHeadModel(GPT2Config(n_positions=1024, n_embd=768, n_layer=n_layer, n_head=12))
bad = []
for inst, fqn in sorted(fqns.items()):
    cls = inst.rsplit("_", 1)[0]
    try:
        got = type(model.get_submodule(fqn)).__name__
    except AttributeError:
        got = None
    if got != cls:
        bad.append([inst, fqn, got])
print(json.dumps({"run": run, "named": len(fqns), "modules": len(list(model.named_modules())), "mismatched": bad}))
