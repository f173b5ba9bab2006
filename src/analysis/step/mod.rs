//! Rebuilding the training step: iterations, phases and nodes, with each node's GPU time and
//! memory in each iteration.
//!
//! ```text
//!            |<------------------- iteration k ------------------->|
//!  main      [to][to][conv2d][bn]...[loss]                [Optimizer.step ...][item]
//!  autograd                              [eval_fn: ...Backward0] ...
//!  phase      other   forward ........      backward ............  optimizer     other
//! ```
//! Iterations come from `ProfilerStep#N` ranges. Without them every autograd backward pass
//! closes one iteration: the next one begins at the first host→device input copy after the
//! optimizer (else at the first op with an autograd sequence number).

use rayon::prelude::*;
use rustc_hash::FxHashMap;

use crate::diagnostics::Diagnostics;
use crate::intern::StrId;
use crate::model::kineto::{GpuKind, OpKind, ThreadId};
use crate::model::{GpuId, OpId, Trace, EVALUATE_FUNCTION};

mod build;
mod facts;
mod iterations;
mod owners;
mod wall;
use self::facts::{autograd_threads, differentiated, node_ops, op_facts, phase_ranges};
use self::owners::{
    assign_to_windows, drop_cut_short, gpu_owners, has_htod, module_by_seq, node_index,
    pageable_copies, sorted_launches, BackwardSpans, GpuOwners,
};
pub use crate::model::step::{Detection, Iteration, Node, Phase, PhaseWall, Step};
use build::{merge_spans, Ctx};
use iterations::{cut_short, find_iterations, Window};

fn is_autograd_wrapper(name: &str) -> bool {
    if name.starts_with(EVALUATE_FUNCTION)
        || name.starts_with("torch::autograd::")
        || name.starts_with("autograd::")
    {
        return true;
    }
    // Autograd node ranges: `ConvolutionBackward0`, `CheckpointFunctionBackward`, ...
    !name.contains("::")
        && name
            .trim_end_matches(|c: char| c.is_ascii_digit())
            .ends_with("Backward")
}

/// Collects the node ops under `op`: the op itself, unless it is an annotation or an autograd
/// wrapper, in which case its children are searched.
fn collect_nodes(t: &Trace, op: OpId, out: &mut Vec<OpId>) {
    let o = t.op(op);
    let name = t.kineto.str(o.name);
    let transparent =
        o.kind == OpKind::Annotation || (is_autograd_wrapper(name) && !t.children(op).is_empty());
    if transparent {
        for &c in t.children(op) {
            collect_nodes(t, c, out);
        }
    } else {
        out.push(op);
    }
}

/// Per-op facts the reconstruction reads repeatedly, indexed by op.
struct OpFacts {
    /// Nearest `evaluate_function` ancestor's autograd function name.
    autograd_fn: Vec<Option<StrId>>,
    /// The `Optimizer.step#` range holding the op, if any.
    in_optimizer: Vec<Option<OpId>>,
    /// Inside `Optimizer.zero_grad#` / `enumerate(DataLoader)#` ranges.
    in_zero_grad: Vec<bool>,
    in_data_loading: Vec<bool>,
}

impl OpFacts {
    /// Whether the op runs under an autograd node (backward work).
    fn is_bw(&self, o: OpId) -> bool {
        self.autograd_fn[o.0 as usize].is_some()
    }
}

/// Rebuilds iterations, phases and nodes, in named passes: the node ops, their facts, the
/// autograd threads, the GPU work each node launched, the iteration windows, the nodes of each
/// window, the modules of backward nodes, then each iteration on its own thread.
pub fn compute(t: &mut Trace, passes_per_step: Option<usize>, diag: &mut Diagnostics) -> Step {
    let node_ops = node_ops(t);
    let facts = op_facts(t, &node_ops);
    let t: &Trace = t;
    let autograd_thread = autograd_threads(t, &node_ops, &facts);
    let node_of = node_index(t, &node_ops);
    let gpu = gpu_owners(t, &node_ops, &node_of);
    let main = t.main_thread;
    let (detection, windows, passes_left_out) = find_iterations(
        t,
        &node_ops,
        &|o| facts.is_bw(o),
        &|ni| has_htod(t, &gpu.of_node[ni]),
        &|ni| gpu.of_node[ni].is_empty(),
        main,
        passes_per_step,
    );
    if passes_left_out > 0 {
        diag.warn(
            "first_step_cut",
            format!(
                "the window opens inside a step: its first {passes_left_out} backward pass(es) end a step whose start it did not record ({} passes a step); they are left out",
                passes_per_step.unwrap_or(1)
            ),
        );
    }
    let (per_iter, outside) = assign_to_windows(t, &node_ops, &windows);
    let module_by_seq = module_by_seq(t, &facts, &autograd_thread);
    let differentiated = differentiated(t, &node_ops, &node_of, &facts);
    let ctx = Ctx {
        t,
        node_ops: &node_ops,
        facts: &facts,
        autograd_thread: &autograd_thread,
        gpu: &gpu,
        module_by_seq: &module_by_seq,
        launches: &sorted_launches(t),
        main,
        has_opt_annotations: facts.in_optimizer.iter().any(|b| b.is_some()),
        differentiated: &differentiated,
        has_gpu: !t.kineto.gpu.is_empty(),
        has_dataloader_annotations: facts.in_data_loading.iter().any(|&b| b),
        phase_ranges: &phase_ranges(t),
    };
    // Iterations are independent: each builds its nodes on its own thread, and they are joined
    // in iteration order, so the output does not depend on the threads.
    let per_window: Vec<(Vec<Node>, Iteration)> = windows
        .par_iter()
        .zip(per_iter)
        .enumerate()
        .map(|(ii, (w, idx))| ctx.build_iteration(ii, w, idx))
        .collect();
    let (mut per_iter_nodes, mut iterations): (Vec<Vec<Node>>, Vec<Iteration>) =
        per_window.into_iter().unzip();
    drop_cut_short(&mut iterations, &mut per_iter_nodes, diag);
    pageable_copies(t, &gpu, &node_of, &per_iter_nodes, &iterations, diag);
    let mut first = 0;
    for (it, own) in iterations.iter_mut().zip(&per_iter_nodes) {
        it.nodes = first..first + own.len();
        first += own.len();
    }
    let nodes = crate::par::concat(&mut per_iter_nodes);
    let unattributed_total: u64 = gpu.unattributed.len() as u64;
    diag.warn_n(
        "gpu_activity_outside_nodes",
        unattributed_total,
        format!("{unattributed_total} GPU activities were launched by ops that are not nodes"),
    );
    if outside > 0 && detection == Detection::ProfilerStep {
        diag.warn_n(
            "nodes_outside_iterations",
            outside as u64,
            format!("{outside} top-level ops lie outside every ProfilerStep range"),
        );
    }
    Step {
        detection,
        iterations,
        nodes,
        nodes_outside: outside,
    }
}

#[cfg(test)]
mod tests;
