//! Analyses over the model. [`run`] performs them all and returns [`Analysis`], which the
//! report stage writes out.

pub mod collectives;
pub mod flops;
pub mod graphs;
pub mod intervals;
mod joins;
pub mod kernels;
pub mod liveness;
pub mod memory;
pub mod node_stats;
pub mod ranks;
pub mod snapshot;
pub mod step;

use serde::Serialize;

use crate::diagnostics::Diagnostics;
use crate::model::kineto::TimeConvention;
use crate::model::Trace;

use joins::{exec_trace_join, snapshot_join};
pub use joins::{snapshot_makers, ExecTraceJoin, SnapshotJoin};
pub use node_stats::NodeStat;
pub use step::{Detection, Iteration, Node, Phase, Step};

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

/// `summary.json`.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// steptrace version.
    pub steptrace_version: &'static str,
    /// Name of what was analysed: the run directory's or the trace file's stem.
    pub name: String,
    /// Trace file name.
    pub trace: String,
    /// Profiled iterations.
    pub iterations: usize,
    /// How they were found.
    pub iteration_detection: Detection,
    /// Their labels.
    pub iteration_labels: Vec<String>,
    /// Nodes in the aligned step (union over iterations).
    pub nodes_per_iteration: usize,
    /// The step time: the program's own (timed by capture with nothing recorded) when the run
    /// directory has it, else the median iteration span under the profiler, s.
    pub step_time_s: f64,
    /// Median iteration span under the profiler, s (includes the profiler's own overhead).
    pub step_time_instrumented_s: f64,
    /// Where `step_time_s` comes from: `after_window` (capture timed the steps after its window,
    /// the rest of the run), `timing_phase` (steps before the window) or `instrumented`.
    pub step_time_source: steptrace_formats::StepTimeSource,
    /// `step_time_instrumented_s / step_time_s`, when the program's own time is known.
    pub profiler_overhead: Option<f64>,
    /// A planned capture's timing phase with steps alternating with and without the plan.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plan_timed_both_ways: Option<crate::model::run::PlanTimedBothWays>,
    /// How far the host ran ahead of the GPU at the end of the program's own steps, s (capture's
    /// timing phase): host time a step can gain before the GPU waits for it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_lead_s: Option<f64>,
    /// The program's own `optimizer.step()` host time, s (capture's timing phase): in a
    /// distributed run, this rank's host speed at the same work as the others'.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub optimizer_step_host_s: Option<f64>,
    /// What checkpointing and swapping cost on the capture's machine (its manifest).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plan_probe: Option<crate::model::run::PlanProbe>,
    /// Where the GPU's time goes over the whole trace (HolisticTraceAnalysis's temporal
    /// breakdown and communication/computation overlap), ns.
    pub gpu_breakdown: kernels::Temporal,
    /// Communication by collective (NCCL kernels' `AllGather`, `ReduceScatter`, …): its time
    /// and the part of it beside computation, over the same activities as `gpu_breakdown`.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub collective_overlap: std::collections::BTreeMap<String, kernels::CollectiveOverlap>,
    /// Each iteration's span, s.
    pub step_times_s: Vec<f64>,
    /// Median union of GPU activity per iteration, s.
    pub gpu_busy_s: f64,
    /// Median sum of GPU activity durations per iteration, s.
    pub gpu_time_s: f64,
    /// Largest `Total Allocated` inside the profiled iterations.
    pub peak_allocated_bytes: Option<i64>,
    /// Node during which that peak happened.
    pub peak_node: Option<String>,
    /// Iteration label of the peak.
    pub peak_iteration: Option<String>,
    /// GPU name.
    pub device: Option<String>,
    /// GPU memory, bytes.
    pub device_memory_bytes: Option<i64>,
    /// How `ts` maps to wall-clock time.
    pub time_convention: TimeConvention,
    /// Events in `traceEvents`.
    pub trace_events: usize,
    /// Whether the trace ended early.
    pub truncated: bool,
    /// Snapshot join, when a snapshot was given.
    pub snapshot: Option<SnapshotJoin>,
    /// Execution Trace join, when one was given.
    pub execution_trace: Option<ExecTraceJoin>,
    /// All FLOPs of one iteration (aligned nodes, medians).
    pub flops_per_iteration: u64,
    /// FLOPs of one iteration in FlopCounterMode's convention (matmul, convolution, attention).
    pub matmul_flops_per_iteration: u64,
    /// GPU, CPU and wall time per iteration by phase (forward, backward, optimizer, data
    /// loading, ...): its nodes' medians summed, and the median of its wall time.
    pub time_by_phase: std::collections::BTreeMap<&'static str, node_stats::PhaseTime>,
    /// Median time per iteration between phases: no phase's work ran (the framework's code
    /// between them, the profiler's step), s.
    pub between_phases_s: f64,
    /// All FLOPs per iteration by phase.
    pub flops_by_phase: std::collections::BTreeMap<&'static str, u64>,
    /// FLOPs per iteration by phase in FlopCounterMode's convention (matmul, convolution,
    /// attention): what FlopCounterMode counts around the forward and around the backward.
    pub matmul_flops_by_phase: std::collections::BTreeMap<&'static str, u64>,
    /// Bytes read and written per iteration by the nodes.
    pub bytes_per_iteration: u64,
    /// Whether node traffic and optimizer FLOPs come from the Execution Trace (exact) or are
    /// estimated from allocations (no ET: foreach optimizer kernels then count 0).
    pub flops_from_execution_trace: bool,
    /// The roofline's peaks.
    pub peaks: Option<flops::Peaks>,
    /// Where activation liveness comes from.
    pub liveness_source: liveness::Source,
    /// Bytes by category at the peak; adds up exactly to `peak_allocated_bytes`.
    pub peak_breakdown_bytes: std::collections::BTreeMap<&'static str, i64>,
    /// Activations found (per iteration, aligned).
    pub activations: usize,
    /// Bytes alive when the window opened that no snapshot block accounts for (counted OTHER).
    pub unexplained_before_window_bytes: i64,
    /// Host↔device bandwidth used for swap times.
    pub swap_bandwidth: liveness::SwapBandwidth,
    /// Backward passes per iteration (median) where there are several: gradient
    /// accumulation's micro-batches, or a step with several losses (absent with one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backward_passes_per_iteration: Option<u32>,
    /// torch's `max_memory_allocated` over the whole run, from its first step to its exit,
    /// where capture read it (absent otherwise): what a plan must keep under its budget.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_peak_allocated_bytes: Option<i64>,
    /// CUDA graph replays in the iterations and the private pools they hold (absent without
    /// replays).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cuda_graphs: Option<graphs::CudaGraphs>,
    /// Anomalies, one line per kind.
    pub warnings: Vec<String>,
}

