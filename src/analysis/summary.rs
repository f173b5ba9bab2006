//! summary.json's figures, built once: from the analyses' results and what the run says about
//! itself beside the trace ([`RunFacts`]: the program's own step time, the whole run's peak,
//! the plan probe), with every warning the analysis gave. Nothing changes it afterwards.

use std::collections::BTreeMap;

use super::{
    file_name, flops, graphs, joins, kernels, liveness, median, memory, node_stats, ns_to_s, Phase,
    Step, Summary,
};
use crate::diagnostics::Diagnostics;
use crate::model::run::{PlanProbe, ProgramStepTime};
use crate::model::Trace;

/// What the run says about itself beside the trace (a capture's manifest): inputs of the
/// summary, not figures of the trace.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct RunFacts {
    /// What was analysed: the run directory's or the trace file's stem.
    pub name: String,
    /// The program's own step time, timed by capture with nothing recorded.
    pub program_step_time: Option<ProgramStepTime>,
    /// What checkpointing and swapping cost on the capture's machine.
    pub plan_probe: Option<PlanProbe>,
    /// torch's `max_memory_allocated` over the whole run.
    pub run_max_memory_allocated: Option<i64>,
    /// Module instance names and their fully qualified names.
    pub module_fqns: BTreeMap<String, String>,
}

/// The analyses' results the summary is made from.
pub(super) struct Parts<'a> {
    pub(super) t: &'a Trace,
    pub(super) step: &'a Step,
    pub(super) mem: &'a memory::Memory,
    pub(super) node_stats: &'a [node_stats::NodeStat],
    pub(super) live: &'a liveness::Liveness,
    pub(super) flop_rows: &'a [flops::FlopRow],
    pub(super) kernels: &'a kernels::Kernels,
    pub(super) idle: &'a super::idle::Idle,
    pub(super) launches: &'a super::launches::Launches,
    pub(super) critical_path: &'a super::critical_path::CriticalPath,
}

/// summary.json.
pub(super) fn build(
    p: &Parts<'_>,
    peaks: Option<flops::Peaks>,
    facts: &RunFacts,
    diag: &mut Diagnostics,
) -> Summary {
    let (t, step, mem, live, rows) = (p.t, p.step, p.mem, p.live, p.flop_rows);
    let peak = memory_peak(t, step);
    let (peak_node, peak_iteration) = match peak {
        Some((_, ts)) => peak_place(t, step, ts),
        None => (None, None),
    };
    let dev = t.device.unwrap_or(0);
    let devinfo = t.kineto.header.devices.iter().find(|d| d.id == dev);
    let (gpu_breakdown, collective_overlap) = kernels::temporal(t, step);
    let (flops_by_phase, matmul_flops_by_phase) = flops_by_phase(rows);
    let snapshot = t
        .snapshot
        .as_ref()
        .map(|_| joins::snapshot_join(t, step, diag));
    let cuda_graphs = graphs::compute(t, step, peak.map(|p| p.0), diag);
    let trace = file_name(&t.kineto.path);
    let clock = if t.kineto.ops.is_empty() {
        Clock::gpu_only(&trace, StepTimes::of(step), p.kernels, diag)
    } else {
        Clock::of(StepTimes::of(step), facts.program_step_time.as_ref(), diag)
    };
    let gpu_utilization = clock.utilization(diag);
    let critical_path = super::critical_path::summary(
        t,
        step,
        p.critical_path,
        super::critical_path::StepFacts {
            step_s: clock.step_s,
            gpu_busy_s: clock.gpu_busy_s,
            host_scale: clock.host_scale(),
        },
    );
    Summary {
        format_version: steptrace_formats::summary::FORMAT_VERSION,
        steptrace_version: env!("CARGO_PKG_VERSION").to_owned(),
        name: facts.name.clone(),
        trace,
        iterations: step.iterations.len(),
        iteration_detection: step.detection,
        iteration_labels: step.iterations.iter().map(|i| i.label.clone()).collect(),
        nodes_per_iteration: p.node_stats.len(),
        step_time_s: clock.step_s,
        step_time_instrumented_s: clock.instrumented_s,
        step_time_source: clock.source,
        profiler_overhead: clock.profiler_overhead,
        plan_timed_both_ways: clock.plan_ab,
        host_lead_s: clock.host_lead_s,
        optimizer_step_host_s: clock.optimizer_step_host_s,
        forward_host_s: clock.forward_host_s,
        backward_host_s: clock.backward_host_s,
        plan_probe: facts.plan_probe,
        gpu_breakdown,
        collective_overlap,
        step_times_s: clock.each_s,
        gpu_busy_s: clock.gpu_busy_s,
        gpu_utilization,
        gpu_utilization_profiled: ratio(clock.gpu_busy_s, clock.instrumented_s),
        idle: p.idle.summary.clone(),
        critical_path,
        launches: (!p.launches.each.is_empty()).then_some(
            steptrace_formats::summary::LaunchSummary {
                launches: p.launches.each.len(),
                shorter_than_launch: p.launches.short,
                runtime_outliers: p.launches.runtime_outliers,
                delay_outliers: p.launches.delay_outliers,
                median_delay_s: p.launches.median_delay_ns as f64 * 1e-9,
            },
        ),
        gpu_time_s: clock.gpu_time_s,
        peak_allocated_bytes: peak.map(|p| p.0),
        peak_node,
        peak_iteration,
        device: t.device_name().map(str::to_owned),
        device_memory_bytes: devinfo.and_then(|d| d.total_memory_bytes),
        time_convention: t.kineto.header.time_convention,
        trace_events: t.kineto.event_count,
        truncated: t.kineto.truncated.is_some(),
        snapshot,
        execution_trace: joins::exec_trace_join(t),
        flops_per_iteration: rows.iter().map(|r| r.flops).fold(0, u64::saturating_add),
        matmul_flops_per_iteration: rows
            .iter()
            .map(|r| r.matmul_flops)
            .fold(0, u64::saturating_add),
        time_by_phase: node_stats::time_by_phase(p.node_stats, step),
        between_phases_s: node_stats::between_phases_s(step),
        flops_by_phase,
        matmul_flops_by_phase,
        bytes_per_iteration: rows.iter().map(|r| r.bytes).sum(),
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
        run_peak_allocated_bytes: facts.run_max_memory_allocated,
        cuda_graphs,
        warnings: diag.lines(),
    }
}

