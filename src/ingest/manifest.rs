//! A capture's `manifest.json` as analysis reads it: the files it names, and per rank the
//! program's own step time, the plan probe's figures and a plan timed both ways (issues 17, 20).

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

/// Files listed by a capture's `manifest.json` (`files.trace`, `files.snapshot`,
/// `files.exec_trace`, relative to the directory).
#[derive(Debug, serde::Deserialize)]
pub(super) struct Manifest {
    #[serde(default)]
    pub(super) files: ManifestFiles,
    #[serde(default)]
    pub(super) ranks: Vec<ManifestRank>,
    #[serde(default)]
    pub(super) step_time_s: Option<f64>,
}

#[derive(Debug, serde::Deserialize)]
pub(super) struct ManifestRank {
    pub(super) rank: i64,
    #[serde(default)]
    pub(super) files: ManifestFiles,
    #[serde(default)]
    pub(super) timing: Option<ManifestTiming>,
    /// Absent in captures before the probe, and where it could not run (no CUDA).
    #[serde(default)]
    pub(super) plan_probe: Option<PlanProbe>,
}

/// A rank's `timing` in the manifest: `step_time_s` with its `source` and the timing phase
/// nested (`timing_phase`), or, as capture wrote it before the after-window timing, the timing
/// phase's fields at the top.
#[derive(Debug, serde::Deserialize)]
pub(super) struct ManifestTiming {
    pub(super) step_time_s: f64,
    #[serde(default)]
    pub(super) source: Option<String>,
    #[serde(default)]
    pub(super) timing_phase: Option<ManifestPhase>,
    #[serde(flatten)]
    pub(super) flat: ManifestPhase,
}

#[derive(Debug, Default, serde::Deserialize)]
pub(super) struct ManifestPhase {
    #[serde(default)]
    pub(super) steps: usize,
    /// Why the timing phase ended (absent before the settling rule).
    #[serde(default)]
    pub(super) stop: Option<String>,
    /// The phase's median (steps with the plan, when it was timed both ways).
    #[serde(default)]
    pub(super) step_time_s: Option<f64>,
    /// The same on the stream's clock (CUDA events).
    #[serde(default)]
    pub(super) step_time_cuda_s: Option<f64>,
    /// The steps without the plan, when it was timed both ways.
    #[serde(default)]
    pub(super) unplanned: Option<ManifestUnplanned>,
    /// How far the host ran ahead of the GPU (absent before capture measured it).
    #[serde(default)]
    pub(super) host_lead_s: Option<f64>,
    /// Median host time of an `optimizer.step()` call (absent before capture measured it).
    #[serde(default)]
    pub(super) optimizer_step_s: Option<f64>,
}

#[derive(Debug, serde::Deserialize)]
pub(super) struct ManifestUnplanned {
    pub(super) steps: usize,
    pub(super) step_time_s: f64,
    #[serde(default)]
    pub(super) step_time_cuda_s: Option<f64>,
}

impl ManifestTiming {
    pub(super) fn program_step_time(&self) -> Option<ProgramStepTime> {
        let after = self.source.as_deref() == Some("after_window");
        let phase = self.timing_phase.as_ref().unwrap_or(&self.flat);
        let stopped_at = match phase.stop.as_deref() {
            Some("step_cap") => Some("step_cap"),
            Some("time_cap") => Some("time_cap"),
            _ => None,
        };
        let plan_ab = phase.unplanned.as_ref().and_then(|u| {
            let (with, without, clock) = match (phase.step_time_cuda_s, u.step_time_cuda_s) {
                (Some(w), Some(wo)) if w > 0.0 && wo > 0.0 => (w, wo, "cuda_events"),
                _ => (phase.step_time_s?, u.step_time_s, "host"),
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
            .map(|s| (s.to_owned(), phase.steps));
        Some(ProgramStepTime {
            ns: secs_to_ns(self.step_time_s)?,
            source: if after {
                "after_window"
            } else {
                "timing_phase"
            },
            unsettled,
            plan_ab,
            host_lead_s: phase.host_lead_s.filter(|l| l.is_finite() && *l >= 0.0),
            optimizer_step_s: phase.optimizer_step_s.filter(|l| l.is_finite() && *l > 0.0),
        })
    }
}

pub(super) fn secs_to_ns(s: f64) -> Option<i64> {
    (s.is_finite() && s > 0.0).then(|| (s * 1e9).round() as i64)
}

#[derive(Debug, Default, serde::Deserialize)]
pub(super) struct ManifestFiles {
    pub(super) trace: Option<String>,
    pub(super) snapshot: Option<String>,
    pub(super) exec_trace: Option<String>,
}
