//! An analysed run (`steptrace analyze` of a trace or run directory), its plan, and runs
//! side by side (`steptrace compare`).

use std::path::PathBuf;

use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::{on_threads, raise, Error};
use steptrace::report::frames::{Table, TABLES};

/// One analysed run: what `steptrace analyze` computes, before any file is written.
#[pyclass(frozen, module = "steptrace._native")]
pub(crate) struct Analysis {
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
            crate::no_table(name, &names)
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

    /// A checkpoint/swap plan for this run (`steptrace plan`): `budget` as the command takes
    /// it (`4GiB`, `80%`), `policy` one of recompute, swap, both; `modules` evaluates those
    /// instances (or `every-block`) instead of searching.
    #[pyo3(signature = (budget=None, policy="recompute", bandwidth_gbps=None, modules=None))]
    fn plan(
        &self,
        py: Python<'_>,
        budget: Option<&str>,
        policy: &str,
        bandwidth_gbps: Option<f64>,
        modules: Option<Vec<String>>,
    ) -> PyResult<Plan> {
        use steptrace::plan::{Budget, Options, Policy};
        let plan_err = |e: steptrace::plan::Error| raise(steptrace::Error::Plan(e));
        let budget = budget
            .map(|b| b.parse::<Budget>())
            .transpose()
            .map_err(plan_err)?;
        let policy = match policy {
            "recompute" => Policy::Recompute,
            "swap" => Policy::Swap,
            "both" => Policy::Both,
            other => {
                return Err(pyo3::exceptions::PyValueError::new_err(format!(
                    "policy {other:?}: one of recompute, swap, both"
                )))
            }
        };
        let opts = Options {
            budget,
            policy,
            bandwidth_gbps,
            modules,
        };
        let plan = py
            .detach(|| {
                on_threads(self.threads, || {
                    steptrace::plan::plan(&self.trace, &self.analysis, &opts)
                })
            })?
            .map_err(plan_err)?;
        Ok(Plan { plan })
    }

    /// Writes every file `steptrace analyze --out OUT` writes; returns the folder.
    fn write(&self, py: Python<'_>, out: PathBuf) -> PyResult<PathBuf> {
        let threads = self.threads;
        py.detach(|| {
            on_threads(threads, || {
                steptrace::report::write_all(
                    &out,
                    &self.trace,
                    &self.analysis,
                    &self.diagnostics,
                    &self.props.report,
                )
            })
        })?
        .map_err(|e| raise(steptrace::Error::Output(e)))?;
        Ok(out)
    }
}

/// A plan `steptrace plan` would make for the same run.
#[pyclass(frozen, module = "steptrace._native")]
pub(crate) struct Plan {
    plan: steptrace::plan::Plan,
}

#[pymethods]
impl Plan {
    /// plan.json's text.
    fn json(&self) -> PyResult<String> {
        serde_json::to_string_pretty(&self.plan).map_err(|e| Error::new_err(e.to_string()))
    }

    /// The table `steptrace plan` prints.
    fn table(&self) -> String {
        steptrace::report::plan::table(&self.plan)
    }

    /// The Python `steptrace plan --print-policy` prints: the plan as
    /// `torch.utils.checkpoint` code for the program.
    fn policy_code(&self) -> String {
        steptrace::report::plan::policy_code(&self.plan)
    }

    /// Writes the files `steptrace plan --out OUT` writes; returns the folder.
    #[pyo3(signature = (out, plots=true))]
    fn write(&self, py: Python<'_>, out: PathBuf, plots: bool) -> PyResult<PathBuf> {
        py.detach(|| steptrace::report::plan::write(&out, &self.plan, plots))
            .map_err(|e| raise(steptrace::Error::Output(e)))?;
        Ok(out)
    }
}

/// Analyses a trace or a run directory (as `steptrace analyze` does), the GIL released.
#[pyfunction]
#[pyo3(signature = (path, *, snapshot=None, exec_trace=None, rank=None, threads=None))]
pub(crate) fn analyze(
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

/// Runs side by side (`steptrace compare`): returns the table the command prints, and each
/// run's label and summary.json text; with `out`, writes the command's files there too.
#[pyfunction]
#[pyo3(signature = (runs, *, labels=Vec::new(), out=None, threads=None))]
pub(crate) fn compare(
    py: Python<'_>,
    runs: Vec<PathBuf>,
    labels: Vec<String>,
    out: Option<PathBuf>,
    threads: Option<usize>,
) -> PyResult<(String, Vec<(String, String)>)> {
    if runs.len() < 2 {
        return Err(pyo3::exceptions::PyValueError::new_err(
            "compare needs two runs or more",
        ));
    }
    let runs = py
        .detach(|| on_threads(threads, || steptrace::compare_runs(&runs, &labels)))?
        .map_err(raise)?;
    if let Some(dir) = out {
        py.detach(|| steptrace::report::compare::write(&dir, "compare", "configuration", &runs))
            .map_err(|e| raise(steptrace::Error::Output(e)))?;
    }
    let mut each = Vec::new();
    for r in &runs {
        let json = serde_json::to_string(&r.summary).map_err(|e| Error::new_err(e.to_string()))?;
        each.push((r.label.clone(), json));
    }
    Ok((steptrace::report::compare::table(&runs), each))
}

/// Whether `path` is a run of two ranks or more (`analyze` then analyses every rank).
#[pyfunction]
pub(crate) fn is_distributed_run(path: PathBuf) -> bool {
    let props = steptrace::AnalyzeProps {
        input: path,
        ..Default::default()
    };
    steptrace::distributed_run(&props).is_some()
}

/// Analyses every rank of a distributed run into `out` (`rank<N>/` per rank, the cross-rank
/// files at the top), as `steptrace analyze` of the run does; returns ranks.json's text, the
/// console summary and ranks.parquet's bytes (the table, no text between).
#[pyfunction]
#[pyo3(signature = (path, out, *, threads=None))]
pub(crate) fn analyze_ranks(
    py: Python<'_>,
    path: PathBuf,
    out: PathBuf,
    threads: Option<usize>,
) -> PyResult<(String, String, Py<PyBytes>)> {
    let mut props = steptrace::AnalyzeProps {
        input: path,
        out: Some(out),
        top: 10,
        ..Default::default()
    };
    props.report.annotated_trace = true;
    let outcome = py
        .detach(|| {
            on_threads(threads, || match steptrace::distributed_run(&props) {
                Some(layout) => steptrace::analyze_ranks(&props, &layout),
                None => Err(steptrace::Error::Input(
                    steptrace::ingest::Error::Discovery {
                        path: props.input.clone(),
                        what: "not a run of two ranks or more".into(),
                    },
                )),
            })
        })?
        .map_err(raise)?;
    let json = serde_json::to_string(&outcome.ranks).map_err(|e| Error::new_err(e.to_string()))?;
    let table = steptrace::report::frames::ranks_parquet_bytes(&outcome.ranks)
        .map_err(|e| raise(steptrace::Error::Output(e)))?;
    Ok((json, outcome.console, PyBytes::new(py, &table).unbind()))
}