/// The step's times as the summary gives them: the program's own step where capture timed
/// it, the profiled one beside it.
struct Clock {
    step_s: f64,
    instrumented_s: f64,
    source: steptrace_formats::StepTimeSource,
    profiler_overhead: Option<f64>,
    plan_ab: Option<crate::model::run::PlanTimedBothWays>,
    host_lead_s: Option<f64>,
    optimizer_step_host_s: Option<f64>,
    forward_host_s: Option<f64>,
    backward_host_s: Option<f64>,
    each_s: Vec<f64>,
    gpu_busy_s: f64,
    gpu_time_s: f64,
}

impl Clock {
    /// The program's host time over the profiled one: its step less the host's lead over the
    /// profiled step; `None` where the step is the profiled one.
    fn host_scale(&self) -> Option<f64> {
        (self.source.is_programs_own() && self.instrumented_s > 0.0)
            .then(|| super::host_scale(self.step_s, self.instrumented_s, self.host_lead_s))
    }
}

/// `part / whole`, 0 where `whole` is not positive.
fn ratio(part: f64, whole: f64) -> f64 {
    if whole > 0.0 {
        part / whole
    } else {
        0.0
    }
}

impl Clock {
    /// GPU busy over the program's own step, where capture timed it. Busy time beyond the
    /// step by more than noise means the profiled iterations did other work than the timed
    /// steps (a different batch, an evaluation step): said, as the figure then describes
    /// neither.
    fn utilization(&self, diag: &mut Diagnostics) -> Option<f64> {
        if self.source == steptrace_formats::StepTimeSource::Instrumented || self.step_s <= 0.0 {
            return None;
        }
        let u = self.gpu_busy_s / self.step_s;
        // Beyond the step by more than noise, the figure describes nothing: left out, said.
        if u > 1.05 {
            diag.warn(
                "gpu_busy_exceeds_step",
                format!(
                    "the GPU is busy {:.3} ms in a profiled iteration, {:.0}% of the program's own step ({:.3} ms): the profiled iterations kept the GPU busier than the timed steps (a collective's kernels spin while they wait for a rank the profiler slows, or other work), so no utilisation is given",
                    self.gpu_busy_s * 1e3,
                    100.0 * u,
                    self.step_s * 1e3
                ),
            );
            return None;
        }
        Some(u)
    }

    /// A GPU-only trace: no step to rebuild, so the figures are the GPU timeline's over the
    /// whole trace, and there is no step of the program's to compare with.
    fn gpu_only(
        trace: &str,
        times: StepTimes,
        k: &kernels::Kernels,
        diag: &mut Diagnostics,
    ) -> Clock {
        diag.warn(
            "no_cpu_operators",
            format!(
                "{trace}: no CPU operators (a GPU-only trace): kernel-level results only (kernels.csv, streams.csv), over the whole trace"
            ),
        );
        let span = ns_to_s(k.span_ns as f64);
        Clock {
            step_s: span,
            instrumented_s: span,
            gpu_busy_s: ns_to_s(k.busy_ns as f64),
            gpu_time_s: ns_to_s(k.kernel_ns as f64),
            ..Clock::profiled(times)
        }
    }

