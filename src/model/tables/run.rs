//! What a capture's manifest says about the run beside its trace: the program's own step time
//! and the plan probe's figures (ingest reads them from manifest.json).

/// What checkpointing and swapping a module cost on the machine a run was captured on,
/// measured by the capture shim at the program's exit on a chain of tiny ops: host
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
    /// Which steps were timed: after the window (the rest of the run) or the timing phase
    /// (steps before the window).
    pub source: steptrace_formats::StepTimeSource,
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
    /// Backward passes a step holds, where capture counted them per step (a program whose
    /// steps it marks by their backward passes: libtorch).
    pub passes_per_step: Option<usize>,
}

/// The timing phase of a planned capture whose steps alternated with and without the plan
///: what the plan adds, measured in one process.
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
