//! Per-node medians over iterations (MuTWO's choice: medians resist the odd slow iteration),
//! after aligning the iterations' node sequences by node name.

use rustc_hash::{FxHashMap, FxHashSet};

use super::memory::{Category, Memory};
use super::step::{Node, Phase, Step};
use super::{median, median_low};
use crate::diagnostics::Diagnostics;
use crate::intern::StrId;
use crate::model::Trace;
pub use steptrace_formats::summary::PhaseTime;

/// One row of `node_stats.csv`.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeStat {
    /// Execution rank in the aligned step.
    pub rank: u32,
    /// Stable node name.
    pub node_name: String,
    /// Op name.
    pub op: StrId,
    /// Category of what it allocates.
    pub node_type: Category,
    /// Phase.
    pub gtype: Phase,
    /// Module path.
    pub module: Option<StrId>,
    /// Autograd function (backward nodes).
    pub autograd_fn: Option<StrId>,
    /// Recomputation inside backward.
    pub recompute: bool,
    /// Median GPU time, s.
    pub median_run_time_s: f64,
    /// Median CPU time, s.
    pub median_cpu_time_s: f64,
    /// Median GPU span, s.
    pub median_gpu_span_s: f64,
    /// Median peak allocated bytes while it ran.
    pub median_peak_mem_bytes: i64,
    /// Median allocated bytes before it started.
    pub median_active_mem_bytes: i64,
    /// Median bytes allocated inside it.
    pub median_alloc_bytes: i64,
    /// Median bytes freed inside it.
    pub median_free_bytes: i64,
    /// Median number of GPU activities.
    pub kernels: i64,
    /// `cuda:N` when it ran GPU work, else `cpu`.
    pub device: String,
    /// In how many iterations it appeared.
    pub iterations_present: u32,
}

/// Aligns node sequences by name: the longest iteration's order, with names seen only in
/// other iterations inserted after their predecessor there.
fn aligned_order(step: &Step) -> Vec<&str> {
    let Some(longest) = step.iterations.iter().max_by(|a, b| {
        a.nodes
            .len()
            .cmp(&b.nodes.len())
            .then(b.index.cmp(&a.index))
    }) else {
        return Vec::new();
    };
    let mut order: Vec<&str> = step.nodes[longest.nodes.clone()]
        .iter()
        .map(|n| n.name.as_str())
        .collect();
    let mut present: FxHashSet<&str> = order.iter().copied().collect();
    for it in &step.iterations {
        let mut prev: Option<&str> = None;
        for n in &step.nodes[it.nodes.clone()] {
            let name = n.name.as_str();
            if present.insert(name) {
                let at = match prev {
                    Some(p) => order
                        .iter()
                        .position(|x| *x == p)
                        .map_or(order.len(), |i| i + 1),
                    None => 0,
                };
                order.insert(at, name);
            }
            prev = Some(name);
        }
    }
    order
}

