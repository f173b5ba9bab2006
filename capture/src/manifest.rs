//! `manifest.json` and what a capture returns. The one definition of the file: capture writes
//! it and `analyze` reads it with these types. Reading is lenient where older captures wrote
//! less (every field has a default; a rank's timing as it was written before the steps after
//! the window were timed is read too), so a run directory from an earlier build still loads.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::{child, finalize, Mode, Record, Schedule};

/// `manifest.json`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Manifest {
    /// steptrace version.
    pub steptrace_version: String,
    /// The command line run.
    pub command: Vec<String>,
    /// Working directory.
    pub cwd: String,
    /// How the program was instrumented.
    pub mode: Mode,
    /// How it ended.
    pub exit: child::Exit,
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

/// Why a capture ran the program twice ([`crate::run`]).
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
    pub timing: Option<finalize::Timing>,
    /// Validation references the shim measured (STEPTRACE_REFERENCE=1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reference: Option<serde_json::Value>,
    /// What checkpointing and swapping cost on this machine, host time per call and per op,
    /// and the pinned-copy bandwidth each way: `steptrace plan`'s step-time prediction.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plan_probe: Option<serde_json::Value>,
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

/// What a capture produced.
#[derive(Debug)]
pub struct Outcome {
    /// How the child ended; the CLI exits with `exit.code`.
    pub exit: child::Exit,
    /// The manifest written.
    pub manifest: Manifest,
    /// Where.
    pub out: PathBuf,
    /// Why manifest.json could not be written (a full disk), if it could not.
    pub manifest_error: Option<String>,
}
