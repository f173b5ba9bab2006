//! `shim.json` (`shim_rankN.json`): what a capture shim (the Python `sitecustomize` or the C++
//! `LD_PRELOAD` library) saw and did in the program, written as it goes and last at the
//! program's exit. The launcher reads it ([`ShimStatus::from_json`]) to assemble the manifest
//! and time the program's steps. Every field has a default: a shim killed early leaves less.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::manifest::{PhaseStop, ProbeRecord, Reference};

/// The schema version the shims write and this build reads.
pub const FORMAT_VERSION: u32 = 1;

/// A shim's status file (`shim[_rankN].json`), as written by either shim.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
pub struct ShimStatus {
    /// This file's schema version ([`FORMAT_VERSION`]; 1 where absent).
    #[serde(default = "one")]
    pub format_version: u32,
    /// Rank under torch.distributed.
    #[serde(default)]
    pub rank: i64,
    /// World size.
    #[serde(default = "one")]
    pub world_size: i64,
    /// torch version.
    #[serde(default)]
    pub torch: Option<String>,
    /// CUDA version torch was built with.
    #[serde(default)]
    pub cuda: Option<String>,
    /// GPU name.
    #[serde(default)]
    pub gpu: Option<String>,
    /// GPU memory.
    #[serde(default)]
    pub gpu_memory_bytes: Option<i64>,
    /// Step boundaries seen.
    #[serde(default)]
    pub steps: i64,
    /// How boundaries were found.
    #[serde(default)]
    pub boundary: Option<String>,
    /// Whether the active window was recorded whole.
    #[serde(default)]
    pub window_complete: bool,
    /// Whether the exit handler ran.
    #[serde(default)]
    pub exited_cleanly: bool,
    /// Files written, by role.
    #[serde(default)]
    pub files: BTreeMap<String, String>,
    /// Errors the shim met (it never stops the program for them).
    #[serde(default)]
    pub errors: Vec<String>,
    /// What the user should know about how steps were found (e.g. gradient accumulation).
    #[serde(default)]
    pub notes: Vec<String>,
    /// Why there is no trace, when the program never imported torch.
    #[serde(default)]
    pub no_trace_reason: Option<String>,
    /// Why there is no snapshot.
    #[serde(default)]
    pub no_snapshot_reason: Option<String>,
    /// Native shim: boundaries, epoch ns.
    #[serde(default)]
    pub boundaries_epoch_ns: Vec<i64>,
    /// Written by the C++ shim.
    #[serde(default)]
    pub native: bool,
    /// Clock readings (ns) at the boundaries of the timing phase.
    #[serde(default)]
    pub timing_ns: Vec<i64>,
    /// Timing intervals left out of the median (warm-up, and the earlier half of the phase).
    #[serde(default)]
    pub timing_settle: usize,
    /// Why the timing phase ended (absent in shims before the rule, and when the program
    /// ended inside the phase).
    #[serde(default)]
    pub timing_stop: Option<PhaseStop>,
    /// Steps the program had completed at the timing phase's first reading (counted in the
    /// rule that marks steps): interval `i` is the program's step `timing_first_step + i`,
    /// counted from 0.
    #[serde(default)]
    pub timing_first_step: Option<i64>,
    /// CUDA-event intervals (ms) between the same boundaries.
    #[serde(default)]
    pub timing_cuda_ms: Vec<f64>,
    /// When the GPU reached the timing phase's last boundary, on the clock of `timing_ns`.
    #[serde(default)]
    pub timing_cuda_last_done_ns: Option<i64>,
    /// With a plan timed both ways (`STEPTRACE_PLAN_AB`): whether the plan was on in each
    /// interval's step.
    #[serde(default)]
    pub timing_plan_on: Vec<bool>,
    /// Host time of each `optimizer.step()` call in the timing phase (ns, from its pre-hook
    /// to its post-hook): how fast this rank's host does the same work as the others', with
    /// nothing recorded.
    #[serde(default)]
    pub timing_optimizer_ns: Vec<i64>,
    /// Host time of each call of the model's outermost forward in the timing phase, ns (Python
    /// programs): the forward at the program's own speed, for the plan's step model.
    #[serde(default)]
    pub timing_forward_ns: Vec<i64>,
    /// Host time of each `torch.autograd.backward` call in the timing phase, ns (Python
    /// programs): the backward at the program's own speed.
    #[serde(default)]
    pub timing_backward_ns: Vec<i64>,
    /// Where the shim was when it last wrote: before_window, window, timing, reference,
    /// finished.
    #[serde(default)]
    pub phase: Option<String>,
    /// Why the window is incomplete, when the shim knows.
    #[serde(default)]
    pub window_incomplete_reason: Option<String>,
    /// Validation references (STEPTRACE_REFERENCE=1), passed through to the manifest; one
    /// without their shape reads as none.
    #[serde(default, deserialize_with = "crate::manifest::lenient")]
    pub reference: Option<Reference>,
    /// What a plan's wrappers cost on this machine (the shim's probe at exit), passed
    /// through to the manifest for `steptrace plan`; one without every figure reads as none.
    #[serde(default, deserialize_with = "crate::manifest::lenient")]
    pub plan_probe: Option<ProbeRecord>,
    /// Each module's profiler-style instance name (`GPT2Block_3`) and its fully qualified
    /// name (`transformer.h.3`), from the Python shim's module hooks.
    #[serde(default)]
    pub module_fqns: BTreeMap<String, String>,
    /// torch.cuda.max_memory_allocated() over the whole run, read at exit (Python programs).
    #[serde(default)]
    pub run_max_memory_allocated: Option<i64>,
    /// Step boundaries after the window, found by the rule's own step hooks (Python: the
    /// optimizer or GradScaler hook), on the clock of `timing_ns`.
    #[serde(default)]
    pub after_window_ns: Vec<i64>,
    /// Start (C++: a callback on autograd nodes) or end (Python: the backward wrapper) of every
    /// backward pass of the run, on the clock of `timing_ns`.
    #[serde(default)]
    pub backward_pass_ns: Vec<i64>,
    /// When the window's files were written and the shim's hooks went: later steps run at the
    /// program's own speed.
    #[serde(default)]
    pub after_window_start_ns: Option<i64>,
    /// The same moment as `after_window_start_ns`, in ns since the Unix epoch.
    #[serde(default)]
    pub after_window_start_epoch_ns: Option<i64>,
    /// When the window opened (the shim's clock).
    #[serde(default)]
    pub window_start_ns: Option<i64>,
    /// When the window closed.
    #[serde(default)]
    pub window_end_ns: Option<i64>,
    /// When the program ended.
    #[serde(default)]
    pub exit_ns: Option<i64>,
    /// What the shim's own work cost the program, ms by piece (trace_export, snapshot,
    /// et_close, ...; the Python shim's profiler_step includes the pieces it triggers).
    #[serde(default)]
    pub costs_ms: BTreeMap<String, f64>,
}

fn one<T: From<u8>>() -> T {
    T::from(1)
}

impl ShimStatus {
    /// Reads a shim's status file, refusing one written for a newer schema (a shim from a
    /// newer steptrace than the launcher).
    pub fn from_json(text: &[u8]) -> Result<ShimStatus, crate::ReadError> {
        crate::read_versioned(text, FORMAT_VERSION)
    }
}
