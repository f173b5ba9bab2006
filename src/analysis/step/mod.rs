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
mod iterations;
mod wall;
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

/// The node ops, in root order: each thread's outermost ops, with annotations and autograd
/// wrappers opened ([`collect_nodes`]). Each root's subtree is searched on its own thread.
fn node_ops(t: &Trace) -> Vec<OpId> {
    let mut per_root: Vec<Vec<OpId>> = t
        .roots
        .par_iter()
        .map(|&r| {
            let mut v = Vec::new();
            collect_nodes(t, r, &mut v);
            v
        })
        .collect();
    crate::par::concat(&mut per_root)
}

/// Per node op: the autograd function of its nearest `evaluate_function` ancestor (interned
/// without the prefix, as it is reported per node) and whether an optimizer or `zero_grad`
/// range holds it. Ancestors are searched on all threads; names are interned after, in node
/// order, so the string table does not depend on the threads.
fn op_facts(t: &mut Trace, node_ops: &[OpId]) -> OpFacts {
    let found: Vec<(Option<StrId>, Option<OpId>, bool, bool)> = node_ops
        .par_iter()
        .map(|&o| {
            let mut f = (None, None, false, false);
            for a in t.ancestors(o) {
                let name_id = t.op(a).name;
                let name = t.kineto.str(name_id);
                if f.0.is_none() && name.starts_with(EVALUATE_FUNCTION) {
                    f.0 = Some(name_id);
                }
                if f.1.is_none() && name.starts_with("Optimizer.step#") {
                    f.1 = Some(a);
                }
                f.2 |= name.starts_with(ZERO_GRAD);
                f.3 |= name.starts_with(DATA_LOADER_NEXT);
            }
            f
        })
        .collect();
    let n_ops = t.kineto.ops.len();
    let mut facts = OpFacts {
        autograd_fn: vec![None; n_ops],
        in_optimizer: vec![None; n_ops],
        in_zero_grad: vec![false; n_ops],
        in_data_loading: vec![false; n_ops],
    };
    let mut fn_names: FxHashMap<StrId, StrId> = FxHashMap::default();
    for (&o, &(eval, opt, zg, dl)) in node_ops.iter().zip(&found) {
        if let Some(name_id) = eval {
            let id = *fn_names.entry(name_id).or_insert_with(|| {
                let f = t.kineto.str(name_id)[EVALUATE_FUNCTION.len()..].to_owned();
                t.kineto.strings.intern(&f)
            });
            facts.autograd_fn[o.0 as usize] = Some(id);
        }
        facts.in_optimizer[o.0 as usize] = opt;
        facts.in_zero_grad[o.0 as usize] = zg;
        facts.in_data_loading[o.0 as usize] = dl;
    }
    facts
}

/// The range a Python DataLoader's iterator opens around each `__next__`
/// (`enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__`).
const DATA_LOADER_NEXT: &str = "enumerate(DataLoader)#";

/// The range torch's optimizers open around `zero_grad`.
const ZERO_GRAD: &str = "Optimizer.zero_grad#";

/// The ranges that are wholly one phase's time, whether or not they hold a node (a
/// DataLoader's Python around the few ops it records; `zero_grad(set_to_none=True)`, which
/// records none), by start: (start, end, phase).
fn phase_ranges(t: &Trace) -> Vec<(i64, i64, Phase)> {
    let mut v: Vec<(i64, i64, Phase)> = t
        .kineto
        .ops
        .iter()
        .filter_map(|o| {
            let name = t.kineto.str(o.name);
            let p = if name.starts_with(ZERO_GRAD) {
                Phase::ZeroGrad
            } else if name.starts_with(DATA_LOADER_NEXT) {
                Phase::DataLoading
            } else {
                return None;
            };
            Some((o.start, o.end(), p))
        })
        .collect();
    v.sort_unstable();
    v
}

