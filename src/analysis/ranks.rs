//! Cross-rank analysis (issue 18): one row per rank of a distributed run, and the straggler.
//!
//! Each rank is analysed alone (its own `Analysis`); what the cross-rank figures need is taken
//! from it as a [`RankResult`] (a few numbers and the per-node medians), so that ranks can be
//! analysed one at a time and their full analyses dropped.
//!
//! The straggler: in synchronous data-parallel training every rank waits in each collective
//! for the last one to arrive, and a communication kernel runs (spinning) from the moment its
//! rank enters the collective. The rank that arrives last therefore spends the least time in
//! communication kernels, and every other rank's excess over it is time spent waiting for it.
//! Where its own time went: its per-node medians against the median of the other ranks' for
//! the same node.

use serde::Serialize;

use super::collectives::{self, Call, Matching};
use super::kernels::Temporal;
use super::Analysis;

/// What the cross-rank outputs need from one rank's analysis.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RankResult {
    /// The rank.
    pub rank: i64,
    /// Its trace's file name.
    pub trace: String,
    /// Iterations found.
    pub iterations: usize,
    /// Median step time, s (the program's own where capture timed it).
    pub step_time_s: f64,
    /// Median step time under the profiler, s.
    pub step_time_instrumented_s: f64,
    /// Each iteration's span under the profiler, s.
    pub step_times_s: Vec<f64>,
    /// What the profiler added to a step on this rank, s: the step under the profiler less
    /// the program's own (`None` where capture did not time the program's own).
    pub profiler_cost_s: Option<f64>,
    /// Where the GPU's time went (HolisticTraceAnalysis's definitions).
    pub gpu: Temporal,
    /// Peak allocated bytes in the window.
    pub peak_allocated_bytes: Option<i64>,
    /// Per node: name, median GPU run time and median CPU time, s.
    #[serde(skip)]
    pub nodes: Vec<(String, f64, f64)>,
    /// Its collectives, with their metadata.
    #[serde(skip)]
    pub collectives: Vec<Call>,
}

impl RankResult {
    /// The slowest iteration (0-based; the first of equals) and its span, s.
    pub fn slowest_iteration(&self) -> Option<(usize, f64)> {
        self.step_times_s
            .iter()
            .copied()
            .enumerate()
            .max_by(|x, y| x.1.total_cmp(&y.1).then(y.0.cmp(&x.0)))
    }

    /// Takes what the cross-rank outputs need from `a`, the analysis of rank `rank`.
    pub fn from_analysis(rank: i64, a: &Analysis) -> RankResult {
        let s = &a.summary;
        RankResult {
            rank,
            trace: s.trace.clone(),
            iterations: s.iterations,
            step_time_s: s.step_time_s,
            step_time_instrumented_s: s.step_time_instrumented_s,
            step_times_s: s.step_times_s.clone(),
            profiler_cost_s: (s.step_time_source != "instrumented")
                .then(|| (s.step_time_instrumented_s - s.step_time_s).max(0.0)),
            gpu: s.gpu_breakdown,
            peak_allocated_bytes: s.peak_allocated_bytes,
            nodes: a
                .node_stats
                .iter()
                .map(|n| {
                    (
                        n.node_name.clone(),
                        n.median_run_time_s,
                        n.median_cpu_time_s,
                    )
                })
                .collect(),
            collectives: a.collectives.clone(),
        }
    }
}

/// One node where the straggler spent longer than the other ranks.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeExcess {
    /// Node name.
    pub node: String,
    /// Which of its times: `gpu` (its kernels' run time) or `cpu` (the op on the host).
    pub time: &'static str,
    /// The straggler's median run time, s.
    pub straggler_s: f64,
    /// Median over the other ranks of their medians, s.
    pub others_s: f64,
}

