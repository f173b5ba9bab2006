//! Activation liveness and the MuTWO checkpointing metrics (Stage 1 of the seed's project),
//! and the data-flow graph.
//!
//! ```text
//!  rank   c          f             b1               b2
//!         [producer] ... [last fw use] .. idle .. [first bw use] ... [last bw use]
//!                                     |<-- inactive time -->|
//! ```
//! With an Execution Trace, uses are exact: an activation is the storage its producer wrote
//! (matched to the allocated block by size), and a node uses it when one of its ops reads that
//! storage. Without one, the first backward use is the autograd node with the producer's
//! sequence number and the last is the node that frees the block (`liveness_source` says which).

mod bandwidth;
mod graph;
mod identities;
mod instances;

use bandwidth::swap_bandwidth;
use graph::build_graph;
pub use graph::{Edge, Graph, GraphTensor};
pub(crate) use identities::{enclosing_node, identities, EtUses, Identities};
use instances::{instances, Inst};

use std::collections::BTreeMap;

use rustc_hash::FxHashMap;
use serde::Serialize;

use super::median_low;
use super::memory::Memory;
use super::node_stats::NodeStat;
use super::step::{Phase, Step};
use crate::model::{Trace, EVALUATE_FUNCTION};
pub use steptrace_formats::summary::{BandwidthSource, LivenessSource as Source, SwapBandwidth};

/// One row of `activation_stats.csv`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ActivationStat {
    /// `<producer node>/act<k>`.
    pub activation_name: String,
    /// Rank of the producing node.
    pub creation_rank: u32,
    /// Rank of the last forward node that reads it.
    pub last_fw_use_rank: u32,
    /// Rank of the first backward node that reads it.
    pub first_bw_use_rank: u32,
    /// Rank of the last backward node that reads it.
    pub last_bw_use_rank: u32,
    /// Median block size over iterations.
    pub median_mem_size_bytes: i64,
    /// GPU time of the nodes between the last forward use and the first backward use, s.
    pub inactive_time_s: f64,
    /// GPU time of the nodes that rebuild it from resident tensors, s.
    pub recomp_time_s: f64,
    /// Memory those nodes allocate while rebuilding it.
    pub recomp_memory_bytes: i64,
    /// Time to copy it to the host and back at the measured bandwidths, s.
    pub swap_time_s: f64,
    /// Bytes saved per second of recomputation (0 when recomputation takes no GPU time).
    pub recompute_ratio: f64,
    /// Op of the producing node.
    pub producer_op: String,
    /// Module of the producing node.
    pub module: String,
    /// Storage id in the Execution Trace (first iteration), -1 without one.
    pub storage_id: i64,
    /// In how many iterations it was seen.
    pub iterations_present: u32,
}

/// Liveness results.
#[derive(Debug, Clone)]
pub struct Liveness {
    /// Source of the uses.
    pub source: Source,
    /// Per activation.
    pub activations: Vec<ActivationStat>,
    /// Bandwidths used.
    pub bandwidth: SwapBandwidth,
    /// The graph, when an Execution Trace was given.
    pub graph: Option<Graph>,
    /// The tensor identities the uses came from (the planner reads them too).
    pub(crate) identities: Option<Identities>,
}

/// Computes activation liveness, MuTWO metrics and the data-flow graph, in passes: the
/// tensors' identities, backward nodes by sequence number, one instance per activation block
/// per iteration, the swap bandwidth, and the instances aggregated by name over iterations.
pub fn compute(
    t: &Trace,
    step: &Step,
    mem: &Memory,
    stats: &[NodeStat],
    swap_override_gbps: Option<f64>,
) -> Liveness {
    let ids = identities(t, step, mem);
    let source = if ids.is_some() {
        Source::ExecutionTrace
    } else {
        Source::MemoryEvents
    };
    let ranks = Ranks::new(step, stats);
    let bw_by_seq = backward_by_seq(t, step);
    let insts = instances(t, step, mem, ids.as_ref(), &ranks, &bw_by_seq);
    let bandwidth = swap_bandwidth(t, swap_override_gbps);
    let activations = aggregate(t, step, stats, &ranks, &insts, &bandwidth);
    let graph = ids
        .as_ref()
        .map(|i| build_graph(t, step, mem, &i.uses, &i.storage_of_block));
    Liveness {
        source,
        activations,
        bandwidth,
        graph,
        identities: ids,
    }
}

/// Node statistics by node name: a node's rank in the aligned step.
struct Ranks<'a> {
    step: &'a Step,
    by_name: FxHashMap<&'a str, &'a NodeStat>,
}

impl<'a> Ranks<'a> {
    fn new(step: &'a Step, stats: &'a [NodeStat]) -> Self {
        Ranks {
            step,
            by_name: stats.iter().map(|s| (s.node_name.as_str(), s)).collect(),
        }
    }

