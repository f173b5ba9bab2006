//! A capture's `manifest.json` as analysis reads it: the files it names, and per rank the
//! program's own step time, the plan probe's figures and a plan timed both ways (issues 17, 20).

use serde::Deserialize;

/// What checkpointing and swapping a module cost on the machine a run was captured on,
/// measured by the capture shim at the program's exit on a chain of tiny ops (issue 20): host
/// time that a trace cannot show at its real size, since the profiler's Python tracing inflates
/// Python-heavy code far more than ops.
#[derive(Debug, Clone, Copy, PartialEq, serde::Deserialize, serde::Serialize)]
pub struct PlanProbe {
    /// A non-reentrant checkpoint's own host time per call (set-up, RNG state), s.
    pub recompute_call_s: f64,
    /// Its host time per op of the module, beyond the op's replay (saved-tensor hooks in the
    /// forward and the recompute), s.
    pub recompute_per_op_s: f64,
    /// The swap hooks' host time per call, s.
    pub swap_call_s: f64,
    /// Their host time per op (pack and unpack, the copies' launches), s.
    pub swap_per_op_s: f64,
    /// Pinned device→host bandwidth, GB/s.
    pub dtoh_gbps: f64,
    /// Pinned host→device bandwidth, GB/s.
    pub htod_gbps: f64,
}

/// The program's own step time from a capture's manifest.
#[derive(Debug, Clone, PartialEq)]
pub struct ProgramStepTime {
    /// Step time, ns: the mean over the steps after the window (outliers left out), or the
    /// timing phase's median (`source`).
    pub ns: i64,
    /// Which steps were timed: `after_window` (the rest of the run) or `timing_phase` (steps
    /// before the window).
    pub source: &'static str,
    /// Why a timing phase the figure comes from ended before its median settled (`step_cap`,
    /// `time_cap`), with the steps in the median: the figure is then a rough one.
    pub unsettled: Option<(String, usize)>,
    /// A plan timed both ways in the timing phase (`capture --plan-ab`, `sweep --budgets`).
    pub plan_ab: Option<PlanTimedBothWays>,
    /// How far the host ran ahead of the GPU at the end of a step in the timing phase, s
    /// (median): host time a step can gain before the GPU waits for it.
    pub host_lead_s: Option<f64>,
    /// Median host time of the program's `optimizer.step()` in the timing phase, s: this
    /// rank's host speed at the same work as the others', with nothing recorded.
    pub optimizer_step_s: Option<f64>,
}

/// The timing phase of a planned capture whose steps alternated with and without the plan
/// (issue 20): what the plan adds, measured in one process.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct PlanTimedBothWays {
    /// Median step with the plan, s.
    pub step_time_with_s: f64,
    /// Median step without it, s.
    pub step_time_without_s: f64,
    /// Which clock: `cuda_events` (events recorded on the stream at each boundary) where the
    /// shim had them, else `host`. The host clock reads a boundary when the CPU reaches it; a
    /// program that waits for the GPU after its boundary (`loss.item()` after the optimizer
    /// step) then counts each step's GPU time in the next step's interval, which with
    /// alternating steps moves the plan's cost into the steps without it (nanoGPT's bench.py:
    /// 49.7 and 30.7 ms on the host clock, 42.8 and 36.6 ms on the stream).
    pub clock: &'static str,
    /// Steps timed with it.
    pub steps_with: usize,
    /// Steps timed without it.
    pub steps_without: usize,
    /// Where the timing phase stopped at a cap (`step_cap`, `time_cap`) before both medians
    /// settled: the figures are then rough ones (nanoGPT's bench.py leaves room for medians
    /// of 2 steps each way); `None` when they settled.
    pub stopped_at: Option<&'static str>,
}

use steptrace_capture::finalize::{Timing, TimingSource};
/// The manifest's one definition, shared with capture, which writes it.
pub(super) use steptrace_capture::Manifest;

/// The program's own step time from a rank's `timing` in the manifest.
pub(super) fn program_step_time(t: &Timing) -> Option<ProgramStepTime> {
    let after = t.source == TimingSource::AfterWindow;
    let phase = t.timing_phase.as_ref();
    let stopped_at = match phase.and_then(|p| p.stop.as_deref()) {
        Some("step_cap") => Some("step_cap"),
        Some("time_cap") => Some("time_cap"),
        _ => None,
    };
    let plan_ab = phase.and_then(|phase| {
        let u = phase.unplanned.as_ref()?;
        let (with, without, clock) = match (phase.step_time_cuda_s, u.step_time_cuda_s) {
            (Some(w), Some(wo)) if w > 0.0 && wo > 0.0 => (w, wo, "cuda_events"),
            _ => (phase.step_time_s, u.step_time_s, "host"),
        };
        (with > 0.0 && without > 0.0).then_some(PlanTimedBothWays {
            step_time_with_s: with,
            step_time_without_s: without,
            clock,
            steps_with: phase.steps,
            steps_without: u.steps,
            stopped_at,
        })
    });
    let unsettled = stopped_at
        .filter(|_| !after)
        .map(|s| (s.to_owned(), phase.map_or(0, |p| p.steps)));
    Some(ProgramStepTime {
        ns: secs_to_ns(t.step_time_s)?,
        source: t.source.as_str(),
        unsettled,
        plan_ab,
        host_lead_s: phase
            .and_then(|p| p.host_lead_s)
            .filter(|l| l.is_finite() && *l >= 0.0),
        optimizer_step_s: phase
            .and_then(|p| p.optimizer_step_s)
            .filter(|l| l.is_finite() && *l > 0.0),
    })
}

pub(super) fn secs_to_ns(s: f64) -> Option<i64> {
    (s.is_finite() && s > 0.0).then(|| (s * 1e9).round() as i64)
}

/// A rank's plan probe as the manifest holds it (the shim's own object), where it has every
/// figure.
pub(super) fn plan_probe(v: Option<&serde_json::Value>) -> Option<PlanProbe> {
    v.and_then(|v| PlanProbe::deserialize(v).ok())
}

/// The files a manifest (or one of its ranks) names for analysis.
#[derive(Debug, Default)]
pub(super) struct ManifestFiles {
    pub(super) trace: Option<String>,
    pub(super) snapshot: Option<String>,
    pub(super) exec_trace: Option<String>,
}

impl ManifestFiles {
    pub(super) fn of(files: &std::collections::BTreeMap<String, String>) -> Self {
        ManifestFiles {
            trace: files.get("trace").cloned(),
            snapshot: files.get("snapshot").cloned(),
            exec_trace: files.get("exec_trace").cloned(),
        }
    }
}
