//! `manifest.json`: what a capture ran and recorded, and per rank the files, the program's
//! own step time, the plan probe and the validation references. `steptrace capture` writes it
//! and `analyze` reads it with these types. Reading is lenient where older captures wrote less
//! (every field has a default; a rank's timing as it was written before the steps after the
//! window were timed is read too), so a run directory from an earlier build still loads; a
//! `format_version` newer than this build's is refused ([`Manifest::from_json`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::summary::PlanProbe;
pub use crate::ReadError;

/// The schema version this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;

/// `manifest.json`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Manifest {
    /// This file's schema version ([`FORMAT_VERSION`]; 1 where absent).
    #[serde(default = "crate::version_one")]
    pub format_version: u32,
    /// steptrace version.
    pub steptrace_version: String,
    /// The command line run.
    pub command: Vec<String>,
    /// Working directory.
    pub cwd: String,
    /// How the program was instrumented.
    pub mode: Mode,
    /// How it ended.
    pub exit: Exit,
    /// UTC start.
    pub started_at: String,
    /// UTC end.
    pub ended_at: String,
    /// Host name.
    pub host: String,
    /// torch version (from the shim, else the probe).
    pub torch: Option<String>,
    /// CUDA version torch was built with.
    pub cuda: Option<String>,
    /// NVIDIA driver version.
    pub driver: Option<String>,
    /// GPU name.
    pub gpu: Option<String>,
    /// GPU memory, bytes.
    pub gpu_memory_bytes: Option<i64>,
    /// Schedule.
    pub schedule: Schedule,
    /// What was asked for.
    pub record: Record,
    /// Rank of the files in `files`.
    pub rank: i64,
    /// World size.
    pub world_size: i64,
    /// Whether the program exited 0 and every rank recorded its whole window.
    pub completed: bool,
    /// Why not, when not.
    pub incomplete_reasons: Vec<String>,
    /// The program's own median step time, seconds (rank 0, or the lowest rank), timed before
    /// the window with nothing recorded; `analyze` reports it beside the instrumented one.
    pub step_time_s: Option<f64>,
    /// Files for analyze (rank 0, or the lowest rank), relative to the run directory.
    pub files: std::collections::BTreeMap<String, String>,
    /// Every rank's files and shim status.
    pub ranks: Vec<RankFiles>,
    /// Notes: shim build, NVTX, missing torch.
    pub notes: Vec<String>,
    /// A short program's first run, which ended before the window: what it ran, and the
    /// schedule of this, the second run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rerun: Option<Rerun>,
}

/// Why a capture ran the program twice ((`steptrace capture`)).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Rerun {
    /// Step boundaries the first run reached (the fewest of any rank).
    pub first_run_steps: i64,
    /// The schedule asked for, which the first run used.
    pub first_run_schedule: Schedule,
    /// The first run's timing phase (steps timed with nothing recorded), when it had one.
    pub first_run_timing_steps: usize,
    /// What the user reads: which steps went where, and what the second run records.
    pub why: String,
}

/// One rank's files.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct RankFiles {
    /// Rank.
    pub rank: i64,
    /// Files by role, relative paths.
    pub files: std::collections::BTreeMap<String, String>,
    /// Step boundaries the shim saw.
    pub steps: i64,
    /// How they were found.
    pub boundary: Option<String>,
    /// Shim errors.
    pub errors: Vec<String>,
    /// The program's own step time: over the steps after the window, and in the timing phase
    /// before it.
    pub timing: Option<Timing>,
    /// Validation references the shim measured (STEPTRACE_REFERENCE=1); one that does not
    /// have their shape reads as none.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub reference: Option<Reference>,
    /// What checkpointing and swapping cost on this machine, host time per call and per op,
    /// and the pinned-copy bandwidth each way: `steptrace plan`'s step-time prediction. A
    /// probe without every figure (an older shim's, or one cut short) reads as none.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub plan_probe: Option<ProbeRecord>,
    /// Each module's instance name as the profiler names it (`GPT2Block_3`) and its fully
    /// qualified name (`transformer.h.3`): a plan's decisions in the names users' code uses.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub module_fqns: std::collections::BTreeMap<String, String>,
    /// What capture's own work cost, ms by piece: the shim's (inside the program's run) and
    /// `compress` (the launcher's, after it).
    pub costs_ms: std::collections::BTreeMap<String, f64>,
    /// torch.cuda.max_memory_allocated() over the whole run, from its first step to its
    /// exit (Python programs): what a plan applied by `capture --plan` must keep under its
    /// budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_max_memory_allocated: Option<i64>,
}

