//! The console summary (returned as text; the CLI prints it) and the readable units it and the
//! other tables use.

use super::*;
use crate::analysis::step::Phase;

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
    // A trace with no GPU activity (a CPU-only program, or a capture without CUDA activities)
    // is read for its host ops: their CPU time is what it has.
    let cpu_only = t.kineto.gpu.is_empty();
    let dev = match (s.device.as_deref(), cpu_only) {
        (_, true) => "the CPU (no GPU activity in the trace)",
        (Some(d), false) => d,
        (None, false) => "an unknown GPU (the trace has no deviceProperties)",
    };
    o += &format!(
        "{}: {} iteration{} ({}), {} nodes per iteration, on {}\n",
        s.trace,
        s.iterations,
        if s.iterations == 1 { "" } else { "s" },
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
    if !cpu_only {
        o += &utilization_line(s);
        o += &idle_line(s);
        o += &launch_line(s);
        o += &path_line(s);
    }
    if let Some(line) = phase_line(s, cpu_only) {
        o += &line;
    }
    for l in super::input_lacks(a) {
        o += l;
        o.push('\n');
    }
    if let Some(p) = s.peak_allocated_bytes {
        o += &format!(
            "peak allocated {} at {} ({})\n",
            human_bytes(p),
            s.peak_node.as_deref().unwrap_or("no node"),
            s.peak_iteration.as_deref().unwrap_or("")
        )
    }
    o += &shape_lines(s);
    o += &work_and_memory_lines(s);
    if a.node_stats.is_empty() {
        // An empty table would read as a step that did nothing; say where the operators are.
        let ops = t
            .kineto
            .ops
            .iter()
            .filter(|op| op.kind == crate::model::kineto::OpKind::Op)
            .count();
        o += &format!(
            "\nno operator runs inside the profiled iterations ({}): the trace's {ops} operator(s) all lie outside them\n",
            s.iteration_labels.join(", ")
        );
    } else if super::nodes_without_gpu_time(&a.node_stats) {
        cpu_table(&mut o, a, top);
    } else {
        gpu_table(&mut o, a, top);
    }
    if s.peak_allocated_bytes.is_none() {
        // No memory events: a table of zeros would read as "nothing allocated".
        by_mem_table_skipped(&mut o);
        return finish_console(o, diag);
    }
    mem_table(&mut o, a, top);
    finish_console(o, diag)
}

/// The step's FLOPs, what its peak holds by category, and how many activations were found.
fn work_and_memory_lines(s: &crate::analysis::Summary) -> String {
    let mut o = String::new();
    if s.flops_counted() && s.flops_per_iteration == 0 {
        // Shapes were recorded, but no op the step runs has a FLOP formula (copies, views,
        // collectives, autograd nodes without their aten ops): a true zero, said as one.
        o += &format!(
            "FLOPs per iteration: none of its ops has a FLOP formula ({} moved)\n",
            human_bytes(s.bytes_per_iteration as i64)
        );
    } else if s.flops_counted() {
        o += &format!(
            "FLOPs per iteration {} (FlopCounterMode convention {}), {} moved\n",
            flops::human_flops(s.flops_per_iteration as f64),
            flops::human_flops(s.matmul_flops_per_iteration as f64),
            human_bytes(s.bytes_per_iteration as i64)
        );
    }
    if !s.peak_breakdown_bytes.is_empty() {
        let parts: Vec<String> = steptrace_formats::summary::by_name_order(&s.peak_breakdown_bytes)
            .into_iter()
            .filter(|(_, b)| **b != 0)
            .map(|(k, b)| format!("{} {}", k.key(), human_bytes(*b)))
            .collect();
        o += &format!("at the peak: {}\n", parts.join(", "));
    }
    // Without memory data or an Execution Trace there is nothing to find activations from.
    if s.activations > 0 || s.peak_allocated_bytes.is_some() {
        o += &format!(
            "{} activations (liveness from {})\n",
            s.activations,
            match s.liveness_source {
                crate::analysis::liveness::Source::ExecutionTrace => "the Execution Trace",
                crate::analysis::liveness::Source::MemoryEvents => "allocator events",
            }
        );
    }
    o
}

