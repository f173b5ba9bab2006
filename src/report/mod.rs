//! Writing results: every output of a run into its folder, side by side (the tables,
//! `summary.json`, Parquet, plots, the report, the annotated trace). `csv_rows` holds the CSV
//! writers, `console` the console summary (returned as text; the CLI prints it).

use crate::file_error::FileError;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

pub mod annotated;
pub mod compare;
mod console;
mod csv_rows;
pub mod flops;
#[cfg(feature = "parquet")]
pub mod frames;
pub mod gzip;
mod html;
mod memory;
pub mod out_dir;
pub mod plan;
pub mod plot;
pub mod ranks;
mod shared;
pub mod snapshot;
mod snapshot_view;
mod tables;
mod tasks;
mod waits;
pub(crate) use self::shared::{
    create, input_lacks, io, nodes_by_time, nodes_without_gpu_time, secs, write_file,
};
pub(crate) use self::tables::write_json;
use self::tasks::{file, named, Task};

pub use console::{console_summary, human_bytes, human_time};
pub use out_dir::OutDir;

pub(crate) use console::truncate;
pub(crate) use csv_rows::{csv_err, csv_writer, us_text, write_table};

/// What to write besides the tables.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct ReportOptions {
    /// Plots to draw (empty: all of [`plot::PLOTS`]).
    pub plots: Vec<plot::Plot>,
    /// Draw no plots (and no HTML report).
    pub no_plots: bool,
    /// GPU memory for the memory-vs-rank line, bytes (default: the trace's).
    pub gpu_mem_bytes: Option<i64>,
    /// Write the annotated trace.
    pub annotated_trace: bool,
    /// Keep only a compact subset of the original events in the annotated trace.
    pub compact: bool,
}

use crate::analysis::Analysis;
use crate::diagnostics::Diagnostics;
use crate::model::Trace;

/// Why output could not be written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A file could not be created or written.
    #[error(transparent)]
    Io(#[from] FileError),
    /// `--out` names something that is not a directory.
    #[error("{}: not a directory (--out names the folder to write results into)", path.display())]
    NotADirectory {
        /// The path.
        path: PathBuf,
    },
    /// A folder the outputs go into is a symbolic link: writing through it would put files
    /// wherever it points.
    #[error("{}: a symbolic link where steptrace writes its outputs; it writes only into real folders (remove the link or choose another --out)", path.display())]
    SymlinkedFolder {
        /// The link.
        path: PathBuf,
    },
    /// Something other than a file (a folder, a FIFO) sits where an output goes: replacing it
    /// would remove what the user put there.
    #[error("{}: not a file, where steptrace writes this output: remove it or choose another --out", path.display())]
    InTheWay {
        /// Where the output goes.
        path: PathBuf,
    },
    /// An output would replace the input it is made from (`--out` the input's own folder, the
    /// input named as that output).
    #[error("{}: the input itself, where this output would be written: choose another --out", path.display())]
    WouldReplaceInput {
        /// The input.
        path: PathBuf,
    },
}

/// Names of the files [`write_all`] creates.
pub const FILES: [&str; 4] = [
    "summary.json",
    "node_stats.csv",
    "node_iterations.csv",
    "iterations.csv",
];

/// Writes every output file into `dir` (created if missing), the annotated trace's copy of
/// the input started first, as `analyze` does: for an analysis made before (the Python
/// module's `write`).
pub fn write_all(
    dir: &Path,
    t: &Trace,
    a: &Analysis,
    diag: &Diagnostics,
    opts: &ReportOptions,
) -> Result<(), Error> {
    let mut out = OutDir::prepare(dir)?;
    out.start_annotated(&t.kineto, opts);
    write_into(out, t, a, diag, opts).map(drop)
}

