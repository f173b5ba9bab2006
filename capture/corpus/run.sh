#!/usr/bin/env bash
# The corpus run on the GPU machine: public training programs, unchanged, each run plain (its
# own step time), under `steptrace capture` as users run it (whole-run time, step time), and
# captured again with STEPTRACE_REFERENCE=1 (torch's max_memory_allocated per window step and
# FlopCounterMode over one step, for peak and FLOPs), each capture analysed.
# Then signals and crashes at each phase of a capture. Results: $OUT/results.jsonl,
# $OUT/signals.jsonl, the run directories in $OUT/runs_*.tar.gz.
#
#   bash capture/corpus/run.sh [NAMES...]     # needs target/release/steptrace and .corpus/
# (.corpus/ comes from capture/corpus/fetch.sh; build_cpp.sh builds the three C++
# examples with their own CMakeLists, as their READMEs say.)
set -u
. capture/corpus/programs.sh
corpus_init "$@"
if want cpp_mnist || want cpp_dcgan || want cpp_regression || want cpp_drn || want signals_cpp; then
  corpus_setup cpp
else
  corpus_setup
fi
now() { date +%s.%N; }
# bounded SECS LOG -- COMMAND...: runs COMMAND; past SECS, writes what every process of its tree
# is doing (state, kernel wait channel, threads, and gdb backtraces where gdb exists) to LOG,
# then kills the tree. A hang at exit then leaves its evidence instead of eating the run.
bounded() {
  local secs=$1 log=$2; shift 3
  "$@" &
  local pid=$! i
  for ((i = 0; i < secs * 10; i++)); do
    kill -0 $pid 2>/dev/null || { wait $pid; return $?; }
    sleep 0.1
  done
  { echo "== still running after ${secs}s: $*"; dump_tree $pid; } >$log 2>&1
  pkill -KILL -P $pid 2>/dev/null; kill -KILL $pid 2>/dev/null
  wait $pid
  return 124
}
# dump_tree PID: state, kernel wait channel and threads of PID and its descendants, with gdb
# backtraces where gdb exists.
dump_tree() {
  local pid=$1 p t
  for p in $pid $(pgrep -P $pid) $(for c in $(pgrep -P $pid); do pgrep -P $c; done); do
    echo "-- pid $p: $(tr '\0' ' ' </proc/$p/cmdline 2>/dev/null | cut -c1-200)"
    grep -E '^(State|Threads)' /proc/$p/status 2>/dev/null
    for t in /proc/$p/task/*; do
      echo "   tid ${t##*/} $(cat $t/comm 2>/dev/null) $(cat $t/stat 2>/dev/null | awk '{print $3}') wchan=$(cat $t/wchan 2>/dev/null)"
    done
    command -v gdb >/dev/null && timeout 60 gdb -batch -p $p -ex 'thread apply all bt 12' 2>&1 | grep -E '^(Thread|#)' | head -150
  done
}
minus() { python3 -c "print($1 - $2)"; }
# stopper NAME_OF_EXE: with STOP_AFTER_S set, sends SIGINT to the program (by its process name,
# so not to the timer around it) after that many seconds, as Ctrl-C would; prints the pid to
# kill once the run is over (none without STOP_AFTER_S).
stopper() {
  [ -n "${STOP_AFTER_S:-}" ] || return 0
  (sleep $STOP_AFTER_S; pkill -INT -x "$(basename "$1" | cut -c1-15)") >/dev/null 2>&1 &
  echo $!
}