/// The rank the others waited for.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Straggler {
    /// The rank.
    pub rank: i64,
    /// How it was told: `collectives` (the rank the others waited for most in the matched
    /// collectives) or `communication_time` (the least time in communication kernels, for
    /// traces whose kernels carry no collective metadata).
    pub method: &'static str,
    /// Its time in communication kernels, s.
    pub communication_s: f64,
    /// Time the other ranks spent waiting for it, summed, s.
    pub wait_caused_s: f64,
    /// That wait per profiled step (over the fewest iterations of any rank), s.
    pub wait_per_step_s: f64,
    /// The most the profiler added to a step on any rank, s, where every rank's own step time
    /// is known: the skew the instrumentation alone can make, which the wait exceeds.
    pub profiler_cost_s: Option<f64>,
    /// Matched collectives it arrived at last, and how many were matched (`collectives` only).
    pub last_arrivals: Option<(usize, usize)>,
    /// Nodes where it spent longer than the other ranks, most excess first.
    pub slower_nodes: Vec<NodeExcess>,
}

/// The rank the others waited for most in one iteration's matched collectives.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IterationStraggler {
    /// Iteration label.
    pub iteration: String,
    /// The rank.
    pub rank: i64,
    /// Time the others waited for it in this iteration, s.
    pub wait_caused_s: f64,
    /// All waiting in this iteration's matched collectives, s.
    pub wait_s: f64,
}

/// The cross-rank result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Ranks {
    /// One row per rank, in rank order.
    pub ranks: Vec<RankResult>,
    /// The collectives matched across ranks, and each rank's arrivals.
    pub collectives: Matching,
    /// The straggler of each iteration (from the matched collectives).
    pub by_iteration: Vec<IterationStraggler>,
    /// The straggler, when there is communication to tell it by and one rank stands out by a
    /// margin (see [`straggler`]).
    pub straggler: Option<Straggler>,
    /// Why there is no straggler, when there is none.
    pub no_straggler_reason: Option<String>,
    /// Ranks that could not be analysed, with why.
    pub not_analysed: Vec<(i64, String)>,
    /// What is off about the run's ranks (a rank seen twice, a world size that disagrees).
    pub warnings: Vec<String>,
}

/// The shortest communication time must be below every other rank's by this share of the
/// median to name a straggler: below it the ranks are even. In matched collectives, the wait a
/// straggler caused must be this share of all time spent in them.
const STRAGGLER_MARGIN: f64 = 0.05;

/// Cross-rank figures from each rank's result.
pub fn combine(mut ranks: Vec<RankResult>, top_nodes: usize) -> Ranks {
    ranks.sort_by_key(|r| r.rank);
    let calls: Vec<(i64, &[Call])> = ranks
        .iter()
        .map(|r| (r.rank, r.collectives.as_slice()))
        .collect();
    let matching = collectives::match_ranks(&calls);
    let by_iteration = collectives::by_iteration(&matching)
        .into_iter()
        .map(|(iteration, rank, caused, all)| IterationStraggler {
            iteration,
            rank,
            wait_caused_s: caused as f64 * 1e-9,
            wait_s: all as f64 * 1e-9,
        })
        .collect();
    let told = if matching.matched.is_empty() {
        straggler(&ranks, top_nodes)
    } else {
        straggler_by_collectives(&ranks, &matching, top_nodes)
    };
    let (straggler, no_straggler_reason) = match told.and_then(|s| beyond_profiler_noise(&ranks, s))
    {
        Ok(s) => (Some(s), None),
        Err(why) => (None, Some(why)),
    };
    let warnings = collectives::spread_warning(&matching).into_iter().collect();
    Ranks {
        ranks,
        collectives: matching,
        by_iteration,
        straggler,
        no_straggler_reason,
        not_analysed: Vec::new(),
        warnings,
    }
}

