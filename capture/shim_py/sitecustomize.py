"""steptrace capture shim, loaded into every Python process started under `steptrace capture`.

The launcher writes this file into a temporary directory and puts that directory first on
PYTHONPATH, so Python imports it at start-up as `sitecustomize`. It does nothing until the
program imports torch; then it records, without changes to the program:

- CUDA caching-allocator history (snapshot pickles at the end of the active window and at exit),
- a Kineto trace over the schedule in STEPTRACE_SCHEDULE, steps found from optimizer.step()
  (a global post hook), else from the first top-level module forward after a backward pass,
  or from explicit `steptrace_capture.step()` calls,
- the Execution Trace over the same window,
- NVTX ranges per iteration and phase (and per op through the C++ shim, when it was built).

It never lets its own failure break the program: errors are recorded in the status file the
launcher turns into manifest.json. An existing sitecustomize later on sys.path is run too.
"""

import os
import sys

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
    def __init__(self):
        self.out = os.environ.get(_ENV_OUT, "")
        self.record = set(filter(None, os.environ.get("STEPTRACE_RECORD", "trace,memory,et,nvtx").split(",")))
        self.schedule = _parse_schedule(os.environ.get("STEPTRACE_SCHEDULE", ""))
        self.max_entries = int(os.environ.get("STEPTRACE_MAX_ENTRIES", "1000000"))
        self.rank = int(os.environ.get("RANK", "0") or 0)
        self.world = int(os.environ.get("WORLD_SIZE", "1") or 1)
        self.suffix = "_rank%d" % self.rank if ("RANK" in os.environ or self.world > 1) else ""
        self.status = {
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
        }
        self.torch = None
        self.prof = None
        self.et = None
        self.explicit = False
        self.optimizer_seen = False
        self.backward_since_step = False
        self.forward_depth = 0
        self.nvtx_iteration_open = False
        self.done = False

    def path(self, name, ext):
        return os.path.join(self.out, "%s%s%s" % (name, self.suffix, ext))

    def error(self, where, exc):
        self.status["errors"].append("%s: %s: %s" % (where, type(exc).__name__, exc))


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


def _boundary(kind):
    """Ends the current step: the profiler's schedule advances."""
    if _S.prof is None:
        return
    if _S.status["boundary"] is None:
        _S.status["boundary"] = kind
    _S.backward_since_step = False
    _S.status["steps"] += 1
    try:
        _S.prof.step()
    except Exception as exc:
        _S.error("profiler.step", exc)
    _nvtx(push="steptrace.iteration %d" % _S.status["steps"], pop=_S.nvtx_iteration_open)
    _S.nvtx_iteration_open = True


def step():
    """Explicit step marker (`import steptrace_capture; steptrace_capture.step()`): once called,
    automatic boundaries are turned off."""
    if _S is None:
        return
    _S.explicit = True
    _boundary("explicit")


def _install_hooks(torch):
    import functools

    def opt_pre(optimizer, args, kwargs):
        _nvtx(push="steptrace.optimizer")

    def opt_post(optimizer, args, kwargs):
        _nvtx(pop=True)
        _S.optimizer_seen = True
        if not _S.explicit and _S.backward_since_step:
            _boundary("optimizer_step")

    from torch.optim.optimizer import (
        register_optimizer_step_post_hook,
        register_optimizer_step_pre_hook,
    )

    register_optimizer_step_pre_hook(opt_pre)
    register_optimizer_step_post_hook(opt_post)

    orig_backward = torch.autograd.backward

    @functools.wraps(orig_backward)
    def backward(*args, **kwargs):
        _nvtx(push="steptrace.backward")
        try:
            return orig_backward(*args, **kwargs)
        finally:
            _nvtx(pop=True)
            _S.backward_since_step = True

    torch.autograd.backward = backward

    def fwd_pre(module, args):
        if _S.forward_depth == 0:
            # Fallback boundary: a new top-level forward after a backward pass with no
            # optimizer step in between (hand-written updates).
            if not _S.explicit and not _S.optimizer_seen and _S.backward_since_step:
                _boundary("backward_pass")
            _nvtx(push="steptrace.forward")
        _S.forward_depth += 1

    def fwd_post(module, args, output):
        _S.forward_depth = max(0, _S.forward_depth - 1)
        if _S.forward_depth == 0:
            _nvtx(pop=True)

    from torch.nn.modules.module import (
        register_module_forward_hook,
        register_module_forward_pre_hook,
    )

    register_module_forward_pre_hook(fwd_pre)
    register_module_forward_hook(fwd_post)


