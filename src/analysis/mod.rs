//! Analyses over the model. [`run`] performs them all and returns [`Analysis`], which the
//! report stage writes out.

pub mod collectives;
pub mod critical_path;
pub mod flops;
pub mod graphs;
pub mod idle;
pub mod intervals;
mod joins;
pub mod kernels;
pub mod launches;
pub mod liveness;
pub mod memory;
pub mod node_stats;
mod numbers;
pub mod queue;
pub mod ranks;
pub mod snapshot;
pub mod step;
mod summary;

use crate::diagnostics::Diagnostics;
use crate::model::Trace;

pub use joins::{snapshot_makers, ExecTraceJoin, SnapshotJoin};
pub use node_stats::NodeStat;
pub use numbers::{host_scale, median, median_low, ns_to_s, percent};
pub use step::{Detection, Iteration, Node, Phase, Step};
pub use steptrace_formats::summary::Summary;
pub use summary::RunFacts;

/// Knobs for the analyses.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct Options {
    /// Peak TFLOP/s per dtype, replacing the table's values (or standing in for an unknown GPU).
    pub peak_tflops: Vec<(flops::Dtype, f64)>,
    /// Peak memory bandwidth, GB/s.
    pub peak_bandwidth_gbps: Option<f64>,
    /// Host↔device bandwidth for swap times, GB/s (default: measured from the trace's copies).
    pub swap_bandwidth_gbps: Option<f64>,
    /// Leave out the replay of a run's snapshot over its whole history
    /// ([`Analysis::snapshot_history`]): only report.html's memory view draws it, and on a
    /// GB snapshot it takes seconds.
    pub without_snapshot_history: bool,
    /// Backward passes a step holds, where capture counted them (its timing rule: a GAN's
    /// discriminator and generator passes): a program without `ProfilerStep` ranges gets one
    /// iteration per step, not per pass.
    pub backward_passes_per_step: Option<usize>,
}

/// Everything analyze computes.
#[derive(Debug, Clone)]
pub struct Analysis {
    /// Module instance names (`GPT2Block_3`) and their fully qualified names
    /// (`transformer.h.3`), where the capture recorded the module tree (empty otherwise).
    pub module_fqns: std::collections::BTreeMap<String, String>,
    /// The rebuilt step.
    pub step: Step,
    /// Per-node medians, in rank order.
    pub node_stats: Vec<NodeStat>,
    /// The summary.
    pub summary: Summary,
    /// Per aligned node FLOPs and roofline.
    pub flops: Vec<flops::FlopRow>,
    /// FlopCounterMode FLOPs per iteration by op (`aten.addmm`, ...), for comparison with it.
    pub matmul_flops_by_op: std::collections::BTreeMap<String, u64>,
    /// Allocator blocks and their categories.
    pub memory: memory::Memory,
    /// Bytes by category after every allocator event.
    pub timeline: Vec<memory::TimelineRow>,
    /// Activation liveness, MuTWO metrics, data-flow graph.
    pub liveness: liveness::Liveness,
    /// Per kernel name and per stream, over the whole trace.
    pub kernels: kernels::Kernels,
    /// Each stream's idle time by cause (why the GPU waits).
    pub idle: idle::Idle,
    /// Each stream's queue of launched work not yet started.
    pub queues: Vec<queue::StreamQueue>,
    /// Each launched GPU activity's launch call, GPU time and launch delay.
    pub launches: launches::Launches,
    /// Each profiled iteration's critical path.
    pub critical_path: critical_path::CriticalPath,
    /// Collectives launched in the iterations, with their metadata.
    pub collectives: Vec<collectives::Call>,
    /// The run's memory snapshot replayed over its whole history, with the node that made
    /// each kept allocation where the trace saw it; `None` without a snapshot or for one of
    /// the old layout (no history to replay).
    pub snapshot_history: Option<SnapshotHistory>,
}

/// A trace run's memory snapshot over its whole history (the interactive memory view's data).
#[derive(Debug, Clone)]
pub struct SnapshotHistory {
    /// The snapshot's own analysis, as `analyze SNAPSHOT` gives it.
    pub analysis: snapshot::SnapshotAnalysis,
    /// Per device of `analysis`, per kept allocation: the step's node that made it
    /// ([`snapshot_makers`]).
    pub makers: Vec<Vec<Option<usize>>>,
}

fn file_name(p: &std::path::Path) -> String {
    p.file_name()
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned()
}