/// Keeps a straggler only where the wait it caused per profiled step is more than the
/// profiler can make. The profiler adds its own cost to each step on each rank (on a short,
/// host-bound step, many times the step: pytorch/examples' FSDP2 example ran 56-70 ms steps
/// at 0.73-1.28 s under it), and unevenly, so one rank can arrive late at every collective
/// for no reason of the program's; but no rank can be made later by it than the whole of
/// what it adds to a step. A wait per step within the largest such cost of any rank is
/// profiler noise; beyond it, the program's own. Where a rank's own step time is unknown
/// (a trace without capture's manifest), the straggler stands, with no such bound.
fn beyond_profiler_noise(ranks: &[RankResult], mut s: Straggler) -> Result<Straggler, String> {
    let steps = ranks.iter().map(|r| r.iterations).min().unwrap_or(1).max(1);
    s.wait_per_step_s = s.wait_caused_s / steps as f64;
    let costs: Option<Vec<(i64, f64)>> = ranks
        .iter()
        .map(|r| r.profiler_cost_s.map(|c| (r.rank, c)))
        .collect();
    let Some((worst_rank, noise)) = costs.and_then(|c| {
        c.into_iter()
            .max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(&a.0)))
    }) else {
        return Ok(s);
    };
    s.profiler_cost_s = Some(noise);
    if s.wait_per_step_s > noise {
        return Ok(s);
    }
    Err(format!(
        "no straggler beyond profiler noise: rank {} made the others wait {:.3} ms per profiled step, within the {:.3} ms the profiler added to a step on rank {worst_rank} (the step under the profiler less the program's own)",
        s.rank,
        s.wait_per_step_s * 1e3,
        noise * 1e3
    ))
}

/// The rank the others waited for most in the matched collectives, when that wait is at
/// least [`STRAGGLER_MARGIN`] of all time the ranks spent in them and at least twice the wait
/// any other rank caused.
pub fn straggler_by_collectives(
    ranks: &[RankResult],
    m: &Matching,
    top_nodes: usize,
) -> Result<Straggler, String> {
    let mut by_wait: Vec<&collectives::Arrivals> = m.arrivals.iter().collect();
    by_wait.sort_by_key(|a| (std::cmp::Reverse(a.wait_caused_ns), a.rank));
    let (top, next) = (by_wait[0], by_wait.get(1).map_or(0, |a| a.wait_caused_ns));
    let in_collectives: i64 = m
        .matched
        .iter()
        .map(|x| x.collective_ns * x.ranks as i64 + x.wait_ns)
        .sum();
    if (top.wait_caused_ns as f64) < STRAGGLER_MARGIN * in_collectives as f64 {
        return Err(format!(
            "ranks are even: no rank made the others wait {:.0}% of the time spent in the {} matched collectives",
            100.0 * STRAGGLER_MARGIN,
            m.matched.len()
        ));
    }
    if top.wait_caused_ns < 2 * next {
        let close: Vec<String> = by_wait
            .iter()
            .filter(|a| 2 * a.wait_caused_ns > top.wait_caused_ns)
            .map(|a| a.rank.to_string())
            .collect();
        return Err(format!(
            "ranks {} each made the others wait within 2x of the most: no single straggler",
            close.join(", ")
        ));
    }
    let s = ranks
        .iter()
        .find(|r| r.rank == top.rank)
        .expect("arrivals come from the ranks");
    Ok(Straggler {
        rank: s.rank,
        method: "collectives",
        communication_s: s.gpu.communication_ns as f64 * 1e-9,
        wait_caused_s: top.wait_caused_ns as f64 * 1e-9,
        wait_per_step_s: 0.0,
        profiler_cost_s: None,
        last_arrivals: Some((top.last, m.matched.len())),
        slower_nodes: slower_nodes(s, ranks, top_nodes),
    })
}

