//! steptrace: rebuild one PyTorch training step from profiler output.
//!
//! ```text
//!  trace.json[.gz] ─┐
//!  snapshot.pickle ─┼─ ingest ──▶ model ──▶ analysis ──▶ report
//!  exec_trace.json ─┘  (parse,     (op trees,  (iterations,   (CSV, JSON,
//!                       parallel)   launches)   phases, nodes,  console)
//!                                               medians)
//! ```
//!
//! Each stage only depends on the ones before it. The library never prints and never exits;
//! the `steptrace` binary does.
//!
//! ```text
//! steptrace analyze sample_traces/resnet18            # a run directory
//! steptrace analyze trace.json.gz snapshot.pickle --out results/
//! ```
#![deny(missing_docs)]
#![warn(unreachable_pub)]

pub mod analysis;
pub mod diagnostics;
pub mod file_error;
#[doc(hidden)]
pub mod fuzzing;
pub mod ingest;
pub mod intern;
pub mod model;
mod par;
pub mod plan;
pub mod read;
pub mod report;

use std::path::{Path, PathBuf};

use diagnostics::Diagnostics;

/// Why `analyze` failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An input could not be found, read or understood.
    #[error(transparent)]
    Input(#[from] ingest::Error),
    /// The inputs were read but hold nothing to analyse.
    #[error("{}: {what}", path.display())]
    Analysis {
        /// The trace.
        path: PathBuf,
        /// What is missing.
        what: String,
    },
    /// Results could not be written.
    #[error(transparent)]
    Output(#[from] report::Error),
    /// No plan could be made.
    #[error(transparent)]
    Plan(#[from] plan::Error),
}

/// What to analyse and where to write.
#[derive(Debug, Clone, Default)]
pub struct AnalyzeProps {
    /// A trace file or a run directory.
    pub input: PathBuf,
    /// Memory snapshot pickle.
    pub snapshot: Option<PathBuf>,
    /// Execution Trace.
    pub exec_trace: Option<PathBuf>,
    /// Output directory (default: beside the input, named after it).
    pub out: Option<PathBuf>,
    /// Rows in the console's top-N tables.
    pub top: usize,
    /// Which rank of a multi-rank run directory.
    pub rank: Option<i64>,
    /// Also write the rank's results as Parquet here, for `steptrace merge`.
    pub rank_output: Option<PathBuf>,
    /// Analysis knobs (roofline peaks).
    pub options: analysis::Options,
    /// Plots, HTML report, annotated trace.
    pub report: report::ReportOptions,
    /// Called with the name of each stage as it starts (the CLI draws progress with it when
    /// stderr is a terminal).
    pub progress: Option<fn(&str)>,
}

/// What `analyze` produced.
#[derive(Debug)]
pub struct Outcome {
    /// Where the files went.
    pub out_dir: PathBuf,
    /// When each output was complete, seconds from the start of writing (`--timings`).
    pub output_times: Vec<(String, f64)>,
    /// The console summary.
    pub console: String,
    /// The analysis itself.
    pub analysis: analysis::Analysis,
    /// Anomalies found.
    pub diagnostics: Diagnostics,
}

/// The default output directory: `<input stem>.steptrace` beside the input.
pub fn default_out_dir(input: &Path) -> PathBuf {
    let name = input
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "trace".into());
    let mut stem = name.as_str();
    for ext in [".gz", ".json", ".pt.trace", ".pickle", ".pkl"] {
        stem = stem.strip_suffix(ext).unwrap_or(stem);
    }
    let stem = if stem.is_empty() { "trace" } else { stem };
    input.with_file_name(format!("{stem}.steptrace"))
}

/// A run's name: the directory's, or the trace file's stem.
pub fn run_name(input: &Path) -> String {
    default_out_dir(input)
        .file_name()
        .map(|n| {
            n.to_string_lossy()
                .trim_end_matches(".steptrace")
                .to_owned()
        })
        .unwrap_or_default()
}

/// Reads, reconstructs and analyses, without writing anything.
pub fn run_analysis(
    props: &AnalyzeProps,
) -> Result<(model::Trace, analysis::Analysis, Diagnostics), Error> {
    run_analysis_with(props, &mut |_| {})
}

/// [`run_analysis`], calling `on_loaded` with the trace as soon as it is read (before the step is
/// rebuilt), so that work which needs only the file can start beside the analysis.
fn run_analysis_with(
    props: &AnalyzeProps,
    on_loaded: &mut dyn FnMut(&ingest::kineto::KinetoTrace),
) -> Result<(model::Trace, analysis::Analysis, Diagnostics), Error> {
    let inputs = ingest::discover(
        &props.input,
        props.snapshot.as_deref(),
        props.exec_trace.as_deref(),
        props.rank,
    )?;
    let stage = |s: &str| {
        if let Some(p) = props.progress {
            p(s)
        }
    };
    stage("reading and parsing");
    let loaded = ingest::load_all(&inputs)?;
    on_loaded(&loaded.kineto);
    stage("rebuilding the step");
    let mut diag = Diagnostics::default();
    let mut trace = model::Trace::build(loaded, &mut diag);
    // No CPU operators but GPU activities (a GPU-only trace) gets kernel-level results.
    if trace.kineto.ops.is_empty() && trace.kineto.gpu.is_empty() {
        return Err(Error::Analysis {
            path: inputs.trace.clone(),
            what: "the trace holds no CPU operators and no GPU activity: record with torch.profiler's CPU and CUDA activities"
                .into(),
        });
    }
    stage("analysing");
    // The snapshot's whole history is drawn by report.html alone (its memory view).
    let options = analysis::Options {
        without_snapshot_history: props.options.without_snapshot_history || props.report.no_plots,
        backward_passes_per_step: inputs
            .program_step_time
            .as_ref()
            .and_then(|p| p.passes_per_step),
        ..props.options.clone()
    };
    let facts = analysis::RunFacts {
        name: run_name(&props.input),
        program_step_time: inputs.program_step_time.clone(),
        plan_probe: inputs.plan_probe,
        run_max_memory_allocated: inputs.run_max_memory_allocated,
        module_fqns: inputs.module_fqns.clone(),
    };
    let analysis = analysis::run(&mut trace, &options, facts, &mut diag);
    Ok((trace, analysis, diag))
}

/// Reads, reconstructs, analyses and writes, returning the console summary.
pub fn analyze(props: &AnalyzeProps) -> Result<Outcome, Error> {
    let out_dir = props
        .out
        .clone()
        .unwrap_or_else(|| default_out_dir(&props.input));
    // The output directory is made ready as soon as the trace is read, so that the annotated
    // trace's copy of the original text runs beside the analysis.
    let mut out: Option<Result<report::OutDir, report::Error>> = None;
    let (trace, analysis, diag) = run_analysis_with(props, &mut |k| {
        let mut o = report::OutDir::prepare(&out_dir);
        if let Ok(o) = &mut o {
            o.start_annotated(k, &props.report);
        }
        out = Some(o);
    })?;
    let out = match out {
        Some(o) => o?,
        None => report::OutDir::prepare(&out_dir)?,
    };
    if let Some(p) = props.progress {
        p("writing results");
    }
    let output_times = report::write_into(out, &trace, &analysis, &diag, &props.report)?;
    let console = report::console_summary(&trace, &analysis, &diag, props.top.max(1));
    ingest::source::drop_aside(trace);
    let outcome = Outcome {
        out_dir,
        output_times,
        console,
        analysis,
        diagnostics: diag,
    };
    if let Some(dir) = &props.rank_output {
        #[cfg(feature = "parquet")]
        write_rank_output(props, &outcome, dir)?;
        #[cfg(not(feature = "parquet"))]
        return Err(Error::Analysis {
            path: dir.clone(),
            what: "--rank-output needs the `parquet` feature (built without it)".into(),
        });
    }
    Ok(outcome)
}

/// What `analyze` of a memory snapshot on its own produced.
#[derive(Debug)]
pub struct SnapshotOutcome {
    /// Where the files went.
    pub out_dir: PathBuf,
    /// The console summary.
    pub console: String,
    /// The analysis.
    pub analysis: analysis::snapshot::SnapshotAnalysis,
    /// Anomalies found.
    pub diagnostics: Diagnostics,
}

/// Whether `analyze` of this input reads a memory snapshot on its own (a pickle, plain or
/// gzip) rather than a trace or a run directory.
pub fn is_snapshot_input(props: &AnalyzeProps) -> bool {
    props.snapshot.is_none() && props.exec_trace.is_none() && is_snapshot_file(&props.input)
}

/// Whether `path` is a memory snapshot file: named as a pickle (so that a broken one is told
/// as such), or starting as one.
pub fn is_snapshot_file(path: &Path) -> bool {
    let named = path.is_file()
        && path.file_name().is_some_and(|n| {
            let n = n.to_string_lossy();
            let n = n.strip_suffix(".gz").unwrap_or(&n);
            n.ends_with(".pickle") || n.ends_with(".pkl")
        });
    named || ingest::snapshot::looks_like_snapshot(path)
}

/// Reads a memory snapshot and analyses it on its own, the history replayed on a thread of
/// its own as it is read and never kept; warns where the history cannot say what the
/// analysis reports (a layout from before PyTorch 2.1, no history recorded).
pub fn load_snapshot(
    path: &Path,
    diag: &mut Diagnostics,
) -> Result<
    (
        model::snapshot::Snapshot,
        analysis::snapshot::SnapshotAnalysis,
    ),
    Error,
> {
    let mut replay = analysis::snapshot::Replay::on_thread();
    let s = ingest::snapshot::load_streamed(path, diag, &mut replay);
    let replay = replay.join();
    let s = s?;
    let a = analysis::snapshot::analyze_streamed(&s, replay);
    if let Some(w) = analysis::snapshot::devices_left_out_warning(&a, path) {
        diag.warn("snapshot_devices_left_out", w);
    }
    if s.legacy_layout {
        diag.warn(
            "legacy_snapshot",
            format!(
                "{}: a snapshot from before PyTorch 2.1 (no history in device_traces): only the state at its end is known",
                path.display()
            ),
        );
    } else if a.entries == 0 {
        diag.warn(
            "snapshot_without_history",
            format!(
                "{}: no allocator history (record it with torch.cuda.memory._record_memory_history() before the steps): the peak is the state at the end",
                path.display()
            ),
        );
    }
    Ok((s, a))
}

/// Reads a memory snapshot, analyses it on its own and writes its outputs (the memory_viz
/// workflow: a snapshot dumped with `torch.cuda.memory._dump_snapshot`, no trace).
pub fn analyze_snapshot(props: &AnalyzeProps) -> Result<SnapshotOutcome, Error> {
    let stage = |s: &str| {
        if let Some(p) = props.progress {
            p(s)
        }
    };
    let out_dir = props
        .out
        .clone()
        .unwrap_or_else(|| default_out_dir(&props.input));
    stage("reading and replaying the snapshot");
    let mut diag = Diagnostics::default();
    let (s, analysis) = load_snapshot(&props.input, &mut diag)?;
    stage("writing results");
    let out = report::OutDir::prepare(&out_dir)?;
    report::snapshot::write(out, &s, &analysis, &diag, !props.report.no_plots)?;
    let console = report::snapshot::console(&analysis, &diag, props.top.max(1));
    Ok(SnapshotOutcome {
        out_dir,
        console,
        analysis,
        diagnostics: diag,
    })
}

/// Analyses a run and plans recomputation and swapping for it; writes nothing.
pub fn plan_run(
    props: &AnalyzeProps,
    opts: &plan::Options,
) -> Result<(plan::Plan, analysis::Analysis), Error> {
    let (trace, analysis, _diag) = run_analysis(props)?;
    let p = plan::plan(&trace, &analysis, opts)?;
    ingest::source::drop_aside(trace);
    Ok((p, analysis))
}

/// The runs `compare` sets side by side, labelled by `labels` in order (else by each run's
/// name): a folder `analyze` wrote is read back (its summary.json and node_stats.csv), a trace
/// or a capture's run directory is analysed.
pub fn compare_runs(
    inputs: &[PathBuf],
    labels: &[String],
) -> Result<Vec<report::compare::Run>, Error> {
    let mut runs = Vec::new();
    for (i, r) in inputs.iter().enumerate() {
        let label = labels.get(i).cloned();
        let run = if ingest::is_results_dir(r) {
            let read = ingest::read_results(r).map_err(Error::Input)?;
            let label = label.unwrap_or_else(|| read.summary.name.clone());
            report::compare::Run::read_back(label, read)
        } else {
            let props = AnalyzeProps {
                input: r.clone(),
                top: 10,
                ..Default::default()
            };
            let (t, a, _) = run_analysis(&props)?;
            let label = label.unwrap_or_else(|| a.summary.name.clone());
            report::compare::Run::analysed(label, &t, &a)
        };
        runs.push(run);
    }
    Ok(runs)
}

/// The distributed run to analyse: a directory holding two or more ranks' traces, when no rank
/// was chosen; `None` otherwise (a single analysis).
pub fn distributed_run(props: &AnalyzeProps) -> Option<ingest::RankLayout> {
    if props.rank.is_some() || !props.input.is_dir() {
        return None;
    }
    let layout = ingest::rank_layout(&props.input);
    (layout.ranks.len() >= 2).then_some(layout)
}

/// Writes one rank's results as Parquet into `dir` for `steptrace merge`: the rank
/// is `props.rank`, else the trace's own (`_rankN` in its name, `distributedInfo`), else 0.
#[cfg(feature = "parquet")]
pub fn write_rank_output(props: &AnalyzeProps, o: &Outcome, dir: &Path) -> Result<i64, Error> {
    let rank = props
        .rank
        .or_else(|| {
            props
                .input
                .is_file()
                .then(|| ingest::rank_of_trace(&props.input))
                .flatten()
        })
        .unwrap_or(0);
    let folder = report::out_dir::Writer::open(dir)?;
    let r = analysis::ranks::RankResult::from_analysis(rank, &o.analysis);
    report::frames::write_rank(dir, &r)?;
    folder.finish()?;
    Ok(rank)
}

/// The cross-rank outputs from ranks' Parquet results written by [`write_rank_output`] in
/// `dirs`, without reading any trace: `ranks.csv` and `ranks.json` into `out`.
#[cfg(feature = "parquet")]
pub fn merge(dirs: &[PathBuf], out: &Path, top: usize) -> Result<RanksOutcome, Error> {
    // What merge reads is its input: a folder or table it cannot read is said as such (exit 2
    // in the binary, as for any unreadable input), not as a failure to write.
    let results = report::frames::read_ranks(dirs).map_err(|e| match e {
        report::Error::Io(f) => Error::Input(ingest::Error::Io(f)),
        other => Error::Output(other),
    })?;
    if results.is_empty() {
        return Err(Error::Analysis {
            path: dirs.first().cloned().unwrap_or_default(),
            what: "no rank results (rank<N>.summary.parquet) here: write them with `analyze --rank-output DIR`".into(),
        });
    }
    let ranks = analysis::ranks::combine(results, top.max(1));
    report::ranks::write(out, &ranks, true)?;
    Ok(RanksOutcome {
        out_dir: out.to_path_buf(),
        console: report::ranks::console(&ranks),
        ranks,
    })
}

/// The outcome of analysing every rank of a distributed run.
#[derive(Debug)]
pub struct RanksOutcome {
    /// Where the files went: `rank<N>/` per rank, the cross-rank files at the top.
    pub out_dir: PathBuf,
    /// The cross-rank result (with the ranks that could not be analysed, and why).
    pub ranks: analysis::ranks::Ranks,
    /// The console summary: one line per rank and the straggler verdict.
    pub console: String,
}

/// Analyses each rank of `run` into `rank<N>/` of the output directory, one rank at a time
/// (each uses every thread, and memory holds one rank's trace at most), then writes the
/// cross-rank outputs (`ranks.csv`, `ranks.json`) at the top. A rank whose files
/// cannot be analysed is reported and left out; when none can, the first rank's error is
/// returned.
pub fn analyze_ranks(
    props: &AnalyzeProps,
    run: &ingest::RankLayout,
) -> Result<RanksOutcome, Error> {
    if let Some(why) = &run.refused {
        let manifest = props.input.join("manifest.json");
        return Err(Error::Input(ingest::Error::Discovery {
            path: if manifest.is_file() {
                manifest
            } else {
                props.input.clone()
            },
            what: why.clone(),
        }));
    }
    let out_dir = props
        .out
        .clone()
        .unwrap_or_else(|| default_out_dir(&props.input));
    let mut results = Vec::new();
    let mut failed = Vec::new();
    let mut first_err = None;
    for &r in &run.ranks {
        // A rank's folder is steptrace's own, made inside --out: a link there would take that
        // rank's outputs (and the removal of the files its last run left) wherever it points.
        let rank_dir = out_dir.join(format!("rank{r}"));
        let p = AnalyzeProps {
            // A trace known by its header alone is analysed as a file: no second search.
            input: run
                .by_header
                .get(&r)
                .cloned()
                .unwrap_or_else(|| props.input.clone()),
            rank: Some(r),
            out: Some(rank_dir.clone()),
            ..props.clone()
        };
        let outcome = if std::fs::symlink_metadata(&rank_dir).is_ok_and(|m| m.is_symlink()) {
            Err(Error::Output(report::Error::SymlinkedFolder {
                path: rank_dir,
            }))
        } else {
            analyze(&p)
        };
        match outcome {
            Ok(o) => results.push(analysis::ranks::RankResult::from_analysis(r, &o.analysis)),
            Err(e) => {
                failed.push((r, e.to_string()));
                first_err.get_or_insert(e);
            }
        }
    }
    if results.is_empty() {
        if let Some(e) = first_err {
            return Err(e);
        }
    }
    let mut ranks = analysis::ranks::combine(results, props.top.max(1));
    ranks.not_analysed = failed;
    ranks.warnings.splice(0..0, run.warnings.iter().cloned());
    report::ranks::write(&out_dir, &ranks, !props.report.no_plots)?;
    Ok(RanksOutcome {
        out_dir,
        console: report::ranks::console(&ranks),
        ranks,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_out_dir_names() {
        assert_eq!(
            default_out_dir(Path::new("a/trace.json.gz")),
            PathBuf::from("a/trace.steptrace")
        );
        assert_eq!(
            default_out_dir(Path::new("runs/resnet18")),
            PathBuf::from("runs/resnet18.steptrace")
        );
        assert_eq!(
            default_out_dir(Path::new("h.123.pt.trace.json")),
            PathBuf::from("h.123.steptrace")
        );
    }
}
