//! Cross-rank outputs: `ranks.csv`, `ranks.json` and the console lines.

use std::path::Path;

use super::{human_bytes, io, secs, write_table, Error};
use crate::analysis::ranks::{Ranks, Straggler};

/// `ranks.csv` columns: times in µs (three decimals) and percentages of the GPU span.
const HEADER: [&str; 21] = [
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
    "last_arrivals",
    "wait_caused_us",
    "waited_us",
    "exposed_communication_us",
];

/// `collectives.csv` columns: one row per collective matched across ranks.
const COLLECTIVES: [&str; 11] = [
    "iteration",
    "pg",
    "seq",
    "op",
    "dtype",
    "in_nelems",
    "ranks",
    "last_rank",
    "collective_us",
    "wait_us",
    "max_wait_us",
];

/// The straggler verdict in words, as the console and report.html give it.
pub(super) fn verdict(s: &Straggler) -> String {
    let wait = super::human_time(s.wait_per_step_s);
    let nodes = super::human_time(s.explained_per_step_s);
    let per_step = match (s.own_host_ratio, s.profiler_skew_s) {
        (Some(r), _) if r >= crate::analysis::ranks::HOST_SLOWER => format!(
            " ({wait} per profiled step and waiting rank; with nothing recorded its host took {r:.1}x the other ranks' time for the same optimizer step)"
        ),
        (_, Some(k)) => format!(
            " ({wait} per profiled step and waiting rank; its nodes took {nodes} per step longer than the other ranks', more than the {} the profiler cost it beyond them)",
            super::human_time(k)
        ),
        (_, None) => format!(
            " ({wait} per profiled step and waiting rank; its nodes took {nodes} per step longer; no rank's own step time is known, so the profiler's share is not ruled out)"
        ),
    };
    let words = match s.last_arrivals {
        Some((last, of)) => format!(
            "rank {} arrived last at {last} of {of} matched collectives; the other ranks waited {} for it in all",
            s.rank,
            super::human_time(s.wait_caused_s)
        ),
        None => format!(
            "rank {} spent the least time in communication ({}); the other ranks waited {} in all",
            s.rank,
            super::human_time(s.communication_s),
            super::human_time(s.wait_caused_s)
        ),
    };
    words + &per_step
}

/// A percentage with two decimals for the CSV; empty where there is no whole.
fn pct2(p: Option<f64>) -> String {
    p.map_or(String::new(), |p| format!("{p:.2}"))
}

/// Writes `ranks.csv` and `ranks.json` (and with the `parquet` feature `ranks.parquet`) into
/// `dir` (made if missing), and with `plots` the
/// cross-rank plots (`plots/ranks_gpu_breakdown`, `plots/ranks_step_times`, SVG and PNG) and
/// `report.html`; then gives them their final names.
pub fn write(dir: &Path, r: &Ranks, plots: bool) -> Result<(), Error> {
    let folder = super::out_dir::Writer::open(dir)?;
    write_tables(dir, r)?;
    if plots && !r.ranks.is_empty() {
        write_page(dir, r)?;
    }
    folder.finish()
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
    let arrivals = &r.collectives.arrivals;
    write_table(&dir.join("ranks.csv"), &HEADER, &r.ranks, |w, x| {
        let g = &x.gpu;
        let slowest = x.slowest_iteration();
        let a = arrivals.iter().find(|a| a.rank == x.rank);
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
            .num(a.map_or(0, |a| a.last))
            .us(a.map_or(0, |a| a.wait_caused_ns))
            .us(a.map_or(0, |a| a.waited_ns))
            .text(
                &g.exposed_communication_ns()
                    .map_or(String::new(), |ns| format!("{:.3}", ns as f64 * 1e-3)),
            )
            .end();
    })?;
    write_table(
        &dir.join("collectives.csv"),
        &COLLECTIVES,
        &r.collectives.matched,
        |w, c| {
            w.text(&c.iteration)
                .text(&c.pg)
                .num(c.seq)
                .text(&c.op)
                .text(&c.dtype)
                .text(&c.in_nelems.map_or(String::new(), |n| n.to_string()))
                .num(c.ranks)
                .num(c.last_rank)
                .us(c.collective_ns)
                .us(c.wait_ns)
                .us(c.max_wait_ns)
                .end();
        },
    )?;
    #[cfg(feature = "parquet")]
    super::frames::write_ranks_table(dir, r)?;
    super::write_json(&dir.join("ranks.json"), r)
}

