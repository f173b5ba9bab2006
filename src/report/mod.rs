//! Writing results: CSV tables, `summary.json`, and the console summary (returned as text;
//! the CLI prints it).

use crate::file_error::FileError;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

pub mod annotated;
pub mod compare;
pub mod flops;
#[cfg(feature = "parquet")]
pub mod frames;
mod html;
mod memory;
pub mod out_dir;
pub mod plan;
pub mod plot;
pub mod ranks;

pub use out_dir::OutDir;

/// What to write besides the tables.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct ReportOptions {
    /// Plots to draw (empty: all of [`plot::PLOTS`]).
    pub plots: Vec<String>,
    /// Draw no plots (and no HTML report).
    pub no_plots: bool,
    /// GPU memory for the memory-vs-rank line, bytes (default: the trace's).
    pub gpu_mem_bytes: Option<i64>,
    /// Write the annotated trace.
    pub annotated_trace: bool,
    /// Keep only a compact subset of the original events in the annotated trace.
    pub compact: bool,
}

use crate::analysis::{Analysis, Summary};
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
/// [`OutDir::commit`] (or [`rename_parts`]) gives it its final name once every file is
/// complete. Part names are new files: nothing is truncated in place (which on ext4 also
/// made closing the file wait for its data, `auto_da_alloc`).
pub(crate) fn create(path: &Path) -> Result<File, Error> {
    let part = out_dir::part_path(path);
    // A failure to remove (no such file, a directory) is left to `create` to report.
    let _ = std::fs::remove_file(&part);
    File::create(&part).map_err(io(path))
}

/// Gives the files written into `dir` (and its plots) their final names: for outputs that are
/// not an analysis run's (compare, sweep).
pub fn rename_parts(dir: &Path) -> Result<(), Error> {
    for p in out_dir::parts(dir) {
        let fin = out_dir::final_path(&p);
        std::fs::rename(&p, &fin).map_err(io(&fin))?;
    }
    Ok(())
}

/// [`create`], then `bytes` written.
pub(crate) fn write_file(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    create(path)?.write_all(bytes).map_err(io(path))
}

/// A CSV writer on a [`create`]d file.
pub(crate) fn csv_writer(path: &Path) -> Result<CsvOut, Error> {
    Ok(CsvOut(csv::Writer::from_writer(create(path)?)))
}

/// A CSV writer whose every field goes through [`safe_cell`].
pub(crate) struct CsvOut(csv::Writer<File>);

impl CsvOut {
    /// Writes one record, each field made safe for spreadsheets.
    pub(crate) fn write_record<I, T>(&mut self, record: I) -> csv::Result<()>
    where
        I: IntoIterator<Item = T>,
        T: AsRef<[u8]>,
    {
        for f in record {
            self.0.write_field(safe_cell(f.as_ref()))?;
        }
        self.0.write_record(None::<&[u8]>)
    }

    /// Flushes what is buffered.
    pub(crate) fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

/// A CSV cell that a spreadsheet would read as a formula (issue 22: an op or label named
/// `=cmd|' /C calc'!A0`, `+SUM(1,2)` or `@HYPERLINK(...)`) gets a leading `'`, as OWASP
/// recommends: text starting with `=`, `@`, a tab or a carriage return, and text starting with
/// `+` or `-` that is not a number (a negative figure stays a number).
pub(crate) fn safe_cell(b: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    let formula = match b.first() {
        Some(b'=' | b'@' | b'\t' | b'\r') => true,
        Some(b'+' | b'-') => {
            let t = std::str::from_utf8(b).unwrap_or("");
            let t = t.strip_suffix('%').unwrap_or(t);
            t.parse::<f64>().is_err()
        }
        _ => false,
    };
    if formula {
        let mut v = Vec::with_capacity(b.len() + 1);
        v.push(b'\'');
        v.extend_from_slice(b);
        std::borrow::Cow::Owned(v)
    } else {
        std::borrow::Cow::Borrowed(b)
    }
}

pub(crate) fn csv_err(path: &Path) -> impl Fn(csv::Error) -> Error + '_ {
    move |e| Error::from(FileError::new(path, e.into()))
}

