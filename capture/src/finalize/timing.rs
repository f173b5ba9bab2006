//! The program's own step time from a shim's clock readings: the timing phase before the
//! window (with a plan, each way), and the steps after it.

use super::ShimStatus;
use steptrace_formats::manifest::PhaseStop;
pub use steptrace_formats::manifest::{
    AfterWindow, PhaseTiming, StepMarker, Timing, TimingSource, Unplanned,
};

/// Steps after the window needed for their figure to be the reported step time.
pub const MIN_AFTER_WINDOW_STEPS: usize = 50;

/// Intervals after the window left out of its figure: the first holds the window's end (the
/// trace written, the profiler torn down).
const AFTER_WINDOW_SETTLE: usize = 2;

/// An interval after the window longer than this many times the median is not a step's time
/// but an epoch's end, an evaluation pass or a checkpoint, and is left out of the mean.
const AFTER_WINDOW_OUTLIER: f64 = 5.0;

fn median(v: &[f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    Some(if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    })
}

/// The program's step time from a shim's status: the steps after the window, else the timing
/// phase (`None` with neither).
pub fn program_timing(st: &ShimStatus) -> Option<Timing> {
    let phase = timing_phase(
        &st.timing_ns,
        &st.timing_cuda_ms,
        st.timing_settle,
        st.timing_stop,
        &st.timing_plan_on,
    )
    .map(|t| PhaseTiming {
        first_step: st.timing_first_step,
        host_lead_s: if st.timing_plan_on.is_empty() {
            st.timing_cuda_last_done_ns
                .and_then(|done| host_lead(&st.timing_ns, &st.timing_cuda_ms, done, t.settle))
        } else {
            None
        },
        optimizer_step_s: median_s(&st.timing_optimizer_ns),
        forward_host_s: median_s(&st.timing_forward_ns),
        backward_host_s: median_s(&st.timing_backward_ns),
        ..t
    });
    let after = st.after_window_start_ns.and_then(|start| {
        let (marks, every, marker) = if st.after_window_ns.len() > AFTER_WINDOW_SETTLE + 1 {
            (&st.after_window_ns, 1, StepMarker::StepHooks)
        } else {
            let k = passes_per_step(&st.timing_ns, &st.backward_pass_ns)?;
            (&st.backward_pass_ns, k, StepMarker::BackwardPasses)
        };
        let a = after_window(marks, start, every, marker)?;
        Some(AfterWindow {
            start_epoch_ns: st.after_window_start_epoch_ns,
            ..a
        })
    });
    choose(after, phase)
}

/// The median of clock readings in ns (durations, the positive ones), seconds.
fn median_s(ns: &[i64]) -> Option<f64> {
    let v: Vec<f64> = ns
        .iter()
        .filter(|&&d| d > 0)
        .map(|&d| d as f64 * 1e-9)
        .collect();
    median(&v)
}

/// The step time from the steps after a window and a timing phase (which may come from an
/// earlier run of the same program: a short program captured again, `crate::run`).
pub fn choose(after: Option<AfterWindow>, phase: Option<PhaseTiming>) -> Option<Timing> {
    let (step_time_s, source) = match (&after, &phase) {
        (Some(a), _) if a.steps >= MIN_AFTER_WINDOW_STEPS => {
            (a.step_time_s, TimingSource::AfterWindow)
        }
        // A phase that ended at a cap before its median settled is a figure over its last few
        // steps only: fewer than ran after the window, those win (nanoGPT's bench.py, 4 steps
        // capped: two steps at 80 and 62 ms made its 37 ms step 71 ms; the 12 after: 38 ms).
        // A distributed run's fixed `lockstep` phase is not such a figure.
        // Only where the steps after the window do the same work as the phase's fastest:
        // work that changed after the window (LBFGS converged: one closure a step where the
        // phase's steps ran twenty, 0.35 s against 2.3 s) leaves the phase, next to the
        // window, as the figure for the steps the window shows.
        (Some(a), Some(p))
            if p.stop.is_some_and(PhaseStop::capped)
                && p.unplanned.is_none()
                && a.steps > p.steps
                && same_work(a, p) =>
        {
            (a.step_time_s, TimingSource::AfterWindow)
        }
        (_, Some(p)) => (p.step_time(), TimingSource::TimingPhase),
        (Some(a), None) => (a.step_time_s, TimingSource::AfterWindow),
        (None, None) => return None,
    };
    Some(Timing {
        step_time_s,
        source,
        timing_phase: phase,
        after_window: after,
    })
}