def _on_trace_ready(prof):
    torch = _S.torch
    if "trace" in _S.record:
        try:
            p = _S.path("trace", ".json")
            prof.export_chrome_trace(p)
            _S.status["files"]["trace"] = os.path.basename(p)
        except Exception as exc:
            _S.error("export_chrome_trace", exc)
    if "memory" in _S.record and torch.cuda.is_available():
        try:
            p = _S.path("snapshot", ".pickle")
            torch.cuda.memory._dump_snapshot(p)
            _S.status["files"]["snapshot"] = os.path.basename(p)
        except Exception as exc:
            _S.error("memory snapshot", exc)
    if _S.et is not None:
        _S.status["files"]["exec_trace"] = os.path.basename(_S.path("exec_trace", ".json"))
    if os.environ.get("STEPTRACE_REFERENCE") == "1":
        _write_references(prof, torch)
    _S.status["window_complete"] = _S.status["steps"] >= sum(
        _S.schedule[k] for k in ("skip_first", "wait", "warmup", "active")
    )
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
    if torch.cuda.is_available():
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
        try:
            # context="alloc": PyTorch 2.11's default ("all") makes backward fail under
            # non-reentrant activation checkpointing.
            torch.cuda.memory._record_memory_history(
                context="alloc", stacks="python", max_entries=_S.max_entries
            )
            st["memory_history"] = True
        except Exception as exc:
            _S.error("record_memory_history", exc)
    lib = os.environ.get("STEPTRACE_NVTX_LIB")
    if lib and "nvtx" in _S.record:
        try:
            torch.ops.load_library(lib)
            st["nvtx_shim"] = lib
        except Exception as exc:
            _S.error("load NVTX shim", exc)
    if "trace" in _S.record or "et" in _S.record:
        try:
            from torch.profiler import ProfilerActivity, profile, schedule

            if "et" in _S.record:
                from torch.profiler import ExecutionTraceObserver

                _S.et = ExecutionTraceObserver()
                _S.et.register_callback(_S.path("exec_trace", ".json"))
            acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
            _S.prof = profile(
                activities=acts,
                schedule=schedule(**_S.schedule),
                on_trace_ready=_on_trace_ready,
                record_shapes=True,
                profile_memory=True,
                with_stack=True,
                with_flops=True,
                with_modules=True,
                execution_trace_observer=_S.et,
            )
            _S.prof.start()
        except Exception as exc:
            _S.error("profiler", exc)
            _S.prof = None
    try:
        _install_hooks(torch)
    except Exception as exc:
        _S.error("hooks", exc)
    import atexit

    # Exit handlers run last-registered-first: registering again now, after torch's own, lets
    # ours stop the profiler before torch tears anything down. _at_exit runs once.
    atexit.register(_at_exit)
    _write_status()


def _at_exit():
    if _S.done:
        return
    _S.done = True
    torch = _S.torch
    if _S.nvtx_iteration_open:
        _nvtx(pop=True)
        _S.nvtx_iteration_open = False
    if torch is None:
        _S.status["no_trace_reason"] = "the program never imported torch"
        _S.status["exited_cleanly"] = True
        _write_status()
        return
    if _S.prof is not None:
        try:
            _S.prof.stop()  # a window cut short still reaches on_trace_ready
        except Exception as exc:
            _S.error("profiler.stop", exc)
    if _S.et is not None:
        try:
            _S.et.unregister_callback()
        except Exception as exc:
            _S.error("execution trace", exc)
    if "memory" in _S.record and _S.status.get("memory_history"):
        try:
            p = _S.path("snapshot_exit", ".pickle")
            torch.cuda.memory._dump_snapshot(p)
            _S.status["files"]["snapshot_exit"] = os.path.basename(p)
        except Exception as exc:
            _S.error("exit snapshot", exc)
    _S.status["exited_cleanly"] = True
    _write_status()


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

    sys.meta_path.insert(0, _TorchFinder())


def _install_sigterm():
    import signal

    # SIGTERM kills Python without running atexit; turn it into SystemExit so the window
    # recorded so far is written. Programs that install their own handler keep it.
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        def handler(signum, frame):
            raise SystemExit(128 + signum)

        try:
            signal.signal(signal.SIGTERM, handler)
        except ValueError:  # not the main thread
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
    if "torch" in sys.modules:
        _on_torch(sys.modules["torch"])
    else:
        _install_torch_hook()
    _write_status()


try:
    _boot()
except Exception as _exc:  # pragma: no cover - last resort, the program must run
    sys.stderr.write("steptrace: capture shim disabled: %s\n" % _exc)

# Expose the explicit marker as `steptrace_capture.step()`.
sys.modules.setdefault("steptrace_capture", sys.modules[__name__])

_chain_sitecustomize()
