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
pub mod snapshot;
mod snapshot_view;

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

pub(crate) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::from(FileError::new(path, source))
}

/// Creates an output file under its part name ([`out_dir::part_path`]); the run's
/// [`OutDir::commit`] (or [`out_dir::Writer::finish`]) gives it its final name once every file is
/// complete. Part names are new files: nothing is truncated in place (which on ext4 also
/// made closing the file wait for its data, `auto_da_alloc`).
pub(crate) fn create(path: &Path) -> Result<File, Error> {
    let part = out_dir::part_path(path);
    // A failure to remove (no such file, a directory) is left to `create` to report.
    let _ = std::fs::remove_file(&part);
    File::create(&part).map_err(io(path))
}

/// [`create`], then `bytes` written.
pub(crate) fn write_file(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    create(path)?.write_all(bytes).map_err(io(path))
}

/// Formats seconds with enough digits for nanosecond inputs, without float noise.
pub(crate) fn secs(v: f64) -> String {
    // A sum of nothing is -0.0 in Rust; write it as 0.
    let v = if v == 0.0 { 0.0 } else { v };
    let s = format!("{v:.9}");
    let s = s.trim_end_matches('0');
    s.strip_suffix('.').unwrap_or(s).to_owned()
}

/// What the input lacks that an output would otherwise show, one sentence each with the
/// recording option that adds it: said once at the top of the console and report.html,
/// where the figures it would give are left out.
pub(crate) fn input_lacks(a: &Analysis) -> Vec<&'static str> {
    let s = &a.summary;
    let mut v = Vec::new();
    if s.peak_allocated_bytes.is_none() {
        v.push(
            "no memory data: the trace holds no allocator events (record with profile_memory=True)",
        );
    }
    if !s.flops_counted() && !a.node_stats.is_empty() {
        v.push("no FLOPs counted: the trace records no operator input shapes (record with record_shapes=True)");
    }
    if !a.node_stats.is_empty() && a.node_stats.iter().all(|n| n.module.is_none()) {
        v.push("no module paths: the trace records no nn.Module ranges (record with with_modules=True); nodes are named by phase and op alone");
    }
    v
}

/// Whether the top-node tables rank by CPU time: no node has GPU time or a kernel. One rule
/// for the console and report.html (the console had asked whether the trace held any GPU
/// event, which differs where GPU work lies outside every node).
pub(crate) fn nodes_without_gpu_time(stats: &[crate::analysis::NodeStat]) -> bool {
    stats
        .iter()
        .all(|n| n.median_run_time_s == 0.0 && n.kernels == 0)
}

/// The nodes by a time of theirs (`time`: GPU or CPU seconds), longest first, ties in
/// execution order: the console's and report.html's top-node tables.
pub(crate) fn nodes_by_time(
    stats: &[crate::analysis::NodeStat],
    time: impl Fn(&crate::analysis::NodeStat) -> f64,
) -> Vec<&crate::analysis::NodeStat> {
    let mut v: Vec<_> = stats.iter().collect();
    v.sort_by(|x, y| time(y).total_cmp(&time(x)).then(x.rank.cmp(&y.rank)));
    v
}

