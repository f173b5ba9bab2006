//! Cross-rank analysis: one row per rank of a distributed run, and the straggler.
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
    /// The program's own `optimizer.step()` host time on this rank, s (capture's timing
    /// phase, nothing recorded): its host's speed at the work every rank does alike.
    pub own_optimizer_step_s: Option<f64>,
    /// Where the GPU's time went (HolisticTraceAnalysis's definitions).
    pub gpu: Temporal,
    /// Communication by collective, with the part beside computation (empty when merged from
    /// Parquet written before it was kept).
    pub collective_overlap: std::collections::BTreeMap<String, super::kernels::CollectiveOverlap>,
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
            profiler_cost_s: s
                .step_time_source
                .is_programs_own()
                .then(|| (s.step_time_instrumented_s - s.step_time_s).max(0.0)),
            own_optimizer_step_s: s.optimizer_step_host_s,
            gpu: s.gpu_breakdown,
            collective_overlap: s.collective_overlap.clone(),
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

/// Which time of a node: what a straggler's node took longer at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeTime {
    /// The op on the host.
    Cpu,
    /// Its kernels' run time.
    Gpu,
}

impl NodeTime {
    /// As the files write it.
    pub fn as_str(self) -> &'static str {
        match self {
            NodeTime::Cpu => "cpu",
            NodeTime::Gpu => "gpu",
        }
    }
}

/// How the straggler was told.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StragglerMethod {
    /// The rank the others waited for most in the matched collectives.
    Collectives,
    /// The least time in communication kernels, for traces whose kernels carry no
    /// collective metadata.
    CommunicationTime,
}

/// One node where the straggler spent longer than the other ranks.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeExcess {
    /// Node name.
    pub node: String,
    /// Which of its times.
    pub time: NodeTime,
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
    /// How it was told.
    pub method: StragglerMethod,
    /// Its time in communication kernels, s.
    pub communication_s: f64,
    /// Time the other ranks spent waiting for it, summed, s.
    pub wait_caused_s: f64,
    /// That wait per profiled step and per waiting rank (over the fewest iterations of any
    /// rank), s: what one other rank lost to it in a step.
    pub wait_per_step_s: f64,
    /// What the profiler cost it per step beyond the other ranks (their median), s, where
    /// every rank's own step time is known: what its nodes' extra time exceeds.
    pub profiler_skew_s: Option<f64>,
    /// Its own `optimizer.step()` host time over the other ranks' median, with nothing
    /// recorded (capture's timing phase), where every rank has one: at [`HOST_SLOWER`] or
    /// more, its host is slower at the same work in the program itself.
    pub own_host_ratio: Option<f64>,
    /// Matched collectives it arrived at last, and how many were matched (`collectives` only).
    pub last_arrivals: Option<(usize, usize)>,
    /// Nodes where it spent longer than the other ranks, most excess first.
    pub slower_nodes: Vec<NodeExcess>,
    /// What all its slower nodes took beyond the other ranks' per step, s (each node's larger
    /// excess, GPU or host): how much of the wait its own work explains.
    pub explained_per_step_s: f64,
}

