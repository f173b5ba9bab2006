//! Cross-rank outputs (issue 18): `ranks.csv`, `ranks.json` and the console lines.

use std::path::Path;

use super::{human_bytes, io, secs, write_table, Error};
use crate::analysis::ranks::Ranks;

/// `ranks.csv` columns: times in µs (three decimals) and percentages of the GPU span.
const HEADER: [&str; 17] = [
    "rank",
    "trace",
    "iterations",
    "step_time_s",
    "step_time_instrumented_s",
    "slowest_iteration",
    "slowest_iteration_s",
    "gpu_span_us",
    "idle_us",
    "compute_us",
    "non_compute_us",
    "communication_us",
    "memory_us",
    "idle_pct",
    "compute_pct",
    "comm_comp_overlap_pct",
    "peak_allocated_bytes",
];

/// A percentage with two decimals for the CSV; empty where there is no whole.
fn pct2(p: Option<f64>) -> String {
    p.map_or(String::new(), |p| format!("{p:.2}"))
}

/// Writes `ranks.csv` and `ranks.json` into `dir` (made if missing), and with `plots` the
/// cross-rank plots (`plots/ranks_gpu_breakdown`, `plots/ranks_step_times`, SVG and PNG) and
/// `report.html`; then gives them their final names.
pub fn write(dir: &Path, r: &Ranks, plots: bool) -> Result<(), Error> {
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    write_tables(dir, r)?;
    if plots && !r.ranks.is_empty() {
        write_page(dir, r)?;
    }
    super::rename_parts(dir)
}

fn write_page(dir: &Path, r: &Ranks) -> Result<(), Error> {
    let pd = dir.join("plots");
    std::fs::create_dir_all(&pd).map_err(io(&pd))?;
    let label = |x: &crate::analysis::ranks::RankResult| format!("rank {}", x.rank);
    let bars: Vec<(String, Vec<f64>)> = r
        .ranks
        .iter()
        .map(|x| {
            let g = &x.gpu;
            let p = |ns| g.pct(ns).unwrap_or(0.0);
            (
                label(x),
                vec![p(g.compute_ns), p(g.non_compute_ns), p(g.idle_ns)],
            )
        })
        .collect();
    let breakdown = super::plot::write_stacked(
        &pd.join("ranks_gpu_breakdown"),
        "GPU time per rank",
        "% of the GPU span",
        &["computation", "communication, memory, other", "idle"],
        &bars,
    )?;
    let rows: Vec<(String, Vec<f64>)> = r
        .ranks
        .iter()
        .map(|x| (label(x), x.step_times_s.iter().map(|s| s * 1e3).collect()))
        .collect();
    let heat = super::plot::write_heatmap(
        &pd.join("ranks_step_times"),
        "step time per rank and iteration, ms",
        "iteration",
        &rows,
    )?;
    let svgs = [
        ("ranks_gpu_breakdown", breakdown.svg),
        ("ranks_step_times", heat.svg),
    ];
    let title = dir
        .file_name()
        .map_or_else(|| "ranks".into(), |n| n.to_string_lossy().into_owned());
    super::html::write_ranks(dir, &title, r, &svgs)
}

fn write_tables(dir: &Path, r: &Ranks) -> Result<(), Error> {
    write_table(&dir.join("ranks.csv"), &HEADER, &r.ranks, |w, x| {
        let g = &x.gpu;
        let slowest = x.slowest_iteration();
        w.num(x.rank)
            .text(&x.trace)
            .num(x.iterations)
            .text(&secs(x.step_time_s))
            .text(&secs(x.step_time_instrumented_s))
            .text(&slowest.map_or(String::new(), |s| s.0.to_string()))
            .text(&slowest.map_or(String::new(), |s| secs(s.1)))
            .us(g.span_ns)
            .us(g.idle_ns)
            .us(g.compute_ns)
            .us(g.non_compute_ns)
            .us(g.communication_ns)
            .us(g.memory_ns)
            .text(&pct2(g.pct(g.idle_ns)))
            .text(&pct2(g.pct(g.compute_ns)))
            .text(&pct2(g.comm_comp_overlap_pct))
            .text(
                &x.peak_allocated_bytes
                    .map_or(String::new(), |b| b.to_string()),
            )
            .end();
    })?;
    super::write_json(&dir.join("ranks.json"), r)
}

/// One line per rank, the straggler verdict, then the ranks not analysed and the warnings.
pub fn console(r: &Ranks) -> String {
    let mut o = format!("{} ranks:\n", r.ranks.len());
    o += "rank  iters  step time   GPU idle  compute  comm      overlap  peak\n";
    for x in &r.ranks {
        let g = &x.gpu;
        o += &format!(
            "{:>4}  {:>5}  {:>9}  {:>8}  {:>7}  {:>8}  {:>7}  {}\n",
            x.rank,
            x.iterations,
            format!("{:.3} ms", x.step_time_s * 1e3),
            format!("{}%", pct2(g.pct(g.idle_ns))),
            format!("{}%", pct2(g.pct(g.compute_ns))),
            format!("{:.3} ms", g.communication_ns as f64 * 1e-6),
            g.comm_comp_overlap_pct
                .map_or("-".into(), |p| format!("{p:.1}%")),
            x.peak_allocated_bytes.map_or("-".into(), human_bytes),
        );
    }
    match (&r.straggler, &r.no_straggler_reason) {
        (Some(s), _) => {
            o += &format!(
                "straggler: rank {} (least time in communication, {:.3} ms; the others waited {:.3} ms in all)\n",
                s.rank,
                s.communication_s * 1e3,
                s.wait_caused_s * 1e3
            );
            for n in &s.slower_nodes {
                o += &format!(
                    "  {:<60} {} {:.3} ms vs {:.3} ms on the other ranks\n",
                    super::truncate(&n.node, 60),
                    n.time,
                    n.straggler_s * 1e3,
                    n.others_s * 1e3
                );
            }
        }
        (None, Some(why)) => o += &format!("no straggler named: {why}\n"),
        (None, None) => {}
    }
    for (rank, why) in &r.not_analysed {
        o += &format!("rank {rank} not analysed: {why}\n");
    }
    for w in &r.warnings {
        o += &format!("warning: {w}\n");
    }
    o
}