# prog NAME KIND(py|cpp) DIR FLOPS(1|0) -- COMMAND...
prog() {
  local name=$1 kind=$2 dir=$3 flops=$4; shift 5
  want $name || return 0
  cd $dir
  local t0 t1 t2 t3 t4
  # Both runs go through progress_timer.py: the program's own progress lines, stamped as they
  # come (its own step time with no hook at all, in the plain run and in the capture itself).
  # The plain run is the program alone, as its users run it: the whole-run slowdown's base.
  local timer="python3 $ROOT/capture/corpus/progress_timer.py"
  t0=$(now)
  local stop=$(stopper "$1")
  $timer $W/ref/$name.progress_plain.json --units-per-step ${UPS:-1} -- "$@" >$W/logs/$name.plain.out 2>&1
  local plain_rc=$?
  [ -n "$stop" ] && kill $stop 2>/dev/null
  t1=$(now)
  stop=$(stopper "$1")
  # The capture as users run it: its whole-run time, steps and step time.
  bounded ${CAPTURE_LIMIT_S:-400} $W/logs/$name.hang \
    -- $timer $W/ref/$name.progress_capture.json --units-per-step ${UPS:-1} -- \
    $ST capture --out $W/runs/$name ${CAPTURE_ARGS:-} -- "$@" >$W/logs/$name.capture.out 2>$W/logs/$name.capture.err
  local cap_rc=$?
  [ -n "$stop" ] && kill $stop 2>/dev/null
  t2=$(now)
  stop=$(stopper "$1")
  # A second capture with the validation references (STEPTRACE_REFERENCE=1: torch's
  # max_memory_allocated per window step, FlopCounterMode over a step, torch's own memory
  # categories, which cost seconds): peak and FLOPs are checked on it.
  STEPTRACE_REFERENCE=1 STEPTRACE_REFERENCE_FLOPS=$flops bounded ${CAPTURE_LIMIT_S:-400} $W/logs/$name.ref.hang \
    -- $ST capture --out $W/runs/$name.ref ${CAPTURE_ARGS:-} -- "$@" >$W/logs/$name.ref.capture.out 2>&1
  local ref_rc=$?
  [ -n "$stop" ] && kill $stop 2>/dev/null
  t3=$(now)
  $ST analyze $W/runs/$name --out $W/an/$name >$W/logs/$name.analyze.out 2>$W/logs/$name.analyze.err
  local an_rc=$?
  t4=$(now)
  $ST analyze $W/runs/$name.ref --out $W/an/$name.ref >$W/logs/$name.ref.analyze.out 2>&1
  local ref_an_rc=$?
  cd $ROOT
  python3 capture/corpus/collect.py "$name" "$kind" $W "$plain_rc" "$cap_rc" "$an_rc" \
    "$(minus $t1 $t0)" "$(minus $t2 $t1)" "$(minus $t4 $t3)" "$ref_rc" "$ref_an_rc" "$(minus $t3 $t2)" >>$OUT/results.jsonl
  tail -n 1 $OUT/results.jsonl
}

# NVLink multicast stays off on the multi-GPU machines (their rule; programs inherit it).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# cpp/regression is a 0.7 s program: a capture still running after a minute has hung.
# The two-process program needs the two-GPU machine: run only when named.
each() { [ $2 = ddp ] && [[ "$ONLY" != *" $1 "* ]] && return 0; UPS=$5 CAPTURE_LIMIT_S=$([ $1 = cpp_regression ] && echo 60 || echo 400) prog "$1" "$2" "$3" "$4" "${@:6}"; }
corpus_programs