/// Whether the steps after the window do the work of the timing phase's steps: their median
/// within [`SAME_WORK_RATIO`] of the phase's fastest interval (a phase still warming up is
/// slower than the steps after the window; nanoGPT's bench.py: 62 ms at the phase's end
/// against 38 ms after it).
fn same_work(a: &AfterWindow, p: &PhaseTiming) -> bool {
    let fastest = p.intervals_s.iter().copied().fold(f64::INFINITY, f64::min);
    fastest.is_finite()
        && a.median_s > 0.0
        && fastest / a.median_s <= SAME_WORK_RATIO
        && a.median_s / fastest <= SAME_WORK_RATIO
}

/// See [`same_work`].
const SAME_WORK_RATIO: f64 = 2.0;

/// How far the host was ahead of the GPU at each boundary after the `settle` first intervals,
/// median, seconds: at the last boundary, when the GPU reached it (`last_done_ns`, read after
/// waiting for its event) less when the host did; at each earlier one, that less what the
/// GPU's intervals since took beyond the host's (the events' intervals, `cuda_ms`, are the
/// GPU's clock between the same boundaries). A host behind the GPU is 0 ahead. `None` unless
/// every interval has its event.
pub fn host_lead(
    boundaries_ns: &[i64],
    cuda_ms: &[f64],
    last_done_ns: i64,
    settle: usize,
) -> Option<f64> {
    let n = boundaries_ns.len();
    if n < 2 || cuda_ms.len() != n - 1 {
        return None;
    }
    let mut lead = (last_done_ns - boundaries_ns[n - 1]) as f64 * 1e-9;
    let mut leads = vec![lead.max(0.0)];
    for i in (1..n - 1).rev() {
        // Boundary i, from boundary i + 1: the GPU took cuda_ms[i] between them, the host
        // the difference of its readings.
        let host = (boundaries_ns[i + 1] - boundaries_ns[i]) as f64 * 1e-9;
        lead -= cuda_ms[i] * 1e-3 - host;
        leads.push(lead.max(0.0));
    }
    // leads[k] is boundary n - 1 - k; keep the boundaries that end a timed interval.
    let timed: Vec<f64> = leads
        .into_iter()
        .enumerate()
        .filter(|&(k, _)| n - 1 - k > settle)
        .map(|(_, l)| l)
        .collect();
    median(&timed)
}

/// Backward passes per step: the number of passes that start (or end) between consecutive
/// boundaries of the timing phase, where most of its intervals hold the same number (its first
/// interval can hold more: the boundary rule may settle on a step's first op only there). A
/// program whose passes do not repeat the same way every step gets `None`.
pub fn passes_per_step(boundaries_ns: &[i64], passes_ns: &[i64]) -> Option<usize> {
    if boundaries_ns.len() < 2 {
        return None;
    }
    // Both lists are in clock order: a pass count is the distance between two insertion points.
    let at = |t: i64| passes_ns.partition_point(|&p| p < t);
    let mut counts: Vec<usize> = boundaries_ns
        .windows(2)
        .map(|w| at(w[1]) - at(w[0]))
        .collect();
    counts.sort_unstable();
    let k = counts[counts.len() / 2];
    let agree = counts.iter().filter(|&&c| c == k).count();
    (k >= 1 && 2 * agree > counts.len()).then_some(k)
}

