//! The four Parquet copies of analyze's main tables, column by column as their CSV files.

use super::columns::col;
use crate::analysis::memory::CATEGORIES;
use crate::analysis::Analysis;
use crate::model::Trace;
use polars::prelude::Column;

pub(super) fn node_stats_columns(t: &Trace, a: &Analysis) -> Vec<Column> {
    use crate::analysis::NodeStat;
    let n = &a.node_stats;
    // Borrowed texts: a `String` per cell was most of this file's time.
    fn s<'a>(n: &'a [NodeStat], f: impl Fn(&'a NodeStat) -> &'a str) -> Vec<&'a str> {
        n.iter().map(f).collect()
    }
    let opt = |id| crate::report::tables::opt(t, id);
    vec![
        col("rank", n.iter().map(|x| x.rank).collect::<Vec<u32>>()),
        col("node_name", s(n, |x| &x.node_name)),
        col("op", s(n, |x| t.kineto.str(x.op))),
        col("node_type", s(n, |x| x.node_type.as_str())),
        col("gtype", s(n, |x| x.gtype.as_str())),
        col("module", s(n, |x| opt(x.module))),
        col("autograd_fn", s(n, |x| opt(x.autograd_fn))),
        col(
            "recompute",
            n.iter().map(|x| x.recompute).collect::<Vec<bool>>(),
        ),
        col(
            "median_run_time_s",
            n.iter().map(|x| x.median_run_time_s).collect::<Vec<f64>>(),
        ),
        col(
            "median_cpu_time_s",
            n.iter().map(|x| x.median_cpu_time_s).collect::<Vec<f64>>(),
        ),
        col(
            "median_gpu_span_s",
            n.iter().map(|x| x.median_gpu_span_s).collect::<Vec<f64>>(),
        ),
        col(
            "median_peak_mem_bytes",
            n.iter()
                .map(|x| x.median_peak_mem_bytes)
                .collect::<Vec<i64>>(),
        ),
        col(
            "median_active_mem_bytes",
            n.iter()
                .map(|x| x.median_active_mem_bytes)
                .collect::<Vec<i64>>(),
        ),
        col(
            "median_alloc_bytes",
            n.iter().map(|x| x.median_alloc_bytes).collect::<Vec<i64>>(),
        ),
        col(
            "median_free_bytes",
            n.iter().map(|x| x.median_free_bytes).collect::<Vec<i64>>(),
        ),
        col("kernels", n.iter().map(|x| x.kernels).collect::<Vec<i64>>()),
        col("device", s(n, |x| &x.device)),
        col(
            "iterations_present",
            n.iter().map(|x| x.iterations_present).collect::<Vec<u32>>(),
        ),
    ]
}

pub(super) fn activation_stats_columns(_: &Trace, a: &Analysis) -> Vec<Column> {
    let act = &a.liveness.activations;
    vec![
        col(
            "activation_name",
            act.iter()
                .map(|x| x.activation_name.clone())
                .collect::<Vec<String>>(),
        ),
        col(
            "creation_rank",
            act.iter().map(|x| x.creation_rank).collect::<Vec<u32>>(),
        ),
        col(
            "last_fw_use_rank",
            act.iter().map(|x| x.last_fw_use_rank).collect::<Vec<u32>>(),
        ),
        col(
            "first_bw_use_rank",
            act.iter()
                .map(|x| x.first_bw_use_rank)
                .collect::<Vec<u32>>(),
        ),
        col(
            "last_bw_use_rank",
            act.iter().map(|x| x.last_bw_use_rank).collect::<Vec<u32>>(),
        ),
        col(
            "median_mem_size_bytes",
            act.iter()
                .map(|x| x.median_mem_size_bytes)
                .collect::<Vec<i64>>(),
        ),
        col(
            "inactive_time_s",
            act.iter().map(|x| x.inactive_time_s).collect::<Vec<f64>>(),
        ),
        col(
            "recomp_time_s",
            act.iter().map(|x| x.recomp_time_s).collect::<Vec<f64>>(),
        ),
        col(
            "recomp_memory_bytes",
            act.iter()
                .map(|x| x.recomp_memory_bytes)
                .collect::<Vec<i64>>(),
        ),
        col(
            "swap_time_s",
            act.iter().map(|x| x.swap_time_s).collect::<Vec<f64>>(),
        ),
        col(
            "recompute_ratio",
            act.iter().map(|x| x.recompute_ratio).collect::<Vec<f64>>(),
        ),
        col(
            "producer_op",
            act.iter()
                .map(|x| x.producer_op.clone())
                .collect::<Vec<String>>(),
        ),
        col(
            "module",
            act.iter()
                .map(|x| x.module.clone())
                .collect::<Vec<String>>(),
        ),
        col(
            "storage_id",
            act.iter().map(|x| x.storage_id).collect::<Vec<i64>>(),
        ),
        col(
            "iterations_present",
            act.iter()
                .map(|x| x.iterations_present)
                .collect::<Vec<u32>>(),
        ),
    ]
}