/// CSV rows formatted into memory, with the quoting of the `csv` crate's default writer (a
/// field is quoted when it holds `,`, `"`, `\r` or `\n`, quotes doubled; a row of one empty
/// field is `""`), which a property test holds it to. The tables with a row per allocator event
/// or per node are the largest outputs: a `String` per field, and then the `csv` writer's
/// per-field state machine, were most of their cost.
pub(crate) struct Rows {
    buf: Vec<u8>,
    row_start: usize,
    fields: u32,
    int: itoa::Buffer,
}

impl Rows {
    pub(crate) fn new() -> Rows {
        Rows {
            buf: Vec::new(),
            row_start: 0,
            fields: 0,
            int: itoa::Buffer::new(),
        }
    }

    fn sep(&mut self) {
        if self.fields > 0 {
            self.buf.push(b',');
        }
        self.fields += 1;
    }

    /// An integer (itoa: `Display` through `fmt` was a tenth of writing the large tables).
    pub(crate) fn num(&mut self, v: impl itoa::Integer) -> &mut Self {
        self.sep();
        self.buf.extend_from_slice(self.int.format(v).as_bytes());
        self
    }

    /// Text, made safe for spreadsheets ([`safe_cell`]) and quoted as CSV needs.
    pub(crate) fn text(&mut self, s: &str) -> &mut Self {
        self.sep();
        let cell = safe_cell(s.as_bytes());
        let b: &[u8] = &cell;
        if b.iter().any(|&c| matches!(c, b',' | b'"' | b'\r' | b'\n')) {
            self.buf.push(b'"');
            for &c in b {
                if c == b'"' {
                    self.buf.push(b'"');
                }
                self.buf.push(c);
            }
            self.buf.push(b'"');
        } else {
            self.buf.extend_from_slice(b);
        }
        self
    }

    /// Nanoseconds as microseconds with three decimals, exactly (no float on the way).
    pub(crate) fn us(&mut self, ns: i64) -> &mut Self {
        self.sep();
        us_text(ns, &mut self.buf);
        self
    }

    /// Ends the row.
    pub(crate) fn end(&mut self) {
        // A row of one empty field would be an empty line, which readers skip.
        if self.fields == 1 && self.buf.len() == self.row_start {
            self.buf.extend_from_slice(b"\"\"");
        }
        self.buf.push(b'\n');
        self.row_start = self.buf.len();
        self.fields = 0;
    }

    /// The text so far.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.buf
    }
}

/// Writes a CSV table of one row per item. Rows are formatted in blocks on all threads and
/// written in item order, so the file does not depend on the threads.
pub(crate) fn write_table<T: Sync>(
    path: &Path,
    header: &[&str],
    items: &[T],
    row: impl Fn(&mut Rows, &T) + Sync,
) -> Result<(), Error> {
    use rayon::prelude::*;
    const BLOCK: usize = 4096;
    let mut head = Rows::new();
    for h in header {
        head.text(h);
    }
    head.end();
    let blocks: Vec<Rows> = items
        .par_chunks(BLOCK)
        .map(|c| {
            let mut r = Rows::new();
            r.buf.reserve(c.len() * 128);
            for x in c {
                row(&mut r, x);
            }
            r
        })
        .collect();
    let mut f = create(path)?;
    f.write_all(head.bytes()).map_err(io(path))?;
    for b in &blocks {
        f.write_all(b.bytes()).map_err(io(path))?;
    }
    Ok(())
}