/// The rank with the least time in communication kernels, when it is shorter than every other
/// rank's by [`STRAGGLER_MARGIN`] of their median.
pub fn straggler(ranks: &[RankResult], top_nodes: usize) -> Result<Straggler, String> {
    if ranks.len() < 2 {
        return Err("one rank".into());
    }
    let comm: Vec<i64> = ranks.iter().map(|r| r.gpu.communication_ns).collect();
    if comm.iter().all(|&c| c == 0) {
        return Err(
            "no communication kernels (NCCL) on any rank: nothing to tell who waited for whom"
                .into(),
        );
    }
    let (at, &least) = comm
        .iter()
        .enumerate()
        .min_by_key(|&(i, c)| (*c, ranks[i].rank))
        .expect("two or more ranks");
    let mut others: Vec<f64> = comm
        .iter()
        .enumerate()
        .filter(|&(i, _)| i != at)
        .map(|(_, &c)| c as f64)
        .collect();
    let next = others.iter().copied().fold(f64::INFINITY, f64::min);
    let med = super::median(&mut others).unwrap_or(0.0);
    if next - least as f64 <= STRAGGLER_MARGIN * med {
        // Ranks as short as the least (within the margin): all of them is even; some, a tie.
        let tied: Vec<String> = comm
            .iter()
            .zip(ranks)
            .filter(|(&c, _)| (c - least) as f64 <= STRAGGLER_MARGIN * med)
            .map(|(_, r)| r.rank.to_string())
            .collect();
        return Err(if tied.len() == ranks.len() {
            format!(
                "ranks are even: every rank's communication time is within {:.0}% of the least",
                100.0 * STRAGGLER_MARGIN
            )
        } else {
            format!(
                "{} ranks tie for the least communication time (ranks {}): no single straggler",
                tied.len(),
                tied.join(", ")
            )
        });
    }
    let wait: i64 = comm.iter().map(|c| c - least).sum();
    let s = &ranks[at];
    Ok(Straggler {
        rank: s.rank,
        method: "communication_time",
        communication_s: least as f64 * 1e-9,
        wait_caused_s: wait as f64 * 1e-9,
        wait_per_step_s: 0.0,
        profiler_cost_s: None,
        last_arrivals: None,
        slower_nodes: slower_nodes(s, ranks, top_nodes),
    })
}

