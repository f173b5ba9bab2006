//! A capture's `manifest.json` as analysis reads it: the files it names, and per rank the
//! program's own step time, the plan probe's figures and a plan timed both ways.

pub use crate::model::tables::run::*;

/// The manifest's one definition, shared with capture, which writes it.
pub(super) use steptrace_formats::manifest::Manifest;
use steptrace_formats::manifest::{PhaseStop, Timing, TimingSource};
use steptrace_formats::StepTimeSource;

/// The program's own step time from a rank's `timing` in the manifest.
pub(super) fn program_step_time(t: &Timing) -> Option<ProgramStepTime> {
    let after = t.source == TimingSource::AfterWindow;
    let phase = t.timing_phase.as_ref();
    let stopped_at = phase.and_then(|p| p.stop).and_then(|s| match s {
        PhaseStop::StepCap => Some(TimingStop::StepCap),
        PhaseStop::TimeCap => Some(TimingStop::TimeCap),
        _ => None,
    });
    let plan_ab = phase.and_then(|phase| {
        let u = phase.unplanned.as_ref()?;
        let (with, without, clock) = match (phase.step_time_cuda_s, u.step_time_cuda_s) {
            (Some(w), Some(wo)) if w > 0.0 && wo > 0.0 => (w, wo, TimingClock::CudaEvents),
            _ => (phase.step_time_s, u.step_time_s, TimingClock::Host),
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
        .map(|s| (s, phase.map_or(0, |p| p.steps)));
    // A manifest written before the timing phase's figure became the CUDA-event one reads
    // the same as one written after (PhaseTiming::step_time).
    let step_time_s = match phase {
        Some(p) if t.source == TimingSource::TimingPhase => p.step_time(),
        _ => t.step_time_s,
    };
    Some(ProgramStepTime {
        ns: secs_to_ns(step_time_s)?,
        source: match t.source {
            TimingSource::AfterWindow => StepTimeSource::AfterWindow,
            TimingSource::TimingPhase => StepTimeSource::TimingPhase,
        },
        unsettled,
        plan_ab,
        host_lead_s: phase
            .and_then(|p| p.host_lead_s)
            .filter(|l| l.is_finite() && *l >= 0.0),
        optimizer_step_s: phase
            .and_then(|p| p.optimizer_step_s)
            .filter(|l| l.is_finite() && *l > 0.0),
        forward_host_s: phase
            .and_then(|p| p.forward_host_s)
            .filter(|l| l.is_finite() && *l > 0.0),
        backward_host_s: phase
            .and_then(|p| p.backward_host_s)
            .filter(|l| l.is_finite() && *l > 0.0),
        passes_per_step: t
            .after_window
            .as_ref()
            .and_then(|a| a.passes_per_step)
            .filter(|&k| k > 0),
    })
}

pub(super) fn secs_to_ns(s: f64) -> Option<i64> {
    (s.is_finite() && s > 0.0).then(|| (s * 1e9).round() as i64)
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