/// torch.profiler's schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Schedule {
    /// Steps ignored at the start.
    pub skip_first: u32,
    /// Steps waited.
    pub wait: u32,
    /// Steps recorded and discarded.
    pub warmup: u32,
    /// Steps recorded.
    pub active: u32,
    /// Cycles.
    pub repeat: u32,
}

impl Default for Schedule {
    fn default() -> Self {
        Schedule {
            skip_first: 1,
            wait: 1,
            warmup: 1,
            active: 3,
            repeat: 1,
        }
    }
}

impl Schedule {
    /// Step boundaries a program must reach for the (last) active window to close.
    pub fn steps_to_window_end(&self) -> u32 {
        self.skip_first + (self.wait + self.warmup + self.active) * self.repeat.max(1)
    }
}

impl std::fmt::Display for Schedule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "skip_first={},wait={},warmup={},active={},repeat={}",
            self.skip_first, self.wait, self.warmup, self.active, self.repeat
        )
    }
}

/// What to record (all on by default).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Record {
    /// Kineto trace.
    pub trace: bool,
    /// CUDA memory history and snapshots.
    pub memory: bool,
    /// Execution Trace.
    pub exec_trace: bool,
    /// NVTX ranges.
    pub nvtx: bool,
}

impl Default for Record {
    fn default() -> Self {
        Record {
            trace: true,
            memory: true,
            exec_trace: true,
            nvtx: true,
        }
    }
}

/// How the program is instrumented.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Python (or torchrun, or a script that starts Python): the sitecustomize shim.
    #[default]
    Python,
    /// A native libtorch binary: the C++ shim through LD_PRELOAD.
    Native,
}

/// How the child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Exit {
    /// The exit code to return: the child's, or 128+N when killed by signal N.
    pub code: i32,
    /// The signal that killed it.
    pub signal: Option<i32>,
    /// A signal the launcher received and forwarded while the child ran.
    pub forwarded_signal: Option<i32>,
    /// Seconds the child was still running after its work was reported finished, when the
    /// launcher ended it for lingering (its linger rule).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ended_lingering_s: Option<u64>,
}

/// The program's own step time: over the steps after the window where there are enough of
/// them (the rest of the run, with nothing recorded), else the timing phase's median.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(from = "TimingRepr")]
pub struct Timing {
    /// The program's step time, seconds: `after_window`'s where it has at least
    /// `MIN_AFTER_WINDOW_STEPS` (50) steps, or more steps than a timing phase that did not
    /// settle; else the timing phase's.
    pub step_time_s: f64,
    /// Which of the two `step_time_s` is.
    pub source: TimingSource,
    /// The timing phase before the window (absent when the program ended inside it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timing_phase: Option<PhaseTiming>,
    /// The steps after the window.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after_window: Option<AfterWindow>,
}

/// Which steps the program's step time was timed over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimingSource {
    /// The rest of the run, after the window.
    AfterWindow,
    /// The timing phase before the window.
    #[default]
    TimingPhase,
}

impl TimingSource {
    /// As written in manifest.json.
    pub fn as_str(self) -> &'static str {
        match self {
            TimingSource::AfterWindow => "after_window",
            TimingSource::TimingPhase => "timing_phase",
        }
    }
}

/// What marks the steps after the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepMarker {
    /// The rule's own hooks (optimizer, GradScaler, explicit marker).
    #[default]
    StepHooks,
    /// Every `passes_per_step`-th backward pass.
    BackwardPasses,
}

/// [`Timing`] as manifest.json holds it: the timing phase nested (`timing_phase`), or, as
/// capture wrote it before the steps after the window were timed, the phase's fields beside
/// `step_time_s`.
#[derive(Deserialize)]
struct TimingRepr {
    step_time_s: f64,
    #[serde(default)]
    source: TimingSource,
    #[serde(default)]
    timing_phase: Option<PhaseTiming>,
    #[serde(default)]
    after_window: Option<AfterWindow>,
    #[serde(flatten)]
    flat: LegacyPhase,
}

