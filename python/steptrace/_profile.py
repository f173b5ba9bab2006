"""`steptrace.profile`: seed 003's profiler decorator and context manager, recording in-process
the run directory `steptrace capture` writes (trace, memory snapshot, Execution Trace, the
program's own step time, manifest.json), so that `steptrace analyze` reads it unchanged.

    @steptrace.profile(output_dir="runs/a")
    def train():
        for batch in loader:
            ...
            optimizer.step()
            steptrace.step()

    with steptrace.profile(output_dir="runs/a") as p:
        for batch in loader:
            ...
            p.step()

The recording is the capture shim's own code (the launcher's sitecustomize, carried in the
extension), started here instead of at interpreter start-up. Under `steptrace capture` the
launcher's shim is already recording: `profile` then records nothing itself and its `step()`
marks the launcher's steps, so one program runs the same under both.
"""

import functools
import json
import os
import sys
import time
import types

from . import _native

__all__ = ["profile", "step"]

# The profile recording in this process, if any (one at a time: the profiler is global).
_active = None

_RANK_FILES = ("trace", "snapshot", "snapshot_exit", "exec_trace", "shim")
_EXTS = (".json", ".json.gz", ".json.tmp", ".pickle", ".pickle.gz")


def _shim():
    """The capture shim as a module of this package (run once, from the extension's copy)."""
    mod = sys.modules.get("steptrace._shim")
    if mod is None:
        mod = types.ModuleType("steptrace._shim")
        code = compile(_native.capture_shim_source(), "<steptrace capture shim>", "exec")
        exec(code, mod.__dict__)  # our own source, carried in the extension
        sys.modules["steptrace._shim"] = mod
    return mod


def _launched():
    """The shim `steptrace capture` started in this process, when it is recording."""
    mod = sys.modules.get("steptrace_capture")
    if mod is None or mod is sys.modules.get("steptrace._shim"):
        return None
    return mod if getattr(mod, "_S", None) is not None else None


def step():
    """Marks the end of a training step for the profile recording now (or for
    `steptrace capture`'s, under it); does nothing when neither records."""
    if _active is not None:
        _active.step()
        return
    launched = _launched()
    if launched is not None:
        launched.step()