/// `ns` as microseconds with three decimals: `-1` is `-0.001`.
fn us_text(ns: i64, out: &mut Vec<u8>) {
    let a = ns.unsigned_abs();
    if ns < 0 {
        out.push(b'-');
    }
    out.extend_from_slice(itoa::Buffer::new().format(a / 1000).as_bytes());
    let r = a % 1000;
    out.extend_from_slice(&[
        b'.',
        b'0' + (r / 100) as u8,
        b'0' + (r / 10 % 10) as u8,
        b'0' + (r % 10) as u8,
    ]);
}

/// Formats seconds with enough digits for nanosecond inputs, without float noise.
pub(crate) fn secs(v: f64) -> String {
    // A sum of nothing is -0.0 in Rust; write it as 0.
    let v = if v == 0.0 { 0.0 } else { v };
    let s = format!("{v:.9}");
    let s = s.trim_end_matches('0');
    s.strip_suffix('.').unwrap_or(s).to_owned()
}

/// The summary with the diagnostics folded in.
pub fn summary_with_warnings(a: &Analysis, diag: &Diagnostics) -> Summary {
    let mut s = a.summary.clone();
    s.warnings = diag.lines();
    s
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
    let mut tasks: Vec<Task<'_>> = vec![
        file(dir, "summary.json", |p| write_summary(p, a, diag)),
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
    ];
    #[cfg(feature = "parquet")]
    for (w, name) in frames::writers().into_iter().zip(frames::FILES) {
        tasks.push(named(name, Box::new(move || w(dir, t, a))));
    }
    if opts.annotated_trace {
        tasks.push(file(dir, annotated::file_name(t), |p| {
            let h = head.lock().unwrap_or_else(|e| e.into_inner()).take();
            annotated::write(p, t, a, opts.compact, h)
        }));
    }
    for (job, slot) in plots.iter().zip(&svgs) {
        let plot_dir = &plot_dir;
        tasks.push(named(
            &format!("plot {}", job.name()),
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
            .filter_map(|(j, s)| Some((j.name(), s.into_inner().ok()??)))
            .collect();
        html::write(dir, &svgs, a, diag)?;
        times.push(("report.html".into(), t0.elapsed().as_secs_f64()));
    }
    out.commit()?;
    times.push(("renamed into place".into(), t0.elapsed().as_secs_f64()));
    Ok(times)
}

fn write_summary(p: &Path, a: &Analysis, diag: &Diagnostics) -> Result<(), Error> {
    write_json(p, &summary_with_warnings(a, diag))
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
            .text(k.kind)
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

fn write_iterations(path: &Path, a: &Analysis) -> Result<(), Error> {
    let mut w = csv_writer(path)?;
    w.write_record([
        "iteration",
        "span_s",
        "nodes",
        "gpu_time_s",
        "gpu_busy_s",
        "gpu_unattributed_s",
        "peak_allocated_bytes",
        "backward_s",
    ])
    .map_err(csv_err(path))?;
    for it in &a.step.iterations {
        w.write_record([
            it.label.clone(),
            secs((it.end - it.start) as f64 * 1e-9),
            it.nodes.len().to_string(),
            secs(it.gpu_time as f64 * 1e-9),
            secs(it.gpu_busy as f64 * 1e-9),
            secs(it.gpu_unattributed as f64 * 1e-9),
            it.peak_allocated.map_or(String::new(), |p| p.to_string()),
            it.backward
                .map_or(String::new(), |(s, e)| secs((e - s) as f64 * 1e-9)),
        ])
        .map_err(csv_err(path))?;
    }
    w.flush().map_err(io(path))
}

/// Bytes in binary units, e.g. `283.1 MiB`.
pub fn human_bytes(b: i64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v.abs() >= 1024.0 && u < units.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", units[u])
    }
}

/// Seconds in a readable unit.
pub fn human_time(s: f64) -> String {
    if s >= 1.0 {
        format!("{s:.3} s")
    } else if s >= 1e-3 {
        format!("{:.3} ms", s * 1e3)
    } else {
        format!("{:.1} us", s * 1e6)
    }
}

/// The console summary: the step, the peak, and the top nodes by GPU time and by memory.
pub fn console_summary(t: &Trace, a: &Analysis, diag: &Diagnostics, top: usize) -> String {
    if t.kineto.ops.is_empty() {
        return gpu_only_console(a, diag, top);
    }
    let s = &a.summary;
    let mut o = String::new();
    let dev = s.device.as_deref().unwrap_or("unknown GPU");
    o += &format!(
        "{}: {} iterations ({}), {} nodes per iteration, on {}\n",
        s.trace,
        s.iterations,
        match s.iteration_detection {
            crate::analysis::Detection::ProfilerStep => "ProfilerStep markers",
            crate::analysis::Detection::BackwardCycle => "found from backward passes",
            crate::analysis::Detection::WholeTrace => "no step structure found: whole trace",
        },
        s.nodes_per_iteration,
        dev
    );
    if let Some(x) = s.profiler_overhead {
        o += &format!(
            "step time {} (median, the program's own: timed by capture with nothing recorded); {} under the profiler ({x:.1}x)\n",
            human_time(s.step_time_s),
            human_time(s.step_time_instrumented_s),
        );
    } else {
        o += &format!(
            "step time {} (median, under the profiler)\n",
            human_time(s.step_time_s)
        );
    }
    // GPU busy is measured inside the profiled iterations: its share is of those.
    o += &format!(
        "GPU busy {} ({:.0}% of the profiled step), GPU kernel time {}\n",
        human_time(s.gpu_busy_s),
        crate::analysis::percent(s.gpu_busy_s, s.step_time_instrumented_s).unwrap_or(0.0),
        human_time(s.gpu_time_s)
    );
    match s.peak_allocated_bytes {
        Some(p) => {
            o += &format!(
                "peak allocated {} at {} ({})\n",
                human_bytes(p),
                s.peak_node.as_deref().unwrap_or("no node"),
                s.peak_iteration.as_deref().unwrap_or("")
            )
        }
        None => {
            o += "no memory data: the trace holds no allocator events (record with profile_memory=True)\n"
        }
    }
    o += &format!(
        "FLOPs per iteration {} (FlopCounterMode convention {}), {} moved\n",
        flops::human_flops(s.flops_per_iteration as f64),
        flops::human_flops(s.matmul_flops_per_iteration as f64),
        human_bytes(s.bytes_per_iteration as i64)
    );
    if !s.peak_breakdown_bytes.is_empty() {
        let parts: Vec<String> = s
            .peak_breakdown_bytes
            .iter()
            .filter(|(_, b)| **b != 0)
            .map(|(k, b)| format!("{k} {}", human_bytes(*b)))
            .collect();
        o += &format!("at the peak: {}\n", parts.join(", "));
    }
    o += &format!(
        "{} activations (liveness from {})\n",
        s.activations,
        match s.liveness_source {
            crate::analysis::liveness::Source::ExecutionTrace => "the Execution Trace",
            crate::analysis::liveness::Source::MemoryEvents => "allocator events",
        }
    );
    let total_gpu: f64 = a.node_stats.iter().map(|n| n.median_run_time_s).sum();
    let mut by_time: Vec<&crate::analysis::NodeStat> = a.node_stats.iter().collect();
    by_time.sort_by(|x, y| {
        y.median_run_time_s
            .total_cmp(&x.median_run_time_s)
            .then(x.rank.cmp(&y.rank))
    });
    o += &format!("\nTop {top} nodes by GPU time (median per iteration)\n");
    o += &format!(
        "{:>5}  {:<60} {:>10} {:>7} {:>8} {:>11}\n",
        "rank", "node", "GPU time", "GPU %", "kernels", "CPU time"
    );
    for n in by_time.iter().take(top) {
        o += &format!(
            "{:>5}  {:<60} {:>10} {:>6.1}% {:>8} {:>11}\n",
            n.rank,
            truncate(&n.node_name, 60),
            human_time(n.median_run_time_s),
            if total_gpu > 0.0 {
                100.0 * n.median_run_time_s / total_gpu
            } else {
                0.0
            },
            n.kernels,
            human_time(n.median_cpu_time_s)
        );
    }
    if s.peak_allocated_bytes.is_none() {
        // No memory events: a table of zeros would read as "nothing allocated" (issue 17).
        by_mem_table_skipped(&mut o);
        return finish_console(o, diag);
    }
    let mut by_mem: Vec<&crate::analysis::NodeStat> = a.node_stats.iter().collect();
    by_mem.sort_by(|x, y| {
        y.median_alloc_bytes
            .cmp(&x.median_alloc_bytes)
            .then(x.rank.cmp(&y.rank))
    });
    o += &format!("\nTop {top} nodes by memory allocated (median per iteration)\n");
    o += &format!(
        "{:>5}  {:<60} {:>11} {:>11} {:>10}\n",
        "rank", "node", "allocated", "peak", "type"
    );
    for n in by_mem.iter().take(top) {
        o += &format!(
            "{:>5}  {:<60} {:>11} {:>11} {:>10}\n",
            n.rank,
            truncate(&n.node_name, 60),
            human_bytes(n.median_alloc_bytes),
            human_bytes(n.median_peak_mem_bytes),
            n.node_type.as_str()
        );
    }
    finish_console(o, diag)
}

/// The console summary of a trace with no CPU operators: the GPU timeline and its kernels.
fn gpu_only_console(a: &Analysis, diag: &Diagnostics, top: usize) -> String {
    let s = &a.summary;
    let k = &a.kernels;
    let mut o = format!(
        "{}: no CPU operators (GPU-only trace): {} GPU activities on {} streams, on {}\n",
        s.trace,
        k.by_name.iter().map(|x| x.count).sum::<usize>(),
        k.streams.len(),
        s.device.as_deref().unwrap_or("unknown GPU")
    );
    o += &format!(
        "GPU span {}, busy {} ({:.0}%), kernel time {}\n",
        human_time(s.step_time_s),
        human_time(s.gpu_busy_s),
        crate::analysis::percent(s.gpu_busy_s, s.step_time_s).unwrap_or(0.0),
        human_time(s.gpu_time_s)
    );
    o += &format!("\nTop {top} kernels by GPU time (whole trace)\n");
    o += &format!(
        "{:<60} {:>7} {:>8} {:>11} {:>11} {:>7}\n",
        "kernel", "kind", "count", "total", "median", "share"
    );
    for x in k.by_name.iter().take(top) {
        o += &format!(
            "{:<60} {:>7} {:>8} {:>11} {:>11} {:>6.1}%\n",
            truncate(&x.name, 60),
            x.kind,
            x.count,
            human_time(x.total_ns as f64 * 1e-9),
            human_time(x.median_ns as f64 * 1e-9),
            x.share_pct
        );
    }
    finish_console(o, diag)
}

fn by_mem_table_skipped(o: &mut String) {
    *o += "\n(no table of nodes by memory: the trace holds no memory data)\n";
}

fn finish_console(mut o: String, diag: &Diagnostics) -> String {
    let lines = diag.lines();
    if !lines.is_empty() {
        o += "\nwarnings:\n";
        for l in lines {
            o += &format!("  {l}\n");
        }
    }
    o
}

/// `s` cut to its last `n` characters, an ellipsis first, where longer.
pub(crate) fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_owned()
    } else {
        let keep: String = s
            .chars()
            .rev()
            .take(n - 1)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        format!("…{keep}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn microseconds_are_written_exactly() {
        let text = |ns| {
            let mut v = Vec::new();
            us_text(ns, &mut v);
            String::from_utf8(v).unwrap()
        };
        assert_eq!(text(4_451_161_997_283_098), "4451161997283.098");
        assert_eq!(text(0), "0.000");
        assert_eq!(text(7), "0.007");
        // Negative values keep their sign on the whole number (div_euclid gave "-1.999").
        assert_eq!(text(-1), "-0.001");
        assert_eq!(text(-1_500), "-1.500");
        assert_eq!(text(i64::MIN), "-9223372036854775.808");
    }

    /// Rows as the `csv` crate's default writer makes them, for the property test.
    fn csv_crate_text(rows: &[Vec<String>]) -> Vec<u8> {
        let mut w = csv::WriterBuilder::new()
            .flexible(true)
            .from_writer(Vec::new());
        for r in rows {
            w.write_record(r.iter().map(|f| safe_cell(f.as_bytes())))
                .unwrap();
        }
        w.into_inner().unwrap()
    }

    proptest::proptest! {
        #[test]
        fn rows_quote_as_the_csv_crate_does(
            rows in proptest::collection::vec(
                proptest::collection::vec("[a,\"\r\n #é0=+@\t.-]{0,6}", 1..5),
                0..6,
            )
        ) {
            let mut r = Rows::new();
            for row in &rows {
                for f in row {
                    r.text(f);
                }
                r.end();
            }
            proptest::prop_assert_eq!(r.bytes(), &csv_crate_text(&rows)[..]);
        }
    }

    /// The sample traces have fewer rows than a block, so the golden and thread-count tests
    /// never join several blocks: this table spans four.
    #[test]
    fn write_table_joins_blocks_in_row_order() {
        let items: Vec<i64> = (0..3 * 4096 + 5).map(|i| i * 7 - 100).collect();
        let path = std::env::temp_dir().join(format!("steptrace-rows-{}.csv", std::process::id()));
        write_table(&path, &["n", "label"], &items, |w, &v| {
            w.num(v).text(if v % 3 == 0 { "a,b" } else { "c" }).end();
        })
        .unwrap();
        let mut expected = Rows::new();
        expected.text("n").text("label").end();
        for &v in &items {
            expected
                .num(v)
                .text(if v % 3 == 0 { "a,b" } else { "c" })
                .end();
        }
        // Written under its part name until the run commits.
        let part = out_dir::part_path(&path);
        let written = std::fs::read(&part).unwrap();
        std::fs::remove_file(&part).unwrap();
        assert_eq!(written, expected.bytes());
    }

    #[test]
    fn issue22_cells_that_would_be_formulas_are_neutralised_and_numbers_kept() {
        let cell = |s: &str| String::from_utf8(safe_cell(s.as_bytes()).into_owned()).unwrap();
        for f in [
            "=cmd|' /C calc'!A0",
            "+SUM(1,2)",
            "@HYPERLINK(\"x\")",
            "-2+3",
            "\tx",
            "\r=1",
        ] {
            assert_eq!(cell(f), format!("'{f}"));
        }
        for keep in ["-1.5", "+2", "-12.5%", "aten::mm", "", "1e-3", "-"] {
            let want = if keep == "-" { "'-" } else { keep };
            assert_eq!(cell(keep), want);
        }
        let mut r = Rows::new();
        r.text("=1+1").text("-0.25").end();
        assert_eq!(r.bytes(), b"'=1+1,-0.25\n");
    }

    #[test]
    fn rows_mix_numbers_and_texts() {
        let mut r = Rows::new();
        r.num(-12i64).us(1_500).text("a,b").text("").end();
        r.text("").end();
        assert_eq!(r.bytes(), b"-12,1.500,\"a,b\",\n\"\"\n");
    }

    #[test]
    fn formats() {
        assert_eq!(secs(0.000123456789), "0.000123457");
        assert_eq!(secs(2.0), "2");
        assert_eq!(secs(0.0), "0");
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(296840192), "283.1 MiB");
        assert_eq!(human_time(0.0647), "64.700 ms");
        assert_eq!(truncate("abcdef", 4), "…def");
    }
}
