//! `steptrace._native`: the steptrace library under Python (the `steptrace` package wraps it).
//!
//! The analysis runs with the GIL released, on its own rayon pool when `threads` is given. The
//! summary crosses as summary.json's text and the tables as their Parquet files' bytes, which
//! polars reads column by column (no text round trip). Errors are `steptrace.Error`
//! subclasses carrying the CLI's one-line message.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

mod analysis;
mod capture;
mod snapshot;

create_exception!(_native, Error, PyException, "Any steptrace failure.");
create_exception!(
    _native,
    InputError,
    Error,
    "An input could not be found, read or understood (the CLI's exit 2)."
);
create_exception!(
    _native,
    AnalysisError,
    Error,
    "The inputs were read but hold nothing to analyse."
);
create_exception!(_native, OutputError, Error, "Results could not be written.");
create_exception!(
    _native,
    PlanError,
    Error,
    "No plan could be made (a bad budget, one below what the run needs at least)."
);

/// The library's error as the Python exception of its kind, with the CLI's one line.
fn raise(e: steptrace::Error) -> PyErr {
    let msg = e.to_string();
    match e {
        steptrace::Error::Input(_) => InputError::new_err(msg),
        steptrace::Error::Output(_) => OutputError::new_err(msg),
        steptrace::Error::Plan(_) => PlanError::new_err(msg),
        _ => AnalysisError::new_err(msg),
    }
}

/// The KeyError for a table name that is none of `names`.
fn no_table(name: &str, names: &[&str]) -> PyErr {
    pyo3::exceptions::PyKeyError::new_err(format!(
        "no table {name:?} (one of {})",
        names.join(", ")
    ))
}

/// Runs `f` on a pool of `threads` threads (rayon's global pool when `None`).
fn on_threads<T: Send>(threads: Option<usize>, f: impl FnOnce() -> T + Send) -> PyResult<T> {
    match threads {
        None => Ok(f()),
        Some(n) => {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(n.max(1))
                .build()
                .map_err(|e| Error::new_err(format!("threads={n}: {e}")))?;
            Ok(pool.install(f))
        }
    }
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_function(wrap_pyfunction!(analysis::analyze, m)?)?;
    m.add_function(wrap_pyfunction!(analysis::compare, m)?)?;
    m.add_function(wrap_pyfunction!(analysis::is_distributed_run, m)?)?;
    m.add_function(wrap_pyfunction!(analysis::analyze_ranks, m)?)?;
    m.add_function(wrap_pyfunction!(capture::capture_shim_source, m)?)?;
    m.add_function(wrap_pyfunction!(capture::utc_now, m)?)?;
    m.add_function(wrap_pyfunction!(capture::finish_capture, m)?)?;
    m.add_class::<analysis::Analysis>()?;
    m.add_class::<analysis::Plan>()?;
    m.add_class::<snapshot::SnapshotAnalysis>()?;
    m.add_function(wrap_pyfunction!(snapshot::is_snapshot_file, m)?)?;
    m.add_function(wrap_pyfunction!(snapshot::analyze_snapshot, m)?)?;
    m.add("Error", py.get_type::<Error>())?;
    m.add("InputError", py.get_type::<InputError>())?;
    m.add("AnalysisError", py.get_type::<AnalysisError>())?;
    m.add("OutputError", py.get_type::<OutputError>())?;
    m.add("PlanError", py.get_type::<PlanError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
