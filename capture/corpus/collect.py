"""One JSON line per corpus program: what capture and analyze report beside the references
measured in the same session (the program's own step time, torch.cuda.max_memory_allocated
per window step, FlopCounterMode). Used by run.sh: the capture as users run it (runs/NAME:
whole-run time, steps, step time, capture's costs) and a second one with the references
(runs/NAME.ref: peak and FLOPs checked there, against its own analysis).

    python3 collect.py NAME KIND WORKDIR PLAIN_RC CAPTURE_RC ANALYZE_RC PLAIN_S CAPTURE_S ANALYZE_S \
        REF_CAPTURE_RC REF_ANALYZE_RC REF_CAPTURE_S
"""

import json
import os
import re
import statistics
import sys

from progress_timer import per_step, printed_times, steady_mean


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except Exception:
        return None


def printed_iterations(text):
    """Per-iteration times (ms) a program prints with their iteration numbers, {iter: ms}
    (nanoGPT train.py with log_interval=1: "iter N: loss L, time T ms")."""
    return {int(i): float(t) for i, t in re.findall(r"iter (\d+): loss [0-9.]+, time ([0-9.]+)ms", text)}


def own_timing(text):
    """The program's own printed step time, ms, where it prints one."""
    m = re.findall(r"time per iteration: ([0-9.]+)ms", text)  # nanoGPT bench.py
    if m:
        return float(m[-1]), "printed: time per iteration"
    m = re.findall(r"ms/batch\s+([0-9.]+)", text)  # word_language_model
    if m:
        return statistics.median(float(x) for x in m), "printed: ms/batch (median of log lines)"
    later = [t for i, t in printed_iterations(text).items() if i >= 20]  # nanoGPT train.py
    if later:
        return statistics.median(later), "printed: iter time (median from iter 20)"
    return None, None


def phase_of(timing):
    """A manifest's timing-phase fields: nested under `timing_phase` since capture also times
    the steps after the window, at the top before."""
    return timing.get("timing_phase") or timing


# capture/src/finalize/timing.rs: the intervals after the window its figure leaves out.
AFTER_WINDOW_SETTLE = 2


def same_steps_printed(w, name, timing):
    """The program's own printed times, in the capture run itself, of exactly the steps the
    timing phase's estimate covers (its intervals after `settle`, starting at `first_step`):
    the one comparison that neither run-to-run drift nor early-step warm-up can move."""
    first = timing.get("first_step")
    n = len(timing.get("intervals_s") or [])
    if first is None or not n:
        return None, None
    try:
        with open(os.path.join(w, "logs", name + ".capture.out"), errors="replace") as f:
            printed = printed_iterations(f.read())
    except Exception:
        return None, None
    steps = range(first + timing.get("settle", 0), first + n)
    got = [printed[i] for i in steps if i in printed]
    if len(got) < len(steps):
        return None, None
    return statistics.median(got), "iterations %d-%d" % (steps[0], steps[-1])


def summary_path(w, name, rank=0):
    """An analysis's summary.json: at the top of its output for one rank; under rank<N>/ for a
    run directory of several ranks (the row's main fields are rank 0's, as for one rank)."""
    top = os.path.join(w, "an", name, "summary.json")
    return top if os.path.exists(top) else os.path.join(w, "an", name, "rank%d" % rank, "summary.json")


def per_rank(w, name, m, mr):
    """Every rank of a distributed run, each against its own references: steps, the
    uninstrumented step time, and the peak against that rank's max_memory_allocated."""
    out = []
    refs = {r.get("rank"): r for r in mr.get("ranks") or []}
    for r in m.get("ranks") or []:
        k = r.get("rank")
        s = load(summary_path(w, name, k)) or {}
        sr = load(summary_path(w, name + ".ref", k)) or {}
        peaks = ((refs.get(k) or {}).get("reference") or {}).get("window_step_peaks_bytes") or []
        one = {"rank": k, "boundary": r.get("boundary"), "steps_found": r.get("steps"),
               "iterations": s.get("iterations"),
               "step_time_ms": (s.get("step_time_s") or 0) * 1e3 or None,
               "step_time_instrumented_ms": (s.get("step_time_instrumented_s") or 0) * 1e3 or None,
               "peak_allocated": sr.get("peak_allocated_bytes"),
               "ref_max_memory_allocated": max(peaks) if peaks else None,
               "warnings": s.get("warnings")}
        if one["peak_allocated"] and one["ref_max_memory_allocated"]:
            one["peak_error_pct"] = 100.0 * (one["peak_allocated"] / one["ref_max_memory_allocated"] - 1)
        out.append(one)
    return out