/// Runs every analysis, and builds the summary from their results and `facts` (what the run
/// says about itself beside the trace), once.
pub fn run(t: &mut Trace, opts: &Options, facts: RunFacts, diag: &mut Diagnostics) -> Analysis {
    // The allocator replay needs only the events (a copy of their addresses and sizes, as
    // the step holds the trace to intern names): beside the step, it leaves the memory chain
    // below shorter.
    let events = memory::replay_input(t);
    let (step, replay) = rayon::join(
        || step::compute(t, opts.backward_passes_per_step, diag),
        || memory::replay(&events),
    );
    drop(events);
    let t: &Trace = t;
    // FLOPs need only the step; the memory chain needs its own earlier results. The two run
    // side by side, and the timeline beside liveness; every warning comes from the memory
    // chain, in its sequential order, so the diagnostics do not depend on the threads.
    let ((mem, node_stats, timeline, live), ((node_flops, by_type), history)) = rayon::join(
        || {
            let mem = memory::compute(t, &step, replay, diag);
            let node_stats = node_stats::compute(t, &step, &mem, diag);
            let (timeline, live) = rayon::join(
                || memory::timeline(t, &mem),
                || liveness::compute(t, &step, &mem, &node_stats, opts.swap_bandwidth_gbps),
            );
            (mem, node_stats, timeline, live)
        },
        || {
            // The snapshot's history replays beside the FLOPs: it needs only the snapshot.
            let history = t
                .snapshot
                .as_ref()
                .filter(|s| !s.legacy_layout && !opts.without_snapshot_history)
                .map(snapshot::analyze);
            (flops::compute(t, &step), history)
        },
    );
    if let (Some(h), Some(s)) = (&history, &t.snapshot) {
        if let Some(w) = snapshot::devices_left_out_warning(h, &s.path) {
            diag.warn("snapshot_devices_left_out", w);
        }
    }
    let peaks = device_peaks(t, opts, diag);
    let flop_rows = flops::rows(t, &step, &node_flops, &node_stats, peaks.as_ref());
    let n_iter = step.iterations.len().max(1) as u64;
    let matmul_flops_by_op = by_type.into_iter().map(|(k, v)| (k, v / n_iter)).collect();
    let kernels = kernels::compute(t);
    // Each GPU activity's launch call, once for the three analyses that pair them.
    let calls = crate::model::launch_calls(&t.kineto);
    let idle = idle::compute(t, &step, &calls);
    let queues = queue::compute(t, &calls);
    let launches = launches::compute(t, &calls);
    let critical_path = critical_path::compute(t, &step, &calls);
    let (collectives, outside) = collectives::calls(t, &step);
    if outside > 0 && !collectives.is_empty() {
        diag.warn(
            "collective_outside_iterations",
            format!("{outside} collective kernel(s) launched outside the iterations (e.g. before the window opened): not matched across ranks"),
        );
    }
    let parts = summary::Parts {
        t,
        step: &step,
        mem: &mem,
        node_stats: &node_stats,
        live: &live,
        flop_rows: &flop_rows,
        kernels: &kernels,
        idle: &idle,
        launches: &launches,
        critical_path: &critical_path,
    };
    let summary = summary::build(&parts, peaks, &facts, diag);
    let mut a = Analysis {
        module_fqns: facts.module_fqns,
        kernels,
        idle,
        queues,
        launches,
        critical_path,
        step,
        node_stats,
        summary,
        flops: flop_rows,
        matmul_flops_by_op,
        memory: mem,
        timeline,
        liveness: live,
        collectives,
        snapshot_history: None,
    };
    a.snapshot_history = history.map(|analysis| SnapshotHistory {
        makers: snapshot_makers(t, &a, &analysis),
        analysis,
    });
    a
}

/// The device's peak rates (the table's entry for its name), with `--peak-tflops` and
/// `--peak-bw` laid over them; a device the table does not know is warned about once.
fn device_peaks(t: &Trace, opts: &Options, diag: &mut Diagnostics) -> Option<flops::Peaks> {
    let peaks = t.device_name().and_then(flops::peaks_for);
    if opts.peak_tflops.is_empty() && opts.peak_bandwidth_gbps.is_none() {
        if peaks.is_none() {
            if let Some(name) = t.device_name() {
                diag.warn(
                    "unknown_gpu_peaks",
                    format!("no peak table entry for '{name}': pass --peak-tflops and --peak-bw for the roofline"),
                );
            }
        }
        return peaks;
    }
    let mut p = peaks.unwrap_or(flops::Peaks {
        device: "override".into(),
        tflops: Vec::new(),
        bandwidth_gbps: 0.0,
    });
    for &(d, v) in &opts.peak_tflops {
        p.tflops.retain(|(x, _)| *x != d);
        p.tflops.push((d, v));
    }
    p.tflops.sort_by_key(|(d, _)| *d);
    if let Some(b) = opts.peak_bandwidth_gbps {
        p.bandwidth_gbps = b;
    }
    Some(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&mut []), None);
        assert_eq!(median_low(&mut [4, 1, 3, 2]), Some(2));
        assert_eq!(median_low(&mut [5]), Some(5));
    }
}
