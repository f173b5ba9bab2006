//! The analysis' tables as files: summary.json, graph_profile.json and the CSV tables (nodes, iterations, kernels, streams).

use super::*;

pub(super) fn write_summary(p: &Path, a: &Analysis) -> Result<(), Error> {
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

pub(super) fn write_graph_profile(p: &Path, a: &Analysis) -> Result<(), Error> {
    let text = serde_json::to_vec_pretty(&flops::graph_profile(a))
        .map_err(|e| Error::from(FileError::new(p, e.into())))?;
    write_file(p, &text)
}

pub(super) fn opt(t: &Trace, id: Option<crate::intern::StrId>) -> &str {
    id.map_or("", |i| t.kineto.str(i))
}

pub(super) fn write_node_stats(path: &Path, t: &Trace, a: &Analysis) -> Result<(), Error> {
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

pub(super) fn write_node_iterations(path: &Path, t: &Trace, a: &Analysis) -> Result<(), Error> {
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

pub(super) fn write_kernels(path: &Path, a: &Analysis) -> Result<(), Error> {
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

/// `idle_time.csv`'s rows: each stream's idle time by cause, over the whole trace (`trace`)
/// and per iteration; every cause of a stream that has a row, zeros included.
pub(crate) fn idle_rows(
    a: &Analysis,
) -> Vec<(
    &str,
    &crate::analysis::idle::StreamIdle,
    crate::analysis::idle::IdleCause,
)> {
    use crate::analysis::idle::IdleCause;
    let mut rows = Vec::new();
    for s in &a.idle.streams {
        let scope = match s.iteration {
            None => "trace",
            Some(i) => a.step.iterations[i as usize].label.as_str(),
        };
        for c in IdleCause::ALL {
            rows.push((scope, s, c));
        }
    }
    rows
}

pub(super) fn write_idle_time(path: &Path, a: &Analysis) -> Result<(), Error> {
    let header = [
        "scope",
        "device",
        "stream",
        "cause",
        "hta_category",
        "idle_s",
        "gaps",
    ];
    let rows = idle_rows(a);
    write_table(path, &header, &rows, |w, (scope, s, c)| {
        let i = c.index();
        w.text(scope)
            .num(s.device)
            .num(s.stream)
            .text(c.as_str())
            .text(c.hta())
            .text(&secs(s.idle_ns[i] as f64 * 1e-9))
            .num(s.gaps[i])
            .end();
    })
}

/// `launches.csv`: each launched GPU activity, in trace order: its launch call's host time,
/// its GPU time and the delay between (HolisticTraceAnalysis's launch statistics).
pub(super) fn write_launches(path: &Path, t: &Trace, a: &Analysis) -> Result<(), Error> {
    let header = [
        "correlation",
        "name",
        "stream",
        "op",
        "cpu_duration_ns",
        "gpu_duration_ns",
        "launch_delay_ns",
        "shorter_than_launch",
    ];
    write_table(path, &header, &a.launches.each, |w, l| {
        let g = &t.kineto.gpu[l.gpu as usize];
        w.num(l.correlation)
            .text(t.kineto.str(g.name))
            .num(g.stream)
            .text(launching_op(t, l.gpu as usize))
            .num(l.cpu_ns)
            .num(l.gpu_ns)
            .num(l.delay_ns)
            .text(if l.short() { "true" } else { "false" })
            .end();
    })
}

/// One row of `critical_path.csv`: the iteration's index, its path's start, and a stretch.
pub(crate) type PathRow<'a> = (u32, i64, &'a crate::analysis::critical_path::Segment);

/// The critical paths' stretches, iteration by iteration, in time order.
pub(crate) fn path_rows(a: &Analysis) -> Vec<PathRow<'_>> {
    a.critical_path
        .iterations
        .iter()
        .flat_map(|p| {
            let start = p.segments.first().map_or(0, |s| s.start);
            p.segments.iter().map(move |s| (p.iteration, start, s))
        })
        .collect()
}

/// The op a stretch of the path is charged to: the node of a host stretch, the op that
/// launched a GPU one (or the activity a gap or a wait came before).
pub(crate) fn path_op<'a>(
    t: &'a Trace,
    a: &'a Analysis,
    s: &crate::analysis::critical_path::Segment,
) -> &'a str {
    match (s.node, s.gpu) {
        (Some(n), _) => &a.step.nodes[n as usize].name,
        (None, Some(g)) => launching_op(t, g as usize),
        _ => "",
    }
}

/// `critical_path.csv`: each iteration's critical path, stretch by stretch: when (from the
/// path's start), how long, what it is, the op it is charged to, and the GPU activity.
pub(super) fn write_critical_path(path: &Path, t: &Trace, a: &Analysis) -> Result<(), Error> {
    let header = [
        "iteration",
        "offset_ns",
        "duration_ns",
        "kind",
        "op",
        "activity",
        "stream",
    ];
    let k = &t.kineto;
    write_table(path, &header, &path_rows(a), |w, (it, start, s)| {
        w.num(*it)
            .num(s.start - start)
            .num(s.end - s.start)
            .text(s.kind.as_str())
            .text(path_op(t, a, s));
        match s.gpu {
            Some(g) => w
                .text(k.str(k.gpu[g as usize].name))
                .num(k.gpu[g as usize].stream),
            None => w.text("").text(""),
        };
        w.end();
    })
}

/// The op whose launch call made GPU activity `gpu` (the innermost op around the call), or ""
/// where the call ran outside every op.
pub(crate) fn launching_op(t: &Trace, gpu: usize) -> &str {
    t.launch[gpu].map_or("", |(op, _)| t.op_name(op))
}

/// The queue of stream (`device`, `stream`), where it has launches.
pub(crate) fn queue_of(
    a: &Analysis,
    device: i64,
    stream: i64,
) -> Option<&crate::analysis::queue::StreamQueue> {
    a.queues
        .iter()
        .find(|q| (q.device, q.stream) == (device, stream))
}

pub(super) fn write_streams(path: &Path, a: &Analysis) -> Result<(), Error> {
    let header = [
        "device",
        "stream",
        "activities",
        "busy_ns",
        "queue_mean",
        "queue_median",
        "queue_max",
        "queue_time_mean",
    ];
    let f3 = |v: f64| format!("{v:.3}");
    write_table(path, &header, &a.kernels.streams, |w, s| {
        let q = queue_of(a, s.device, s.stream);
        w.num(s.device)
            .num(s.stream)
            .num(s.activities)
            .num(s.busy_ns)
            .text(&q.map_or(String::new(), |q| f3(q.mean)))
            .text(&q.map_or(String::new(), |q| f3(q.median)))
            .text(&q.map_or(String::new(), |q| q.max.to_string()))
            .text(&q.map_or(String::new(), |q| f3(q.time_mean)))
            .end();
    })
}

/// `iterations.csv`: one row per iteration, its wall time split by phase last
/// (`wall_<phase>_s` in [`Phase::ALL`]'s order, then `between_phases_s`: they add up to
/// `span_s`).
///
/// [`Phase::ALL`]: crate::analysis::step::Phase::ALL
pub(super) fn write_iterations(path: &Path, a: &Analysis) -> Result<(), Error> {
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
