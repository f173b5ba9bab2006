//! Which plots an analysis gets, each with the data it draws and writes beside it.

use std::path::Path;

use super::charts::{short_node_name, top_labels};
use super::*;

/// CSV rows of (rank, x, y) points, x and y with the given decimals.
fn rank_rows(points: &[(u32, f64, f64)], x_digits: usize, y_digits: usize) -> Vec<Vec<String>> {
    points
        .iter()
        .map(|p| {
            vec![
                p.0.to_string(),
                format!("{:.*}", x_digits, p.1),
                format!("{:.*}", y_digits, p.2),
            ]
        })
        .collect()
}

/// The chosen plots (all when `which` is empty), in [`PLOTS`] order.
pub fn jobs(a: &Analysis, which: &[Plot], gpu_mem_bytes: Option<i64>) -> Vec<Job> {
    // What the input holds decides as well: no memory plots without memory data, no roofline
    // without FLOPs (an empty chart reads as "nothing allocated", "nothing computed").
    let memory = a.summary.peak_allocated_bytes.is_some();
    let holds = |p: Plot| match p {
        Plot::MemoryVsRank | Plot::MemoryOverTime | Plot::PeakBreakdown => memory,
        Plot::Activations => !a.liveness.activations.is_empty(),
        Plot::Roofline => a.summary.flops_per_iteration > 0,
        Plot::TimeByPhase => !phase_bars(a).is_empty(),
        // GPU time per node: not a chart of zeros where no node ran on the GPU.
        Plot::NodeRuntime => a.node_stats.iter().any(|n| n.median_run_time_s > 0.0),
    };
    let want = |p: Plot| holds(p) && (which.is_empty() || which.contains(&p));
    PLOTS
        .into_iter()
        .filter(|&p| want(p))
        .map(|p| match p {
            Plot::TimeByPhase => time_by_phase(a),
            Plot::MemoryVsRank => memory_vs_rank(a, gpu_mem_bytes),
            Plot::MemoryOverTime => memory_over_time(a),
            Plot::NodeRuntime => node_runtime(a),
            Plot::Activations => activations(a),
            Plot::PeakBreakdown => peak_breakdown(a),
            Plot::Roofline => roofline(a),
        })
        .collect()
}

/// The bars of [`time_by_phase`]: each phase's GPU time and wall time per iteration in the
/// order a step runs them (wall time alone where no node has GPU time), the time between
/// phases, then the GPU's idle time in an iteration; phases with no time left out.
fn phase_bars(a: &Analysis) -> Vec<(String, f64, &'static str, bool)> {
    let s = &a.summary;
    let cpu_only = crate::report::nodes_without_gpu_time(&a.node_stats);
    let mut bars = Vec::new();
    for p in crate::report::console::PHASE_ORDER {
        let k = p.as_str();
        let Some(t) = s.time_by_phase.get(&p) else {
            continue;
        };
        if !cpu_only && t.gpu_s > 0.0 {
            bars.push((format!("{k} GPU"), t.gpu_s * 1e3, k, false));
        }
        let host = t.host_s();
        if host > 0.0 {
            bars.push((format!("{k} wall"), host * 1e3, k, true));
        }
    }
    if !bars.is_empty() && s.between_phases_s >= 1e-6 {
        bars.push((
            "between phases".to_owned(),
            s.between_phases_s * 1e3,
            "idle",
            true,
        ));
    }
    if !bars.is_empty() && !cpu_only {
        let idle = (s.step_time_instrumented_s - s.gpu_busy_s).max(0.0);
        bars.push(("GPU idle".to_owned(), idle * 1e3, "idle", false));
    }
    bars
}

/// Where an iteration's time goes, by phase: the headline of the console and report as a
/// chart.
fn time_by_phase(a: &Analysis) -> Job {
    let name = &a.summary.name;
    let bars = phase_bars(a);
    let rows: Vec<Vec<String>> = bars
        .iter()
        .map(|b| vec![b.0.clone(), format!("{:.6}", b.1)])
        .collect();
    let d = Bars {
        bars: bars
            .into_iter()
            .map(|(label, ms, phase, host)| {
                let c = phase_color(phase);
                // A phase's wall time in its colour, lighter.
                (label, ms, if host { c.mix(0.4) } else { c.mix(1.0) })
            })
            .collect(),
        scale: BarScale::MsPerIteration,
        digits: 3,
        title: format!("{name}: time per iteration by phase (medians, under the profiler)"),
    };
    job!(Plot::TimeByPhase, ["bar", "ms"], rows, d, draw_bars)
}

/// Peak and active memory of each node, in execution order.
fn memory_vs_rank(a: &Analysis, gpu_mem_bytes: Option<i64>) -> Job {
    let d = mem_vs_rank_data(a, gpu_mem_bytes);
    let rows = rank_rows(&d.points, 6, 6);
    job!(
        Plot::MemoryVsRank,
        ["rank", "peak_mib", "active_mib"],
        rows,
        d,
        draw_mem_vs_rank
    )
}

