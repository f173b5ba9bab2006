//! Parquet copies of the per-iteration tables (`node_iterations`, `iterations`), the GPU's
//! (`kernels`, `streams`) and the FLOP rollups (`flops_by_op`, `flops_by_module`), column by
//! column as their CSV files; times at full precision where the CSV rounds them.

use super::columns::col;
use crate::analysis::step::Phase;
use crate::analysis::Analysis;
use crate::model::Trace;
use crate::report::flops::Rollup;
use polars::prelude::Column;

pub(super) fn node_iterations_columns(t: &Trace, a: &Analysis) -> Vec<Column> {
    let n = &a.step.nodes;
    let its = &a.step.iterations;
    let num = |name: &str, f: &dyn Fn(&crate::model::step::Node) -> i64| {
        col(name, n.iter().map(f).collect::<Vec<i64>>())
    };
    vec![
        col(
            "iteration",
            n.iter()
                .map(|x| its[x.iteration as usize].label.as_str())
                .collect::<Vec<&str>>(),
        ),
        col("rank", n.iter().map(|x| x.rank).collect::<Vec<u32>>()),
        col(
            "node_name",
            n.iter().map(|x| x.name.as_str()).collect::<Vec<&str>>(),
        ),
        col(
            "op",
            n.iter()
                .map(|x| t.kineto.str(t.op(x.op).name))
                .collect::<Vec<&str>>(),
        ),
        col(
            "gtype",
            n.iter().map(|x| x.phase.as_str()).collect::<Vec<&str>>(),
        ),
        num("start_ns", &|x| {
            t.op(x.op).start - its[x.iteration as usize].start
        }),
        num("cpu_time_ns", &|x| x.cpu_time),
        num("gpu_time_ns", &|x| x.gpu_time),
        num("gpu_span_ns", &|x| x.gpu_span),
        col("kernels", n.iter().map(|x| x.kernels).collect::<Vec<u32>>()),
        num("active_mem_bytes", &|x| x.active_before),
        num("peak_mem_bytes", &|x| x.peak),
        num("alloc_bytes", &|x| x.alloc_bytes),
        num("free_bytes", &|x| x.free_bytes),
    ]
}

pub(super) fn iterations_columns(_: &Trace, a: &Analysis) -> Vec<Column> {
    let its = &a.step.iterations;
    let s = |ns: i64| ns as f64 * 1e-9;
    let secs = |name: &str, f: &dyn Fn(&crate::model::step::Iteration) -> f64| {
        col(name, its.iter().map(f).collect::<Vec<f64>>())
    };
    let mut cols = vec![
        col(
            "iteration",
            its.iter().map(|i| i.label.as_str()).collect::<Vec<&str>>(),
        ),
        secs("span_s", &|i| s(i.end - i.start)),
        col(
            "nodes",
            its.iter()
                .map(|i| i.nodes.len() as u64)
                .collect::<Vec<u64>>(),
        ),
        secs("gpu_time_s", &|i| s(i.gpu_time)),
        secs("gpu_busy_s", &|i| s(i.gpu_busy)),
        secs("gpu_unattributed_s", &|i| s(i.gpu_unattributed)),
        col(
            "peak_allocated_bytes",
            its.iter()
                .map(|i| i.peak_allocated)
                .collect::<Vec<Option<i64>>>(),
        ),
        col(
            "backward_s",
            its.iter()
                .map(|i| i.backward.map(|(b, e)| s(e - b)))
                .collect::<Vec<Option<f64>>>(),
        ),
    ];
    for p in Phase::ALL {
        cols.push(secs(&format!("wall_{}_s", p.as_str()), &|i| {
            s(i.wall.of(p))
        }));
    }
    cols.push(secs("between_phases_s", &|i| s(i.wall.between)));
    cols
}

pub(super) fn kernels_columns(_: &Trace, a: &Analysis) -> Vec<Column> {
    let k = &a.kernels.by_name;
    vec![
        col(
            "name",
            k.iter().map(|x| x.name.as_str()).collect::<Vec<&str>>(),
        ),
        col(
            "kind",
            k.iter().map(|x| x.kind.as_str()).collect::<Vec<&str>>(),
        ),
        col(
            "count",
            k.iter().map(|x| x.count as u64).collect::<Vec<u64>>(),
        ),
        col(
            "total_ns",
            k.iter().map(|x| x.total_ns).collect::<Vec<i64>>(),
        ),
        col(
            "median_ns",
            k.iter().map(|x| x.median_ns).collect::<Vec<i64>>(),
        ),
        col("max_ns", k.iter().map(|x| x.max_ns).collect::<Vec<i64>>()),
        col(
            "share_pct",
            k.iter().map(|x| x.share_pct).collect::<Vec<f64>>(),
        ),
    ]
}