/// The timing phase's fields where older manifests put them (`step_time_s` is the `Timing`'s).
#[derive(Deserialize)]
struct LegacyPhase {
    steps: Option<usize>,
    #[serde(default)]
    settle: usize,
    #[serde(default)]
    stop: Option<PhaseStop>,
    #[serde(default)]
    step_time_cuda_s: Option<f64>,
    #[serde(default)]
    intervals_s: Vec<f64>,
    #[serde(default)]
    unplanned: Option<Unplanned>,
    #[serde(default)]
    first_step: Option<i64>,
    #[serde(default)]
    host_lead_s: Option<f64>,
    #[serde(default)]
    optimizer_step_s: Option<f64>,
}

impl From<TimingRepr> for Timing {
    fn from(r: TimingRepr) -> Self {
        let f = r.flat;
        let timing_phase = r.timing_phase.or_else(|| {
            f.steps.map(|steps| PhaseTiming {
                steps,
                settle: f.settle,
                stop: f.stop,
                step_time_s: r.step_time_s,
                step_time_cuda_s: f.step_time_cuda_s,
                intervals_s: f.intervals_s,
                unplanned: f.unplanned,
                first_step: f.first_step,
                host_lead_s: f.host_lead_s,
                optimizer_step_s: f.optimizer_step_s,
                forward_host_s: None,
                backward_host_s: None,
            })
        });
        Timing {
            step_time_s: r.step_time_s,
            source: r.source,
            timing_phase,
            after_window: r.after_window,
        }
    }
}

/// The steps run after the window, with the window's files written and only step markers left:
/// the program at its own speed over the rest of its run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AfterWindow {
    /// Intervals timed (after the first ones, left out).
    pub steps: usize,
    /// The step time: the mean interval, seconds, leaving out intervals over 5× the median
    /// (epoch ends, evaluation, checkpoints). A mean, as programs measure themselves (ms/batch
    /// over a log interval) and as throughput is: input-bound steps are often bimodal
    /// (pytorch/examples word_language_model: median 6.45 ms, mean 6.94 ms, printed 6.93 ms).
    pub step_time_s: f64,
    /// The median interval, seconds.
    pub median_s: f64,
    /// Intervals left out as outliers.
    pub outliers: usize,
    /// 10th percentile of the intervals, seconds (with `p90_s`: how much the steps move).
    pub p10_s: f64,
    /// 90th percentile of the intervals, seconds.
    pub p90_s: f64,
    /// What marks the steps: `step_hooks` (the rule's own hooks) or `backward_passes` (every
    /// `passes_per_step`-th backward pass, counted per step in the timing phase).
    pub marker: StepMarker,
    /// Backward passes per step, where they mark the steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub passes_per_step: Option<usize>,
    /// When the steps timed here began (the window's files written), ns since the Unix epoch:
    /// to set the figure beside what the program printed over the same time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_epoch_ns: Option<i64>,
}

/// Why a timing phase ended: the shim's rule, as shim.json and manifest.json write it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PhaseStop {
    /// The step time settled.
    Settled,
    /// It timed as many steps as it may (`--timing-max-steps`).
    StepCap,
    /// It ran as long as it may (`--timing-max-s`).
    TimeCap,
    /// The program made one step in all.
    OneStep,
    /// A distributed run's fixed phase, every rank the same steps.
    Lockstep,
    /// A word this build does not know (a newer shim's): read, and taken as no cap.
    #[serde(other)]
    Other,
}

impl PhaseStop {
    /// Whether a cap ended the phase before the step time settled.
    pub fn capped(self) -> bool {
        matches!(self, PhaseStop::StepCap | PhaseStop::TimeCap)
    }
}

/// The timing phase before the window: steps run with nothing recorded but the boundary hooks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PhaseTiming {
    /// Steps timed (in the median).
    pub steps: usize,
    /// Steps timed first and left out (warm-up, and the earlier half of the phase).
    #[serde(default)]
    pub settle: usize,
    /// Why the phase ended (the shim's rule).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<PhaseStop>,
    /// Median host-clock interval between boundaries, seconds.
    pub step_time_s: f64,
    /// Median CUDA-event interval between the same boundaries (Python programs), seconds.
    #[serde(default)]
    pub step_time_cuda_s: Option<f64>,
    /// Every interval, seconds, in order.
    #[serde(default)]
    pub intervals_s: Vec<f64>,
    /// A plan timed both ways: the steps alternate with and without it, and `step_time_s`,
    /// `step_time_cuda_s` and `steps` are the steps with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unplanned: Option<Unplanned>,
    /// The program's step (from 0) that the first interval covers, when the shim knows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_step: Option<i64>,
    /// How far the host ran ahead of the GPU at the end of a step, seconds (median over the
    /// timed steps; 0 where the GPU waits for the host): host time a step can gain before the
    /// GPU waits for it. Python programs with CUDA, phases without a plan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_lead_s: Option<f64>,
    /// Median host time of an `optimizer.step()` call in the phase, seconds (Python programs
    /// with an optimizer): in a distributed run, each rank's host speed at the same work, with
    /// nothing recorded (the step times themselves are equal on every rank: they wait for each
    /// other).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub optimizer_step_s: Option<f64>,
    /// Median host time of the model's outermost forward call in the phase, seconds (Python
    /// programs): what the profiler's forward takes at the program's own speed. The profiler
    /// slows a Python forward more than the autograd engine's backward, so the plan's step
    /// model scales each by its own figure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forward_host_s: Option<f64>,
    /// Median host time of a `torch.autograd.backward` call in the phase, seconds (Python
    /// programs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backward_host_s: Option<f64>,
}