/// Medians per aligned node.
pub fn compute(t: &Trace, step: &Step, mem: &Memory, diag: &mut Diagnostics) -> Vec<NodeStat> {
    let order = aligned_order(step);
    let cats: Vec<Category> = mem.node_categories(step.nodes.len());
    let mut by_name: FxHashMap<&str, Vec<usize>> = FxHashMap::default();
    for (i, n) in step.nodes.iter().enumerate() {
        by_name.entry(n.name.as_str()).or_default().push(i);
    }
    let n_iter = step.iterations.len() as u32;
    let device = format!("cuda:{}", t.device.unwrap_or(0));
    let mut missing = 0u64;
    let mut varying_data = 0u64;
    let mut example = String::new();
    let (mut extra, mut extra_example) = (0u64, String::new());
    let stats: Vec<NodeStat> = order
        .iter()
        .enumerate()
        .map(|(rank, name)| {
            let idx = &by_name[name];
            let nodes: Vec<&Node> = idx.iter().map(|&i| &step.nodes[i]).collect();
            let first = nodes[0];
            let f = |g: &dyn Fn(&Node) -> i64| {
                let mut v: Vec<f64> = nodes.iter().map(|n| g(n) as f64 * 1e-9).collect();
                median(&mut v).unwrap_or(0.0)
            };
            let m = |g: &dyn Fn(&Node) -> i64| {
                let mut v: Vec<i64> = nodes.iter().map(|n| g(n)).collect();
                median_low(&mut v).unwrap_or(0)
            };
            // The category seen most often across iterations (ties: the first iteration's).
            let mut votes: FxHashMap<Category, usize> = FxHashMap::default();
            for &i in idx {
                *votes.entry(cats[i]).or_default() += 1;
            }
            let node_type = votes
                .iter()
                .max_by(|a, b| {
                    a.1.cmp(b.1)
                        .then((*b.0 != cats[idx[0]]).cmp(&(*a.0 != cats[idx[0]])))
                })
                .map_or(Category::Other, |(c, _)| *c);
            let present = nodes.len() as u32;
            if present < n_iter {
                // A batch built with random transforms (a flip for some samples) runs other
                // ops each step: data loading varies by design, the step itself should not.
                if first.phase == Phase::DataLoading {
                    varying_data += 1;
                } else if present * 2 < n_iter {
                    // Work done in a minority of the iterations (the HF Trainer's mean of the
                    // loss for its log every tenth step, an evaluation, a checkpoint) is a
                    // step doing more than the others, not the others missing it.
                    extra += 1;
                    if extra_example.is_empty() {
                        let its: Vec<&str> = nodes
                            .iter()
                            .map(|n| step.iterations[n.iteration as usize].label.as_str())
                            .collect();
                        extra_example = format!(
                            "{name} runs only in {} ({present} of the {n_iter} iterations)",
                            its.join(", ")
                        );
                    }
                } else {
                    missing += 1;
                    if example.is_empty() {
                        example = format!("{name} appears in {present} of {n_iter} iterations");
                    }
                }
            }
            let kernels = m(&|n| n.kernels as i64);
            NodeStat {
                rank: rank as u32,
                node_name: (*name).to_owned(),
                op: t.op(first.op).name,
                node_type,
                gtype: first.phase,
                module: first.module,
                autograd_fn: first.autograd_fn,
                recompute: first.recompute,
                median_run_time_s: f(&|n| n.gpu_time),
                median_cpu_time_s: f(&|n| n.cpu_time),
                median_gpu_span_s: f(&|n| n.gpu_span),
                median_peak_mem_bytes: m(&|n| n.peak),
                median_active_mem_bytes: m(&|n| n.active_before),
                median_alloc_bytes: m(&|n| n.alloc_bytes),
                median_free_bytes: m(&|n| n.free_bytes),
                kernels,
                device: if nodes.iter().any(|n| n.kernels > 0) {
                    device.clone()
                } else {
                    "cpu".into()
                },
                iterations_present: present,
            }
        })
        .collect();
    diag.warn_n("nodes_missing_in_some_iterations", missing, example);
    diag.warn_n(
        "extra_work_in_some_iterations",
        extra,
        format!("{extra} nodes run in under half of the iterations (periodic work such as logging or evaluation; the other iterations are the steady step): {extra_example}"),
    );
    diag.warn_n(
        "data_loading_varies",
        varying_data,
        format!("{varying_data} data-loading nodes are not in every iteration: the batch is built with other ops each step (random transforms)"),
    );
    stats
}

/// The median over the iterations of one figure of their wall split, s.
fn median_wall(step: &Step, f: impl Fn(&super::step::PhaseWall) -> i64) -> f64 {
    let mut v: Vec<f64> = step
        .iterations
        .iter()
        .map(|it| f(&it.wall) as f64)
        .collect();
    median(&mut v).unwrap_or(0.0) * 1e-9
}

/// Each phase's share of an iteration: its nodes' median GPU and CPU times, summed (nodes are
/// the outermost ops of each thread, so nothing is counted twice), and the median over the
/// iterations of its wall time.
pub fn time_by_phase(
    stats: &[NodeStat],
    step: &Step,
) -> std::collections::BTreeMap<Phase, PhaseTime> {
    let mut m = std::collections::BTreeMap::new();
    for n in stats {
        let e: &mut PhaseTime = m.entry(n.gtype).or_default();
        e.gpu_s += n.median_run_time_s;
        e.cpu_s += n.median_cpu_time_s;
    }
    for p in Phase::ALL {
        let wall = median_wall(step, |w| w.of(p));
        if wall > 0.0 {
            m.entry(p).or_default().wall_s = wall;
        }
    }
    m
}

/// Median over the iterations of the time between phases ([`PhaseWall::between`]), s.
///
/// [`PhaseWall::between`]: super::step::PhaseWall::between
pub fn between_phases_s(step: &Step) -> f64 {
    median_wall(step, |w| w.between)
}
