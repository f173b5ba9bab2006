//! The tables the step is built from, one module per input: what ingest's readers fill and
//! everything above reads. Plain data, with the lookups that need nothing else.

pub mod exec_trace;
pub mod kineto;
pub mod run;
pub mod snapshot;

/// Everything read for one analysis.
#[derive(Debug)]
pub struct Loaded {
    /// The Kineto trace.
    pub kineto: kineto::KinetoTrace,
    /// The memory snapshot, if given.
    pub snapshot: Option<snapshot::Snapshot>,
    /// The Execution Trace, if given.
    pub exec_trace: Option<exec_trace::ExecTrace>,
    /// Anomalies met while reading.
    pub diagnostics: crate::diagnostics::Diagnostics,
}