pub(super) fn streams_columns(_: &Trace, a: &Analysis) -> Vec<Column> {
    use crate::report::tables::queue_of;
    let s = &a.kernels.streams;
    let queue = |name: &str, f: &dyn Fn(&crate::analysis::queue::StreamQueue) -> f64| {
        col(
            name,
            s.iter()
                .map(|x| queue_of(a, x.device, x.stream).map(f))
                .collect::<Vec<Option<f64>>>(),
        )
    };
    vec![
        col("device", s.iter().map(|x| x.device).collect::<Vec<i64>>()),
        col("stream", s.iter().map(|x| x.stream).collect::<Vec<i64>>()),
        col(
            "activities",
            s.iter().map(|x| x.activities as u64).collect::<Vec<u64>>(),
        ),
        col("busy_ns", s.iter().map(|x| x.busy_ns).collect::<Vec<i64>>()),
        queue("queue_mean", &|q| q.mean),
        queue("queue_median", &|q| q.median),
        col(
            "queue_max",
            s.iter()
                .map(|x| queue_of(a, x.device, x.stream).map(|q| q.max))
                .collect::<Vec<Option<i64>>>(),
        ),
        queue("queue_time_mean", &|q| q.time_mean),
    ]
}

/// A FLOP rollup's columns; `label` names its key column (`op` or `module`).
pub(super) fn rollup_columns(label: &str, rows: &[Rollup]) -> Vec<Column> {
    let u = |name: &str, f: &dyn Fn(&Rollup) -> u64| {
        col(name, rows.iter().map(f).collect::<Vec<u64>>())
    };
    vec![
        col(
            label,
            rows.iter().map(|r| r.key.as_str()).collect::<Vec<&str>>(),
        ),
        u("nodes", &|r| r.nodes),
        u("flops", &|r| r.flops),
        u("matmul_flops", &|r| r.matmul_flops),
        u("bytes", &|r| r.bytes),
        col(
            "gpu_time_s",
            rows.iter().map(|r| r.gpu_time_s).collect::<Vec<f64>>(),
        ),
        col(
            "achieved_tflops",
            rows.iter()
                .map(Rollup::achieved_tflops)
                .collect::<Vec<f64>>(),
        ),
    ]
}

pub(super) fn idle_columns(a: &Analysis) -> Vec<Column> {
    let rows = crate::report::tables::idle_rows(a);
    vec![
        col("scope", rows.iter().map(|r| r.0).collect::<Vec<&str>>()),
        col(
            "device",
            rows.iter().map(|r| r.1.device).collect::<Vec<i64>>(),
        ),
        col(
            "stream",
            rows.iter().map(|r| r.1.stream).collect::<Vec<i64>>(),
        ),
        col(
            "cause",
            rows.iter().map(|r| r.2.as_str()).collect::<Vec<&str>>(),
        ),
        col(
            "hta_category",
            rows.iter().map(|r| r.2.hta()).collect::<Vec<&str>>(),
        ),
        col(
            "idle_s",
            rows.iter()
                .map(|r| r.1.idle_ns[r.2.index()] as f64 * 1e-9)
                .collect::<Vec<f64>>(),
        ),
        col(
            "gaps",
            rows.iter()
                .map(|r| r.1.gaps[r.2.index()])
                .collect::<Vec<u64>>(),
        ),
    ]
}

pub(super) fn launches_columns(t: &Trace, a: &Analysis) -> Vec<Column> {
    let l = &a.launches.each;
    let k = &t.kineto;
    let num = |name: &str, f: &dyn Fn(&crate::analysis::launches::Launch) -> i64| {
        col(name, l.iter().map(f).collect::<Vec<i64>>())
    };
    vec![
        num("correlation", &|x| x.correlation),
        col(
            "name",
            l.iter()
                .map(|x| k.str(k.gpu[x.gpu as usize].name))
                .collect::<Vec<&str>>(),
        ),
        num("stream", &|x| k.gpu[x.gpu as usize].stream),
        col(
            "op",
            l.iter()
                .map(|x| crate::report::tables::launching_op(t, x.gpu as usize))
                .collect::<Vec<&str>>(),
        ),
        num("cpu_duration_ns", &|x| x.cpu_ns),
        num("gpu_duration_ns", &|x| x.gpu_ns),
        num("launch_delay_ns", &|x| x.delay_ns),
        col(
            "shorter_than_launch",
            l.iter().map(|x| x.short()).collect::<Vec<bool>>(),
        ),
    ]
}

pub(super) fn critical_path_columns(t: &Trace, a: &Analysis) -> Vec<Column> {
    let rows = crate::report::tables::path_rows(a);
    let k = &t.kineto;
    vec![
        col("iteration", rows.iter().map(|r| r.0).collect::<Vec<u32>>()),
        col(
            "offset_ns",
            rows.iter().map(|r| r.2.start - r.1).collect::<Vec<i64>>(),
        ),
        col(
            "duration_ns",
            rows.iter()
                .map(|r| r.2.end - r.2.start)
                .collect::<Vec<i64>>(),
        ),
        col(
            "kind",
            rows.iter()
                .map(|r| r.2.kind.as_str())
                .collect::<Vec<&str>>(),
        ),
        col(
            "op",
            rows.iter()
                .map(|r| crate::report::tables::path_op(t, a, r.2))
                .collect::<Vec<&str>>(),
        ),
        col(
            "activity",
            rows.iter()
                .map(|r| r.2.gpu.map(|g| k.str(k.gpu[g as usize].name)))
                .collect::<Vec<Option<&str>>>(),
        ),
        col(
            "stream",
            rows.iter()
                .map(|r| r.2.gpu.map(|g| k.gpu[g as usize].stream))
                .collect::<Vec<Option<i64>>>(),
        ),
    ]
}