/// Writes every output file into `dir` (created if missing).
pub fn write_all(
    dir: &Path,
    t: &Trace,
    a: &Analysis,
    diag: &Diagnostics,
    opts: &ReportOptions,
) -> Result<(), Error> {
    write_into(OutDir::prepare(dir)?, t, a, diag, opts).map(drop)
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
    type Job<'a> = Box<dyn Fn() -> Result<(), Error> + Send + Sync + 'a>;
    type Task<'a> = (String, Job<'a>);
    fn named<'a>(name: &str, f: Job<'a>) -> Task<'a> {
        (name.to_owned(), f)
    }
    // A task writing the one file `name` in `dir`.
    fn file<'a>(
        dir: &'a Path,
        name: &'static str,
        w: impl Fn(&Path) -> Result<(), Error> + Send + Sync + 'a,
    ) -> Task<'a> {
        named(name, Box::new(move || w(&dir.join(name))))
    }
    let mut tasks: Vec<Task<'_>> = Vec::new();
    // The annotated trace first: the longest task (tens of MB formatted, and for a gzip input
    // compressed), started while the short ones fill the other threads.
    if opts.annotated_trace {
        tasks.push(file(dir, annotated::file_name(t), |p| {
            let h = head.lock().unwrap_or_else(|e| e.into_inner()).take();
            annotated::write(p, t, a, opts.compact, h)
        }));
    }
    tasks.extend([
        file(dir, "summary.json", |p| write_summary(p, a)),
        file(dir, "node_stats.csv", |p| write_node_stats(p, t, a)),
        file(dir, "node_iterations.csv", |p| {
            write_node_iterations(p, t, a)
        }),
        file(dir, "iterations.csv", |p| write_iterations(p, a)),
        file(dir, "flops.csv", |p| flops::write_flops_csv(p, a)),
        named("flops rollups", Box::new(|| flops::write_rollups(dir, a))),
        file(dir, "graph_profile.json", |p| write_graph_profile(p, a)),
        file(dir, "activation_stats.csv", |p| {
            memory::write_activation_stats(p, a)
        }),
        file(dir, "memory_timeline.csv", |p| {
            memory::write_timeline(p, t, a)
        }),
        named("graph.json/dot", Box::new(|| memory::write_graph(dir, a))),
        file(dir, "kernels.csv", |p| write_kernels(p, a)),
        file(dir, "streams.csv", |p| write_streams(p, a)),
    ]);
    #[cfg(feature = "parquet")]
    for (w, name) in frames::writers().into_iter().zip(frames::FILES) {
        tasks.push(named(name, Box::new(move || w(dir, t, a))));
    }
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

fn write_summary(p: &Path, a: &Analysis) -> Result<(), Error> {
    write_json(p, &a.summary)
}

/// `v` as indented JSON with a final newline, under `p`'s part name.
pub(crate) fn write_json(p: &Path, v: &impl serde::Serialize) -> Result<(), Error> {
    let mut w = BufWriter::new(create(p)?);
    serde_json::to_writer_pretty(&mut w, v)
        .map_err(|e| Error::from(FileError::new(p, e.into())))?;
    w.write_all(b"\n").map_err(io(p))?;
    w.flush().map_err(io(p))
}

fn write_graph_profile(p: &Path, a: &Analysis) -> Result<(), Error> {
    let text = serde_json::to_vec_pretty(&flops::graph_profile(a))
        .map_err(|e| Error::from(FileError::new(p, e.into())))?;
    write_file(p, &text)
}

fn opt(t: &Trace, id: Option<crate::intern::StrId>) -> &str {
    id.map_or("", |i| t.kineto.str(i))
}

fn write_node_stats(path: &Path, t: &Trace, a: &Analysis) -> Result<(), Error> {
    let mut w = csv_writer(path)?;
    w.write_record([
        "rank",
        "node_name",
        "op",
        "node_type",
        "gtype",
        "module",
        "autograd_fn",
        "recompute",
        "median_run_time_s",
        "median_cpu_time_s",
        "median_gpu_span_s",
        "median_peak_mem_bytes",
        "median_active_mem_bytes",
        "median_alloc_bytes",
        "median_free_bytes",
        "kernels",
        "device",
        "iterations_present",
    ])
    .map_err(csv_err(path))?;
    for s in &a.node_stats {
        w.write_record([
            s.rank.to_string(),
            s.node_name.clone(),
            t.kineto.str(s.op).to_owned(),
            s.node_type.as_str().to_owned(),
            s.gtype.as_str().to_owned(),
            opt(t, s.module).to_owned(),
            opt(t, s.autograd_fn).to_owned(),
            s.recompute.to_string(),
            secs(s.median_run_time_s),
            secs(s.median_cpu_time_s),
            secs(s.median_gpu_span_s),
            s.median_peak_mem_bytes.to_string(),
            s.median_active_mem_bytes.to_string(),
            s.median_alloc_bytes.to_string(),
            s.median_free_bytes.to_string(),
            s.kernels.to_string(),
            s.device.clone(),
            s.iterations_present.to_string(),
        ])
        .map_err(csv_err(path))?;
    }
    w.flush().map_err(io(path))
}