pub(super) fn memory_timeline_columns(t: &Trace, a: &Analysis) -> Vec<Column> {
    let tl = &a.timeline;
    let t0 = t.memory.first().map_or(0, |m| m.ts);
    let rank_of: rustc_hash::FxHashMap<&str, u32> = a
        .node_stats
        .iter()
        .map(|s| (s.node_name.as_str(), s.rank))
        .collect();
    let node = |r: &crate::analysis::memory::TimelineRow| r.node.map(|n| &a.step.nodes[n]);
    let mut cols = vec![
        col(
            "time_ns",
            tl.iter().map(|r| r.ts - t0).collect::<Vec<i64>>(),
        ),
        // Microseconds as a float, as the CSV's `epoch_us` reads (to a quarter of a
        // nanosecond's worth of precision lost at today's epochs).
        col(
            "epoch_us",
            tl.iter()
                .map(|r| t.kineto.epoch_ns(r.ts) as f64 / 1e3)
                .collect::<Vec<f64>>(),
        ),
        col(
            "iteration",
            tl.iter()
                .map(|r| {
                    r.iteration
                        .map(|i| a.step.iterations[i as usize].label.as_str())
                })
                .collect::<Vec<Option<&str>>>(),
        ),
        col(
            "node_rank",
            tl.iter()
                .map(|r| node(r).and_then(|n| rank_of.get(n.name.as_str()).copied()))
                .collect::<Vec<Option<u32>>>(),
        ),
        col(
            "node_name",
            tl.iter()
                .map(|r| node(r).map(|n| n.name.as_str()))
                .collect::<Vec<Option<&str>>>(),
        ),
        col(
            "total_allocated_bytes",
            tl.iter().map(|r| r.total).collect::<Vec<i64>>(),
        ),
    ];
    for (i, c) in CATEGORIES.iter().enumerate() {
        cols.push(col(
            c.key(),
            tl.iter().map(|r| r.breakdown[i]).collect::<Vec<i64>>(),
        ));
    }
    cols
}

pub(super) fn flops_columns(_: &Trace, a: &Analysis) -> Vec<Column> {
    let f = &a.flops;
    let text = |g: &dyn Fn(&crate::analysis::flops::FlopRow) -> &str| -> Vec<String> {
        f.iter().map(|x| g(x).to_owned()).collect()
    };
    let num = |g: &dyn Fn(&crate::analysis::flops::FlopRow) -> f64| -> Vec<f64> {
        f.iter().map(g).collect()
    };
    vec![
        col("rank", f.iter().map(|x| x.rank).collect::<Vec<u32>>()),
        col("node_name", text(&|x| &x.node_name)),
        col("op", text(&|x| &x.op)),
        col("gtype", text(&|x| x.gtype.as_str())),
        col("module", text(&|x| &x.module)),
        col("flops", f.iter().map(|x| x.flops).collect::<Vec<u64>>()),
        col(
            "matmul_flops",
            f.iter().map(|x| x.matmul_flops).collect::<Vec<u64>>(),
        ),
        col("bytes", f.iter().map(|x| x.bytes).collect::<Vec<u64>>()),
        col("arithmetic_intensity", num(&|x| x.arithmetic_intensity)),
        col("dtype", text(&|x| x.dtype.as_str())),
        col("median_run_time_s", num(&|x| x.gpu_time_s)),
        col("achieved_tflops", num(&|x| x.achieved_tflops)),
        col("achieved_gbps", num(&|x| x.achieved_gbps)),
        col(
            "pct_peak_flops",
            f.iter()
                .map(|x| x.pct_peak_flops)
                .collect::<Vec<Option<f64>>>(),
        ),
        col(
            "pct_peak_bandwidth",
            f.iter()
                .map(|x| x.pct_peak_bandwidth)
                .collect::<Vec<Option<f64>>>(),
        ),
        col("bound", text(&|x| x.bound.map_or("", |b| b.as_str()))),
    ]
}