/// Writes every output file into a prepared directory and commits them; returns when each
/// output was complete (seconds from the start of writing), for `--timings`.
///
/// The files are independent of one another, so they are written as parallel tasks (each plot
/// on its own, the annotated trace, the Parquet copies, the tables); the previous run's files
/// are removed beside them. Each file's bytes do not depend on the thread count; when several
/// tasks fail, the error of the earliest task in the list below is returned, so the error is
/// deterministic too.
pub fn write_into(
    mut out: OutDir,
    t: &Trace,
    a: &Analysis,
    diag: &Diagnostics,
    opts: &ReportOptions,
) -> Result<Vec<(String, f64)>, Error> {
    use rayon::prelude::*;
    if opts.annotated_trace {
        refuse_to_replace_input(&out.path().join(annotated::file_name(t)), t)?;
    }
    let clearing = out.clear_previous(&t.kineto.path);
    let dir = out.path().to_path_buf();
    let dir = dir.as_path();
    let head = std::sync::Mutex::new(out.head.take());
    let plot_dir = dir.join("plots");
    let plots = if opts.no_plots {
        Vec::new()
    } else {
        plot::jobs(a, &opts.plots, opts.gpu_mem_bytes)
    };
    if !plots.is_empty() {
        std::fs::create_dir_all(&plot_dir).map_err(io(&plot_dir))?;
    }
    let svgs: Vec<std::sync::Mutex<Option<String>>> =
        plots.iter().map(|_| std::sync::Mutex::new(None)).collect();
    let mut tasks: Vec<Task<'_>> = Vec::new();
    // The annotated trace first: the longest task (tens of MB formatted, and for a gzip input
    // compressed), started while the short ones fill the other threads.
    if opts.annotated_trace {
        tasks.push(file(dir, annotated::file_name(t), |p| {
            let h = head.lock().unwrap_or_else(|e| e.into_inner()).take();
            annotated::write(p, t, a, opts.compact, h)
        }));
    }
    tasks.extend(tasks::tables(dir, t, a));
    for (job, slot) in plots.iter().zip(&svgs) {
        let plot_dir = &plot_dir;
        tasks.push(named(
            &format!("plot {}", job.plot().name()),
            Box::new(move || {
                let svg = job.write(plot_dir)?;
                *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(svg);
                Ok(())
            }),
        ));
    }
    // When each output was complete, from the start of writing: tasks run side by side (and a
    // waiting task's thread may run another's work), so their own durations would overlap.
    let t0 = std::time::Instant::now();
    let results: Vec<(Result<(), Error>, f64)> = tasks
        .par_iter()
        .map(|(_, task)| {
            let r = task();
            (r, t0.elapsed().as_secs_f64())
        })
        .collect();
    let mut times: Vec<(String, f64)> = tasks
        .iter()
        .zip(&results)
        .map(|((name, _), (_, at))| (name.clone(), *at))
        .collect();
    drop(tasks);
    let done: Result<(), Error> = results.into_iter().try_for_each(|(r, _)| r);
    if let Some(h) = clearing {
        let _ = h.join();
    }
    done?;
    if !opts.no_plots {
        // The HTML report inlines the SVG plots, so it follows them.
        let svgs: Vec<(&str, String)> = plots
            .iter()
            .zip(svgs)
            .filter_map(|(j, s)| Some((j.plot().name(), s.into_inner().ok()??)))
            .collect();
        let view = snapshot_section(t, a);
        html::write(dir, &svgs, a, diag, view)?;
        times.push(("report.html".into(), t0.elapsed().as_secs_f64()));
    }
    out.commit()?;
    times.push(("renamed into place".into(), t0.elapsed().as_secs_f64()));
    Ok(times)
}

/// An error where the annotated trace `dest` is the input trace itself (an analysis of an
/// annotated trace into the folder it came from), which writing would destroy.
fn refuse_to_replace_input(dest: &Path, t: &Trace) -> Result<(), Error> {
    let same = match (dest.canonicalize(), t.kineto.path.canonicalize()) {
        (Ok(x), Ok(y)) => x == y,
        _ => false,
    };
    if same {
        return Err(Error::WouldReplaceInput {
            path: t.kineto.path.clone(),
        });
    }
    Ok(())
}

/// The memory view of a run with a snapshot: its whole history, interactively, each
/// allocation named by the node that made it where one did.
fn snapshot_section(t: &Trace, a: &Analysis) -> Option<String> {
    t.snapshot
        .as_ref()
        .zip(a.snapshot_history.as_ref())
        .map(|(s, h)| {
            let makers: Vec<Vec<Option<String>>> = h
                .makers
                .iter()
                .map(|d| {
                    d.iter()
                        .map(|&n| {
                            let n = a.step.nodes.get(n?)?;
                            Some(format!("{}, iteration {}", n.name, n.iteration))
                        })
                        .collect()
                })
                .collect();
            snapshot_view::section(s, &h.analysis, &makers)
        })
}

#[cfg(test)]
mod tests;
