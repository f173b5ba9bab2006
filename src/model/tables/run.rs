//! What a capture's manifest says about the run beside its trace: the program's own step time
//! and the plan probe's figures (ingest reads them from manifest.json).

pub use steptrace_formats::summary::{PlanProbe, PlanTimedBothWays, TimingClock, TimingStop};

/// The program's own step time from a capture's manifest.
#[derive(Debug, Clone, PartialEq)]
pub struct ProgramStepTime {
    /// Step time, ns: the mean over the steps after the window (outliers left out), or the
    /// timing phase's median (`source`).
    pub ns: i64,
    /// Which steps were timed: after the window (the rest of the run) or the timing phase
    /// (steps before the window).
    pub source: steptrace_formats::StepTimeSource,
    /// Why a timing phase the figure comes from ended before its median settled (`step_cap`,
    /// `time_cap`), with the steps in the median: the figure is then a rough one.
    pub unsettled: Option<(TimingStop, usize)>,
    /// A plan timed both ways in the timing phase (`capture --plan-ab`, `sweep --budgets`).
    pub plan_ab: Option<PlanTimedBothWays>,
    /// How far the host ran ahead of the GPU at the end of a step in the timing phase, s
    /// (median): host time a step can gain before the GPU waits for it.
    pub host_lead_s: Option<f64>,
    /// Median host time of the program's `optimizer.step()` in the timing phase, s: this
    /// rank's host speed at the same work as the others', with nothing recorded.
    pub optimizer_step_s: Option<f64>,
    /// Median host time of the model's outermost forward call in the timing phase, s: the
    /// forward at the program's own speed (Python programs).
    pub forward_host_s: Option<f64>,
    /// Median host time of a backward call in the timing phase, s.
    pub backward_host_s: Option<f64>,
    /// Backward passes a step holds, where capture counted them per step (a program whose
    /// steps it marks by their backward passes: libtorch).
    pub passes_per_step: Option<usize>,
}
