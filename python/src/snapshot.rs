//! A memory snapshot analysed on its own (`steptrace analyze snapshot.pickle.gz`).

use std::path::PathBuf;

use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::{on_threads, raise, Error};
use steptrace::report::frames::{snapshot_parquet_bytes, SNAPSHOT_TABLES};

/// One snapshot's analysis: what `steptrace analyze` computes from the pickle alone.
#[pyclass(frozen, module = "steptrace._native")]
pub(crate) struct SnapshotAnalysis {
    snapshot: steptrace::model::snapshot::Snapshot,
    analysis: steptrace::analysis::snapshot::SnapshotAnalysis,
    diagnostics: steptrace::diagnostics::Diagnostics,
}

#[pymethods]
impl SnapshotAnalysis {
    /// summary.json's text.
    fn summary_json(&self) -> PyResult<String> {
        let s = steptrace::report::snapshot::summary(&self.analysis, &self.diagnostics);
        serde_json::to_string_pretty(&s).map_err(|e| Error::new_err(e.to_string()))
    }

    /// The names of the tables `table_parquet` gives.
    #[staticmethod]
    fn table_names() -> Vec<&'static str> {
        SNAPSHOT_TABLES.to_vec()
    }

    /// A table as the bytes of its Parquet file (the CLI's `<name>.parquet`).
    fn table_parquet<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyBytes>> {
        let bytes = py
            .detach(|| snapshot_parquet_bytes(name, &self.analysis))
            .ok_or_else(|| crate::no_table(name, &SNAPSHOT_TABLES))?
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
        steptrace::report::snapshot::console(&self.analysis, &self.diagnostics, top.max(1))
    }

    /// Writes every file `steptrace analyze --out OUT` writes; returns the folder.
    fn write(&self, py: Python<'_>, out: PathBuf) -> PyResult<PathBuf> {
        py.detach(|| {
            let dir = steptrace::report::OutDir::prepare(&out)?;
            steptrace::report::snapshot::write(
                dir,
                &self.snapshot,
                &self.analysis,
                &self.diagnostics,
                true,
            )
        })
        .map_err(|e| raise(steptrace::Error::Output(e)))?;
        Ok(out)
    }
}

/// Whether `path` is a memory snapshot (`analyze` then reads it on its own).
#[pyfunction]
pub(crate) fn is_snapshot_file(path: PathBuf) -> bool {
    steptrace::is_snapshot_file(&path)
}

/// Reads a memory snapshot and analyses it on its own, the GIL released.
#[pyfunction]
#[pyo3(signature = (path, *, threads=None))]
pub(crate) fn analyze_snapshot(
    py: Python<'_>,
    path: PathBuf,
    threads: Option<usize>,
) -> PyResult<SnapshotAnalysis> {
    let (snapshot, analysis, diagnostics) = py
        .detach(|| {
            on_threads(threads, || {
                let mut diag = steptrace::diagnostics::Diagnostics::default();
                steptrace::load_snapshot(&path, &mut diag).map(|(s, a)| (s, a, diag))
            })
        })?
        .map_err(raise)?;
    Ok(SnapshotAnalysis {
        snapshot,
        analysis,
        diagnostics,
    })
}