impl Summary {
    /// Whether FLOPs and bytes were counted at all: a trace recorded without input shapes
    /// gives neither, and its 0 is "not measured", not "nothing computed".
    pub fn flops_counted(&self) -> bool {
        self.flops_per_iteration > 0 || self.bytes_per_iteration > 0
    }
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

/// `part` as a percentage of `whole`; `None` when `whole` is not positive.
pub fn percent(part: f64, whole: f64) -> Option<f64> {
    (whole > 0.0).then(|| 100.0 * part / whole)
}

/// Median of a slice of f64 (mean of the middle two for even lengths); `None` when empty.
pub fn median(v: &mut [f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// Seconds from nanoseconds, as the f64 nearest the 9-decimal value (so JSON shows
/// `0.05912032`, not `0.059120320000000004`).
pub fn ns_to_s(ns: f64) -> f64 {
    format!("{:.9}", ns * 1e-9).parse().unwrap_or(0.0)
}

/// Lower median of integers (an element of the data, so byte counts stay whole).
pub fn median_low(v: &mut [i64]) -> Option<i64> {
    if v.is_empty() {
        return None;
    }
    v.sort_unstable();
    Some(v[(v.len() - 1) / 2])
}

fn file_name(p: &std::path::Path) -> String {
    p.file_name()
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned()
}

/// Runs every analysis.
pub fn run(t: &mut Trace, opts: &Options, diag: &mut Diagnostics) -> Analysis {
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
    let peaks = device_peaks(t, opts, diag);
    let flop_rows = flops::rows(t, &step, &node_flops, &node_stats, peaks.as_ref());
    let n_iter = step.iterations.len().max(1) as u64;
    let matmul_flops_by_op = by_type.into_iter().map(|(k, v)| (k, v / n_iter)).collect();
    let (flops_by_phase, matmul_flops_by_phase) = flops_by_phase(&flop_rows);
    let snapshot = t.snapshot.as_ref().map(|_| snapshot_join(t, &step, diag));
    let execution_trace = exec_trace_join(t);

    let times = StepTimes::of(&step);
    let peak = memory_peak(t, &step);
    let (peak_node, peak_iteration) = match peak {
        Some((_, ts)) => peak_place(t, &step, ts),
        None => (None, None),
    };
    let dev = t.device.unwrap_or(0);
    let devinfo = t.kineto.header.devices.iter().find(|d| d.id == dev);
    let (gpu_breakdown, collective_overlap) = kernels::temporal(t, &step);
    let mut summary = Summary {
        steptrace_version: env!("CARGO_PKG_VERSION"),
        name: String::new(),
        trace: file_name(&t.kineto.path),
        iterations: step.iterations.len(),
        iteration_detection: step.detection,
        iteration_labels: step.iterations.iter().map(|i| i.label.clone()).collect(),
        nodes_per_iteration: node_stats.len(),
        step_time_s: times.median_s,
        step_time_instrumented_s: times.median_s,
        step_time_source: steptrace_formats::StepTimeSource::Instrumented,
        profiler_overhead: None,
        plan_timed_both_ways: None,
        host_lead_s: None,
        optimizer_step_host_s: None,
        plan_probe: None,
        gpu_breakdown,
        collective_overlap,
        step_times_s: times.each_s,
        gpu_busy_s: times.gpu_busy_s,
        gpu_time_s: times.gpu_time_s,
        peak_allocated_bytes: peak.map(|p| p.0),
        peak_node,
        peak_iteration,
        device: t.device_name().map(str::to_owned),
        device_memory_bytes: devinfo.and_then(|d| d.total_memory_bytes),
        time_convention: t.kineto.header.time_convention,
        trace_events: t.kineto.event_count,
        truncated: t.kineto.truncated.is_some(),
        snapshot,
        execution_trace,
        flops_per_iteration: flop_rows
            .iter()
            .map(|r| r.flops)
            .fold(0, u64::saturating_add),
        matmul_flops_per_iteration: flop_rows
            .iter()
            .map(|r| r.matmul_flops)
            .fold(0, u64::saturating_add),
        time_by_phase: node_stats::time_by_phase(&node_stats, &step),
        between_phases_s: node_stats::between_phases_s(&step),
        flops_by_phase,
        matmul_flops_by_phase,
        bytes_per_iteration: flop_rows.iter().map(|r| r.bytes).sum(),
        flops_from_execution_trace: t.exec_trace.is_some(),
        peaks,
        liveness_source: live.source,
        peak_breakdown_bytes: peak
            .map(|(bytes, ts)| mem.breakdown_by_key(ts, bytes))
            .unwrap_or_default(),
        activations: live.activations.len(),
        unexplained_before_window_bytes: mem.unexplained_before,
        swap_bandwidth: live.bandwidth,
        backward_passes_per_iteration: step.backward_passes_per_iteration(),
        run_peak_allocated_bytes: None,
        cuda_graphs: graphs::compute(t, &step, peak.map(|p| p.0), diag),
        warnings: Vec::new(),
    };
    let kernels = kernels::compute(t);
    let (collectives, outside) = collectives::calls(t, &step);
    if outside > 0 && !collectives.is_empty() {
        diag.warn(
            "collective_outside_iterations",
            format!("{outside} collective kernel(s) launched outside the iterations (e.g. before the window opened): not matched across ranks"),
        );
    }
    if t.kineto.ops.is_empty() {
        gpu_only_figures(&mut summary, &kernels, diag);
    }
    let mut a = Analysis {
        // Filled from the inputs by the caller, beside the run's name.
        module_fqns: Default::default(),
        kernels,
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

/// The iterations' times: each, and the medians of the span, the GPU's busy time and its
/// kernel time.
struct StepTimes {
    each_s: Vec<f64>,
    median_s: f64,
    gpu_busy_s: f64,
    gpu_time_s: f64,
}

impl StepTimes {
    fn of(step: &Step) -> Self {
        let its = &step.iterations;
        let mut span: Vec<f64> = its.iter().map(|i| (i.end - i.start) as f64).collect();
        let each_s = span.iter().map(|&v| ns_to_s(v)).collect();
        let mut busy: Vec<f64> = its.iter().map(|i| i.gpu_busy as f64).collect();
        let mut gt: Vec<f64> = its.iter().map(|i| i.gpu_time as f64).collect();
        let med = |v: &mut [f64]| ns_to_s(median(v).unwrap_or(0.0));
        StepTimes {
            each_s,
            median_s: med(&mut span),
            gpu_busy_s: med(&mut busy),
            gpu_time_s: med(&mut gt),
        }
    }
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

/// Per-iteration FLOPs by phase name.
type PhaseFlops = std::collections::BTreeMap<&'static str, u64>;

/// FLOPs and matmul FLOPs per iteration, summed by phase.
fn flops_by_phase(rows: &[flops::FlopRow]) -> (PhaseFlops, PhaseFlops) {
    let (mut all, mut matmul) = (PhaseFlops::new(), PhaseFlops::new());
    for r in rows {
        *all.entry(r.gtype).or_insert(0) += r.flops;
        *matmul.entry(r.gtype).or_insert(0) += r.matmul_flops;
    }
    (all, matmul)
}

/// The peak: the first event carrying the largest total inside any iteration, as (bytes,
/// time). A negative total is an unknown one (absent or out of range).
fn memory_peak(t: &Trace, step: &Step) -> Option<(i64, i64)> {
    let mut peak: Option<(i64, i64)> = None;
    for it in &step.iterations {
        let lo = t.memory.partition_point(|m| m.ts < it.start);
        for m in t.memory[lo..].iter().take_while(|m| m.ts <= it.end) {
            if m.total_allocated >= 0 && peak.is_none_or(|(b, _)| m.total_allocated > b) {
                peak = Some((m.total_allocated, m.ts));
            }
        }
    }
    peak
}

/// The node running at `ts` (innermost in time: the latest-starting one that contains it) and
/// the iteration's label.
fn peak_place(t: &Trace, step: &Step, ts: i64) -> (Option<String>, Option<String>) {
    let it = step
        .iterations
        .iter()
        .find(|i| ts >= i.start && ts <= i.end);
    let node = it.and_then(|it| {
        let nodes = &step.nodes[it.nodes.clone()];
        let inside = nodes
            .iter()
            .filter(|n| {
                let o = t.op(n.op);
                o.start <= ts && ts <= o.end()
            })
            .max_by_key(|n| (t.op(n.op).start, n.rank))
            .map(|n| n.name.clone());
        // Memory allocated outside any op (a compiled graph's buffers are allocated without
        // the dispatcher): the node that ran last before it.
        inside.or_else(|| {
            nodes
                .iter()
                .filter(|n| t.op(n.op).start <= ts)
                .max_by_key(|n| (t.op(n.op).end(), n.rank))
                .map(|n| format!("{} (allocated after it, outside any op)", n.name))
        })
    });
    (node, it.map(|i| i.label.clone()))
}

/// A GPU-only trace: no step to rebuild, so the figures are the GPU timeline's over the whole
/// trace.
fn gpu_only_figures(summary: &mut Summary, kernels: &kernels::Kernels, diag: &mut Diagnostics) {
    summary.step_time_s = ns_to_s(kernels.span_ns as f64);
    summary.step_time_instrumented_s = summary.step_time_s;
    summary.gpu_busy_s = ns_to_s(kernels.busy_ns as f64);
    summary.gpu_time_s = ns_to_s(kernels.kernel_ns as f64);
    diag.warn(
        "no_cpu_operators",
        format!(
            "{}: no CPU operators (a GPU-only trace): kernel-level results only (kernels.csv, streams.csv), over the whole trace",
            summary.trace
        ),
    );
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