    fn stat(&self, ni: usize) -> Option<&'a NodeStat> {
        self.by_name.get(self.step.nodes[ni].name.as_str()).copied()
    }

    fn rank(&self, ni: usize) -> u32 {
        self.stat(ni).map_or(0, |s| s.rank)
    }
}

/// Backward nodes by (iteration, the autograd sequence number of their evaluate_function).
fn backward_by_seq(t: &Trace, step: &Step) -> FxHashMap<(u32, i64), usize> {
    let mut bw_by_seq: FxHashMap<(u32, i64), usize> = FxHashMap::default();
    for (i, n) in step.nodes.iter().enumerate() {
        if n.phase != Phase::Backward {
            continue;
        }
        let seq = t
            .ancestors(n.op)
            .find(|a| t.op_name(*a).starts_with(EVALUATE_FUNCTION))
            .and_then(|a| t.op(a).seq);
        if let Some(s) = seq {
            bw_by_seq.entry((n.iteration, s)).or_insert(i);
        }
    }
    bw_by_seq
}

/// The instances aggregated by name over iterations (size: the median; ranks, chain and
/// storage: the first iteration's, as ranks are those of the aligned step), with the MuTWO
/// metrics, in order of creation.
fn aggregate(
    t: &Trace,
    step: &Step,
    stats: &[NodeStat],
    ranks: &Ranks<'_>,
    insts: &[Inst],
    bandwidth: &SwapBandwidth,
) -> Vec<ActivationStat> {
    let mut by_name: BTreeMap<&str, Vec<&Inst>> = BTreeMap::new();
    for i in insts {
        by_name.entry(i.name.as_str()).or_default().push(i);
    }
    let time_between = |a: u32, b: u32| -> f64 {
        stats
            .iter()
            .filter(|s| s.rank > a && s.rank < b)
            .map(|s| s.median_run_time_s)
            .fold(0.0, |x, y| x + y)
    };
    let mut activations: Vec<ActivationStat> = by_name
        .into_values()
        .map(|v| {
            let first = v[0];
            let mut sizes: Vec<i64> = v.iter().map(|i| i.size).collect();
            let size = median_low(&mut sizes).unwrap_or(0);
            let (c, f, b1, b2) = first.ranks;
            let chain_stats: Vec<&NodeStat> =
                first.chain.iter().filter_map(|&n| ranks.stat(n)).collect();
            let recomp_time: f64 = chain_stats
                .iter()
                .map(|s| s.median_run_time_s)
                .fold(0.0, |x, y| x + y);
            let recomp_mem: i64 = chain_stats.iter().map(|s| s.median_alloc_bytes).sum();
            let swap = size as f64 / (bandwidth.dtoh_gbps * 1e9)
                + size as f64 / (bandwidth.htod_gbps * 1e9);
            let prod = &step.nodes[first.producer];
            ActivationStat {
                activation_name: first.name.clone(),
                creation_rank: c,
                last_fw_use_rank: f,
                first_bw_use_rank: b1,
                last_bw_use_rank: b2,
                median_mem_size_bytes: size,
                inactive_time_s: time_between(f, b1),
                recomp_time_s: recomp_time,
                recomp_memory_bytes: recomp_mem,
                swap_time_s: swap,
                recompute_ratio: if recomp_time > 0.0 {
                    size as f64 / recomp_time
                } else {
                    0.0
                },
                producer_op: t.op_name(prod.op).to_owned(),
                module: prod
                    .module
                    .map_or(String::new(), |m| t.kineto.str(m).to_owned()),
                storage_id: first.storage,
                iterations_present: v.len() as u32,
            }
        })
        .collect();
    activations.sort_by(|a, b| {
        a.creation_rank
            .cmp(&b.creation_rank)
            .then(a.activation_name.cmp(&b.activation_name))
    });
    activations
}

#[cfg(test)]
mod tests {
    use super::instances::use_window;

    // The use window's rule, apart from the readers that feed it.
    #[test]
    fn use_windows_put_backward_after_the_last_forward_use() {
        // Read in forward up to rank 5, in backward at 9 and 12.
        assert_eq!(use_window(2, 5, Some(9), Some(12), Some(14)), (2, 5, 9, 12));
        // No backward reader seen: the backward node that frees it stands for both.
        assert_eq!(use_window(2, 5, None, None, Some(14)), (2, 5, 14, 14));
        // Nothing in backward at all: right after its last forward use.
        assert_eq!(use_window(2, 5, None, None, None), (2, 5, 6, 6));
        // A backward reader ranked before the last forward use (ranks of the aligned step
        // differ between iterations): moved after it.
        assert_eq!(use_window(2, 8, Some(7), Some(7), None), (2, 8, 9, 9));
        // A first reader found but no last: the first.
        assert_eq!(use_window(0, 1, Some(4), None, None), (0, 1, 4, 4));
    }
}
