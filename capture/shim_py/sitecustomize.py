"""steptrace capture shim, loaded into every Python process started under `steptrace capture`.

The launcher writes this file into a temporary directory and puts that directory first on
PYTHONPATH, so Python imports it at start-up as `sitecustomize`. It does nothing until the
program imports torch; then it records, without changes to the program:

- CUDA caching-allocator history from start-up to the end of the active window (snapshot
  pickles at the window's end and at exit),
- a Kineto trace over the schedule in STEPTRACE_SCHEDULE, with steps found from optimizer
  steps (global hooks; with several optimizers, the last of each cycle), GradScaler updates
  that skipped the step, the first top-level module forward after a backward pass (no
  optimizer), or explicit `steptrace_capture.step()` calls,
- the Execution Trace over the active window only (it costs several times the step),
- a timing phase after the first skipped steps and before anything heavy has run:
  STEPTRACE_TIMING_STEPS steps with no instrumentation but the boundary hooks (memory history
  paused), timed by the host clock and CUDA events (the program's own step time),
- NVTX ranges per iteration and phase (and per op through the C++ shim, when an NVTX tool is
  attached).

After the window every hook is removed. (The profiler's Python tracer leaves CPython 3.12
slower after it stops, which is why the timing phase comes first.) It never lets its own failure break the program: errors are recorded
in the status file the launcher turns into manifest.json. An existing sitecustomize later on
sys.path is run too.
"""

import os
import sys
import time

_ENV_OUT = "STEPTRACE_OUT"


def _chain_sitecustomize():
    """Runs the next `sitecustomize` on sys.path (the one this file shadows), if any."""
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    path = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.origin is None or spec.loader is None:
        return
    if os.path.dirname(os.path.abspath(spec.origin)) == here:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


class _State:
    def __init__(self, env=None):
        # The launcher's settings come through the environment; steptrace.profile (in-process)
        # hands the same names in a mapping of its own.
        env = os.environ if env is None else env
        self.env = env
        self.out = env.get(_ENV_OUT, "")
        self.record = set(filter(None, env.get("STEPTRACE_RECORD", "trace,memory,et,nvtx").split(",")))
        self.schedule = _parse_schedule(env.get("STEPTRACE_SCHEDULE", ""))
        # What the profiler records beyond shapes and memory (steptrace.profile's with_stack,
        # with_flops, with_modules; the launcher leaves all three on).
        self.profiler_with = set(env.get("STEPTRACE_PROFILER_WITH", "stack,flops,modules").split(","))
        self.max_entries = int(env.get("STEPTRACE_MAX_ENTRIES", "1000000"))
        self.timing_steps = int(env.get("STEPTRACE_TIMING_STEPS", "10") or 0)
        # Steps run (and timed, but left out of the median) before the timed ones: cuDNN
        # autotuning, allocator growth and recompilation settle there.
        self.timing_settle = int(env.get("STEPTRACE_TIMING_SETTLE", "5") or 0)
        # The phase goes on past timing_steps until its median is settled (_timing_stop),
        # up to these caps.
        self.timing_max_steps = int(env.get("STEPTRACE_TIMING_MAX_STEPS", "20") or 0)
        self.timing_max_s = float(env.get("STEPTRACE_TIMING_MAX_S", "10") or 0)
        self.reference = env.get("STEPTRACE_REFERENCE") == "1"
        # A plan is on in every step but, with STEPTRACE_PLAN_AB, in every other
        # step of the timing phase: what the plan adds, measured in this one process.
        self.plan_on = True
        self.plan_ab = False
        self.reference_flops = self.reference and env.get("STEPTRACE_REFERENCE_FLOPS", "1") == "1"
        self.rank = int(env.get("RANK", "0") or 0)
        self.world = int(env.get("WORLD_SIZE", "1") or 1)
        # capture --stop-after-window N: the program is ended N steps after the window's files
        # are written, for programs that would run on for hours (an epoch of ImageNet).
        stop = env.get("STEPTRACE_STOP_AFTER_WINDOW", "")
        self.stop_after_window = int(stop) if stop.strip() else None
        self.after_steps = 0
        self.suffix = "_rank%d" % self.rank if ("RANK" in env or self.world > 1) else ""
        s = self.schedule
        # Boundary counts (steps) at which the window opens and closes. repeat=0 records
        # cycles until the program ends, as torch.profiler does.
        self.active_start = s["skip_first"] + s["wait"] + s["warmup"]
        cycle = s["wait"] + s["warmup"] + s["active"]
        self.window_end = s["skip_first"] + cycle * s["repeat"] if s["repeat"] > 0 else None
        self.status = {
            # The shim.json schema (steptrace_formats::shim::FORMAT_VERSION).
            "format_version": 1,
            "rank": self.rank,
            "world_size": self.world,
            "pid": os.getpid(),
            "argv": list(sys.argv),
            "files": {},
            "errors": [],
            "steps": 0,
            "boundary": None,
            "window_complete": False,
            "exited_cleanly": False,
            "phase": "before_window",
            "timing_ns": [],
            "notes": [],
            "timing_settle": 0,
            "timing_cuda_ms": [],
            # What capture's own work at the window's edges cost the program (ms, by piece):
            # the manifest shows where a captured run's extra time went.
            "costs_ms": {},
        }
        self.torch = None
        self.prof = None
        self.et = None
        self.explicit = False
        self.optimizer_seen = False
        self.backward_since_step = False
        self.forward_depth = 0
        # Module names: profiler-style instance names and the qualified names they stand for.
        self.module_seen = {}
        self.module_counters = {}
        self.fqn_of = {}
        self.module_stack = []
        self.nvtx_iteration_open = False
        self.done = False
        self.run_peak = 0  # max_memory_allocated before each reset the reference makes
        # Set by the SIGTERM handler: the process then ends as SIGTERM would once written.
        self.sigterm = False
        # Optimizers stepped since the cycle began, and the one that ends a step once the
        # cycle is known (the last before the first repeat).
        self.cycle = []
        self.anchor = None
        self.cuda_events = []
        self.flop_mode = None
        self.flop_backward = 0
        self.flop_backward_calls = 0
        self.opt_t0 = None
        self.flops_armed = False
        self.pstep = 0  # profiler steps: boundaries outside the timing phase
        self.timing_started = False
        # After the window the step hooks stay, only to time the rest of the run at the
        # program's own speed: step boundaries (perf_counter_ns) from then on, and the end of
        # every backward pass over the whole run (the no-optimizer rule's boundaries are found
        # by module hooks, which go with the window; the launcher counts backward passes per
        # step in the timing phase instead). Both capped (_MAX_READINGS).
        self.after_ns = []
        self.after_start_ns = None
        self.backward_ns = []
        self.module_hooks = []
        # Hooks timing the models' outermost forward calls in the timing phase (_time_forward);
        # gone when the window opens, so the steps after it run without them.
        self.forward_timers = []
        # What takes the run-long hooks back out (steptrace.profile's end, in-process).
        self.undo = []
        self.in_process = False
        # Per-op and per-module NVTX ranges only matter when a tool records them.
        self.nvtx_tool = bool(env.get("NVTX_INJECTION64_PATH"))

    def path(self, name, ext):
        return os.path.join(self.out, "%s%s%s" % (name, self.suffix, ext))

    def error(self, where, exc):
        self.status["errors"].append("%s: %s: %s" % (where, type(exc).__name__, exc))


class _Cost:
    """Times one piece of capture's own work into status["costs_ms"][name] (summed)."""

    def __init__(self, name):
        self.name = name

    def __enter__(self):
        self.t0 = time.perf_counter_ns()

    def __exit__(self, *exc):
        costs = _S.status["costs_ms"]
        costs[self.name] = round(costs.get(self.name, 0.0) + (time.perf_counter_ns() - self.t0) * 1e-6, 3)
        return False


# Clock readings kept for the after-window timing: hours of typical steps, a few MB of status.
_MAX_READINGS = 200000


def _parse_schedule(text):
    sched = {"skip_first": 1, "wait": 1, "warmup": 1, "active": 3, "repeat": 1}
    for part in filter(None, text.split(",")):
        k, _, v = part.partition("=")
        if k.strip() in sched:
            sched[k.strip()] = int(v)
    return sched


_S = None