/// Per node: whether it is forward work that autograd later differentiates. The trace links
/// each such forward op to its backward node with a `fwdbwd` flow (its start at the forward
/// op's start, on the forward op's thread); a node holding a linked op is forward work
/// wherever it runs, inside an `Optimizer.step` closure (Lightning, LBFGS) included. A trace
/// without flows falls back on sequence numbers: an op whose number an `evaluate_function`
/// range carries. (That is looser: an op under `no_grad` records the counter's next value
/// without taking it, which is the next forward op's.)
fn differentiated(t: &Trace, node_ops: &[OpId], node_of: &[u32], facts: &OpFacts) -> Vec<bool> {
    let node_holding = |o: OpId| -> Option<u32> {
        let node = std::iter::once(o)
            .chain(t.ancestors(o))
            .map(|a| node_of[a.0 as usize])
            .find(|&n| n != u32::MAX)?;
        // Backward nodes are linked too (recomputation): they are not forward work.
        (!facts.is_bw(node_ops[node as usize])).then_some(node)
    };
    let flows = &t.kineto.flows;
    let marked: Vec<u32> = if flows.iter().any(|f| !f.is_start) {
        let mut ends: Vec<i64> = flows.iter().filter(|f| !f.is_start).map(|f| f.id).collect();
        ends.par_sort_unstable();
        flows
            .par_iter()
            .filter(|f| f.is_start && ends.binary_search(&f.id).is_ok())
            .filter_map(|f| {
                let list = t.thread_ops.get(f.thread.0 as usize)?;
                let k = list.partition_point(|&o| t.op(o).start < f.ts);
                let &o = list.get(k).filter(|&&o| t.op(o).start == f.ts)?;
                node_holding(o)
            })
            .collect()
    } else {
        let mut bw_seqs: Vec<i64> = t
            .kineto
            .ops
            .iter()
            .filter(|o| t.kineto.str(o.name).starts_with(EVALUATE_FUNCTION))
            .filter_map(|o| o.seq)
            .collect();
        bw_seqs.par_sort_unstable();
        bw_seqs.dedup();
        (0..t.kineto.ops.len() as u32)
            .into_par_iter()
            .filter_map(|oi| {
                let seq = t.op(OpId(oi)).seq?;
                bw_seqs.binary_search(&seq).ok()?;
                node_holding(OpId(oi))
            })
            .collect()
    };
    let mut out = vec![false; node_ops.len()];
    for n in marked {
        out[n as usize] = true;
    }
    out
}

/// Threads the autograd engine ran on (a backward node ran there), by thread index. Other side
/// threads (data loading, pinning) are not backward work.
fn autograd_threads(t: &Trace, node_ops: &[OpId], facts: &OpFacts) -> Vec<bool> {
    let mut autograd_thread = vec![false; t.kineto.threads.len()];
    for &o in node_ops {
        if facts.is_bw(o) {
            autograd_thread[t.op(o).thread.0 as usize] = true;
        }
    }
    autograd_thread
}

/// The GPU activities each node launched (the launching op or its nearest node ancestor), and
/// those launched by ops under no node, with their launch times.
struct GpuOwners {
    /// By node index.
    of_node: Vec<Vec<GpuId>>,
    unattributed: Vec<(GpuId, i64)>,
}

/// Each op's node index (`u32::MAX` for ops that are not nodes).
fn node_index(t: &Trace, node_ops: &[OpId]) -> Vec<u32> {
    let mut node_of: Vec<u32> = vec![u32::MAX; t.kineto.ops.len()];
    for (i, &o) in node_ops.iter().enumerate() {
        node_of[o.0 as usize] = i as u32;
    }
    node_of
}