def main():
    name, kind, w = sys.argv[1:4]
    plain_rc, cap_rc, an_rc = (int(x) for x in sys.argv[4:7])
    plain_s, cap_s, an_s = (float(x) for x in sys.argv[7:10])
    ref_cap_rc, ref_an_rc = (int(x) for x in sys.argv[10:12])
    ref_cap_s = float(sys.argv[12])
    row = {"name": name, "kind": kind, "plain_exit": plain_rc, "capture_exit": cap_rc,
           "analyze_exit": an_rc, "plain_run_s": plain_s, "capture_run_s": cap_s,
           "slowdown": cap_s / plain_s if plain_s > 0 else None, "analyze_s": an_s,
           "ref_capture_exit": ref_cap_rc, "ref_analyze_exit": ref_an_rc, "ref_capture_run_s": ref_cap_s}
    try:
        with open(os.path.join(w, "logs", name + ".plain.out"), errors="replace") as f:
            printed, how = own_timing(f.read())
        row["own_printed_step_ms"] = printed
        row["own_printed_how"] = how
    except Exception:
        pass
    plain_progress = load(os.path.join(w, "ref", name + ".progress_plain.json")) or {}
    if plain_progress.get("step_s"):
        # Its own progress lines, stamped as they came: no hook in the program at all.
        row["own_progress_plain_ms"] = plain_progress["step_s"] * 1e3
        row["own_progress_plain_intervals"] = plain_progress.get("intervals")
        row["reference_step_ms"] = row["own_progress_plain_ms"]
        row["reference_how"] = "its progress lines, timed (plain run, whole run)"
    m = load(os.path.join(w, "runs", name, "manifest.json")) or {}
    r0 = (m.get("ranks") or [{}])[0]
    row["capture_completed"] = m.get("completed")
    row["capture_incomplete"] = m.get("incomplete_reasons")
    row["capture_notes"] = m.get("notes")
    row["boundary"] = r0.get("boundary")
    row["steps_found"] = r0.get("steps")
    full = r0.get("timing") or {}
    timing = phase_of(full)
    row["step_time_source"] = full.get("source")
    row["timing_phase_ms"] = (timing.get("step_time_s") or 0) * 1e3 or None
    after = full.get("after_window") or {}
    row["after_window"] = after or None
    row["timing_intervals_ms"] = [round(x * 1e3, 4) for x in timing.get("intervals_s") or []]
    row["timing_cuda_ms"] = (timing.get("step_time_cuda_s") or 0) * 1e3 or None
    row["timing_first_step"] = timing.get("first_step")
    row["own_printed_same_run_steps_ms"], row["own_printed_same_run_steps"] = same_steps_printed(w, name, timing)
    # The same run's own progress over the steps the after-window figure covers.
    cap_progress = load(os.path.join(w, "ref", name + ".progress_capture.json")) or {}
    recs = cap_progress.get("records") or []
    since = after.get("start_epoch_ns")
    if cap_progress.get("records") and since:
        recs = cap_progress["records"]
        own = printed_times(recs, since)
        steps = per_step(recs, cap_progress.get("units_per_step") or 1, since)
        if own:
            row["own_same_run_after_window_ms"] = steady_mean(own) * 1e3
            row["own_same_run_after_window_how"] = "printed by the program (%d lines)" % len(own)
        elif steps:
            # The intervals capture's figure covers: its first AFTER_WINDOW_SETTLE left out
            # (they hold the window's end), then as many as it kept. Steps whose work changes
            # through the run (LBFGS converging) differ from one interval to the next.
            n = after.get("steps") or len(steps)
            kept = steps[AFTER_WINDOW_SETTLE:AFTER_WINDOW_SETTLE + n] if len(steps) > AFTER_WINDOW_SETTLE else steps
            row["own_same_run_after_window_ms"] = steady_mean(kept) * 1e3
            row["own_same_run_after_window_how"] = "its progress lines, timed (%d intervals)" % len(kept)
        # The timing phase's steps by the program's progress lines (one line a step), where
        # it prints no time of its own.
        first, n = timing.get("first_step"), len(timing.get("intervals_s") or [])
        if row["own_printed_same_run_steps_ms"] is None and first is not None and n and cap_progress.get("units_per_step", 1) == 1:
            by_step = {}
            for a, b in zip(recs, recs[1:]):
                if a[1] == b[1] and b[2] == a[2] + 1:
                    by_step[a[2]] = (b[0] - a[0]) * 1e-9
            want = range(first + timing.get("settle", 0), first + n)
            got = [by_step[i] for i in want if i in by_step]
            if len(got) == len(want):
                row["own_printed_same_run_steps_ms"] = statistics.median(got) * 1e3
                row["own_printed_same_run_steps"] = "steps %d-%d by its progress lines" % (want[0], want[-1])
    row["shim_errors"] = r0.get("errors")
    row["files"] = sorted((m.get("files") or {}).keys())
    row["costs_ms"] = r0.get("costs_ms")
    # Peak and FLOPs: the reference capture's own figures against its own analysis.
    mr = load(os.path.join(w, "runs", name + ".ref", "manifest.json")) or {}
    refd = ((mr.get("ranks") or [{}])[0]).get("reference") or {}
    peaks = refd.get("window_step_peaks_bytes") or []
    row["ref_max_memory_allocated"] = max(peaks) if peaks else None
    row["ref_flop_counter_total"] = refd.get("flop_counter_total")
    s = load(summary_path(w, name)) or {}
    row["iterations"] = s.get("iterations")
    row["iteration_detection"] = s.get("iteration_detection")
    row["step_time_ms"] = (s.get("step_time_s") or 0) * 1e3
    row["step_time_instrumented_ms"] = (s.get("step_time_instrumented_s") or 0) * 1e3 or None
    row["warnings"] = s.get("warnings")
    row["peak_allocated_user_run"] = s.get("peak_allocated_bytes")
    sr = load(summary_path(w, name + ".ref")) or {}
    row["peak_allocated"] = sr.get("peak_allocated_bytes")
    row["peak_node"] = sr.get("peak_node")
    row["flops_fcm_convention"] = sr.get("matmul_flops_per_iteration")
    # Phases: FlopCounterMode split at the step's backward calls, against steptrace's FLOPs by
    # phase (FlopCounterMode's convention where the summary has it).
    row["ref_flop_counter_forward"] = refd.get("flop_counter_forward")
    row["ref_flop_counter_backward"] = refd.get("flop_counter_backward")
    row["flops_by_phase"] = sr.get("flops_by_phase")
    row["matmul_flops_by_phase"] = sr.get("matmul_flops_by_phase")
    fwd = (sr.get("matmul_flops_by_phase") or {}).get("forward")
    if row["ref_flop_counter_forward"] and fwd is not None:
        row["forward_flops_error_pct"] = 100.0 * (fwd / row["ref_flop_counter_forward"] - 1)
    row["activations"] = sr.get("activations")
    row["peak_breakdown_bytes"] = sr.get("peak_breakdown_bytes")
    if row["ref_max_memory_allocated"] and row["peak_allocated"]:
        row["peak_error_pct"] = 100.0 * (row["peak_allocated"] / row["ref_max_memory_allocated"] - 1)
    own = row.get("own_printed_step_ms") or row.get("reference_step_ms")
    if own and row["step_time_ms"]:
        row["step_time_error_pct"] = 100.0 * (row["step_time_ms"] / own - 1)
    # The program's print over the timing phase's own steps is set beside the timing phase's
    # figure (the step time reported only where that is its source: a figure from the steps
    # after the window is set beside the print over those, below).
    same = row.get("own_printed_same_run_steps_ms")
    if same and row.get("timing_phase_ms"):
        row["timing_phase_same_steps_error_pct"] = 100.0 * (row["timing_phase_ms"] / same - 1)
    if same and row["step_time_ms"] and row.get("step_time_source") == "timing_phase":
        row["step_time_same_steps_error_pct"] = 100.0 * (row["step_time_ms"] / same - 1)
    same = row.get("own_same_run_after_window_ms")
    aw = (row.get("after_window") or {}).get("step_time_s")
    if same and aw:
        row["after_window_same_steps_error_pct"] = 100.0 * (aw * 1e3 / same - 1)
    if same and row["step_time_ms"] and row.get("step_time_source") == "after_window":
        row["step_time_same_run_error_pct"] = 100.0 * (row["step_time_ms"] / same - 1)
    if row["ref_flop_counter_total"] and row["flops_fcm_convention"]:
        row["flops_error_pct"] = 100.0 * (row["flops_fcm_convention"] / row["ref_flop_counter_total"] - 1)
    if len(m.get("ranks") or []) > 1:
        row["ranks"] = per_rank(w, name, m, mr)
    try:
        with open(os.path.join(w, "logs", name + ".analyze.err"), errors="replace") as f:
            row["analyze_stderr"] = f.read()[-600:]
    except Exception:
        pass
    print(json.dumps(row))


if __name__ == "__main__":
    main()