def _write_status():
    import json

    try:
        tmp = _S.path("shim", ".json.tmp")
        with open(tmp, "w") as f:
            json.dump(_S.status, f, indent=1, sort_keys=True)
        os.replace(tmp, _S.path("shim", ".json"))
    except Exception:  # the launcher reports a missing status file itself
        pass


def _nvtx(push=None, pop=False):
    if "nvtx" not in _S.record or _S.torch is None:
        return
    try:
        nv = _S.torch.cuda.nvtx
        if pop:
            nv.range_pop()
        if push is not None:
            nv.range_push(push)
    except Exception:
        pass


class _NoLazyInductor:
    """torch.profiler asks `hasattr(torch, "_inductor")` when it prepares a trace (to learn
    whether inductor's CUDA graphs are on), and torch's module `__getattr__` answers by
    importing torch._inductor, and torch._dynamo with it: 6.2 s of word_language_model's
    captured run on the H100 machine, more than all the rest of capture's work there. A
    program that has not imported torch._inductor runs nothing compiled by it, so the answer
    the profiler needs is no: for the length of the call, that one lazy attribute is refused
    unless it is already imported. (`import torch._inductor` elsewhere is not affected.)"""

    def __init__(self, torch):
        self.torch = torch
        self.orig = None

    def __enter__(self):
        orig = self.torch.__dict__.get("__getattr__")
        if orig is None or "torch._inductor" in sys.modules:
            return self

        def guarded(name):
            if name == "_inductor" and "torch._inductor" not in sys.modules:
                raise AttributeError(name)
            return orig(name)

        self.orig = orig
        self.torch.__getattr__ = guarded
        return self

    def __exit__(self, *exc):
        if self.orig is not None:
            self.torch.__getattr__ = self.orig
        return False


def _profiler_edge(n):
    """The name of the profiler's work at the end of schedule step `n`."""
    if n == _S.active_start - _S.schedule["warmup"]:
        return "profiler_warmup_start"
    if n == _S.active_start:
        return "profiler_active_start"
    if _S.window_end is not None and n == _S.window_end:
        return "profiler_stop"
    return "profiler_step"


def _cuda_ok():
    return _S.status.get("cuda_available") is True


def _boundary(kind):
    """Ends the current step: the timing phase takes its clock reading, or the profiler's
    schedule advances and the window opens or closes."""
    if _S.done or _S.torch is None:
        return
    st = _S.status
    if st["phase"] == "finished":
        # One reading a step: the GradScaler's update and the optimizer hook both end a step,
        # and only the first to come after a backward pass counts.
        _S.backward_since_step = False
        if _S.after_start_ns is not None and len(_S.after_ns) < _MAX_READINGS:
            _S.after_ns.append(time.perf_counter_ns())
        _S.after_steps += 1
        _stop_if_asked()
        return
    if st["boundary"] is None:
        st["boundary"] = kind
    _S.backward_since_step = False
    st["steps"] += 1
    ph = st["phase"]
    if ph == "timing":
        _timing_mark()
    elif ph in ("before_window", "window"):
        _S.pstep += 1
        n = _S.pstep
        if _S.reference and _cuda_ok():
            _reference_peak(n)
        if _S.prof is not None:
            try:
                # Named by the schedule's edge the step crosses: Kineto's start at the warm-up,
                # its stop at the window's end (which includes on_trace_ready's trace_export,
                # snapshot and references, also counted on their own).
                with _Cost(_profiler_edge(n)), _NoLazyInductor(_S.torch):
                    _S.prof.step()
            except Exception as exc:
                _S.error("profiler.step", exc)
        if not _S.timing_started and n == max(1, _S.schedule["skip_first"]) and n < _S.active_start:
            _start_timing()
        elif n == _S.active_start:
            st["phase"] = "window"
            _drop_forward_timers()
            _cuda_profiler_range(True)
            _untear_if_cpu_only()
            _start_et()
            _write_status()
        if _S.window_end is not None and n >= _S.window_end:
            _end_window()
    elif ph == "reference":
        _reference_flops_step()
    if st["phase"] != "finished":
        _nvtx(push="steptrace.iteration %d" % st["steps"], pop=_S.nvtx_iteration_open)
        _S.nvtx_iteration_open = True
    elif _S.nvtx_iteration_open:
        _nvtx(pop=True)
        _S.nvtx_iteration_open = False
    if st["phase"] == "finished":
        _stop_if_asked()  # --stop-after-window 0: at the step that closed the window


def _stop_if_asked():
    """capture --stop-after-window: ends the program with status 0 once that many steps ran
    after the window. SystemExit unwinds the program's own loop (its `finally` blocks and exit
    handlers run, ours writing the status), as when it returns; on every rank at the same
    step, so that no rank waits in a collective for one that left."""
    n = _S.stop_after_window
    if n is None or _S.after_steps < n or _S.status.get("stopped_after_window") is not None:
        return
    _S.status["stopped_after_window"] = _S.after_steps
    _S.status["notes"].append(
        "ended by capture %d step(s) after the window (--stop-after-window), at step %d"
        % (_S.after_steps, _S.status["steps"] + _S.after_steps)
    )
    raise SystemExit(0)


def _untear_if_cpu_only():
    """A program that has made no GPU allocation by its window is CPU-only: the TEARDOWN_CUPTI
    that capture set (for the cost the profiler leaves behind on the GPU path) is taken back,
    as Kineto's CUPTI teardown hung a CPU-only libtorch program at exit."""
    if os.environ.get("STEPTRACE_SET_TEARDOWN_CUPTI") != "1":
        return
    try:
        torch = _S.torch
        # Asking an uninitialised CUDA for its statistics would initialise it.
        used = (
            _cuda_ok()
            and torch.cuda.is_initialized()
            and torch.cuda.memory_stats().get("allocation.all.allocated", 0) > 0
        )
    except Exception:
        used = True
    _S.status["gpu_used"] = bool(used)
    if not used:
        os.environ.pop("TEARDOWN_CUPTI", None)


def _start_timing():
    """The timing phase, right after the skipped first steps and before anything heavy has
    run: the profiler's Python tracer leaves the interpreter slower after it stops (CPython
    3.12), so steps timed after the window would not be the program's own. Memory history
    pauses too."""
    st = _S.status
    _S.timing_started = True
    if _S.timing_steps <= 0:
        return
    st["phase"] = "timing"
    st["timing_settle"] = _S.timing_settle
    if st.get("memory_history"):
        try:
            _S.torch.cuda.memory._record_memory_history(enabled=None)
            st["memory_history_paused"] = True
        except Exception as exc:
            _S.error("pause memory history", exc)
    _timing_mark()


def _cuda_profiler_range(on):
    """With STEPTRACE_CUDA_PROFILER_RANGE=1 (steptrace.profile's nsight_enabled), the active
    window is also the CUDA profiler's range (cudaProfilerStart/Stop), which
    `nsys profile --capture-range=cudaProfilerApi` records alone."""
    if _S.env.get("STEPTRACE_CUDA_PROFILER_RANGE") != "1" or not _cuda_ok():
        return
    if on == _S.status.get("cuda_profiler_range", False):
        return
    try:
        if on:
            _S.torch.cuda.profiler.start()
        else:
            _S.torch.cuda.profiler.stop()
        _S.status["cuda_profiler_range"] = on
    except Exception as exc:
        _S.error("CUDA profiler range", exc)


def _start_et():
    if "et" not in _S.record or _S.torch is None:
        return
    try:
        from torch.profiler import ExecutionTraceObserver

        with _Cost("et_start"):
            _S.et = ExecutionTraceObserver()
            _S.et.register_callback(_S.path("exec_trace", ".json"))
            _S.et.start()
    except Exception as exc:
        _S.error("execution trace", exc)
        _S.et = None


def _stop_et():
    """Stops the Execution Trace and closes its file, exactly once."""
    et, _S.et = _S.et, None
    if et is None:
        return
    try:
        with _Cost("et_close"):
            et.stop()
            et.unregister_callback()
        _S.status["files"]["exec_trace"] = os.path.basename(_S.path("exec_trace", ".json"))
    except Exception as exc:
        _S.error("execution trace", exc)


