//! What a plan's actions cost: the wrappers' own host work measured by the capture's probe
//! ([`Overheads`]), and the rates that turn a module's ops and bytes into time ([`Rates`]).
//! Where that work runs and how it adds up to a step is [`super::queue`].

use super::{OverheadSource, Overheads};

/// The host work a checkpoint or a swap adds beyond its module's own ops: the capture shim's
/// probe on the capture's machine ([`crate::model::run::PlanProbe`]), or none where the run has no
/// probe (the prediction then leaves it out, and says so).
pub(super) fn overheads_of(probe: Option<&crate::model::run::PlanProbe>) -> Overheads {
    match probe {
        Some(p) => Overheads {
            recompute_call_s: p.recompute_call_s,
            recompute_per_op_s: p.recompute_per_op_s,
            swap_call_s: p.swap_call_s,
            swap_per_op_s: p.swap_per_op_s,
            source: OverheadSource::CaptureProbe,
        },
        None => Overheads {
            source: OverheadSource::None,
            ..Overheads::default()
        },
    }
}

/// What turns a module's measured ops and bytes into time ([`candidates::build_candidates`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct Rates {
    /// The program's own host time per step (its step less the host's lead) over the
    /// instrumented step: profiled host time to real. Where `phases` is known, the same for
    /// the step's host time outside the forward and the backward.
    pub cpu_scale: f64,
    /// The forward's and the backward's own scales (capture timed both: Python programs).
    pub phases: Option<(f64, f64)>,
    /// How far the host ran ahead of the GPU at the end of a step, s (capture's timing phase;
    /// 0 where not measured or the step time is the instrumented one).
    pub host_lead_s: f64,
    /// Host→device bandwidth for swaps, GB/s.
    pub htod_gbps: f64,
    /// Device→host bandwidth for swaps, GB/s.
    pub dtoh_gbps: f64,
    /// The wrappers' own host work.
    pub overheads: Overheads,
}
