//! `steptrace._native`: the steptrace library under Python (the `steptrace` package wraps it).
//!
//! The analysis runs with the GIL released, on its own rayon pool when `threads` is given. The
//! summary crosses as summary.json's text and the tables as their Parquet files' bytes, which
//! polars reads column by column (no text round trip). Errors are `steptrace.Error`
//! subclasses carrying the CLI's one-line message.

use std::path::PathBuf;

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use steptrace::report::frames::{Table, TABLES};

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

/// The library's error as the Python exception of its kind, with the CLI's one line.
fn raise(e: steptrace::Error) -> PyErr {
    let msg = e.to_string();
    match e {
        steptrace::Error::Input(_) => InputError::new_err(msg),
        steptrace::Error::Output(_) => OutputError::new_err(msg),
        _ => AnalysisError::new_err(msg),
    }
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

/// One analysed run: what `steptrace analyze` computes, before any file is written.
#[pyclass(frozen, module = "steptrace._native")]
struct Analysis {
    props: steptrace::AnalyzeProps,
    threads: Option<usize>,
    trace: steptrace::model::Trace,
    analysis: steptrace::analysis::Analysis,
    diagnostics: steptrace::diagnostics::Diagnostics,
}

#[pymethods]
impl Analysis {
    /// summary.json's text.
    fn summary_json(&self) -> PyResult<String> {
        serde_json::to_string_pretty(&self.analysis.summary)
            .map_err(|e| Error::new_err(e.to_string()))
    }

    /// The names of the tables `table_parquet` gives.
    #[staticmethod]
    fn table_names() -> Vec<&'static str> {
        TABLES.iter().map(|t| t.name()).collect()
    }

    /// A table as the bytes of its Parquet file (the CLI's `<name>.parquet`).
    fn table_parquet<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyBytes>> {
        let table = Table::from_name(name).ok_or_else(|| {
            let names: Vec<&str> = TABLES.iter().map(|t| t.name()).collect();
            pyo3::exceptions::PyKeyError::new_err(format!(
                "no table {name:?} (one of {})",
                names.join(", ")
            ))
        })?;
        let bytes = py
            .detach(|| table.parquet_bytes(&self.trace, &self.analysis))
            .map_err(|e| raise(steptrace::Error::Output(e)))?;
        Ok(PyBytes::new(py, &bytes))
    }

    /// The warnings the CLI prints, one line each.
    fn warnings(&self) -> Vec<String> {
        self.diagnostics.lines()
    }

    /// The console summary `steptrace analyze` prints.
    #[pyo3(signature = (top=10))]
    fn console(&self, top: usize) -> String {
        steptrace::report::console_summary(&self.trace, &self.analysis, &self.diagnostics, top)
    }

    /// Writes every file `steptrace analyze --out OUT` writes; returns the folder.
    fn write(&self, py: Python<'_>, out: PathBuf) -> PyResult<PathBuf> {
        let threads = self.threads;
        py.detach(|| {
            on_threads(threads, || {
                let mut dir = steptrace::report::OutDir::prepare(&out)?;
                dir.start_annotated(&self.trace.kineto, &self.props.report);
                steptrace::report::write_into(
                    dir,
                    &self.trace,
                    &self.analysis,
                    &self.diagnostics,
                    &self.props.report,
                )?;
                Ok::<_, steptrace::report::Error>(())
            })
        })?
        .map_err(|e| raise(steptrace::Error::Output(e)))?;
        Ok(out)
    }
}

/// Analyses a trace or a run directory (as `steptrace analyze` does), the GIL released.
#[pyfunction]
#[pyo3(signature = (path, *, snapshot=None, exec_trace=None, rank=None, threads=None))]
fn analyze(
    py: Python<'_>,
    path: PathBuf,
    snapshot: Option<PathBuf>,
    exec_trace: Option<PathBuf>,
    rank: Option<i64>,
    threads: Option<usize>,
) -> PyResult<Analysis> {
    let mut props = steptrace::AnalyzeProps {
        input: path,
        snapshot,
        exec_trace,
        rank,
        top: 10,
        ..Default::default()
    };
    // The command's defaults: every output, the annotated trace among them.
    props.report.annotated_trace = true;
    let (trace, analysis, diagnostics) = py
        .detach(|| on_threads(threads, || steptrace::run_analysis(&props)))?
        .map_err(raise)?;
    Ok(Analysis {
        props,
        threads,
        trace,
        analysis,
        diagnostics,
    })
}

/// The capture shim's source (capture/shim_py/sitecustomize.py), which `steptrace.profile`
/// runs in-process: the launcher's own code, so both write the same files.
#[pyfunction]
fn capture_shim_source() -> &'static str {
    steptrace_capture::shim::SITECUSTOMIZE_PY
}

/// Now, as the manifest writes times (UTC).
#[pyfunction]
fn utc_now() -> String {
    steptrace_capture::now_utc()
}

/// The end of an in-process capture: every rank's files in `out` compressed and manifest.json
/// written, as `steptrace capture` does after the program's exit. Returns the manifest's text.
#[pyfunction]
#[pyo3(signature = (out, *, argv, schedule, record, timing, max_entries, started_at, raised=None, notes=Vec::new()))]
#[allow(clippy::too_many_arguments)]
fn finish_capture(
    py: Python<'_>,
    out: PathBuf,
    argv: Vec<String>,
    schedule: &str,
    record: Vec<String>,
    timing: (u32, u32, u32),
    max_entries: u64,
    started_at: String,
    raised: Option<String>,
    notes: Vec<String>,
) -> PyResult<String> {
    let schedule = steptrace_capture::parse_schedule(schedule)
        .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))?;
    let on = |name: &str| record.iter().any(|r| r == name);
    let props = steptrace_capture::CaptureProps {
        program: argv.into_iter().map(Into::into).collect(),
        out,
        force: true,
        schedule,
        record: steptrace_capture::Record {
            trace: on("trace"),
            memory: on("memory"),
            exec_trace: on("et"),
            nvtx: on("nvtx"),
        },
        mode: Some(steptrace_capture::Mode::Python),
        python: None,
        max_entries,
        cache: None,
        timing: steptrace_capture::TimingPhase {
            steps: timing.0,
            max_steps: timing.1,
            max_s: timing.2,
        },
        plan: None,
        plan_ab: false,
        rerun_short: false,
        stop_after_window: None,
        progress: None,
    };
    let outcome = py
        .detach(|| steptrace_capture::finish_in_process(&props, started_at, raised, notes))
        .map_err(|e| OutputError::new_err(e.to_string()))?;
    if let Some(e) = outcome.manifest_error {
        return Err(OutputError::new_err(e));
    }
    serde_json::to_string_pretty(&outcome.manifest).map_err(|e| Error::new_err(e.to_string()))
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_function(wrap_pyfunction!(analyze, m)?)?;
    m.add_function(wrap_pyfunction!(capture_shim_source, m)?)?;
    m.add_function(wrap_pyfunction!(utc_now, m)?)?;
    m.add_function(wrap_pyfunction!(finish_capture, m)?)?;
    m.add_class::<Analysis>()?;
    m.add("Error", py.get_type::<Error>())?;
    m.add("InputError", py.get_type::<InputError>())?;
    m.add("AnalysisError", py.get_type::<AnalysisError>())?;
    m.add("OutputError", py.get_type::<OutputError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