# Signals and crashes: the signal is sent when the shim's status says the phase is reached.
sig() { # NAME PHASE SIGNAL TARGET(steptrace|child) -- COMMAND...
  local name=$1 phase=$2 signal=$3 target=$4; shift 5
  local out=$W/sig/$name
  mkdir -p $W/sig
  STEPTRACE_STACKS_ON_USR2=1 $ST capture --out $out --schedule skip_first=1,wait=1,warmup=1,active=${ACTIVE:-200} -- "$@" \
    >$W/logs/sig_$name.out 2>$W/logs/sig_$name.err &
  local pid=$! seen=""
  for i in $(seq 1 600); do
    sleep 0.05
    seen=$(python3 -c "import json,glob;print(json.load(open(glob.glob('$out/shim*.json')[0])).get('phase',''))" 2>/dev/null)
    [ "$seen" = "$phase" ] && break
    [ "$phase" = after ] && [ "$seen" = finished ] && break
  done
  local victim=$pid
  [ $target = child ] && victim=$(pgrep -P $pid | head -n 1)
  kill -$signal $victim 2>/dev/null
  # Watchdog: a run that has not ended SIG_LIMIT_S seconds after its signal has its process
  # tree described in sig_NAME.hang and every Python thread's stack printed into its .err log
  # (the shim's SIGUSR2 dump), then its tree is killed (rc 124).
  local rc i
  for ((i = 0; i < ${SIG_LIMIT_S:-90} * 10; i++)); do
    kill -0 $pid 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 $pid 2>/dev/null; then
    # Its own file: the child's stderr (the .err log) is written at the child's offset.
    { echo "== $name: still running ${SIG_LIMIT_S:-90}s after SIG$signal"; dump_tree $pid; } >$W/logs/sig_$name.hang
    for p in $(pgrep -P $pid) $(for c in $(pgrep -P $pid); do pgrep -P $c; done); do kill -USR2 $p 2>/dev/null; done
    sleep 3
    for p in $(for c in $(pgrep -P $pid); do pgrep -P $c; done) $(pgrep -P $pid); do kill -KILL $p 2>/dev/null; done
    kill -KILL $pid 2>/dev/null; wait $pid; rc=124
  else
    wait $pid; rc=$?
  fi
  $ST analyze $out --out $out.an >$W/logs/sig_$name.analyze.out 2>&1; local an=$?
  python3 - "$name" "$phase" "$seen" "$signal" "$rc" "$an" "$out" <<'PY' >>$OUT/signals.jsonl
import json, sys, os
name, phase, seen, signal, rc, an, out = sys.argv[1:]
m = {}
try:
    m = json.load(open(os.path.join(out, "manifest.json")))
except Exception as e:
    m = {"error": str(e)}
print(json.dumps({"name": name, "phase_wanted": phase, "phase_seen": seen, "signal": signal,
  "steptrace_exit": int(rc), "analyze_exit": int(an), "completed": m.get("completed"),
  "incomplete_reasons": m.get("incomplete_reasons"), "files": m.get("files"),
  "errors": [e for r in m.get("ranks", []) for e in r.get("errors", [])]}))
PY
  tail -n 1 $OUT/signals.jsonl
}
if want signals_py; then
  cd $W/examples/mnist
  for s in ${SIG_PY:-INT TERM}; do
    for ph in ${SIG_PHASES:-before_window window after}; do sig py_${s}_$ph $ph $s steptrace -- python3 main.py --epochs 3; done
  done
  if [ -z "${SIG_PY:-}" ]; then
    sig py_SEGV_after after SEGV child -- python3 main.py --epochs 3
    sig py_SEGV_window window SEGV child -- python3 main.py --epochs 3
  fi
  cd $ROOT
fi
if want signals_cpp; then
  cd $W/cppdata
  for s in INT TERM; do
    for ph in before_window window after; do ACTIVE=400 sig cpp_${s}_$ph $ph $s steptrace -- $W/build/mnist/mnist; done
  done
  ACTIVE=400 sig cpp_SEGV_window window SEGV child -- $W/build/mnist/mnist
  ACTIVE=400 sig cpp_SEGV_after after SEGV child -- $W/build/mnist/mnist
  ACTIVE=400 sig cpp_ABRT_window window ABRT child -- $W/build/mnist/mnist
  cd $ROOT
fi

cd $W
tar czf $OUT/runs_py.tar.gz runs/py_* runs/nanogpt* runs/fw_* an/py_* an/nanogpt* an/fw_* ref 2>/dev/null
tar czf $OUT/runs_cpp.tar.gz runs/cpp_* an/cpp_* 2>/dev/null
tar czf $OUT/runs_ddp.tar.gz runs/ddp_* an/ddp_* ref/ddp_* 2>/dev/null
tar czf $OUT/logs.tar.gz logs sig 2>/dev/null
cp logs/*.hang $OUT/ 2>/dev/null
ls -la $OUT
