//! Each op's facts for the step: which ops are nodes, their phase from the step's annotations, and which ran under autograd.

use super::*;

/// The node ops, in root order: each thread's outermost ops, with annotations and autograd
/// wrappers opened ([`collect_nodes`]). Each root's subtree is searched on its own thread.
pub(super) fn node_ops(t: &Trace) -> Vec<OpId> {
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
pub(super) fn op_facts(t: &mut Trace, node_ops: &[OpId]) -> OpFacts {
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
pub(super) const DATA_LOADER_NEXT: &str = "enumerate(DataLoader)#";

/// The range torch's optimizers open around `zero_grad`.
pub(super) const ZERO_GRAD: &str = "Optimizer.zero_grad#";

/// The ranges that are wholly one phase's time, whether or not they hold a node (a
/// DataLoader's Python around the few ops it records; `zero_grad(set_to_none=True)`, which
/// records none), by start: (start, end, phase).
pub(super) fn phase_ranges(t: &Trace) -> Vec<(i64, i64, Phase)> {
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
pub(super) fn differentiated(
    t: &Trace,
    node_ops: &[OpId],
    node_of: &[u32],
    facts: &OpFacts,
) -> Vec<bool> {
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
pub(super) fn autograd_threads(t: &Trace, node_ops: &[OpId], facts: &OpFacts) -> Vec<bool> {
    let mut autograd_thread = vec![false; t.kineto.threads.len()];
    for &o in node_ops {
        if facts.is_bw(o) {
            autograd_thread[t.op(o).thread.0 as usize] = true;
        }
    }
    autograd_thread
}