impl PhaseTiming {
    /// The phase's step time: the CUDA-event figure where the shim has one, else the host
    /// clock's. Events recorded at the step boundaries complete when the GPU finishes each
    /// step, so their intervals are what a program that waits for the GPU times itself, and
    /// the same on every rank of a lockstep run; the host's readings move with how far the
    /// host runs ahead. pytorch/examples' FSDP2 on two GPUs, 12 ranks over 6 captures: the
    /// event intervals were the program's own printed ones to 0.1 ms, the host figure 2% to
    /// 7% off on 4 of them; committed FSDP2 samples read 53.1 / 68.2 ms by the host clock
    /// on their two ranks and 68.4 / 68.2 by events.
    pub fn step_time(&self) -> f64 {
        self.step_time_cuda_s
            .filter(|s| s.is_finite() && *s > 0.0)
            .unwrap_or(self.step_time_s)
    }
}

/// The steps of a timing phase that ran without the plan, between steps that ran with it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Unplanned {
    /// Steps timed without the plan (in the median).
    pub steps: usize,
    /// Median host-clock interval, seconds.
    pub step_time_s: f64,
    /// Median CUDA-event interval, seconds.
    #[serde(default)]
    pub step_time_cuda_s: Option<f64>,
    /// Whether the plan was on in each interval of `intervals_s`.
    #[serde(default)]
    pub plan_on: Vec<bool>,
}

/// A value that reads as `None` where it does not have the type's shape.
pub(crate) fn lenient<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::de::DeserializeOwned,
{
    let v = Option::<serde_json::Value>::deserialize(d)?;
    Ok(v.and_then(|v| T::deserialize(v).ok()))
}

/// The plan probe as the shim records it: the figures `steptrace plan` uses, and the timings
/// they were made from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeRecord {
    /// What a checkpoint and a swap cost, per call and per op, and the copies' bandwidths.
    #[serde(flatten)]
    pub figures: PlanProbe,
    /// The median of each timed chain (`plain_12`, `recompute_12`, `swap_1`, ...), s.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub medians_s: BTreeMap<String, f64>,
    /// Timings per chain in a round.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reps: Option<u32>,
    /// Rounds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rounds: Option<u32>,
}

/// What the shim measured to check steptrace against (`STEPTRACE_REFERENCE=1`): torch's own
/// figures over the same steps.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Reference {
    /// FlopCounterMode's count of the backward passes of the step it counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flop_counter_backward: Option<u64>,
    /// How many backward passes that count covers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flop_counter_backward_calls: Option<u64>,
    /// FlopCounterMode's count by op (`aten.mm`), the whole counted step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flop_counter_by_op: Option<BTreeMap<String, u64>>,
    /// The count less the backward's: the forward.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flop_counter_forward: Option<i64>,
    /// FlopCounterMode's total over the counted step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flop_counter_total: Option<u64>,
    /// `torch.cuda.max_memory_allocated()` at the end of each of the window's steps, reset
    /// at each step's start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_step_peaks_bytes: Option<Vec<i64>>,
    /// Anything else a shim recorded, kept as it was written.
    #[serde(flatten)]
    pub other: BTreeMap<String, serde_json::Value>,
}

impl Manifest {
    /// Reads a `manifest.json`, refusing one written for a newer schema.
    pub fn from_json(text: &[u8]) -> Result<Manifest, ReadError> {
        crate::read_versioned(text, FORMAT_VERSION)
    }
}