    /// The profiled iterations' times alone, the program's own unknown.
    fn profiled(times: StepTimes) -> Clock {
        Clock {
            step_s: times.median_s,
            instrumented_s: times.median_s,
            source: steptrace_formats::StepTimeSource::Instrumented,
            profiler_overhead: None,
            plan_ab: None,
            host_lead_s: None,
            optimizer_step_host_s: None,
            forward_host_s: None,
            backward_host_s: None,
            each_s: times.each_s,
            gpu_busy_s: times.gpu_busy_s,
            gpu_time_s: times.gpu_time_s,
        }
    }

    /// The step time users compare with their own: the one capture timed with nothing
    /// recorded, when the run directory has it; the instrumented one stays beside it.
    fn of(times: StepTimes, program: Option<&ProgramStepTime>, diag: &mut Diagnostics) -> Clock {
        let mut c = Clock::profiled(times);
        match program {
            Some(p) => {
                c.step_s = p.ns as f64 * 1e-9;
                c.source = p.source;
                c.profiler_overhead = Some(c.instrumented_s / c.step_s);
                c.plan_ab = p.plan_ab;
                c.host_lead_s = p.host_lead_s;
                c.optimizer_step_host_s = p.optimizer_step_s;
                c.forward_host_s = p.forward_host_s;
                c.backward_host_s = p.backward_host_s;
                if let Some((stop, steps)) = &p.unsettled {
                    let cap = match stop {
                        steptrace_formats::summary::TimingStop::TimeCap => "time",
                        steptrace_formats::summary::TimingStop::StepCap => "step",
                    };
                    diag.warn(
                        "step_time_unsettled",
                        format!(
                            "the program's own step time ({:.3} ms) did not settle within +-2.5% before capture's timing phase reached its {cap} cap: \
                             a median of {steps} steps whose times swing or drift; capture with a larger --timing-max-steps for a steadier figure",
                            c.step_s * 1e3
                        ),
                    );
                }
            }
            None if c.step_s > 0.0 && c.gpu_busy_s < 0.5 * c.step_s && c.gpu_busy_s > 0.0 => {
                diag.warn(
                    "step_time_includes_profiler",
                    format!(
                        "the step time ({:.3} ms) is measured under the profiler and the GPU idles {:.0}% of it: \
                         much of that can be the profiler's own work on the CPU; `steptrace capture` also times steps with nothing recorded",
                        c.step_s * 1e3,
                        100.0 * (1.0 - c.gpu_busy_s / c.step_s)
                    ),
                );
            }
            None => {}
        }
        c
    }
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

/// Per-iteration FLOPs by phase name.
type PhaseFlops = std::collections::BTreeMap<Phase, u64>;

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

#[cfg(test)]
mod tests {
    use super::*;

    fn times(busy_s: f64, span_s: f64) -> StepTimes {
        StepTimes {
            each_s: vec![span_s],
            median_s: span_s,
            gpu_busy_s: busy_s,
            gpu_time_s: busy_s,
        }
    }

    fn own(ms: f64) -> ProgramStepTime {
        ProgramStepTime {
            ns: (ms * 1e6) as i64,
            source: steptrace_formats::StepTimeSource::AfterWindow,
            unsettled: None,
            plan_ab: None,
            host_lead_s: None,
            optimizer_step_s: None,
            forward_host_s: None,
            backward_host_s: None,
            passes_per_step: None,
        }
    }

    #[test]
    fn utilisation_is_against_the_programs_own_step() {
        let mut d = Diagnostics::default();
        // 10 ms busy in a 100 ms profiled step; the program's own step is 20 ms.
        let c = Clock::of(times(0.010, 0.100), Some(&own(20.0)), &mut d);
        let u = c.utilization(&mut d).unwrap();
        assert!((u - 0.5).abs() < 1e-9, "{u}");
        assert!((ratio(c.gpu_busy_s, c.instrumented_s) - 0.1).abs() < 1e-9);
        assert!(d.lines().is_empty());
        // Without the program's own step there is no utilisation to claim.
        let c = Clock::of(times(0.010, 0.100), None, &mut d);
        assert_eq!(c.utilization(&mut d), None);
    }

    #[test]
    fn busy_beyond_the_programs_step_is_said() {
        let mut d = Diagnostics::default();
        let c = Clock::of(times(0.030, 0.100), Some(&own(20.0)), &mut d);
        assert_eq!(c.utilization(&mut d), None);
        assert!(d
            .lines()
            .iter()
            .any(|l| l.starts_with("gpu_busy_exceeds_step")));
    }
}