/// The straggler's nodes that took longer than the median of the other ranks' medians for the
/// same node (nodes every rank has) by more than [`STRAGGLER_MARGIN`] of it and a
/// microsecond, on the GPU (kernels) or on the host (a slow input pipeline or Python shows
/// there), most excess first, then by name.
fn slower_nodes(s: &RankResult, ranks: &[RankResult], top: usize) -> Vec<NodeExcess> {
    use std::collections::BTreeMap;
    let mut per: BTreeMap<&str, (Vec<f64>, Vec<f64>)> = BTreeMap::new();
    for r in ranks.iter().filter(|r| r.rank != s.rank) {
        for (n, gpu, cpu) in &r.nodes {
            let e = per.entry(n.as_str()).or_default();
            e.0.push(*gpu);
            e.1.push(*cpu);
        }
    }
    let need = ranks.len() - 1;
    let mut v: Vec<NodeExcess> = Vec::new();
    for (n, gpu, cpu) in &s.nodes {
        let Some((og, oc)) = per.get_mut(n.as_str()) else {
            continue;
        };
        if og.len() != need {
            continue;
        }
        for (time, mine, others) in [("gpu", *gpu, og), ("cpu", *cpu, oc)] {
            let Some(others_s) = super::median(others) else {
                continue;
            };
            // Jitter between ranks is not a cause: 5% and a microsecond at least.
            if mine - others_s > (STRAGGLER_MARGIN * others_s).max(1e-6) {
                v.push(NodeExcess {
                    node: n.clone(),
                    time,
                    straggler_s: mine,
                    others_s,
                });
            }
        }
    }
    v.sort_by(|a, b| {
        (b.straggler_s - b.others_s)
            .total_cmp(&(a.straggler_s - a.others_s))
            .then(a.node.cmp(&b.node))
            .then(a.time.cmp(b.time))
    });
    v.truncate(top);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rank(rank: i64, comm_us: i64, nodes: &[(&str, f64)]) -> RankResult {
        RankResult {
            rank,
            trace: format!("trace_rank{rank}.json"),
            iterations: 3,
            step_time_s: 0.01,
            step_time_instrumented_s: 0.012,
            step_times_s: vec![0.01, 0.011, 0.01],
            profiler_cost_s: None,
            gpu: Temporal {
                communication_ns: comm_us * 1000,
                ..Temporal::default()
            },
            peak_allocated_bytes: None,
            collectives: Vec::new(),
            nodes: nodes
                .iter()
                .map(|(n, t)| (n.to_string(), *t, *t / 2.0))
                .collect(),
        }
    }

    #[test]
    fn the_rank_with_least_communication_is_the_straggler_and_its_slow_node_is_named() {
        // Issue 18: rank 2 computes longer in `conv`, so ranks 0, 1 and 3 wait in NCCL.
        let nodes = |conv: f64| vec![("conv", conv), ("relu", 0.001), ("fc", 0.002)];
        let r = combine(
            vec![
                rank(3, 900, &nodes(0.004)),
                rank(0, 1000, &nodes(0.004)),
                rank(2, 100, &nodes(0.0049)),
                rank(1, 950, &nodes(0.004)),
            ],
            5,
        );
        assert_eq!(
            r.ranks.iter().map(|x| x.rank).collect::<Vec<_>>(),
            [0, 1, 2, 3]
        );
        let s = r.straggler.expect("a straggler");
        assert_eq!(s.rank, 2);
        assert!((s.wait_caused_s - (900.0 + 850.0 + 800.0) * 1e-6).abs() < 1e-12);
        // conv on the GPU first (0.9 ms more), then on the host (0.45 ms more).
        assert_eq!(s.slower_nodes.len(), 2);
        assert_eq!(
            (s.slower_nodes[0].node.as_str(), s.slower_nodes[0].time),
            ("conv", "gpu")
        );
        assert_eq!(s.slower_nodes[1].time, "cpu");
        assert!((s.slower_nodes[0].others_s - 0.004).abs() < 1e-12);
    }

    /// The frameworks issue: on a short host-bound step the profiler alone makes one rank
    /// late (FSDP2's example: 0.86 s of waits per step under a 0.7-1.2 s profiler cost). A
    /// wait per step within what the profiler adds to a step on any rank names no straggler;
    /// beyond it, the straggler stands, with both figures.
    #[test]
    fn a_wait_within_the_profilers_own_cost_per_step_names_no_straggler() {
        let n = [("a", 0.001)];
        // Rank 1 caused 2.7 ms of waits over 3 iterations: 0.9 ms per profiled step.
        let with_cost = |cost: f64| {
            let mut v = vec![rank(0, 3000, &n), rank(1, 300, &n)];
            for r in &mut v {
                r.profiler_cost_s = Some(cost);
            }
            v[0].profiler_cost_s = Some(cost / 2.0);
            combine(v, 5)
        };
        let noise = with_cost(0.002);
        assert!(noise.straggler.is_none());
        assert_eq!(
            noise.no_straggler_reason.unwrap(),
            "no straggler beyond profiler noise: rank 1 made the others wait 0.900 ms per profiled step, within the 2.000 ms the profiler added to a step on rank 1 (the step under the profiler less the program's own)"
        );
        let real = with_cost(0.0005)
            .straggler
            .expect("a straggler beyond the noise");
        assert_eq!(real.rank, 1);
        assert!((real.wait_per_step_s - 0.0009).abs() < 1e-12);
        assert_eq!(real.profiler_cost_s, Some(0.0005));
        // No rank's own step time: the straggler stands, with no bound.
        let unknown = combine(vec![rank(0, 3000, &n), rank(1, 300, &n)], 5);
        assert_eq!(
            unknown.straggler.expect("a straggler").profiler_cost_s,
            None
        );
    }

    #[test]
    fn even_ranks_or_no_communication_name_no_straggler() {
        let n = [("a", 0.001)];
        let even = combine(vec![rank(0, 1000, &n), rank(1, 990, &n)], 5);
        assert!(even.straggler.is_none());
        assert!(even.no_straggler_reason.unwrap().contains("even"));
        let tie = combine(
            vec![rank(0, 1000, &n), rank(1, 100, &n), rank(2, 101, &n)],
            5,
        );
        assert_eq!(
            tie.no_straggler_reason.unwrap(),
            "2 ranks tie for the least communication time (ranks 1, 2): no single straggler"
        );
        let none = combine(vec![rank(0, 0, &n), rank(1, 0, &n)], 5);
        assert!(none
            .no_straggler_reason
            .unwrap()
            .contains("no communication"));
    }
}
