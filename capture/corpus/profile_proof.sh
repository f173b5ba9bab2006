#!/usr/bin/env bash
# Issue 78's proof on the GPU: one program (programs/seed003_profile.py, a seed 003 loop under
# `@steptrace.profile`) recorded in-process and under `steptrace capture`, alone and under
# torchrun with 2 processes (DDP over gloo on one GPU); each run analysed, and the figures set
# side by side by profile_vs_capture.py with the program's own as the truth.
#
#     ST=target/release/steptrace OUT=/tmp/o bash capture/corpus/profile_proof.sh
#
# Needs the steptrace binary ($ST) and the module (python/steptrace with its built
# _native.abi3.so, or the wheel installed); torch and transformers installed.
set -u
cd "$(dirname "$0")/../.."
ST=${ST:-target/release/steptrace}
O=${OUT:?}/profile_proof
mkdir -p "$O"
export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
prog=$PWD/capture/corpus/programs/seed003_profile.py
run() { # name, command...
  local name=$1; shift
  local t0=$SECONDS
  timeout 240 "$@" >"$O/$name.log" 2>&1
  echo "$name: exit $? in $((SECONDS - t0)) s" | tee -a "$O/runs.txt"
}
run inproc python3 "$prog" --out "$O/inproc"
run launched "$ST" capture -o "$O/launched" -- python3 "$prog" --out "$O/unused"
run inproc_ddp torchrun --standalone --nproc-per-node 2 "$prog" --ddp --out "$O/inproc_ddp"
run launched_ddp "$ST" capture -o "$O/launched_ddp" -- \
  torchrun --standalone --nproc-per-node 2 "$prog" --ddp --out "$O/unused_ddp"
# Under capture the decorator records nothing itself.
for u in unused unused_ddp; do
  [ -e "$O/$u" ] && echo "$u: written under capture (it must not be)" | tee -a "$O/runs.txt"
done
for r in inproc launched inproc_ddp launched_ddp; do
  "$ST" analyze "$O/$r" -o "$O/$r.steptrace" -q >"$O/$r.analyze.log" 2>&1
  echo "analyze $r: exit $?" | tee -a "$O/runs.txt"
done
python3 capture/corpus/profile_vs_capture.py "$O" >"$O/compare.jsonl"
cat "$O/compare.jsonl"