class profile:
    """Records a window of training steps into `output_dir`, as `steptrace capture` does.

    Options, with seed 003's names and defaults: `enabled`, `output_dir`, the schedule
    (`skip_first` 1, `wait` 1, `warmup` 1, `active` 3, `repeat` 1), `with_flops` (on),
    `nsight_enabled` (NVTX ranges per step and phase, and the active window as the CUDA
    profiler's range for `nsys profile --capture-range=cudaProfilerApi`) and `nsight_output`
    (the name `nsys -o` is told, in the manifest's note). `with_stack` and `with_modules` are on
    by default, unlike the seed's: steptrace's nodes are modules, and their memory is placed by
    stack. Beyond the seed: `memory` (the CUDA allocator's history and snapshot), `exec_trace`,
    `timing_steps` / `timing_max_steps` / `timing_max_s` (the program's own step time, timed
    before the window with nothing recorded, as capture does), `max_entries` (allocator
    history kept) and `rank_wait_s` (how long rank 0 waits for the other ranks' files before
    it writes the manifest).

    Under torchrun every rank records into the same `output_dir`, its files named `_rank<N>`
    as capture names them, and rank 0 writes the one manifest.json once all have finished.
    Steps are those the program marks with `p.step()` or `steptrace.step()`.
    """

    def __init__(
        self,
        enabled=True,
        output_dir="./profiler_logs",
        skip_first=1,
        wait=1,
        warmup=1,
        active=3,
        repeat=1,
        with_stack=True,
        with_flops=True,
        with_modules=True,
        nsight_enabled=False,
        nsight_output="nsight_profile",
        *,
        memory=True,
        exec_trace=True,
        timing_steps=10,
        timing_max_steps=20,
        timing_max_s=10,
        max_entries=1_000_000,
        rank_wait_s=600,
    ):
        self._options = dict(locals())
        del self._options["self"]
        for name in ("skip_first", "wait", "warmup", "active", "repeat"):
            v = self._options[name]
            if not isinstance(v, int) or v < 0:
                raise ValueError(f"{name} must be a whole number of steps, got {v!r}")
        if active < 1:
            raise ValueError("active must be at least 1 step")
        self.enabled = bool(enabled)
        self.output_dir = os.path.abspath(os.fspath(output_dir))
        self.schedule = (
            f"skip_first={skip_first},wait={wait},warmup={warmup},active={active},repeat={repeat}"
        )
        self.record = ["trace"]
        if memory:
            self.record.append("memory")
        if exec_trace:
            self.record.append("et")
        if nsight_enabled:
            self.record.append("nvtx")
        self.manifest = None
        self._state = None

    # -- decorator ---------------------------------------------------------------------------

    def __call__(self, fn):
        options = self._options

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with profile(**options):
                return fn(*args, **kwargs)

        return wrapper

    # -- context manager ---------------------------------------------------------------------

    def __enter__(self):
        global _active
        if not self.enabled:
            return self
        launched = _launched()
        if launched is not None:
            if hasattr(launched, "explicit_steps"):
                launched.explicit_steps()
            self._state = ("launched", launched)
            return self
        if _active is not None:
            raise RuntimeError("steptrace.profile: another profile is recording in this process")
        rank = int(os.environ.get("RANK", "0") or 0)
        world = int(os.environ.get("WORLD_SIZE", "1") or 1)
        os.makedirs(self.output_dir, exist_ok=True)
        suffix = f"_rank{rank}" if ("RANK" in os.environ or world > 1) else ""
        self._clear_stale(rank, world, suffix)
        o = self._options
        if "TEARDOWN_CUPTI" not in os.environ:
            # As capture sets it: Kineto otherwise keeps CUPTI subscribed after the window,
            # and a launch-bound step ran 30-40% slower for the rest of the run (an H100).
            os.environ["TEARDOWN_CUPTI"] = "1"
            os.environ["STEPTRACE_SET_TEARDOWN_CUPTI"] = "1"
        env = dict(os.environ)
        env.update(
            {
                "STEPTRACE_OUT": self.output_dir,
                "STEPTRACE_SCHEDULE": self.schedule,
                "STEPTRACE_RECORD": ",".join(self.record),
                "STEPTRACE_MAX_ENTRIES": str(int(o["max_entries"])),
                "STEPTRACE_TIMING_STEPS": str(int(o["timing_steps"])),
                "STEPTRACE_TIMING_MAX_STEPS": str(int(o["timing_max_steps"])),
                "STEPTRACE_TIMING_MAX_S": str(o["timing_max_s"]),
                "STEPTRACE_PROFILER_WITH": ",".join(
                    n for n in ("stack", "flops", "modules") if o["with_" + n]
                ),
                "STEPTRACE_CUDA_PROFILER_RANGE": "1" if o["nsight_enabled"] else "0",
            }
        )
        shim = _shim()
        started_at = _native.utc_now()
        shim.start(env)
        self._state = ("recording", shim, rank, world, suffix, started_at)
        _active = self
        return self

    def step(self):
        """Ends a training step (the profiler's schedule advances, the step is timed)."""
        if self._state is None:
            return
        self._state[1].step()

    def __exit__(self, exc_type, exc, tb):
        global _active
        state, self._state = self._state, None
        if state is None or state[0] != "recording":
            return False
        _, shim, rank, world, suffix, started_at = state
        _active = None
        shim.stop()
        if rank != 0:
            return False
        notes = []
        missing = self._wait_for_ranks(world)
        if missing:
            notes.append(
                "rank(s) %s had not finished %d s after rank 0: their files are left out"
                % (", ".join(map(str, missing)), self._options["rank_wait_s"])
            )
        if self._options["nsight_enabled"]:
            notes.append(
                "the active window is the CUDA profiler's range: `nsys profile "
                "--capture-range=cudaProfilerApi -o %s python ...` records it alone"
                % self._options["nsight_output"]
            )
        o = self._options
        text = _native.finish_capture(
            self.output_dir,
            argv=[str(a) for a in (getattr(sys, "orig_argv", None) or sys.argv)],
            schedule=self.schedule,
            record=self.record,
            timing=(int(o["timing_steps"]), int(o["timing_max_steps"]), int(o["timing_max_s"])),
            max_entries=int(o["max_entries"]),
            started_at=started_at,
            raised=None if exc_type is None else f"{exc_type.__name__}: {exc}",
            notes=notes,
        )
        self.manifest = json.loads(text)
        return False

    # -- files -------------------------------------------------------------------------------

    def _status_path(self, rank, world):
        suffix = f"_rank{rank}" if ("RANK" in os.environ or world > 1) else ""
        return os.path.join(self.output_dir, f"shim{suffix}.json")

    def _wait_for_ranks(self, world):
        """Rank 0 waits for every other rank's status to report its end; returns the ranks
        that did not within `rank_wait_s`."""
        deadline = time.monotonic() + float(self._options["rank_wait_s"])
        waiting = list(range(1, world))
        while waiting:
            still = []
            for r in waiting:
                try:
                    with open(self._status_path(r, world)) as f:
                        done = json.load(f).get("exited_cleanly") is True
                except (OSError, ValueError):
                    done = False
                if not done:
                    still.append(r)
            waiting = still
            if not waiting or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        return waiting

    def _clear_stale(self, rank, world, suffix):
        """Removes what an earlier recording into the same folder left under this rank's
        names (rank 0: the manifest too, and the files of ranks beyond this run's), so that
        none of it can stand in for a file this run does not write."""
        names = {base + suffix + ext for base in _RANK_FILES for ext in _EXTS}
        if rank == 0:
            names.add("manifest.json")
            for entry in os.listdir(self.output_dir):
                for base in _RANK_FILES:
                    tail = entry[len(base) + 5 :] if entry.startswith(base + "_rank") else ""
                    digits = tail.split(".", 1)[0]
                    if digits.isdigit() and int(digits) >= world:
                        names.add(entry)
        for name in names:
            path = os.path.join(self.output_dir, name)
            if os.path.isfile(path) and not os.path.islink(path):
                os.remove(path)

    def __repr__(self):
        return f"<steptrace.profile {self.output_dir!r} {self.schedule}>"