def _end_window():
    """The active window is over: the trace was written by on_trace_ready; the Execution
    Trace and memory history stop here, so later steps run without them."""
    st = _S.status
    st["window_end_ns"] = time.perf_counter_ns()
    _cuda_profiler_range(False)
    _stop_et()
    # The profiler's results are large and full of Python objects: kept alive, every later
    # full garbage collection would walk them for the rest of the run.
    _S.prof = None
    try:
        import gc

        with _Cost("gc"):
            gc.collect()
    except Exception:
        pass
    st["window_complete"] = True
    torch = _S.torch
    if st.get("memory_history"):
        try:
            torch.cuda.memory._record_memory_history(enabled=None)
            st["memory_history"] = False
            st["memory_history_stopped_at_step"] = st["steps"]
        except Exception as exc:
            _S.error("stop memory history", exc)
    if _S.reference_flops and _cuda_ok():
        st["phase"] = "reference"
        _S.flops_armed = True
        _reference_flops_step()
    else:
        _finish_hooks()
    _write_status()


def _timing_mark():
    """A clock reading at a boundary of the timing phase (after our own work at the boundary,
    so the trace export and snapshot dump before it are not counted)."""
    st = _S.status
    if _cuda_ok():
        try:
            ev = _S.torch.cuda.Event(enable_timing=True)
            ev.record()
            _S.cuda_events.append(ev)
        except Exception as exc:
            _S.error("cuda event", exc)
    if not st["timing_ns"]:
        st["timing_first_step"] = st["steps"] - st.get("boundaries_before_optimizer", 0)
    st["timing_ns"].append(time.perf_counter_ns())
    if _S.plan_ab:
        # The step that starts here runs with the plan if the one before ran without it.
        # In pairs, on, on, off, off, ...: the first step of a pair starts with what the step
        # before left queued (a plan that keeps the GPU busy lets the host run ahead of it, and
        # the next step gains), so only the second of each pair is timed (_paired).
        ways = st.setdefault("timing_plan_on", [])
        _ab_peak(ways)
        _S.plan_on = (len(ways) // 2) % 2 == 0
        ways.append(_S.plan_on)
        stop = _timing_stop_ab(st["timing_ns"], st["timing_plan_on"], _S.timing_settle, _S.timing_steps,
                               _S.timing_max_steps, _S.timing_max_s)
    else:
        stop = _timing_stop(st["timing_ns"], _S.timing_settle, _S.timing_steps, _S.timing_max_steps,
                            _S.timing_max_s, _S.world > 1)
    if stop is not None:
        st["timing_stop"], st["timing_settle"] = stop
        _after_timing()


def _ab_peak(ways):
    """With steps timed both ways, the whole run's peak is the plan's: a step without the
    plan needs the memory the plan saves, so its peak is left out. At each boundary the step
    that just ended is folded into the run's peak if it ran with the plan (the steps before
    the timing phase did), and the allocator's peak is reset for the next one."""
    torch = _S.torch
    try:
        if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
            return
        if not ways or ways[-1]:
            _S.run_peak = max(_S.run_peak, int(torch.cuda.max_memory_allocated()))
        else:
            _S.status["run_peak_left_out_steps"] = _S.status.get("run_peak_left_out_steps", 0) + 1
        torch.cuda.reset_peak_memory_stats()
    except Exception as exc:
        _S.error("plan a/b peak", exc)


def _median(v):
    s = sorted(v)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2.0


def _timing_stop(ns, settle, steps, max_steps, max_s, lockstep=False):
    """Whether the timing phase ends at this reading: (why, intervals left out) or None.

    At least `steps` intervals are timed after the `settle` first ones. The estimate is the
    median of the later half of them (early steps of input-bound programs drift); it ends
    when that median is settled: the earlier half's median within 2.5% of it, and its 95%
    confidence interval (the box-plot notch, 1.58 IQR / sqrt(n)) within +-2.5%; or at
    `max_steps` intervals, or `max_s` seconds. The same rule is in the C++ shim.

    `lockstep` (a distributed run): every rank must open its window at the same step, or
    their windows cover different steps and no collective can be matched across them; the
    settle rule and the time cap would end each rank's phase at its own step, so the phase
    is a fixed `max_steps` intervals (`steps` when there is no cap) on every rank."""
    timed = [(b - a) * 1e-9 for a, b in zip(ns[settle:], ns[settle + 1:])]
    n = len(timed)
    if n < max(1, steps):
        return None
    later = timed[n - n // 2:] if n >= 2 else timed
    left_out = settle + n - len(later)
    if lockstep:
        return ("lockstep", left_out) if n >= (max_steps if max_steps > 0 else max(1, steps)) else None
    if n >= 2 and _settled(timed[: n - len(later)], later):
        return ("settled", left_out)
    if max_steps > 0 and n >= max_steps:
        return ("step_cap", left_out)
    if max_s > 0 and (ns[-1] - ns[0]) * 1e-9 >= max_s:
        return ("time_cap", left_out)
    if n < 2:
        return ("one_step", left_out)
    return None


def _settled(earlier, later):
    """Whether the median of `later` is settled: `earlier`'s median within 2.5% of it, and its
    95% confidence interval (the box-plot notch, 1.58 IQR / sqrt(n)) within +-2.5%."""
    if not earlier or not later:
        return False
    m = _median(later)
    q = sorted(later)
    k = len(q)
    iqr = q[(3 * k) // 4] - q[k // 4]
    return m > 0 and abs(_median(earlier) - m) <= 0.025 * m and 1.58 * iqr / k ** 0.5 <= 0.025 * m


def _paired(ns, plan_on, settle):
    """The timed intervals of a plan timed both ways: (seconds, plan on, interval index) of each
    interval after the `settle` first ones whose step ran the same way as the step before it."""
    return [((b - a) * 1e-9, on, i)
            for i, (a, b, on) in enumerate(zip(ns, ns[1:], plan_on))
            if i >= max(settle, 1) and plan_on[i - 1] == on]


def _timing_stop_ab(ns, plan_on, settle, steps, max_steps, max_s):
    """`_timing_stop` for a plan timed both ways (steps in pairs with and without it, the
    second of each pair timed): at least `steps` intervals each way after the `settle` first
    ones, until both medians are settled (the later half of the intervals, an even number of
    them so that both ways keep as many), or `max_steps` each way, or twice `max_s` seconds.
    The intervals left out are those before the first one kept."""
    paired = _paired(ns, plan_on, settle)
    timed = [(d, on) for d, on, _ in paired]
    n = len(timed)
    each = min(sum(1 for _, on in timed if on), sum(1 for _, on in timed if not on))
    if each < max(1, steps):
        return None
    keep = (n // 2) // 2 * 2
    left_out = paired[n - keep][2] if keep > 0 else settle

    def way(part, on):
        return [d for d, o in part if o == on]

    earlier, later = timed[: n - keep], timed[n - keep:]
    if keep >= 2 and all(_settled(way(earlier, on), way(later, on)) for on in (True, False)):
        return ("settled", left_out)
    if max_steps > 0 and each >= max_steps:
        return ("step_cap", left_out)
    if max_s > 0 and (ns[-1] - ns[0]) * 1e-9 >= 2 * max_s:
        return ("time_cap", left_out)
    return None


def _after_timing():
    st = _S.status
    _S.plan_on = True
    if st.get("run_peak_left_out_steps"):
        st["notes"].append("the whole run's peak leaves out the %d steps timed without the plan "
                           "(--plan-ab): they need the memory the plan saves" % st["run_peak_left_out_steps"])
    _timing_cuda(at_boundary=True)
    st["phase"] = "before_window"
    if st.get("memory_history_paused"):
        _start_memory_history()
    _write_status()


def _timing_cuda(at_boundary=False):
    if len(_S.cuda_events) > 1:
        try:
            _S.cuda_events[-1].synchronize()
            if at_boundary:
                # Called at the phase's last boundary: the host waited here until the GPU got
                # there too, so this is when the GPU reached it, on the host's clock (or a few
                # microseconds after, when it already had). With the events' intervals it gives
                # how far the host ran ahead of the GPU at each boundary: the host time a plan
                # can add before the GPU waits for it (`steptrace plan`).
                _S.status["timing_cuda_last_done_ns"] = time.perf_counter_ns()
            _S.status["timing_cuda_ms"] = [
                a.elapsed_time(b) for a, b in zip(_S.cuda_events, _S.cuda_events[1:])
            ]
        except Exception as exc:
            _S.error("cuda event timing", exc)
    _S.cuda_events = []


def _start_memory_history():
    try:
        # context="alloc": PyTorch 2.11's default ("all") makes backward fail under
        # non-reentrant activation checkpointing.
        _S.torch.cuda.memory._record_memory_history(
            context="alloc", stacks="python", max_entries=_S.max_entries
        )
        _S.status["memory_history"] = True
    except Exception as exc:
        _S.error("record_memory_history", exc)


def _reference_peak(n):
    """Validation only: torch.cuda.max_memory_allocated() of each step of the window, reset
    at the step's start."""
    torch = _S.torch
    try:
        ref = _S.status.setdefault("reference", {"window_step_peaks_bytes": []})
        if _S.active_start < n <= (_S.window_end or n):
            ref["window_step_peaks_bytes"].append(int(torch.cuda.max_memory_allocated()))
        if _S.active_start <= n < (_S.window_end or n + 1):
            # The whole run's peak survives the reset (_run_peak).
            _S.run_peak = max(_S.run_peak, int(torch.cuda.max_memory_allocated()))
            torch.cuda.reset_peak_memory_stats()
    except Exception as exc:
        _S.error("reference peak", exc)


def _run_peak(torch):
    """torch.cuda.max_memory_allocated() over the whole run, at exit (with the resets the
    reference made taken into account): what a plan must keep under the budget from the first
    step to the last, and what the program's own `max_memory_allocated` would say."""
    try:
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            peak = max(_S.run_peak, int(torch.cuda.max_memory_allocated()))
            if peak > 0:
                _S.status["run_max_memory_allocated"] = peak
    except Exception as exc:
        _S.error("run peak", exc)


def _reference_flops_step():
    """Validation only: FlopCounterMode over one whole step after the timing phase."""
    torch = _S.torch
    try:
        if _S.flops_armed:
            from torch.utils.flop_counter import FlopCounterMode

            _S.flops_armed = False
            _S.flop_backward = 0
            _S.flop_backward_calls = 0
            _S.flop_mode = FlopCounterMode(display=False)
            _S.flop_mode.__enter__()
            return
        mode, _S.flop_mode = _S.flop_mode, None
        if mode is not None:
            mode.__exit__(None, None, None)
            ref = _S.status.setdefault("reference", {})
            ref["flop_counter_total"] = int(mode.get_total_flops())
            # FlopCounterMode inside the step's backward calls, and outside them (forward).
            ref["flop_counter_backward"] = int(_S.flop_backward)
            # The backward calls the counted step made (an LBFGS step calls its closure a
            # varying number of times: its FLOPs are per call times calls).
            ref["flop_counter_backward_calls"] = int(_S.flop_backward_calls)
            ref["flop_counter_forward"] = int(mode.get_total_flops()) - int(_S.flop_backward)
            ref["flop_counter_by_op"] = {
                str(k): int(v) for k, v in sorted(mode.get_flop_counts().get("Global", {}).items(), key=str)
            }
    except Exception as exc:
        _S.error("reference flops", exc)
        _S.flop_mode = None
    _finish_hooks()
    _write_status()


def _count_graph_flops(torch):
    """CUDA graphs (torch.compile's "reduce-overhead", torch.cuda.graph,
    make_graphed_callables) replay without running an operator on the host, so the trace has
    no shapes to count their FLOPs from. While a graph is captured its operators do run
    through the dispatcher: a dispatch mode counts them there, with FlopCounterMode's formulas
    (matmuls, convolutions, attention), and each later replay is wrapped in a
    `steptrace::cuda_graph#<k> flops=<n>` range, which the trace records around the
    cudaGraphLaunch it makes. Analyze reads the FLOPs of each replay from that range."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.flop_counter import flop_registry

    class GraphFlops(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.flops = 0
            self.failed = False

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            formula = flop_registry.get(func._overloadpacket)
            if formula is not None:
                try:
                    self.flops += int(formula(*args, **kwargs, out_val=out))
                except Exception:
                    # Not counted, and said: the graph's range then carries no figure, and
                    # analyze warns that its FLOPs are left out.
                    self.failed = True
            return out

    graph_cls = torch.cuda.CUDAGraph
    begin, end, replay = graph_cls.capture_begin, graph_cls.capture_end, graph_cls.replay
    record = torch.profiler.record_function

    def capture_begin(self, *args, **kwargs):
        begin(self, *args, **kwargs)
        try:
            mode = GraphFlops()
            mode.__enter__()
            self._steptrace_flops = mode
        except Exception as exc:
            _S.error("CUDA graph FLOPs (capture)", exc)

    def capture_end(self, *args, **kwargs):
        mode = getattr(self, "_steptrace_flops", None)
        if mode is not None:
            self._steptrace_flops = None
            mode.__exit__(None, None, None)
            graphs = _S.status.setdefault("cuda_graphs", [])
            flops = "unknown" if mode.failed else "%d" % mode.flops
            self._steptrace_name = "steptrace::cuda_graph#%d flops=%s" % (len(graphs), flops)
            graphs.append(None if mode.failed else mode.flops)
        return end(self, *args, **kwargs)

    def replay_counted(self, *args, **kwargs):
        name = getattr(self, "_steptrace_name", None)
        if name is None:
            return replay(self, *args, **kwargs)
        with record(name):
            return replay(self, *args, **kwargs)

    graph_cls.capture_begin = capture_begin
    graph_cls.capture_end = capture_end
    graph_cls.replay = replay_counted

    def undo():
        graph_cls.capture_begin, graph_cls.capture_end, graph_cls.replay = begin, end, replay

    _S.undo.append(undo)


def _total_flops(mode):
    if mode is None:
        return None
    try:
        return int(mode.get_total_flops())
    except Exception:
        return None


def _finish_hooks():
    """Everything recorded: the rest of the run is the program's own. Global module hooks go
    (they put every module call on a slow path); the step hooks (optimizer, GradScaler,
    backward wrapper: one call per step) stay to time the rest of the run."""
    _S.status["phase"] = "finished"
    for h in _S.module_hooks:
        try:
            h.remove()
        except Exception:
            pass
    _S.module_hooks = []
    _S.after_start_ns = time.perf_counter_ns()
    _S.status["after_window_start_ns"] = _S.after_start_ns
    _S.status["after_window_start_epoch_ns"] = time.time_ns()


def step():
    """Explicit step marker (`import steptrace_capture; steptrace_capture.step()`): once called,
    automatic boundaries are turned off."""
    if _S is None:
        return
    _S.explicit = True
    _boundary("explicit")


def explicit_steps():
    """From now on steps are marked by `step()` only (steptrace.profile under the launcher
    says so as its block starts, so that the optimizer does not end the first step too)."""
    if _S is not None:
        _S.explicit = True


def _optimizer_ends_step(optimizer):
    """With several optimizers (a GAN's D and G), a step ends at the last optimizer of each
    cycle: the one stepped just before the first optimizer repeats."""
    if _S.anchor is not None:
        return optimizer is _S.anchor
    if any(o is optimizer for o in _S.cycle):
        _S.anchor = _S.cycle[-1]
        _S.status["optimizers_per_step"] = len(_S.cycle)
        return optimizer is _S.anchor
    _S.cycle.append(optimizer)
    return False


def _optimizer_found(drop_hooks=True):
    """Steps are marked by the optimizer (or its GradScaler) from now on: the module hooks of
    the no-optimizer fallback go once a whole step has run (`drop_hooks`: at the end of the
    optimizer's step, not its start, so that a closure's forward inside the first step still
    names its modules), unless an NVTX tool records their ranges (global module hooks put every
    module call on its slow path)."""
    if _S.optimizer_seen:
        if drop_hooks:
            _drop_module_hooks()
        return
    _S.optimizer_seen = True
    st = _S.status
    if st["boundary"] == "backward_pass" and not _S.explicit:
        # Gradient accumulation: the backward passes before the first optimizer step looked
        # like steps of a program with no optimizer (nanoGPT's train.py: 3 micro-batches of
        # its first iteration). From here the optimizer marks steps, and the manifest names
        # that rule; a timing phase begun on micro-batches starts again at this step, or its
        # intervals would mix micro-batches with optimizer steps.
        st["boundary"] = None
        st["boundaries_before_optimizer"] = st["steps"]
        note = ("steps are optimizer steps; the %d boundaries before the first one were "
                "backward passes (gradient accumulation)" % st["steps"])
        if st["phase"] == "timing":
            st["timing_ns"] = []
            st.pop("timing_plan_on", None)  # one label per reading, as the readings start again
            _S.cuda_events = []
            note += ", and the timing phase started again at it"
        elif st["phase"] in ("window", "finished"):
            note += ": the window opened on them, so its first steps are micro-batches"
        st["notes"].append(note)
    if drop_hooks:
        _drop_module_hooks()


def _drop_module_hooks():
    if not _S.nvtx_tool and _S.module_hooks:
        for h in _S.module_hooks:
            h.remove()
        _S.module_hooks = []
        _S.forward_depth = 0
        _S.module_stack = []


def _profiler_name(counters, module):
    """A module's name as the profiler gives it: its class's name and the order in which
    instances of that class (the class itself: two classes of one name, Lightning's demo
    `Transformer` and the `nn.Transformer` inside it, count apart and are both `Transformer_0`)
    were first called."""
    cls = type(module)
    k = counters.get(cls, 0)
    counters[cls] = k + 1
    return "%s_%d" % (cls.__name__, k)


def _name_module(module):
    """Names a module at its first call as the profiler does (`GPT2Block_3`), with the path
    of names of the modules it was called in (`GPT2LMHeadModel_0/GPT2Model_0/GPT2Block_3`, the
    trace's module path: what plans name) and its fully qualified name under the model it was
    first called in (`transformer.h.3`, as `model.named_modules()` gives it, "" for the model
    itself), into the status's `module_fqns` by path: a plan's modules in the names users'
    code, Lightning, HF and torchtitan use. Returns the module's path."""
    key = id(module)
    path = _S.module_seen.get(key)
    if path is not None:
        return path
    if _S.forward_depth == 0 and key not in _S.fqn_of:
        try:
            for name, m in module.named_modules():
                _S.fqn_of.setdefault(id(m), name)
        except Exception as exc:
            _S.error("module names", exc)
        _time_forward(module)
    name = _profiler_name(_S.module_counters, module)
    parent = _S.module_stack[-1] if _S.module_stack else None
    path = name if parent is None else parent + "/" + name
    _S.module_seen[key] = path
    fqn = _S.fqn_of.get(key)
    names = _S.status.setdefault("module_fqns", {})
    if fqn is not None and len(names) < _MAX_READINGS:
        names[path] = fqn
    return path


def _time_forward(root):
    """Times the model's outermost forward calls in the timing phase (`timing_forward_ns`):
    the host's own speed at the forward, with nothing recorded, which the plan's step model
    sets against the profiled forward (the profiler slows the parts of a step unequally:
    Lightning's demo at batch 512, the forward 8.3 times, the backward 7.2, the DataLoader's
    collation 9.5). Hooks on the root alone, not the global ones the window's module names
    need."""
    if len(_S.forward_timers) >= 8 or _S.status["phase"] not in ("before_window", "timing"):
        return
    t0 = []

    def pre(module, args):
        t0.append(time.perf_counter_ns() if _S.status["phase"] == "timing" else None)

    def post(module, args, output):
        start = t0.pop() if t0 else None
        if start is not None and _S.status["phase"] == "timing":
            v = _S.status.setdefault("timing_forward_ns", [])
            if len(v) < _MAX_READINGS:
                v.append(time.perf_counter_ns() - start)

    try:
        hooks = (root.register_forward_pre_hook(pre), root.register_forward_hook(post))
    except Exception as exc:
        _S.error("forward timing", exc)
        return
    _S.forward_timers.extend(hooks)


def _drop_forward_timers():
    for h in _S.forward_timers:
        h.remove()
    _S.forward_timers = []


def _install_hooks(torch):
    import functools

    def opt_pre(optimizer, args, kwargs):
        _nvtx(push="steptrace.optimizer")
        # The optimizer marks steps from its first call on, before its step runs: a closure
        # it calls (LBFGS: up to 20 forward and backward passes a step) must not mark steps
        # of its own through the no-optimizer rule.
        _optimizer_found(drop_hooks=False)
        _S.opt_t0 = time.perf_counter_ns() if _S.status["phase"] == "timing" else None

    def opt_post(optimizer, args, kwargs):
        _nvtx(pop=True)
        # Each rank's host speed at the same work, with nothing recorded: the optimizer's own
        # host time (a closure's forward and backward inside it count too, alike on every rank).
        t0, _S.opt_t0 = _S.opt_t0, None
        if t0 is not None and _S.status["phase"] == "timing":
            v = _S.status.setdefault("timing_optimizer_ns", [])
            if len(v) < _MAX_READINGS:
                v.append(time.perf_counter_ns() - t0)
        _optimizer_found()
        if _S.explicit or not _S.backward_since_step:
            return
        if len(_S.cycle) == 0 and _S.anchor is None:
            # The first optimizer ever: a single-optimizer program ends its step here. A
            # second, different optimizer before the next backward makes it a cycle.
            _S.cycle.append(optimizer)
            _boundary("optimizer_step")
            return
        if _optimizer_ends_step(optimizer):
            _boundary("optimizer_step")

    from torch.optim.optimizer import (
        register_optimizer_step_post_hook,
        register_optimizer_step_pre_hook,
    )

    # For the whole run: after the window they time the program's steps.
    _S.undo.append(register_optimizer_step_pre_hook(opt_pre).remove)
    _S.undo.append(register_optimizer_step_post_hook(opt_post).remove)

    # Tensor.backward calls torch.autograd.backward through the module attribute, so this
    # one wrapper sees both.
    orig_backward = torch.autograd.backward

    @functools.wraps(orig_backward)
    def backward(*args, **kwargs):
        _nvtx(push="steptrace.backward")
        # Validation only: FlopCounterMode's count split into backward (inside this call) and
        # the rest (the forward passes: no optimizer op has a FLOP formula there).
        mode = _S.flop_mode
        before = _total_flops(mode)
        t0 = time.perf_counter_ns() if _S.status["phase"] == "timing" else None
        try:
            return orig_backward(*args, **kwargs)
        finally:
            # The backward's host time at the program's own speed (see _time_forward).
            if t0 is not None and _S.status["phase"] == "timing":
                v = _S.status.setdefault("timing_backward_ns", [])
                if len(v) < _MAX_READINGS:
                    v.append(time.perf_counter_ns() - t0)
            if before is not None and _S.flop_mode is mode:
                after = _total_flops(mode)
                if after is not None:
                    _S.flop_backward += after - before
                    _S.flop_backward_calls += 1
            _nvtx(pop=True)
            _S.backward_since_step = True
            # Passes mark steps after the window only where no step hook does (the
            # no-optimizer rule); before it they are counted per step in the timing phase.
            after_marked = _S.after_start_ns is not None and _S.optimizer_seen
            if not after_marked and len(_S.backward_ns) < _MAX_READINGS:
                _S.backward_ns.append(time.perf_counter_ns())

    torch.autograd.backward = backward
    _S.undo.append(lambda: setattr(torch.autograd, "backward", orig_backward))
    _S.undo.append(_drop_forward_timers)  # a window that never opened leaves them

    try:
        # A GradScaler that finds inf/NaN gradients skips optimizer.step(); its update() still
        # runs once per step, so it ends a step the optimizer hook did not.
        orig_update = torch.amp.GradScaler.update

        @functools.wraps(orig_update)
        def update(self, *args, **kwargs):
            out = orig_update(self, *args, **kwargs)
            _optimizer_found()
            if not _S.explicit and _S.backward_since_step:
                _boundary("grad_scaler_update")
            return out

        torch.amp.GradScaler.update = update
        _S.undo.append(lambda: setattr(torch.amp.GradScaler, "update", orig_update))
    except Exception as exc:
        _S.error("GradScaler hook", exc)

    def fwd_pre(module, args):
        _S.module_stack.append(_name_module(module))
        if _S.forward_depth == 0:
            # Fallback boundary: a new top-level forward after a backward pass with no
            # optimizer step in between (hand-written updates).
            if not _S.explicit and not _S.optimizer_seen and _S.backward_since_step:
                _boundary("backward_pass")
            _nvtx(push="steptrace.forward")
        _S.forward_depth += 1

    def fwd_post(module, args, output):
        if _S.module_stack:
            _S.module_stack.pop()
        _S.forward_depth = max(0, _S.forward_depth - 1)
        if _S.forward_depth == 0:
            _nvtx(pop=True)

    from torch.nn.modules.module import (
        register_module_forward_hook,
        register_module_forward_pre_hook,
    )

    _S.module_hooks.append(register_module_forward_pre_hook(fwd_pre))
    _S.module_hooks.append(register_module_forward_hook(fwd_post))


def _on_trace_ready(prof):
    torch = _S.torch
    if "trace" in _S.record:
        try:
            p = _S.path("trace", ".json")
            with _Cost("trace_export"):
                prof.export_chrome_trace(p)
            _S.status["files"]["trace"] = os.path.basename(p)
        except Exception as exc:
            _S.error("export_chrome_trace", exc)
    if "memory" in _S.record and _S.status.get("memory_history"):
        try:
            p = _S.path("snapshot", ".pickle")
            with _Cost("snapshot"):
                torch.cuda.memory._dump_snapshot(p)
            _S.status["files"]["snapshot"] = os.path.basename(p)
        except Exception as exc:
            _S.error("memory snapshot", exc)
    try:
        # torch's own account of its profiler's work (enable, disable, parsing), in ms.
        stats = getattr(getattr(prof, "profiler", None), "_stats", None)
        for k, v in sorted(vars(stats).items()) if stats is not None else []:
            if k.endswith("_duration_us") and isinstance(v, (int, float)) and v > 0:
                _S.status["costs_ms"]["torch_" + k[: -len("_duration_us")]] = round(v * 1e-3, 3)
    except Exception:
        pass
    if _S.reference:
        with _Cost("references"):
            _write_references(prof, torch)
    _write_status()


def _write_references(prof, torch):
    """Validation only (STEPTRACE_REFERENCE=1): what torch itself makes of the same profile,
    for steptrace's tests to check against: its op counts and its memory category timeline."""
    import json

    try:
        counts = {e.key: e.count for e in prof.key_averages()}
        p = _S.path("torch_key_averages", ".json")
        with open(p, "w") as f:
            json.dump(dict(sorted(counts.items())), f, indent=0)
        _S.status["files"]["torch_key_averages"] = os.path.basename(p)
    except Exception as exc:
        _S.error("key_averages", exc)
    # A program that never used the GPU has no CUDA categories to give (torch still walks every
    # event of the window: a CPU-only LBFGS program wrote 1.5 GB and did not finish).
    if _cuda_ok() and _S.status.get("gpu_used", True):
        try:
            p = _S.path("memory_timeline_torch", ".json")
            prof.export_memory_timeline(p, device="cuda:%d" % torch.cuda.current_device())
            _S.status["files"]["memory_timeline_torch"] = os.path.basename(p)
        except Exception as exc:
            _S.error("export_memory_timeline", exc)


def _on_torch(torch):
    _S.torch = torch
    st = _S.status
    st["torch"] = torch.__version__
    st["cuda"] = torch.version.cuda
    cuda = False
    try:
        cuda = torch.cuda.is_available()
    except Exception as exc:
        _S.error("cuda", exc)
    st["cuda_available"] = cuda
    if cuda:
        try:
            local = int(os.environ.get("LOCAL_RANK", "0") or 0)
            if "LOCAL_RANK" in os.environ and local < torch.cuda.device_count():
                # Under torchrun each rank uses its own GPU; select it before anything touches
                # device 0, as the program will.
                torch.cuda.set_device(local)
            dev = torch.cuda.current_device()
            props = torch.cuda.get_device_properties(dev)
            st["gpu"] = props.name
            st["gpu_memory_bytes"] = props.total_memory
            st["device"] = dev
        except Exception as exc:
            _S.error("device properties", exc)
    else:
        st["no_snapshot_reason"] = "no CUDA device visible to torch"
    if "memory" in _S.record and cuda:
        _start_memory_history()
    lib = _S.env.get("STEPTRACE_NVTX_LIB")
    if lib and "nvtx" in _S.record:
        try:
            torch.ops.load_library(lib)
            st["nvtx_shim"] = lib
        except Exception as exc:
            _S.error("load NVTX shim", exc)
    if "trace" in _S.record:
        try:
            from torch.profiler import ProfilerActivity, profile, schedule

            acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
            if _S.schedule.get("repeat") == 1:
                # torch 2.11 warns "Profiler clears events at the end of each cycle ... set
                # acc_events=True" into the program's stderr (once per rank) even for a
                # schedule of one cycle, where nothing is cleared (pytorch#180387, fixed
                # after 2.11): advice about the capture's profiler that the user can't act
                # on. Only that message is silenced, and only for a one-cycle schedule.
                import warnings

                warnings.filterwarnings(
                    "ignore",
                    message="Warning: Profiler clears events at the end of each cycle",
                    category=UserWarning,
                )
            # The Execution Trace is not handed to the profiler: the shim starts it with the
            # active window and closes it once at the window's end (handing it over wrote the
            # file twice under torch.compile).
            _S.prof = profile(
                activities=acts,
                schedule=schedule(**_S.schedule),
                on_trace_ready=_on_trace_ready,
                record_shapes=True,
                profile_memory=True,
                with_stack="stack" in _S.profiler_with,
                with_flops="flops" in _S.profiler_with,
                with_modules="modules" in _S.profiler_with,
            )
            with _Cost("profiler_start"):
                with _NoLazyInductor(torch):
                    _S.prof.start()
        except Exception as exc:
            _S.error("profiler", exc)
            _S.prof = None
    try:
        _install_hooks(torch)
    except Exception as exc:
        _S.error("hooks", exc)
    if cuda and "trace" in _S.record:
        try:
            _count_graph_flops(torch)
        except Exception as exc:
            _S.error("CUDA graph FLOPs", exc)
    if _S.env.get("STEPTRACE_PLAN"):
        try:
            _apply_plan(torch, _S.env["STEPTRACE_PLAN"])
        except Exception as exc:
            _S.error("plan", exc)
    import atexit

    # Exit handlers run last-registered-first: registering again now, after torch's own, lets
    # ours stop the profiler before torch tears anything down. _at_exit runs once.
    atexit.register(_at_exit)
    _write_status()


# The plan.json schema version this shim applies (steptrace_formats::plan::FORMAT_VERSION).
_PLAN_FORMAT_VERSION = 1


def _apply_plan(torch, path):
    """Applies `steptrace plan`'s decisions: a module's forward runs under non-reentrant
    `torch.utils.checkpoint` (recompute) or under saved-tensor hooks that keep what it saves in
    pinned host memory (swap). A decision that names the module's qualified name (`fqn`, as
    `model.named_modules()` gives it) is applied from the module's first call: at the first
    call of the model (the outermost module) its submodules are found by name and wrapped
    before any of them runs, so the run's first step, the one that makes the optimizer's state,
    runs with the plan like every other (a plan applied from the second call let step 1 peak
    36% over the prediction on a HF Trainer GPT-2). A decision without one (a plan from a
    capture that recorded no names) is found by its profiler name (`Block_3`: class and the
    order instances of that class were first called) and applied from its second call."""
    import json

    with open(path) as f:
        plan = json.load(f)
    # plan.json's schema: steptrace_formats::plan (docs/planner.md). The launcher has checked
    # the file against it; a version newer than this shim knows is refused, not half-applied.
    version = int(plan.get("format_version", 1))
    if version > _PLAN_FORMAT_VERSION:
        raise ValueError("plan format version %d is newer than this shim reads (%d)" % (version, _PLAN_FORMAT_VERSION))
    # By the module's path where the plan gives it (two modules can share an instance name:
    # classes of one name count apart), else by instance name.
    want, by_instance, by_fqn = {}, {}, {}
    for d in plan.get("decisions", []):
        want[d.get("module") or d["instance"]] = d["action"]
        by_instance[d["instance"]] = d.get("module") or d["instance"]
        if d.get("fqn"):
            by_fqn[d["fqn"]] = d["action"]
    st = _S.status
    st["plan"] = {"file": os.path.basename(path), "wanted": sorted(want), "applied": [], "missing": [],
                  "from_first_call": []}
    if not want:
        return
    # A distributed run's ranks time a fixed number of steps in lockstep (_timing_stop).
    _S.plan_ab = _S.env.get("STEPTRACE_PLAN_AB") == "1" and _S.world == 1
    if _S.plan_ab:
        st["plan"]["timed_both_ways"] = True

    counters = {}
    seen = set()  # id(module); modules live as long as the program's model
    early = set()  # id(module) of those wrapped by name before their first call

    def wrap(module, action):
        module.forward = _planned_forward(torch, module.forward, action, lambda: module.parameters())

    handle = None

    def by_name(root):
        # The model's first call (the module hooks, called first, named it the root: its
        # qualified name is ""): every planned submodule is wrapped before it is called.
        try:
            for name, m in root.named_modules():
                action = by_fqn.get(name)
                if name and action in ("recompute", "swap") and id(m) not in early:
                    wrap(m, action)
                    early.add(id(m))
        except Exception as exc:
            _S.error("plan by name", exc)

    def pre_hook(module, args):
        key = id(module)
        if key in seen:
            return None
        seen.add(key)
        if by_fqn and _S.fqn_of.get(key) == "":
            by_name(module)
        inst = _profiler_name(counters, module)
        # Its path, as the module hooks (registered before this one, so called first) named
        # it at this same first call; none where they are gone or never ran.
        path_ = _S.module_seen.get(key)
        if path_ is None:
            # No path known: by its instance name (ambiguous only where two classes share one).
            path_ = by_instance.get(inst)
        action = want.get(path_) if path_ is not None else None
        if key in early and path_ is not None:
            if path_ not in st["plan"]["applied"]:
                st["plan"]["applied"].append(path_)
                st["plan"]["from_first_call"].append(path_)
            if len(st["plan"]["applied"]) == len(want) and handle is not None:
                handle.remove()
        elif action in ("recompute", "swap") and path_ not in st["plan"]["applied"]:
            wrap(module, action)
            st["plan"]["applied"].append(path_)
            if len(st["plan"]["applied"]) == len(want) and handle is not None:
                handle.remove()  # every module found: no global hook on every call
        return None

    handle = torch.nn.modules.module.register_module_forward_pre_hook(pre_hook)


def _swap_hooks(torch, params, args, kwargs):
    """Saved-tensor hooks that keep what a module's forward saves in pinned host memory, copied
    there without blocking and back on first use; its parameters and inputs stay where they
    are (they are alive anyway)."""
    keep = {p.untyped_storage().data_ptr() for p in params()}
    for a in list(args) + list(kwargs.values()):
        if isinstance(a, torch.Tensor):
            keep.add(a.untyped_storage().data_ptr())

    def pack(t):
        if t.device.type != "cuda" or t.untyped_storage().data_ptr() in keep:
            return t
        host = torch.empty(t.size(), dtype=t.dtype, layout=t.layout, pin_memory=True)
        host.copy_(t, non_blocking=True)
        return (t.device, host)

    def unpack(p):
        if isinstance(p, tuple):
            return p[1].to(p[0], non_blocking=True)
        return p

    return torch.autograd.graph.saved_tensors_hooks(pack, unpack)


def _planned_forward(torch, orig, action, params):
    """`orig` under the plan's action while the plan is on (and grad is): non-reentrant
    checkpoint (recompute) or the swap hooks. One function for the program's modules and for
    the cost probe (_plan_probe), so that what the probe times is what a plan runs."""
    from torch.utils.checkpoint import checkpoint

    if action == "recompute":
        def forward(*args, **kwargs):
            if not _S.plan_on or not torch.is_grad_enabled():
                return orig(*args, **kwargs)
            return checkpoint(orig, *args, use_reentrant=False, **kwargs)
    else:
        def forward(*args, **kwargs):
            if not _S.plan_on or not torch.is_grad_enabled():
                return orig(*args, **kwargs)
            with _swap_hooks(torch, params, args, kwargs):
                return orig(*args, **kwargs)

    return forward


def _probe_fit(med, lengths):
    """Per call and per op, ((recompute), (swap), (recompute's forward part)), from the probe's
    medians (`med[(variant, n)]`, s per step) at two chain lengths of n linear+gelu pairs (2n
    ops): what a checkpoint adds beyond the chain as written and its replayed forward, what the
    swap hooks add beyond the chain, and what the checkpoint adds to the forward call alone,
    each fitted as per_call + per_op * ops through the two lengths, never below 0."""
    lo, hi = lengths

    def fit(extra):
        per_op = max(0.0, (extra[hi] - extra[lo]) / (2 * hi - 2 * lo))
        return max(0.0, extra[lo] - per_op * 2 * lo), per_op

    rec = fit({n: med[("recompute", n)] - med[("plain", n)] - med[("forward", n)] for n in lengths})
    swap = fit({n: med[("swap", n)] - med[("plain", n)] for n in lengths})
    rec_fwd = fit({n: med[("recompute_forward", n)] - med[("forward", n)] for n in lengths})
    return rec, swap, rec_fwd


def _probe_chain(torch, dev):
    """The probe's chain on `dev`: its input layer's weight, the 12 pairs' weights, the input,
    and `chain(n)`, a function of n linear+gelu pairs (2n ops; a pair saves 3 tensors for the
    backward: mm's two, gelu's one). Also what `capture/corpus/ckpt_split.py` times."""
    F = torch.nn.functional
    gen = torch.Generator(device=dev).manual_seed(0)
    d = 64
    w_in = torch.randn(d, d, device=dev, generator=gen).mul_(0.1).requires_grad_()
    ws = [torch.randn(d, d, device=dev, generator=gen).mul_(0.1).requires_grad_() for _ in range(12)]
    x0 = torch.randn(8, d, device=dev, generator=gen)

    def chain(n):
        def f(x):
            for w in ws[:n]:
                x = F.gelu(F.linear(x, w))
            return x
        return f

    return w_in, ws, x0, chain


def _plan_probe(torch):
    """What the plan's wrappers cost on this machine, with this torch and Python,
    for `steptrace plan`'s step-time prediction; None without CUDA in use.

    A checkpoint or a swap adds host work that the trace cannot show at its real size (the
    profiler's Python tracing inflates Python-heavy code far more than the ops): the
    checkpoint's own set-up and RNG-state capture per call, and its saved-tensor hooks per op
    in the forward and again in the recompute. Timed here on a chain of tiny ops (linear, gelu)
    that the GPU runs faster than the host launches them, so every figure is host time: steps
    of the chain as written, under `_planned_forward` (the very wrapper a plan runs) and its
    forward alone (what a recompute replays), with 1 and 12 linear+gelu pairs, interleaved round
    by round so that drift hits all alike, medians of the rounds. Also the pinned-copy bandwidth
    each way, 64 MiB timed on the stream, which is what a swap moves."""
    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return None
    F = torch.nn.functional
    dev = torch.device("cuda", torch.cuda.current_device())
    w_in, ws, x0, chain = _probe_chain(torch, dev)
    lengths = (1, 12)

    params = lambda: iter(ws)  # noqa: E731 - what a module's parameters() would give
    fns = {}
    for n in lengths:
        f = chain(n)
        fns[("plain", n)] = f
        fns[("recompute", n)] = _planned_forward(torch, f, "recompute", params)
        fns[("swap", n)] = _planned_forward(torch, f, "swap", params)

    def step(f):
        y = f(F.linear(x0, w_in))
        torch.autograd.backward(y.sum())

    def forward_only(f):
        x = F.linear(x0, w_in)
        y = f(x)
        del y

    bodies = [(k, step, f) for k, f in sorted(fns.items())]
    bodies += [(("forward", n), forward_only, fns[("plain", n)]) for n in lengths]
    # The checkpoint's forward alone: how much of its own work lands before the backward (its
    # saved-tensor hooks pack once there; the recompute packs again and the backward unpacks,
    # so the backward's share is the larger: 13 and 25 us an op on an H200).
    bodies += [(("recompute_forward", n), forward_only, fns[("recompute", n)]) for n in lengths]
    reps, rounds = 8, 7
    times = {k: [] for k, _, _ in bodies}
    was_on = _S.plan_on
    _S.plan_on = True
    try:
        for r in range(rounds):
            for k, body, f in bodies:
                torch.cuda.synchronize(dev)
                t0 = time.perf_counter_ns()
                for _ in range(reps):
                    body(f)
                torch.cuda.synchronize(dev)
                if r > 0:  # the first round warms up
                    times[k].append((time.perf_counter_ns() - t0) * 1e-9 / reps)
    finally:
        _S.plan_on = was_on
        for w in [w_in] + ws:
            w.grad = None
    med = {k: _median(v) for k, v in times.items()}
    (rec_call, rec_op), (swap_call, swap_op), (fwd_call, fwd_op) = _probe_fit(med, lengths)

    def bandwidth(to_host):
        nbytes = 64 << 20
        dev_buf = torch.empty(nbytes, dtype=torch.uint8, device=dev)
        host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
        src, dst = (dev_buf, host) if to_host else (host, dev_buf)
        got = []
        for _ in range(4):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            dst.copy_(src, non_blocking=True)
            b.record()
            b.synchronize()
            got.append(nbytes / (a.elapsed_time(b) * 1e-3) / 1e9)
        return _median(got[1:])

    return {
        "recompute_call_s": rec_call,
        "recompute_per_op_s": rec_op,
        "recompute_forward_call_s": fwd_call,
        "recompute_forward_per_op_s": fwd_op,
        "swap_call_s": swap_call,
        "swap_per_op_s": swap_op,
        "dtoh_gbps": bandwidth(True),
        "htod_gbps": bandwidth(False),
        "medians_s": {"%s_%d" % k: v for k, v in sorted(med.items())},
        "rounds": rounds - 1,
        "reps": reps,
    }


def _at_exit():
    if _S is None:
        return
    try:
        _at_exit_work()
    finally:
        if _S.sigterm:
            _end_as_sigterm()


def _at_exit_work():
    if _S.done:
        return
    st = _S.status
    torch = _S.torch
    if _S.nvtx_iteration_open:
        _nvtx(pop=True)
        _S.nvtx_iteration_open = False
    if torch is None:
        _S.done = True
        st["no_trace_reason"] = "the program never imported torch"
        st["exited_cleanly"] = True
        _write_status()
        return
    st["phase_at_exit"] = st["phase"]
    _cuda_profiler_range(False)
    _run_peak(torch)
    if st.get("plan"):
        st["plan"]["missing"] = [n for n in st["plan"]["wanted"] if n not in st["plan"]["applied"]]
    if st["phase"] in ("before_window", "window") and _S.prof is not None:
        try:
            _S.prof.stop()  # a window cut short still reaches on_trace_ready
        except Exception as exc:
            _S.error("profiler.stop", exc)
    _stop_et()
    if _S.flop_mode is not None:
        try:
            _S.flop_mode.__exit__(None, None, None)
        except Exception:
            pass
    if st["phase"] == "timing":
        _timing_cuda()
    _S.done = True
    # Only while memory history still records (the window never closed), as in the C++ shim:
    # after a closed window analyze never reads it, and taking it cost word_language_model
    # 5.5 s at exit on the H100 machine (a 1.4 KB snapshot; the window's took 2 ms).
    if "memory" in _S.record and st.get("memory_history"):
        try:
            p = _S.path("snapshot_exit", ".pickle")
            with _Cost("snapshot_exit"):
                torch.cuda.memory._dump_snapshot(p)
            _S.status["files"]["snapshot_exit"] = os.path.basename(p)
        except Exception as exc:
            _S.error("exit snapshot", exc)
    _timing_readings()
    # After the readings are kept: the probe's own backward passes are not the program's.
    if _S.env.get("STEPTRACE_PLAN_PROBE", "1") != "0" and not _S.sigterm:
        try:
            with _Cost("plan_probe"):
                st["plan_probe"] = _plan_probe(torch)
        except Exception as exc:
            _S.error("plan probe", exc)
    st["exited_cleanly"] = True
    _write_status()


def _timing_readings():
    """The readings the launcher times the run from (the clock is perf_counter_ns)."""
    st = _S.status
    st["after_window_ns"] = list(_S.after_ns)
    st["backward_pass_ns"] = list(_S.backward_ns)
    st["exit_ns"] = time.perf_counter_ns()


def _end_as_sigterm():
    # SIGTERM's own action ends the process at once, running no exit handler at all; the
    # handler only delays that until the window is written. Once it is, skip the rest (other
    # exit handlers, the interpreter's finalization), as SIGTERM would. (pytorch/examples mnist hung there, in a thread join, after a SIGTERM inside the
    # window.)
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except Exception:
            pass
    os._exit(128 + 15)


def _install_torch_hook():
    import importlib.machinery

    class _TorchFinder:
        """Runs `_on_torch` right after `import torch` completes, once."""

        armed = True

        def find_spec(self, name, path=None, target=None):
            if name != "torch" or not self.armed:
                return None
            self.armed = False
            spec = importlib.machinery.PathFinder.find_spec(name, path)
            if spec is None or spec.loader is None:
                return spec
            orig = spec.loader.exec_module

            def exec_module(module):
                orig(module)
                try:
                    _on_torch(module)
                except Exception as exc:  # never break the program
                    _S.error("setup", exc)
                    _write_status()

            spec.loader.exec_module = exec_module
            return spec

    finder = _TorchFinder()
    sys.meta_path.insert(0, finder)
    _S.undo.append(lambda: finder in sys.meta_path and sys.meta_path.remove(finder))


def _install_sigterm():
    import signal

    # SIGTERM kills Python without running atexit; turn it into SystemExit so the window
    # recorded so far is written. Programs that install their own handler keep it.
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        def handler(signum, frame):
            _S.sigterm = True
            raise SystemExit(128 + signum)

        try:
            signal.signal(signal.SIGTERM, handler)
        except ValueError:  # not the main thread
            pass


def _install_stack_dump():
    # Diagnosing a run that does not end (the corpus script's watchdog): SIGUSR2 prints every
    # thread's Python stack to stderr. Off unless asked for: the program may use SIGUSR2.
    if not os.environ.get("STEPTRACE_STACKS_ON_USR2"):
        return
    try:
        import faulthandler
        import signal

        faulthandler.register(signal.SIGUSR2, all_threads=True, chain=True)
    except (ImportError, AttributeError, ValueError, RuntimeError):
        pass


def _is_launcher_process():
    """torchrun's agent only starts the ranks; instrumenting it would add a rank-less run."""
    argv = list(getattr(sys, "orig_argv", None) or sys.argv)
    if argv and os.path.basename(argv[0]) in ("torchrun", "torchrun.exe"):
        return True
    if sys.argv and os.path.basename(sys.argv[0]) == "torchrun":
        return True
    return any(a in ("torch.distributed.run", "torch.distributed.launch") for a in argv)


def _boot():
    global _S
    if not os.environ.get(_ENV_OUT) or _is_launcher_process():
        return
    _S = _State()
    import atexit

    atexit.register(_at_exit)
    _install_sigterm()
    _install_stack_dump()
    if "torch" in sys.modules:
        _on_torch(sys.modules["torch"])
    else:
        _install_torch_hook()
    _write_status()


def running():
    """Whether a capture is recording in this process (the launcher's, or steptrace.profile's)."""
    return _S is not None and not _S.done


def start(env):
    """An in-process capture (`steptrace.profile`): the launcher's settings, by the same names,
    in `env`; steps are marked by `step()` only. Files and the status go where `env` says;
    `stop()` ends it."""
    global _S
    if running():
        raise RuntimeError("a steptrace capture is already recording in this process")
    _S = _State(env)
    _S.in_process = True
    _S.explicit = True
    import atexit

    # A program that exits inside the block still writes what it recorded.
    atexit.register(_at_exit)
    if "torch" in sys.modules:
        _on_torch(sys.modules["torch"])
    else:
        _install_torch_hook()
    _write_status()


def stop():
    """Ends an in-process capture as the program's exit would (the window cut short if it is
    still open), takes every hook back out, and returns the status written."""
    if _S is None:
        return None
    try:
        _at_exit_work()
    finally:
        errors = len(_S.status["errors"])
        for h in _S.module_hooks:
            _S.undo.insert(0, h.remove)
        _S.module_hooks = []
        for undo in reversed(_S.undo):
            try:
                undo()
            except Exception as exc:
                _S.error("remove hooks", exc)
        _S.undo = []
        if len(_S.status["errors"]) != errors:
            _write_status()
    return _S.status


if __name__ == "sitecustomize":
    try:
        _boot()
    except Exception as _exc:  # pragma: no cover - last resort, the program must run
        sys.stderr.write("steptrace: capture shim disabled: %s\n" % _exc)

    # Expose the explicit marker as `steptrace_capture.step()`.
    sys.modules.setdefault("steptrace_capture", sys.modules[__name__])

    _chain_sitecustomize()