/// The nodes that took the most CPU time, where no node has GPU time.
fn cpu_table(o: &mut String, a: &Analysis, top: usize) {
    let total: f64 = a.node_stats.iter().map(|n| n.median_cpu_time_s).sum();
    let by_time = super::nodes_by_time(&a.node_stats, |n| n.median_cpu_time_s);
    *o += &format!("\nTop {top} nodes by CPU time (median per iteration; no node has GPU time)\n");
    *o += &format!(
        "{:>5}  {:<60} {:>11} {:>7}\n",
        "order", "node", "CPU time", "CPU %"
    );
    for n in by_time.iter().take(top) {
        *o += &format!(
            "{:>5}  {:<60} {:>11} {:>6.1}%\n",
            n.rank,
            truncate(&n.node_name, 60),
            human_time(n.median_cpu_time_s),
            crate::analysis::percent(n.median_cpu_time_s, total).unwrap_or(0.0)
        );
    }
}

/// The nodes that took the most GPU time.
fn gpu_table(o: &mut String, a: &Analysis, top: usize) {
    let total_gpu: f64 = a.node_stats.iter().map(|n| n.median_run_time_s).sum();
    let by_time = super::nodes_by_time(&a.node_stats, |n| n.median_run_time_s);
    *o += &format!("\nTop {top} nodes by GPU time (median per iteration)\n");
    *o += &format!(
        "{:>5}  {:<60} {:>10} {:>7} {:>8} {:>11}\n",
        "order", "node", "GPU time", "GPU %", "kernels", "CPU time"
    );
    for n in by_time.iter().take(top) {
        *o += &format!(
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
}

/// The nodes that allocated the most.
fn mem_table(o: &mut String, a: &Analysis, top: usize) {
    let mut by_mem: Vec<&crate::analysis::NodeStat> = a.node_stats.iter().collect();
    by_mem.sort_by(|x, y| {
        y.median_alloc_bytes
            .cmp(&x.median_alloc_bytes)
            .then(x.rank.cmp(&y.rank))
    });
    *o += &format!("\nTop {top} nodes by memory allocated (median per iteration)\n");
    *o += &format!(
        "{:>5}  {:<60} {:>11} {:>11} {:>10}\n",
        "order", "node", "allocated", "peak", "type"
    );
    for n in by_mem.iter().take(top) {
        *o += &format!(
            "{:>5}  {:<60} {:>11} {:>11} {:>10}\n",
            n.rank,
            truncate(&n.node_name, 60),
            human_bytes(n.median_alloc_bytes),
            human_bytes(n.median_peak_mem_bytes),
            n.node_type.as_str()
        );
    }
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
            x.kind.as_str(),
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

/// The phases in the order a step runs them (the summary keys its times by their names).
pub(super) const PHASE_ORDER: [Phase; 6] = [
    Phase::DataLoading,
    Phase::Forward,
    Phase::Backward,
    Phase::ZeroGrad,
    Phase::Optimizer,
    Phase::Other,
];

/// Each phase's time per iteration, in the order a step runs them: GPU time of its nodes (and
/// their host time), or host time alone for a CPU-only trace; phases with none left out.
pub(super) fn phase_parts(s: &crate::analysis::Summary, cpu_only: bool) -> Vec<String> {
    let mut parts: Vec<String> = PHASE_ORDER
        .iter()
        .filter_map(|p| {
            let k = p.as_str();
            let t = s.time_by_phase.get(p)?;
            let host = t.host_s();
            (t.gpu_s > 0.0 || host > 0.0).then(|| {
                if cpu_only || t.gpu_s == 0.0 {
                    format!("{k} {}", human_time(host))
                } else {
                    format!("{k} {} (GPU {})", human_time(host), human_time(t.gpu_s))
                }
            })
        })
        .collect();
    // Under a microsecond is a rounding of spans that meet (a trace cut to its ops).
    if !parts.is_empty() && s.between_phases_s >= 1e-6 {
        parts.push(format!("between phases {}", human_time(s.between_phases_s)));
    }
    parts
}

/// Each phase's median is taken over the iterations on its own, so they need not add up to
/// the median step: said where they do not, by more than 1% (ResNet-18: 44.85 ms of medians
/// against a 42.0 ms step).
pub(super) fn phase_sum_note(s: &crate::analysis::Summary) -> Option<String> {
    let sum: f64 = PHASE_ORDER
        .iter()
        .filter_map(|p| s.time_by_phase.get(p))
        .map(|t| t.host_s())
        .sum::<f64>()
        + s.between_phases_s;
    let step = s.step_time_instrumented_s;
    (sum > 0.0 && step > 0.0 && (sum - step).abs() > 0.01 * step).then(|| {
        format!(
            "the phases' medians, each over the iterations on its own, add up to {} against the median iteration's {}",
            human_time(sum),
            human_time(step)
        )
    })
}

/// The console's line of [`phase_parts`].
fn phase_line(s: &crate::analysis::Summary, cpu_only: bool) -> Option<String> {
    let parts = phase_parts(s, cpu_only);
    (!parts.is_empty()).then(|| {
        format!(
            "per iteration by phase ({}): {}\n",
            if cpu_only {
                "wall time, medians"
            } else {
                "wall time, and the GPU time of its nodes; medians"
            },
            parts.join(", ")
        ) + &phase_sum_note(s).map_or_else(String::new, |n| format!("  ({n})\n"))
    })
}

/// `s` in at most `n` characters. A node name (`phase:module/…/op#k`) keeps its phase and its
/// op, and as much of the module path before the op as fits, the rest elided in the middle
/// (`backward:…/Transformer_0/aten::mm#1`); anything else keeps its last characters, an
/// ellipsis first.
pub(crate) fn truncate(s: &str, n: usize) -> String {
    let len = s.chars().count();
    if len <= n {
        return s.to_owned();
    }
    if let (Some(colon), Some(slash)) = (s.find(':'), s.rfind('/')) {
        let phase = &s[..=colon];
        let known = [
            "forward:",
            "backward:",
            "optimizer:",
            "zero_grad:",
            "data_loading:",
            "other:",
        ];
        if known.contains(&phase) && slash > colon {
            // The module components between the phase and the op, kept from the op back.
            let middle: Vec<&str> = s[colon + 1..slash].split('/').collect();
            let op = &s[slash..];
            let mut tail = String::new();
            for c in middle.iter().rev() {
                let candidate = format!("/{c}{tail}");
                if phase.chars().count() + 1 + candidate.chars().count() + op.chars().count() > n {
                    break;
                }
                tail = candidate;
            }
            let out = format!("{phase}…{tail}{op}");
            if out.chars().count() <= n {
                return out;
            }
        }
    }
    let keep: String = s.chars().skip(len + 1 - n).collect();
    format!("…{keep}")
}

/// What the step's shape is beyond one forward and backward: several backward passes an
/// iteration (accumulation), CUDA graph replays.
fn shape_lines(s: &crate::analysis::Summary) -> String {
    let mut o = String::new();
    if let Some(k) = s.backward_passes_per_iteration {
        o += &format!(
            "{k} backward passes per iteration: gradient accumulation over {k} micro-batches (or a step with {k} losses); per-node figures count each pass's nodes apart (#0 … #{})\n",
            k - 1
        );
    }
    if let Some(g) = &s.cuda_graphs {
        o += &graphs_line(g);
    }
    o
}

/// The step's CUDA graphs: their share of the GPU work, and what their private pools hold of
/// the device beside the allocated peak (never free memory or fragmentation).
pub(crate) fn graphs_line(g: &crate::analysis::graphs::CudaGraphs) -> String {
    let mut o = format!(
        "CUDA graphs: {} replay(s) an iteration, {} of GPU work ({:.0}% of it){}",
        g.replays_per_iteration,
        human_time(g.gpu_time_per_iteration_s),
        g.share_of_gpu_time_pct,
        if g.flops_counted {
            ", their FLOPs counted when capture recorded them"
        } else {
            ", their FLOPs not in the FLOPs figures"
        }
    );
    if !g.private_pools.is_empty() {
        let pools: Vec<String> = g
            .private_pools
            .iter()
            .map(|p| format!("pool {} {}", p.id, human_bytes(p.reserved_bytes as i64)))
            .collect();
        o += &format!(
            "; private pools reserved: {}; the device holds {} in all (memory_reserved)",
            pools.join(", "),
            human_bytes(g.reserved_bytes.unwrap_or(0) as i64)
        );
    }
    o.push('\n');
    o
}

/// The GPU's utilisation as the headline: against the program's own step where capture timed
/// it, the profiled step's share beside it and named as the profiler's; else the profiled
/// step's alone, said to be so.
pub(crate) fn utilization_line(s: &crate::analysis::Summary) -> String {
    let profiled = 100.0 * s.gpu_utilization_profiled;
    match s.gpu_utilization {
        Some(u) => format!(
            "GPU utilisation {:.0}%: busy {} of the program's own {} step (under the profiler {profiled:.0}%: its own host work lengthens the step), GPU kernel time {}\n",
            100.0 * u,
            human_time(s.gpu_busy_s),
            human_time(s.step_time_s),
            human_time(s.gpu_time_s)
        ),
        None if s.profiler_overhead.is_some() => format!(
            "GPU busy {} ({profiled:.0}% of the profiled step), more than the program's own {} step: no utilisation (gpu_busy_exceeds_step), GPU kernel time {}\n",
            human_time(s.gpu_busy_s),
            human_time(s.step_time_s),
            human_time(s.gpu_time_s)
        ),
        None => format!(
            "GPU busy {} ({profiled:.0}% of the profiled step, which the profiler's host work lengthens; the program's own step is not known: `steptrace capture` times it), GPU kernel time {}\n",
            human_time(s.gpu_busy_s),
            human_time(s.gpu_time_s)
        ),
    }
}

/// Why the GPU waits, in one line: the busiest stream's idle time per iteration by cause,
/// largest first, and the op the largest is charged to.
pub(crate) fn idle_line(s: &crate::analysis::Summary) -> String {
    let Some(idle) = &s.idle else {
        return String::new();
    };
    let mut causes: Vec<_> = idle
        .per_iteration_s
        .iter()
        .filter(|(_, v)| **v > 0.0)
        .collect();
    causes.sort_by(|a, b| b.1.total_cmp(a.1).then(a.0.cmp(b.0)));
    if causes.is_empty() {
        return String::new();
    }
    let parts: Vec<String> = causes
        .iter()
        .map(|(c, v)| format!("{} {}", c.as_str().replace('_', " "), human_time(**v)))
        .collect();
    let mut line = format!(
        "GPU idle per profiled iteration on stream {}: {}",
        idle.stream,
        parts.join(", ")
    );
    if let Some(op) = idle.top_ops.get(causes[0].0).and_then(|v| v.first()) {
        line += &format!(
            " (most {} before {}: {})",
            causes[0].0.as_str().replace('_', " "),
            op.op,
            human_time(op.idle_s)
        );
    }
    // Measured under the profiler, whose host work lengthens every gap the host causes.
    line + ", host causes lengthened by the profiler\n"
}

/// The critical path in one line: its length per profiled iteration by kind (largest first),
/// whether the host or the GPU bounds it, the host's part at the program's own speed, and the
/// op holding most of it.
pub(crate) fn path_line(s: &crate::analysis::Summary) -> String {
    let Some(p) = &s.critical_path else {
        return String::new();
    };
    let mut kinds: Vec<_> = p
        .per_iteration_s
        .iter()
        .filter(|(_, v)| **v > 0.0)
        .collect();
    kinds.sort_by(|a, b| b.1.total_cmp(a.1).then(a.0.cmp(b.0)));
    let parts: Vec<String> = kinds
        .iter()
        .take(4)
        .map(|(k, v)| format!("{} {}", k.as_str().replace('_', " "), human_time(**v)))
        .collect();
    let mut line = format!(
        "critical path per profiled iteration: {} ({}; {:.0}% host under the profiler); {}-bound: a host that cost nothing would leave the GPU's {} of the {} step",
        human_time(p.length_s),
        parts.join(", "),
        100.0 * p.host_share,
        p.bound,
        human_time(p.host_free_step_s),
        human_time(s.step_time_s)
    );
    if let Some(h) = p.host_s_at_program_speed {
        line += &format!("; its host work at the program's speed {}", human_time(h));
    }
    if let Some(op) = p.top_ops.first() {
        line += &format!("; most on it: {} {}", op.op, human_time(op.path_s));
    }
    line + "\n"
}

/// The launches in one line: how many kernels ran shorter than their own launch call (the
/// host cannot keep such a GPU busy) and the median delay from launch to start.
pub(crate) fn launch_line(s: &crate::analysis::Summary) -> String {
    let Some(l) = &s.launches else {
        return String::new();
    };
    let share = 100.0 * l.shorter_than_launch as f64 / l.launches.max(1) as f64;
    format!(
        "launches (under the profiler): {} of {} GPU activities ran shorter than their launch call ({share:.0}%{}), median launch delay {}\n",
        l.shorter_than_launch,
        l.launches,
        if share >= 50.0 { ": launch-bound" } else { "" },
        human_time(l.median_delay_s)
    )
}