/// Memory by category over the profiled time.
fn memory_over_time(a: &Analysis) -> Job {
    let name = &a.summary.name;
    let t0 = a.timeline.first().map_or(0, |r| r.ts);
    // At most ~2000 points: keep the first row of each time bucket.
    let step = (a.timeline.len() / 2000).max(1);
    let points: Vec<(f64, [f64; CATEGORY_COUNT])> = a
        .timeline
        .iter()
        .step_by(step)
        .map(|r| {
            (
                (r.ts - t0) as f64 * 1e-6,
                r.breakdown.map(|b| b as f64 / MIB),
            )
        })
        .collect();
    let mut header = vec!["ms"];
    header.extend(CATEGORIES.iter().map(|c| c.key()));
    let rows: Vec<Vec<String>> = points
        .iter()
        .map(|p| {
            std::iter::once(format!("{:.6}", p.0))
                .chain(p.1.iter().map(|v| format!("{v:.6}")))
                .collect()
        })
        .collect();
    let d = MemOverTime {
        points,
        title: format!("{name}: memory by category over time"),
    };
    job!(Plot::MemoryOverTime, header, rows, d, draw_mem_over_time)
}

/// Points named on the node-runtime and roofline charts: the nodes of most GPU time.
const LABELLED: usize = 5;

/// Each node's median GPU time, by rank and phase.
fn node_runtime(a: &Analysis) -> Job {
    let name = &a.summary.name;
    let d = ByRank {
        points: a
            .node_stats
            .iter()
            .map(|n| {
                (
                    n.rank,
                    n.median_run_time_s * 1e3,
                    n.gtype.as_str().to_owned(),
                )
            })
            .collect(),
        labels: top_labels(
            &a.node_stats,
            LABELLED,
            |n| n.median_run_time_s,
            |n| (f64::from(n.rank), n.median_run_time_s * 1e3),
            |n| short_node_name(&n.node_name),
        )
        .into_iter()
        .map(|(x, y, s)| (x as u32, y, s))
        .collect(),
        y_desc: "GPU time, ms".into(),
        title: format!("{name}: GPU time per node (median; the {LABELLED} longest named)"),
    };
    let rows: Vec<Vec<String>> = d
        .points
        .iter()
        .map(|p| vec![p.0.to_string(), format!("{:.9}", p.1), p.2.clone()])
        .collect();
    job!(
        Plot::NodeRuntime,
        ["rank", "gpu_ms", "gtype"],
        rows,
        d,
        draw_by_rank
    )
}

/// Each activation's size against how long it sits unused.
fn activations(a: &Analysis) -> Job {
    let name = &a.summary.name;
    let d = Activations {
        points: a
            .liveness
            .activations
            .iter()
            .map(|x| {
                (
                    x.creation_rank,
                    x.median_mem_size_bytes as f64 / MIB,
                    x.inactive_time_s * 1e3,
                )
            })
            .collect(),
        title: name.clone(),
    };
    let rows = rank_rows(&d.points, 6, 9);
    job!(
        Plot::Activations,
        ["creation_rank", "size_mib", "inactive_ms"],
        rows,
        d,
        draw_activations
    )
}

/// Memory at the peak by category.
fn peak_breakdown(a: &Analysis) -> Job {
    let name = &a.summary.name;
    let mib: Vec<(String, f64)> = CATEGORIES
        .iter()
        .map(|c| {
            let bytes = a.summary.peak_breakdown_bytes.get(c).copied();
            (c.key().to_owned(), bytes.unwrap_or(0) as f64 / MIB)
        })
        .collect();
    let rows: Vec<Vec<String>> = mib
        .iter()
        .map(|b| vec![b.0.clone(), format!("{:.6}", b.1)])
        .collect();
    let d = Bars {
        bars: mib
            .into_iter()
            .enumerate()
            .map(|(i, (k, v))| (k, v, category_color(i).mix(1.0)))
            .collect(),
        scale: BarScale::Mib,
        digits: 1,
        title: format!("{name}: memory at the peak by category"),
    };
    job!(Plot::PeakBreakdown, ["category", "mib"], rows, d, draw_bars)
}

/// Each op's arithmetic intensity and achieved throughput, under the GPU's ceilings.
fn roofline(a: &Analysis) -> Job {
    let name = &a.summary.name;
    let peaks = a.summary.peaks.as_ref();
    let mut dts: Vec<&str> = a
        .flops
        .iter()
        .filter(|r| r.flops > 0)
        .map(|r| r.dtype.as_str())
        .collect();
    dts.sort_unstable();
    dts.dedup();
    let d = Roofline {
        points: a
            .flops
            .iter()
            .filter(|r| r.flops > 0 && r.gpu_time_s > 0.0)
            .map(|r| {
                (
                    r.arithmetic_intensity,
                    r.achieved_tflops,
                    r.dtype.as_str().to_owned(),
                )
            })
            .collect(),
        ceilings: peaks
            .map(|p| {
                p.tflops
                    .iter()
                    .filter(|(d, _)| dts.contains(&d.as_str()))
                    .map(|(d, v)| (d.as_str().to_owned(), *v))
                    .collect()
            })
            .unwrap_or_default(),
        bandwidth_tbs: peaks.map(|p| p.bandwidth_gbps / 1000.0),
        // The ops where the GPU time goes.
        labels: top_labels(
            &a.flops,
            LABELLED,
            |r| if r.flops > 0 { r.gpu_time_s } else { 0.0 },
            |r| (r.arithmetic_intensity, r.achieved_tflops),
            |r| short_node_name(&r.node_name),
        ),
        title: format!(
            "{name}: roofline ({})",
            peaks.map_or("no peaks".to_owned(), |p| p.device.clone())
        ),
    };
    let rows: Vec<Vec<String>> = d
        .points
        .iter()
        .map(|p| vec![format!("{:.6}", p.0), format!("{:.6}", p.1), p.2.clone()])
        .collect();
    job!(
        Plot::Roofline,
        ["arithmetic_intensity", "achieved_tflops", "dtype"],
        rows,
        d,
        draw_roofline
    )
}