fn gpu_owners(t: &Trace, node_ops: &[OpId], node_of: &[u32]) -> GpuOwners {
    // Each launch's owner is found on all threads.
    let owners: Vec<Option<(Option<u32>, i64)>> = t
        .launch
        .par_iter()
        .map(|l| {
            let (op, launch_ts) = (*l)?;
            let owner = std::iter::once(op)
                .chain(t.ancestors(op))
                .map(|a| node_of[a.0 as usize])
                .find(|&n| n != u32::MAX);
            Some((owner, launch_ts))
        })
        .collect();
    let mut g = GpuOwners {
        of_node: vec![Vec::new(); node_ops.len()],
        unattributed: Vec::new(),
    };
    for (gi, owner) in owners.into_iter().enumerate() {
        match owner {
            Some((Some(n), _)) => g.of_node[n as usize].push(GpuId(gi as u32)),
            Some((None, launch_ts)) => g.unattributed.push((GpuId(gi as u32), launch_ts)),
            None => {}
        }
    }
    g
}

/// Whether a node's GPU work includes a host→device copy (an input batch).
fn has_htod(t: &Trace, gpus: &[GpuId]) -> bool {
    gpus.iter().any(|g| {
        let a = &t.kineto.gpu[g.0 as usize];
        a.kind == GpuKind::Memcpy && t.kineto.str(a.name).contains("HtoD")
    })
}

/// Node indices per window, by the node's start (a window holds `[start, end)`), and how many
/// nodes start outside every window.
fn assign_to_windows(t: &Trace, node_ops: &[OpId], windows: &[Window]) -> (Vec<Vec<usize>>, usize) {
    let window_of: Vec<Option<usize>> = node_ops
        .par_iter()
        .map(|&o| {
            let s = t.op(o).start;
            let w = windows.partition_point(|w| w.1 <= s);
            (w < windows.len() && windows[w].0 <= s).then_some(w)
        })
        .collect();
    let mut per_iter: Vec<Vec<usize>> = vec![Vec::new(); windows.len()];
    let mut outside = 0usize;
    for (ni, w) in window_of.into_iter().enumerate() {
        match w {
            Some(w) => per_iter[w].push(ni),
            None => outside += 1,
        }
    }
    (per_iter, outside)
}

/// The module of forward ops by sequence number, so that backward nodes can name their module.
/// Every op, not only node ops: a node is often a composite (`aten::linear`) whose
/// RecordFunction has no sequence number while the ops under it (`aten::addmm`) do.
fn module_by_seq(t: &Trace, facts: &OpFacts, autograd_thread: &[bool]) -> FxHashMap<i64, StrId> {
    let mut by_seq: FxHashMap<i64, StrId> = FxHashMap::default();
    for oi in 0..t.kineto.ops.len() {
        let o = OpId(oi as u32);
        if let (Some(seq), Some(m)) = (t.op(o).seq, t.module[oi]) {
            // Sequence numbers count per thread: forward recomputed on an autograd thread
            // (checkpointing) numbers its ops from that thread's counter.
            if !facts.is_bw(o) && !autograd_thread[t.op(o).thread.0 as usize] {
                by_seq.entry(seq).or_insert(m);
            }
        }
    }
    by_seq
}

/// Every launch's time with its GPU activity's index, sorted: each iteration reads its slice.
fn sorted_launches(t: &Trace) -> Vec<(i64, usize)> {
    let mut launches: Vec<(i64, usize)> = t
        .launch
        .iter()
        .enumerate()
        .filter_map(|(gi, l)| l.map(|(_, ts)| (ts, gi)))
        .collect();
    launches.par_sort_unstable();
    launches
}

/// The spans where an iteration's backward passes run. An iteration with several (a GAN's
/// discriminator and generator, gradient accumulation's micro-batches) runs forward work on
/// the main thread between them: that is not backward.
struct BackwardSpans {
    /// From the first backward node's start to the last one's end.
    extent: Option<(i64, i64)>,
    /// The backward nodes' spans, merged.
    spans: Vec<(i64, i64)>,
}

