#!/usr/bin/env bash
# Which part of capture keeps a Python program from ending when its window is still open at
# exit (issue 17/20): nanoGPT's bench.py (30 steps) with a timing phase long enough that the
# window cannot complete, under capture with each recording switched off in turn. A run still
# alive after HANG_S seconds gets SIGABRT, so that Python's faulthandler prints every
# thread's stack, and (where gdb exists) the native stacks are taken first.
# One line per variant in $OUT/exit_hang.jsonl; stacks in $OUT/<variant>.err.
#
#   bash capture/corpus/exit_hang.sh [VARIANTS...]   # needs target/release/steptrace, .corpus/
set -u
. capture/corpus/programs.sh
corpus_init "$@"
corpus_scratch /tmp/exithang
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1
HANG_S=${HANG_S:-60}
# The window (6 steps) cannot complete after 25 timed steps of a 30-step program.
OPEN=(--timing-steps 25 --timing-max-steps 25)

variant() {
  local name=$1; shift
  want $name || return 0
  local t0=$SECONDS
  (cd $W/nanoGPT && exec $ST capture --force --out $W/$name "$@" -- \
    python3 bench.py --real_data=False --compile=False >$OUT/$name.out 2>$OUT/$name.err) &
  local pid=$! hung=0
  while kill -0 $pid 2>/dev/null; do
    if [ $((SECONDS - t0)) -ge $HANG_S ]; then
      hung=1
      local py
      py=$(pgrep -f "python3 bench.py" | head -1)
      echo "=== hung after $HANG_S s: python pid $py" >>$OUT/$name.err
      if [ -n "$py" ] && command -v gdb >/dev/null; then
        timeout 60 gdb -p $py -batch -ex "thread apply all bt 12" >>$OUT/$name.err 2>&1
      fi
      [ -n "$py" ] && kill -ABRT $py
      sleep 5
      pkill -KILL -f "python3 bench.py"
      break
    fi
    sleep 1
  done
  wait $pid
  local rc=$?
  echo "{\"variant\": \"$name\", \"args\": \"$*\", \"exit\": $rc, \"seconds\": $((SECONDS - t0)), \"hung\": $hung}" | tee -a $OUT/exit_hang.jsonl
}

variant open "${OPEN[@]}"
# The sweep's own case: its 90% plan (8 MLPs recomputed), default timing phase.
variant plan --plan $ROOT/capture/corpus/results/budget_sweep/nanogpt/plan_90pct.json
variant open_no_et "${OPEN[@]}" --no-et
variant open_no_memory "${OPEN[@]}" --no-memory
variant open_no_trace "${OPEN[@]}" --no-trace
variant closed
