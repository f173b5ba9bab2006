//! What `steptrace.profile` (python/steptrace/_profile.py) needs of the capture crate: the
//! shim's source it runs in-process, and the end of the capture (files compressed, manifest).

use std::path::PathBuf;

use pyo3::prelude::*;

use crate::{Error, OutputError};

/// The capture shim's source (capture/shim_py/sitecustomize.py), which `steptrace.profile`
/// runs in-process: the launcher's own code, so both write the same files.
#[pyfunction]
pub(crate) fn capture_shim_source() -> &'static str {
    steptrace_capture::shim::SITECUSTOMIZE_PY
}

/// Now, as the manifest writes times (UTC).
#[pyfunction]
pub(crate) fn utc_now() -> String {
    steptrace_capture::now_utc()
}

/// The end of an in-process capture: every rank's files in `out` compressed and manifest.json
/// written, as `steptrace capture` does after the program's exit. Returns the manifest's text.
#[pyfunction]
#[pyo3(signature = (out, *, argv, schedule, record, timing, max_entries, started_at, raised=None, notes=Vec::new()))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn finish_capture(
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