impl BackwardSpans {
    fn new(t: &Trace, bw: &[OpId]) -> BackwardSpans {
        let extent = (!bw.is_empty()).then(|| {
            (
                bw.iter().map(|&o| t.op(o).start).min().unwrap_or(0),
                bw.iter().map(|&o| t.op(o).end()).max().unwrap_or(0),
            )
        });
        let mut spans: Vec<(i64, i64)> =
            bw.iter().map(|&o| (t.op(o).start, t.op(o).end())).collect();
        spans.sort_unstable();
        BackwardSpans {
            extent,
            spans: merge_spans(spans),
        }
    }

    fn contains(&self, ts: i64) -> bool {
        let k = self.spans.partition_point(|s| s.0 <= ts);
        k > 0 && ts < self.spans[k - 1].1
    }
}

/// Says when the batch's copies to the device read pageable memory (a DataLoader without
/// `pin_memory`): such a copy is staged through a pinned buffer by the driver, runs at a
/// fraction of the link's speed and blocks the host until it is done. Median per iteration,
/// said where it is 1% of the iteration's GPU time and 50 µs or more.
fn pageable_copies(
    t: &Trace,
    gpu: &GpuOwners,
    node_of: &[u32],
    per_iter_nodes: &[Vec<Node>],
    iterations: &[Iteration],
    diag: &mut Diagnostics,
) {
    let mut per_iter: Vec<f64> = per_iter_nodes
        .iter()
        .map(|nodes| {
            nodes
                .iter()
                .filter(|n| n.phase == Phase::DataLoading)
                .flat_map(|n| &gpu.of_node[node_of[n.op.0 as usize] as usize])
                .map(|g| &t.kineto.gpu[g.0 as usize])
                .filter(|a| a.kind == GpuKind::Memcpy)
                .filter(|a| {
                    let name = t.kineto.str(a.name);
                    name.contains("HtoD") && name.contains("Pageable")
                })
                .map(|a| a.dur as f64)
                .sum()
        })
        .collect();
    let ns = crate::analysis::median(&mut per_iter).unwrap_or(0.0);
    let mut gpu_time: Vec<f64> = iterations.iter().map(|i| i.gpu_time as f64).collect();
    let gpu_time = crate::analysis::median(&mut gpu_time).unwrap_or(0.0);
    // 1% of the iteration's GPU time and 50 µs at least: a toy model's few kilobytes are not
    // worth a word.
    if ns >= 50_000.0 && ns * 100.0 >= gpu_time {
        diag.warn(
            "input_copy_from_pageable_memory",
            format!(
                "the batch's copy to the device reads pageable memory: {:.2} ms of GPU time an iteration ({:.0}% of it, in data_loading); a DataLoader with pin_memory=True and .to(device, non_blocking=True) copies from pinned memory, faster and without holding the host",
                ns * 1e-6,
                100.0 * ns / gpu_time.max(1.0)
            ),
        );
    }
}

/// Leaves out the last iteration when the window ended inside it: the program ended inside a
/// ProfilerStep range (a schedule longer than the run: the range runs on to the profiler's stop
/// and holds a fraction of a step; nanoGPT's bench.py: 9.1 s and one node against 0.11 s and
/// 346), or a libtorch window closed after a backward pass and before the optimizer (a loop
/// whose step boundary capture found mid-step). Left in, its nodes read "missing in some
/// iterations" and its figures are a part-step's; left out, it is said once.
fn drop_cut_short(
    iterations: &mut Vec<Iteration>,
    per_iter_nodes: &mut Vec<Vec<Node>>,
    diag: &mut Diagnostics,
) {
    let Some(why) = cut_short(per_iter_nodes) else {
        return;
    };
    if let (Some(it), Some(_)) = (iterations.pop(), per_iter_nodes.pop()) {
        diag.warn(
            "last_iteration_cut_short",
            format!(
                "{}: the window ended inside this step ({why}); it is left out of every per-node and per-iteration figure",
                it.label
            ),
        );
    }
}

#[cfg(test)]
mod tests;