fn write_node_iterations(path: &Path, t: &Trace, a: &Analysis) -> Result<(), Error> {
    let header = [
        "iteration",
        "rank",
        "node_name",
        "op",
        "gtype",
        "start_ns",
        "cpu_time_ns",
        "gpu_time_ns",
        "gpu_span_ns",
        "kernels",
        "active_mem_bytes",
        "peak_mem_bytes",
        "alloc_bytes",
        "free_bytes",
    ];
    write_table(path, &header, &a.step.nodes, |w, n| {
        let op = t.op(n.op);
        let it = &a.step.iterations[n.iteration as usize];
        w.text(&it.label)
            .num(n.rank)
            .text(&n.name)
            .text(t.kineto.str(op.name))
            .text(n.phase.as_str())
            .num(op.start - it.start)
            .num(n.cpu_time)
            .num(n.gpu_time)
            .num(n.gpu_span)
            .num(n.kernels)
            .num(n.active_before)
            .num(n.peak)
            .num(n.alloc_bytes)
            .num(n.free_bytes)
            .end();
    })
}

fn write_kernels(path: &Path, a: &Analysis) -> Result<(), Error> {
    let header = [
        "name",
        "kind",
        "count",
        "total_ns",
        "median_ns",
        "max_ns",
        "share_pct",
    ];
    write_table(path, &header, &a.kernels.by_name, |w, k| {
        w.text(&k.name)
            .text(k.kind.as_str())
            .num(k.count)
            .num(k.total_ns)
            .num(k.median_ns)
            .num(k.max_ns)
            .text(&format!("{:.3}", k.share_pct))
            .end();
    })
}

fn write_streams(path: &Path, a: &Analysis) -> Result<(), Error> {
    let header = ["device", "stream", "activities", "busy_ns"];
    write_table(path, &header, &a.kernels.streams, |w, s| {
        w.num(s.device)
            .num(s.stream)
            .num(s.activities)
            .num(s.busy_ns)
            .end();
    })
}

/// `iterations.csv`: one row per iteration, its wall time split by phase last
/// (`wall_<phase>_s` in [`Phase::ALL`]'s order, then `between_phases_s`: they add up to
/// `span_s`).
///
/// [`Phase::ALL`]: crate::analysis::step::Phase::ALL
fn write_iterations(path: &Path, a: &Analysis) -> Result<(), Error> {
    use crate::analysis::step::Phase;
    let mut w = csv_writer(path)?;
    let wall_cols = Phase::ALL.map(|p| format!("wall_{}_s", p.as_str()));
    let head = [
        "iteration",
        "span_s",
        "nodes",
        "gpu_time_s",
        "gpu_busy_s",
        "gpu_unattributed_s",
        "peak_allocated_bytes",
        "backward_s",
    ]
    .into_iter()
    .chain(wall_cols.iter().map(String::as_str))
    .chain(["between_phases_s"]);
    w.write_record(head).map_err(csv_err(path))?;
    for it in &a.step.iterations {
        let walls = Phase::ALL
            .iter()
            .map(|&p| secs(it.wall.of(p) as f64 * 1e-9))
            .chain([secs(it.wall.between as f64 * 1e-9)]);
        w.write_record(
            [
                it.label.clone(),
                secs((it.end - it.start) as f64 * 1e-9),
                it.nodes.len().to_string(),
                secs(it.gpu_time as f64 * 1e-9),
                secs(it.gpu_busy as f64 * 1e-9),
                secs(it.gpu_unattributed as f64 * 1e-9),
                it.peak_allocated.map_or(String::new(), |p| p.to_string()),
                it.backward
                    .map_or(String::new(), |(s, e)| secs((e - s) as f64 * 1e-9)),
            ]
            .into_iter()
            .chain(walls),
        )
        .map_err(csv_err(path))?;
    }
    w.flush().map_err(io(path))
}

#[cfg(test)]
mod tests;