/// One line per rank, the straggler verdict, then the ranks not analysed and the warnings.
pub fn console(r: &Ranks) -> String {
    let mut o = format!(
        "{} ranks (step: the program's own with nothing recorded, and under the profiler; GPU idle and compute: % of the window's GPU span; comm and exposed comm, with no computation beside it: per profiled step):\n",
        r.ranks.len()
    );
    o += "rank  iters  step (own)  step (profiled)  GPU idle  compute  comm/step  overlap  exposed/step  peak\n";
    for x in &r.ranks {
        let g = &x.gpu;
        let own = if x.profiler_cost_s.is_some() {
            format!("{:.3} ms", x.step_time_s * 1e3)
        } else {
            "-".into()
        };
        o += &format!(
            "{:>4}  {:>5}  {:>10}  {:>15}  {:>8}  {:>7}  {:>9}  {:>7}  {:>12}  {}\n",
            x.rank,
            x.iterations,
            own,
            format!("{:.3} ms", x.step_time_instrumented_s * 1e3),
            format!("{}%", pct2(g.pct(g.idle_ns))),
            format!("{}%", pct2(g.pct(g.compute_ns))),
            format!(
                "{:.3} ms",
                g.communication_ns as f64 * 1e-6 / x.iterations.max(1) as f64
            ),
            g.comm_comp_overlap_pct
                .map_or("-".into(), |p| format!("{p:.1}%")),
            g.exposed_communication_ns()
                .map_or("-".into(), |ns| format!(
                    "{:.3} ms",
                    ns as f64 * 1e-6 / x.iterations.max(1) as f64
                )),
            x.peak_allocated_bytes.map_or("-".into(), human_bytes),
        );
    }
    // Per collective (FSDP2: all-gathers and reduce-scatters), per profiled step.
    for x in r.ranks.iter().filter(|x| !x.collective_overlap.is_empty()) {
        let per = |ns: i64| ns as f64 * 1e-6 / x.iterations.max(1) as f64;
        let parts: Vec<String> = x
            .collective_overlap
            .iter()
            .map(|(k, c)| {
                format!(
                    "{k} {:.3} ms ({:.1}% beside compute, {:.3} ms exposed)",
                    per(c.communication_ns),
                    crate::analysis::percent(c.overlapped_ns as f64, c.communication_ns as f64)
                        .unwrap_or(0.0),
                    per(c.exposed_ns())
                )
            })
            .collect();
        o += &format!(
            "rank {} collectives per profiled step: {}\n",
            x.rank,
            parts.join(", ")
        );
    }
    match (&r.straggler, &r.no_straggler_reason) {
        (Some(s), _) => {
            o += &format!("straggler: {}\n", verdict(s));
            for n in &s.slower_nodes {
                o += &format!(
                    "  {:<60} {} {:.3} ms vs {:.3} ms on the other ranks\n",
                    super::truncate(&n.node, 60),
                    n.time.as_str(),
                    n.straggler_s * 1e3,
                    n.others_s * 1e3
                );
            }
        }
        (None, Some(why)) => o += &format!("no straggler named: {why}\n"),
        (None, None) => {}
    }
    if !r.by_iteration.is_empty() {
        let each: Vec<String> = r
            .by_iteration
            .iter()
            .map(|i| {
                format!(
                    "{} rank {} ({})",
                    i.iteration,
                    i.rank,
                    super::human_time(i.wait_caused_s)
                )
            })
            .collect();
        o += &format!(
            "last to arrive, per iteration (the wait it caused): {}\n",
            each.join(", ")
        );
    }
    let c = &r.collectives;
    if c.unmatched > 0 {
        o += &format!(
            "warning: {} collective(s) ran on one rank only in the windows (no peer to match)\n",
            c.unmatched
        );
    }
    for d in &c.disagreements {
        o += &format!("warning: collectives disagree: {d}\n");
    }
    if c.disagreeing > c.disagreements.len() {
        o += &format!(
            "warning: {} more collectives disagree across ranks\n",
            c.disagreeing - c.disagreements.len()
        );
    }
    for (rank, why) in &r.not_analysed {
        o += &format!("rank {rank} not analysed: {why}\n");
    }
    for w in &r.warnings {
        o += &format!("warning: {w}\n");
    }
    o
}