/// Every `every`-th marker after `start`, as step intervals; the first
/// [`AFTER_WINDOW_SETTLE`] left out while others remain.
fn after_window(
    markers_ns: &[i64],
    start: i64,
    every: usize,
    marker: StepMarker,
) -> Option<AfterWindow> {
    let marks: Vec<i64> = markers_ns
        .iter()
        .copied()
        .filter(|&t| t > start)
        .step_by(every.max(1))
        .collect();
    let intervals: Vec<f64> = marks
        .windows(2)
        .map(|w| (w[1] - w[0]) as f64 * 1e-9)
        .collect();
    let skip = if intervals.len() > AFTER_WINDOW_SETTLE {
        AFTER_WINDOW_SETTLE
    } else {
        0
    };
    let kept = &intervals[skip..];
    let median_s = median(kept)?;
    let mut sorted = kept.to_vec();
    sorted.sort_by(f64::total_cmp);
    // Sorted, the steady intervals are a prefix.
    let steady = &sorted[..sorted.partition_point(|&x| x <= AFTER_WINDOW_OUTLIER * median_s)];
    let step_time_s = steady.iter().sum::<f64>() / steady.len() as f64;
    let pct = |p: f64| sorted[((sorted.len() - 1) as f64 * p).round() as usize];
    Some(AfterWindow {
        steps: kept.len(),
        step_time_s,
        median_s,
        outliers: kept.len() - steady.len(),
        p10_s: pct(0.1),
        p90_s: pct(0.9),
        marker,
        passes_per_step: (marker == StepMarker::BackwardPasses).then_some(every),
        start_epoch_ns: None,
    })
}

/// Timing from boundary clock readings (ns) and CUDA-event intervals (ms). The first `settle`
/// intervals (warm-up: autotuning, allocator growth) are left out while any remain after them.
/// `plan_on`, when the shim timed a plan both ways, says for each interval whether its step ran
/// with the plan: the figures are then the steps with it, and [`Unplanned`] the others.
/// `None` with fewer than two readings (or no step with the plan).
pub fn timing_phase(
    boundaries_ns: &[i64],
    cuda_ms: &[f64],
    settle: usize,
    stop: Option<PhaseStop>,
    plan_on: &[bool],
) -> Option<PhaseTiming> {
    let intervals: Vec<f64> = boundaries_ns
        .windows(2)
        .map(|w| (w[1] - w[0]) as f64 * 1e-9)
        .collect();
    let skip = if intervals.len() > settle { settle } else { 0 };
    let cuda: Vec<f64> = cuda_ms.iter().map(|m| m * 1e-3).collect();
    let cuda_skip = if cuda.len() > settle { settle } else { 0 };
    // The intervals after the settling ones whose step ran with the plan (`want`), or all. The
    // shim runs a plan timed both ways in pairs of steps and times the second of each: the
    // first starts with what the step before the other way left queued.
    let ab = plan_on.len() >= intervals.len() && !intervals.is_empty();
    let pick = |v: &[f64], skip: usize, want: bool| -> Vec<f64> {
        v.iter()
            .enumerate()
            .skip(skip)
            .filter(|&(i, _)| {
                !ab || (i >= 1 && plan_on.get(i) == Some(&want) && plan_on[i - 1] == want)
            })
            .map(|(_, &x)| x)
            .collect()
    };
    let timed = pick(&intervals, skip, true);
    let step_time_s = median(&timed)?;
    let unplanned = ab
        .then(|| {
            let off = pick(&intervals, skip, false);
            Some(Unplanned {
                steps: off.len(),
                step_time_s: median(&off)?,
                step_time_cuda_s: median(&pick(&cuda, cuda_skip, false)),
                plan_on: plan_on[..intervals.len()].to_vec(),
            })
        })
        .flatten();
    Some(PhaseTiming {
        steps: timed.len(),
        settle: skip,
        stop,
        step_time_s,
        step_time_cuda_s: median(&pick(&cuda, cuda_skip, true)),
        intervals_s: intervals,
        first_step: None,
        host_lead_s: None,
        optimizer_step_s: None,
        forward_host_s: None,
        backward_host_s: None,
        unplanned,
    })
}

#[cfg(test)]
mod tests;
