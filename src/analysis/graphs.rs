//! CUDA graph replays in the step (`torch.compile(mode="reduce-overhead")`,
//! `torch.cuda.graph`, `make_graphed_callables`): how much of the step's GPU work they hold,
//! and the private memory pools they keep reserved.
//!
//! ```text
//!  host    [Torch-Compiled Region [cudaGraphLaunch]]      (no aten op runs during a replay)
//!  GPU              [k1][k2][k3] ... [kN]                  (each kernel: the launch's correlation id)
//! ```
//! Each replay is a node of its own (ingest makes the launch an op), charged with every kernel
//! of the graph. What rests on recorded operators cannot see inside a replay: FLOPs and bytes
//! are counted from operator shapes, so the replayed work is missing from them, and that is
//! said with the share of GPU time it is.

use super::snapshot::segment_totals;
use super::step::Step;
use crate::diagnostics::Diagnostics;
use crate::model::kineto::is_graph_launch;
use crate::model::Trace;
pub use steptrace_formats::summary::CudaGraphs;

/// The step's CUDA graphs, `None` when no iteration replays one. Warns that FLOPs leave the
/// replays out, and that the allocated peak leaves out what the graphs' pools hold reserved.
pub fn compute(
    t: &Trace,
    step: &Step,
    peak_allocated: Option<i64>,
    diag: &mut Diagnostics,
) -> Option<CudaGraphs> {
    // The replays (launch ops) and their kernels, gathered once: most traces have none, and
    // then nothing else is looked at.
    let graph_ops: Vec<usize> = (0..t.kineto.ops.len())
        .filter(|&o| is_graph_launch(t.kineto.str(t.kineto.ops[o].name)))
        .collect();
    if graph_ops.is_empty() {
        return None;
    }
    let graph_gpu: Vec<(i64, i64)> = t
        .launch
        .iter()
        .zip(&t.kineto.gpu)
        .filter_map(|(l, g)| {
            let (o, ts) = (*l)?;
            graph_ops.binary_search(&(o.0 as usize)).ok()?;
            Some((ts, g.dur))
        })
        .collect();
    // Every replay counts, the ones inside a compiled region's node (a forward graph) as well
    // as those that are nodes themselves.
    let mut replays = Vec::new();
    let mut gpu = Vec::new();
    let mut share = Vec::new();
    let mut counted = true;
    for it in &step.iterations {
        let inside = |ts: i64| ts >= it.start && ts < it.end;
        let mut n = 0;
        for &o in &graph_ops {
            if inside(t.kineto.ops[o].start) {
                n += 1;
                // Its FLOPs are known where capture's range encloses the launch.
                counted &=
                    t.parent[o].is_some_and(|p| super::flops::graph_flops(t.op_name(p)).is_some());
            }
        }
        let time: i64 = graph_gpu
            .iter()
            .filter(|(ts, _)| inside(*ts))
            .map(|(_, d)| d)
            .sum();
        replays.push(n as f64);
        gpu.push(time as f64);
        share.push(if it.gpu_time > 0 {
            100.0 * time as f64 / it.gpu_time as f64
        } else {
            0.0
        });
    }
    let med = |v: &mut Vec<f64>| super::median(v).unwrap_or(0.0);
    let replays_per_iteration = med(&mut replays);
    if replays_per_iteration == 0.0 {
        return None;
    }
    let (reserved_bytes, private_pools) = match t.snapshot.as_ref().map(segment_totals) {
        Some((totals, _, pools)) => (Some(totals.reserved_bytes), pools),
        None => (None, Vec::new()),
    };
    let g = CudaGraphs {
        flops_counted: counted,
        replays_per_iteration,
        gpu_time_per_iteration_s: med(&mut gpu) * 1e-9,
        share_of_gpu_time_pct: med(&mut share),
        reserved_bytes,
        private_pools,
    };
    if !counted {
        diag.warn("flops_leave_out_cuda_graphs", format!(
            "FLOPs and bytes per iteration leave out the work of {} CUDA graph replay(s) an iteration ({:.1} ms, {:.0}% of its GPU time): a replay runs no operator on the host, so no shapes are recorded for it; FlopCounterMode on the model run eagerly counts that work (`steptrace capture` counts it when the graphs are recorded)",
            g.replays_per_iteration,
            g.gpu_time_per_iteration_s * 1e3,
            g.share_of_gpu_time_pct
        ));
    }
    let pooled: u64 = g.private_pools.iter().map(|p| p.reserved_bytes).sum();
    if pooled > 0 {
        let peak = peak_allocated.map_or("unknown".into(), |p| gib(p.max(0) as u64));
        diag.warn(
            "peak_leaves_out_graph_pools",
            format!(
                "the allocated peak ({peak}) counts the blocks allocated; {} private pool(s) of the CUDA graphs hold {} reserved beside it (free inside them is the graphs' reused workspace, not fragmentation): the device holds {} in all",
                g.private_pools.len(),
                gib(pooled),
                gib(g.reserved_bytes.unwrap_or(0))
            ),
        );
    }
    Some(g)
}

/// Bytes as GiB with two decimals (a warning's text; the figures themselves are in bytes).
fn gib(b: u64) -> String {
    format!("{:.2} GiB", b as f64 / (1u64 << 30) as f64)
}