impl Straggler {
    fn with_nodes(mut self, (nodes, explained): (Vec<NodeExcess>, f64)) -> Straggler {
        self.slower_nodes = nodes;
        self.explained_per_step_s = explained;
        self
    }
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
            iteration: iteration.to_string(),
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

/// The share of the wait a straggler causes that its own slower nodes must explain. Measured:
/// a rank sharing its GPU with another process (pytorch/examples' DDP, two H100s) explains
/// 35% of its wait with its slower nodes; the same program with no rank slowed, 16%;
/// pytorch/examples' FSDP2 example under the profiler, no rank slowed, 8-23%; an injected
/// 3 ms op among eight ranks, 50%.
const EXPLAINED_SHARE: f64 = 0.25;

/// How much longer a rank's own `optimizer.step()` host time must be than the other ranks'
/// median for its host to count as slower with nothing recorded. Measured on pytorch/examples'
/// FSDP2 example (H200s): with no rank slowed, ranks' own steps spread up to 1.6x the others'
/// median (four ranks: 4.7-7.8 ms, in two groups); with one rank's host pinned to a core
/// shared with two spinning processes, 3.2x, 4.3x (two ranks) and 5.0x.
pub const HOST_SLOWER: f64 = 2.5;

/// Keeps a straggler only where its lead is the program's and not the profiler's. The
/// profiler adds its own cost to every step on every rank (on a short host-bound step, many
/// times the step: FSDP2's example ran 51-80 ms steps at 224-410 ms under it), and unevenly;
/// nothing syncs the hosts of such a step, so the host the profiler slows most drifts behind
/// and the other GPUs spin in their collectives for nearly a whole profiled step. Two checks:
///
/// - its host is slower at the same work with nothing recorded (its own `optimizer.step()`
///   host time in capture's timing phase, [`HOST_SLOWER`] over the other ranks'): a
///   straggler, whatever its profiled steps show; else
/// - its slower nodes must explain [`EXPLAINED_SHARE`] of the wait it causes per step and
///   waiting rank: a rank that arrives late without being slower at its work has drifted; and
///   where every rank's own step time is known, what its nodes took beyond the other ranks'
///   exceeds what the profiler cost it beyond them (its step under the profiler less its
///   own, against the other ranks' median of the same): a host the profiler slows more runs
///   every node longer by that much.
///
/// Where a rank's own step time is unknown (a trace without capture's manifest), the second
/// check is not made and the verdict says so.
fn beyond_profiler_noise(ranks: &[RankResult], mut s: Straggler) -> Result<Straggler, String> {
    let steps = ranks.iter().map(|r| r.iterations).min().unwrap_or(1).max(1);
    let waiting = ranks.len().saturating_sub(1).max(1);
    s.wait_per_step_s = s.wait_caused_s / steps as f64 / waiting as f64;
    let intro = format!(
        "no straggler beyond profiler noise: rank {} made each other rank wait {:.3} ms per profiled step, but its nodes took only {:.3} ms per step longer than the other ranks'",
        s.rank,
        s.wait_per_step_s * 1e3,
        s.explained_per_step_s * 1e3,
    );
    // With nothing recorded, the same work on every rank: a host slower at it is slow in the
    // program itself, whatever the profiler adds — first, for its late arrivals under the
    // profiler then say little (FSDP2 on four ranks, rank 1's host slowed on purpose: its own
    // optimizer step 5.0x the others', its nodes only 16% of the wait it caused).
    let probe: Option<Vec<(i64, f64)>> = ranks
        .iter()
        .map(|r| r.own_optimizer_step_s.map(|t| (r.rank, t)))
        .collect();
    if let Some(probe) = probe.filter(|p| p.len() > 1) {
        let mine = probe.iter().find(|p| p.0 == s.rank).map_or(0.0, |p| p.1);
        let mut others: Vec<f64> = probe
            .iter()
            .filter(|p| p.0 != s.rank)
            .map(|p| p.1)
            .collect();
        if let Some(m) = super::median(&mut others).filter(|m| *m > 0.0) {
            s.own_host_ratio = Some(mine / m);
            if mine >= HOST_SLOWER * m {
                return Ok(s);
            }
        }
    }
    if s.explained_per_step_s < EXPLAINED_SHARE * s.wait_per_step_s {
        return Err(format!(
            "{intro} ({:.0}% of the wait): it arrived late without being slower at its work (its host drifted behind, as the profiler's uneven cost makes it)",
            100.0 * s.explained_per_step_s / s.wait_per_step_s.max(f64::MIN_POSITIVE)
        ));
    }
    let Some(own) = s_cost(ranks, s.rank) else {
        return Ok(s);
    };
    let mut others: Vec<f64> = ranks
        .iter()
        .filter(|r| r.rank != s.rank)
        .filter_map(|r| r.profiler_cost_s)
        .collect();
    if others.len() + 1 < ranks.len() {
        return Ok(s);
    }
    let skew = (own - super::median(&mut others).unwrap_or(own)).max(0.0);
    s.profiler_skew_s = Some(skew);
    if s.explained_per_step_s > skew {
        return Ok(s);
    }
    Err(format!(
        "{intro}, within the {:.3} ms more the profiler cost it per step than the other ranks (its step under the profiler less its own, against theirs)",
        skew * 1e3
    ))
}

/// What the profiler added to a step on `rank`, where known.
fn s_cost(ranks: &[RankResult], rank: i64) -> Option<f64> {
    ranks.iter().find(|r| r.rank == rank)?.profiler_cost_s
}

/// The rank the others waited for most in the matched collectives, when that wait is at
/// least `STRAGGLER_MARGIN` of all time the ranks spent in them and at least twice the wait
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
        method: StragglerMethod::Collectives,
        communication_s: s.gpu.communication_ns as f64 * 1e-9,
        wait_caused_s: top.wait_caused_ns as f64 * 1e-9,
        wait_per_step_s: 0.0,
        profiler_skew_s: None,
        own_host_ratio: None,
        last_arrivals: Some((top.last, m.matched.len())),
        explained_per_step_s: 0.0,
        slower_nodes: Vec::new(),
    }
    .with_nodes(slower_nodes(s, ranks, top_nodes)))
}

/// The rank with the least time in communication kernels, when it is shorter than every other
/// rank's by `STRAGGLER_MARGIN` of their median.
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
        method: StragglerMethod::CommunicationTime,
        communication_s: least as f64 * 1e-9,
        wait_caused_s: wait as f64 * 1e-9,
        wait_per_step_s: 0.0,
        profiler_skew_s: None,
        own_host_ratio: None,
        last_arrivals: None,
        explained_per_step_s: 0.0,
        slower_nodes: Vec::new(),
    }
    .with_nodes(slower_nodes(s, ranks, top_nodes)))
}

/// The straggler's nodes that took longer than the median of the other ranks' medians for the
/// same node (nodes every rank has) by more than `STRAGGLER_MARGIN` of it and a
/// microsecond, on the GPU (kernels) or on the host (a slow input pipeline or Python shows
/// there), most excess first, then by name.
fn slower_nodes(s: &RankResult, ranks: &[RankResult], top: usize) -> (Vec<NodeExcess>, f64) {
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
        for (time, mine, others) in [(NodeTime::Gpu, *gpu, og), (NodeTime::Cpu, *cpu, oc)] {
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
            .then(a.time.cmp(&b.time))
    });
    // Per node the larger of its two excesses (a node's kernels and its host op overlap in
    // time), over every node, before the list is cut.
    let mut per_node: rustc_hash::FxHashMap<&str, f64> = rustc_hash::FxHashMap::default();
    for e in &v {
        let x = per_node.entry(e.node.as_str()).or_insert(0.0);
        *x = x.max(e.straggler_s - e.others_s);
    }
    let mut excess: Vec<f64> = per_node.into_values().collect();
    excess.sort_by(f64::total_cmp);
    let explained = excess.iter().sum();
    v.truncate(top);
    (v, explained)
}

#[cfg(test)]
#[path = "ranks_tests.rs"]
mod tests;
