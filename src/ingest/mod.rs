//! Reading input files: find them (a run directory or explicit paths), then read the Kineto
//! trace, the memory snapshot and the Execution Trace side by side.

mod discover;
pub mod exec_trace;
pub mod kineto;
mod manifest;
pub mod pickle;
mod ranks;
mod results;
pub mod snapshot;
pub use self::discover::discover;
use self::discover::{classify_path, entry_is, Kind};
/// Moved below ingest (`crate::read`); the old paths still name them.
pub use crate::read::{json_scan, source};

use manifest::{program_step_time, secs_to_ns, Manifest, ManifestFiles};
pub use manifest::{PlanProbe, PlanTimedBothWays, ProgramStepTime};
use ranks::rank_traces;
pub use ranks::{rank_layout, rank_of_trace, RankLayout};
pub use results::{is_results_dir, read_results, AnalysisResults, OpTotals};

use crate::file_error::FileError;
use std::path::{Path, PathBuf};

use crate::diagnostics::Diagnostics;

/// Why an input could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The file could not be opened or read.
    #[error(transparent)]
    Io(#[from] FileError),
    /// The file was read but is not what it should be.
    #[error("{}: {what}", path.display())]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        what: String,
    },
    /// A run directory that does not hold (exactly) what analyze needs.
    #[error("{}: {what}", path.display())]
    Discovery {
        /// The directory.
        path: PathBuf,
        /// What is wrong.
        what: String,
    },
}

impl From<crate::read::Error> for Error {
    fn from(e: crate::read::Error) -> Error {
        match e {
            crate::read::Error::Io(f) => Error::Io(f),
            crate::read::Error::Format { path, what } => Error::Format { path, what },
        }
    }
}

/// The files of one analysis.
#[derive(Debug, Clone, PartialEq)]
pub struct Inputs {
    /// Kineto Chrome trace.
    pub trace: PathBuf,
    /// CUDA memory snapshot pickle.
    pub snapshot: Option<PathBuf>,
    /// Execution Trace JSON.
    pub exec_trace: Option<PathBuf>,
    /// `manifest.json` of a capture run directory.
    pub manifest: Option<PathBuf>,
    /// Whether the snapshot and Execution Trace were found in a run directory rather than named
    /// by the user: then one that cannot be read is a warning, not an error.
    pub side_files_optional: bool,
    /// The program's own step time, timed by capture with nothing recorded (from the
    /// manifest).
    pub program_step_time: Option<ProgramStepTime>,
    /// What a plan's checkpoints and swaps cost on the capture's machine (from the manifest).
    pub plan_probe: Option<PlanProbe>,
    /// torch's `max_memory_allocated` over the whole run, where capture read it at exit.
    pub run_max_memory_allocated: Option<i64>,
    /// Module instance names (`GPT2Block_3`) and their fully qualified names, where the
    /// capture recorded them (from the manifest).
    pub module_fqns: std::collections::BTreeMap<String, String>,
}

impl Inputs {
    /// A trace with nothing beside it.
    fn trace_only(trace: PathBuf) -> Inputs {
        Inputs {
            trace,
            snapshot: None,
            exec_trace: None,
            manifest: None,
            side_files_optional: false,
            program_step_time: None,
            plan_probe: None,
            run_max_memory_allocated: None,
            module_fqns: Default::default(),
        }
    }
}

pub use crate::model::tables::Loaded;

/// Reads all inputs, the three files in parallel. Diagnostics are merged in a fixed order.
pub fn load_all(inputs: &Inputs) -> Result<Loaded, Error> {
    let ((kin, snap), et) = rayon::join(
        || {
            rayon::join(
                || {
                    let mut d = Diagnostics::default();
                    kineto::load(&inputs.trace, &mut d).map(|t| (t, d))
                },
                || {
                    inputs.snapshot.as_deref().map(|p| {
                        let mut d = Diagnostics::default();
                        snapshot::load(p, &mut d).map(|s| (s, d))
                    })
                },
            )
        },
        || {
            inputs.exec_trace.as_deref().map(|p| {
                let mut d = Diagnostics::default();
                exec_trace::load(p, &mut d).map(|e| (e, d))
            })
        },
    );
    let (kineto, mut diagnostics) = kin?;
    let optional = inputs.side_files_optional;
    let snapshot = side_file(snap, optional, &mut diagnostics)?;
    let exec_trace = side_file(et, optional, &mut diagnostics)?;
    Ok(Loaded {
        kineto,
        snapshot,
        exec_trace,
        diagnostics,
    })
}

/// A snapshot or Execution Trace as read: one found in a run directory that cannot be read is
/// a warning and the analysis goes on without it; one the user named is an error.
fn side_file<T>(
    r: Option<Result<(T, Diagnostics), Error>>,
    optional: bool,
    diagnostics: &mut Diagnostics,
) -> Result<Option<T>, Error> {
    match r {
        Some(Ok((v, d))) => {
            diagnostics.extend(d);
            Ok(Some(v))
        }
        None => Ok(None),
        Some(Err(e)) if optional => {
            diagnostics.warn("side_file_unreadable", format!("{e}; analysed without it"));
            Ok(None)
        }
        Some(Err(e)) => Err(e),
    }
}

#[cfg(test)]
mod tests;
