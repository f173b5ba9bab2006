//! The rebuilt step: the profiled iterations, each with its nodes (the outermost ops of each
//! thread, aligned across iterations by a name stable from one to the next), their phase,
//! module, GPU and host times and memory, and each iteration's wall time by phase.
//! `analysis::step` builds it from the trace; every other analysis, the planner and the
//! reports read it.

use serde::Serialize;

use super::OpId;
use crate::intern::StrId;
pub use steptrace_formats::summary::{Category, Detection, Phase};

/// An iteration's wall time by phase, ns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct PhaseWall {
    /// By phase, indexed by [`Phase::index`].
    pub by_phase: [i64; Phase::ALL.len()],
    /// Time no phase's work covers, nor lies between two spans of one phase.
    pub between: i64,
}

impl PhaseWall {
    /// The wall time of `p`, ns.
    pub fn of(&self, p: Phase) -> i64 {
        self.by_phase[p.index()]
    }
}

/// One node in one iteration.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    /// The op.
    pub op: OpId,
    /// Iteration index (0-based among the profiled iterations).
    pub iteration: u32,
    /// Execution order within the iteration.
    pub rank: u32,
    /// Name stable across iterations.
    pub name: String,
    /// Phase.
    pub phase: Phase,
    /// Autograd function for backward nodes, e.g. `ConvolutionBackward0`.
    pub autograd_fn: Option<StrId>,
    /// Module path (backward nodes inherit their forward op's).
    pub module: Option<StrId>,
    /// Whether it is forward recomputation inside backward (activation checkpointing).
    pub recompute: bool,
    /// Sum of its GPU activities' durations, ns.
    pub gpu_time: i64,
    /// First GPU start to last GPU end, ns (0 without GPU work).
    pub gpu_span: i64,
    /// Number of GPU activities (kernels, memcpys, memsets).
    pub kernels: u32,
    /// CPU duration of the op, ns.
    pub cpu_time: i64,
    /// Allocated bytes just before it started.
    pub active_before: i64,
    /// Highest allocated bytes while it ran.
    pub peak: i64,
    /// Bytes allocated inside it (its thread).
    pub alloc_bytes: i64,
    /// Bytes freed inside it (its thread).
    pub free_bytes: i64,
}

/// One profiled iteration.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Iteration {
    /// 0-based index.
    pub index: u32,
    /// `ProfilerStep#N` or `iteration k`.
    pub label: String,
    /// Start, ns.
    pub start: i64,
    /// End, ns.
    pub end: i64,
    /// Nodes, as a range of [`Step::nodes`].
    pub nodes: std::ops::Range<usize>,
    /// Sum of all GPU activity launched in the iteration, ns.
    pub gpu_time: i64,
    /// Union of those activities' intervals, ns.
    pub gpu_busy: i64,
    /// GPU time of activity launched outside every node, ns.
    pub gpu_unattributed: i64,
    /// Peak allocated bytes inside the iteration.
    pub peak_allocated: Option<i64>,
    /// Backward pass span, ns.
    pub backward: Option<(i64, i64)>,
    /// Backward passes in it: runs of backward nodes that forward work on the main thread
    /// separates (gradient accumulation's micro-batches, a GAN's several losses).
    #[serde(skip)]
    pub backward_passes: u32,
    /// Its wall time split by phase.
    pub wall: PhaseWall,
}

/// The rebuilt step.
#[derive(Debug, Clone)]
pub struct Step {
    /// How iterations were found.
    pub detection: Detection,
    /// Iterations in time order.
    pub iterations: Vec<Iteration>,
    /// Nodes, grouped by iteration, in rank order.
    pub nodes: Vec<Node>,
    /// Top-level ops that fell outside every iteration.
    pub nodes_outside: usize,
}

impl Step {
    /// Backward passes per iteration (the lower median) where there are several: gradient
    /// accumulation's micro-batches, or a step with several losses.
    pub fn backward_passes_per_iteration(&self) -> Option<u32> {
        let mut v: Vec<i64> = self
            .iterations
            .iter()
            .map(|i| i.backward_passes as i64)
            .collect();
        lower_median(&mut v).filter(|&k| k > 1).map(|k| k as u32)
    }
}

/// The lower median (an element of the data).
fn lower_median(v: &mut [i64]) -> Option<i64> {
    if v.is_empty() {
        return None;
    }
    v.sort_unstable();
    Some(v[(v.len() - 1) / 2])
}
