//! The modules a plan can act on: every module enclosing a forward node, with the
//! events each action adds to each profiled iteration's measured memory, the time it adds,
//! and the blocks it drops; the "every block" class users would checkpoint by hand.

use super::call::{calls, one_call, CallEffects, Ctx, EvalFns, FwdSeqOp, Held};
use super::*;
use crate::analysis::step::Step;

/// A module that can be planned: its forward nodes and what acting on it changes, per
/// iteration.
#[derive(Debug, Clone)]
pub(super) struct Candidate {
    pub(super) path: String,
    pub(super) instance: String,
    /// Its fully qualified name, where the capture recorded it.
    pub(super) fqn: Option<String>,
    pub(super) class: String,
    pub(super) depth: usize,
    /// Per iteration (index into `Ctx::iters`): the events each action adds.
    pub(super) added: Vec<BTreeMap<Action, Vec<Added>>>,
    /// Activation bytes dropped (median over iterations).
    pub(super) dropped_bytes: i64,
    /// Blocks dropped, per iteration (for the never-twice check).
    pub(super) dropped_blocks: Vec<Vec<usize>>,
    /// Per iteration: the tensors a recompute of it keeps alive longer (its forward's inputs).
    pub(super) held: Vec<Vec<Held>>,
    /// Per iteration: the host and GPU work each action adds, where it runs.
    pub(super) work: Vec<BTreeMap<Action, Vec<Work>>>,
    /// Has modules below it.
    pub(super) composite: bool,
}

pub(super) struct Iter {
    pub(super) label: String,
    pub(super) start: i64,
    pub(super) measured: Measured,
    /// Its launches, for the step model.
    pub(super) lane: Lane,
    /// Its forward's and backward's spans (trace clock, ns), where it has one of each.
    pub(super) phases: super::build::PhaseSpans,
}

/// Whether `c` sits inside another module of its class name: instances of a block class stand
/// side by side, and one inside another (Lightning's demo `Transformer` holding an
/// `nn.Transformer`) is not a repeated block.
pub(super) fn inside_own_class(cands: &[Candidate], c: &Candidate) -> bool {
    cands
        .iter()
        .any(|o| o.class == c.class && o.path != c.path && under(&c.path, &o.path))
}

/// The class users would checkpoint "every block" of: among modules with modules below them,
/// the class with the most instances (two at least); ties go to the shallower, then by name.
pub(super) fn every_block_class(cands: &[Candidate]) -> Option<String> {
    let mut by_class: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for c in cands
        .iter()
        .filter(|c| c.composite && c.depth > 0 && !inside_own_class(cands, c))
    {
        let e = by_class.entry(c.class.as_str()).or_insert((0, usize::MAX));
        e.0 += 1;
        e.1 = e.1.min(c.depth);
    }
    by_class
        .into_iter()
        .filter(|(_, (n, _))| *n >= 2)
        .max_by(|a, b| {
            a.1 .0
                .cmp(&b.1 .0)
                .then(b.1 .1.cmp(&a.1 .1))
                .then(b.0.cmp(a.0))
        })
        .map(|(c, _)| c.to_owned())
}

/// The forward module paths whose ops the program itself runs again inside the backward pass
/// (its own activation checkpointing: HF's `gradient_checkpointing`, `torch.utils.checkpoint`
/// in its code). The replay runs on the autograd thread, whose module ranges start at the
/// checkpointed module (`Block_0/Linear_1`), so each is matched to the forward path it ends
/// (`GPT_0/Block_0/Linear_1`).
pub(super) fn replayed_forward_paths(t: &Trace, step: &Step) -> BTreeSet<String> {
    let replayed: BTreeSet<&str> = step
        .nodes
        .iter()
        .filter(|n| n.recompute)
        .filter_map(|n| n.module.map(|m| t.kineto.str(m)))
        .collect();
    if replayed.is_empty() {
        return BTreeSet::new();
    }
    let own: BTreeSet<&str> = step
        .nodes
        .iter()
        .filter(|n| n.phase == Phase::Forward)
        .filter_map(|n| n.module.map(|m| t.kineto.str(m)))
        .collect();
    own.into_iter()
        .filter(|q| {
            replayed.iter().any(|r| {
                *q == *r
                    || (q.len() > r.len()
                        && q.ends_with(r)
                        && q.as_bytes()[q.len() - r.len() - 1] == b'/')
            })
        })
        .map(str::to_owned)
        .collect()
}

/// The modules the program itself recomputes, outermost first in path order: those whose every
/// forward module path with nodes of its own is replayed in the backward pass, with their
/// qualified names where the capture recorded them.
pub(super) fn already_recomputed(
    t: &Trace,
    a: &Analysis,
    replayed: &BTreeSet<String>,
) -> Vec<(String, Option<String>)> {
    if replayed.is_empty() {
        return Vec::new();
    }
    let own: BTreeSet<&str> = a
        .step
        .nodes
        .iter()
        .filter(|n| n.phase == Phase::Forward)
        .filter_map(|n| n.module.map(|m| t.kineto.str(m)))
        .collect();
    let whole = |p: &str| {
        let mut inside = own.iter().filter(|q| under(q, p)).peekable();
        inside.peek().is_some() && inside.all(|q| replayed.contains(*q))
    };
    let mut out = Vec::new();
    for p in &forward_module_paths(t, &a.step) {
        let parent_whole = p.rsplit_once('/').is_some_and(|(parent, _)| whole(parent));
        if whole(p) && !parent_whole {
            out.push((p.clone(), fqn_of(a, p)));
        }
    }
    out
}

/// A module's fully qualified name where the capture recorded it: by its path (captures name
/// modules so: two classes may share an instance name), else by its instance name (captures
/// before paths were recorded).
fn fqn_of(a: &Analysis, path: &str) -> Option<String> {
    let instance = path.rsplit('/').next().unwrap_or(path);
    a.module_fqns
        .get(path)
        .or_else(|| a.module_fqns.get(instance))
        .cloned()
}

/// Every module enclosing a forward node, with the events each action adds per iteration;
/// none that the program already recomputes (`replayed`: [`replayed_forward_paths`]), or that
/// holds one (never a module checkpointed twice).
pub(super) fn build_candidates(
    t: &Trace,
    a: &Analysis,
    replayed: &BTreeSet<String>,
    ids: Option<&liveness::Identities>,
    iters: &[Iter],
    iter_index: &BTreeMap<u32, usize>,
    rates: &Rates,
) -> Vec<Candidate> {
    let Rates {
        cpu_scale,
        phases,
        htod_gbps: htod,
        dtoh_gbps: dtoh,
        overheads: ov,
        ..
    } = *rates;
    let step = &a.step;
    let mem = &a.memory;
    let paths: Vec<String> = forward_module_paths(t, step)
        .into_iter()
        .filter(|p| !replayed.iter().any(|r| under(r, p)))
        .collect();
    // Blocks by the node that made them.
    let mut made_by: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for (bi, b) in mem.blocks.iter().enumerate() {
        if let Some(p) = b.producer {
            made_by.entry(p).or_default().push(bi);
        }
    }
    let (eval_fns, fwd_seq_ops) = autograd_ops(t);
    let autocast = super::autocast::autocast_copies(t, step, mem, ids, &made_by);
    let bwd_starts = super::autocast::backward_starts(t, step);
    let syncs = t.host_syncs();
    let cx = Ctx {
        t,
        step,
        mem,
        ids,
        made_by: &made_by,
        eval_fns: &eval_fns,
        fwd_seq_ops: &fwd_seq_ops,
        autocast: &autocast,
        bwd_starts: &bwd_starts,
        syncs: &syncs,
        forward_scale: phases.map_or(cpu_scale, |p| p.0),
        htod,
        dtoh,
        ov,
    };
    let composite: BTreeSet<&str> = paths
        .iter()
        .filter_map(|p| p.rsplit_once('/').map(|(parent, _)| parent))
        .collect();
    let cands: Vec<Option<Candidate>> = paths
        .par_iter()
        .map(|path| {
            let per_iter = PerIteration::of(&cx, path, iters.len(), iter_index)?;
            let instance = path.rsplit('/').next().unwrap_or(path).to_owned();
            let mut dp: Vec<f64> = per_iter.dropped_bytes.iter().map(|&b| b as f64).collect();
            Some(Candidate {
                fqn: fqn_of(a, path),
                class: crate::model::module_class(&instance).to_owned(),
                instance,
                depth: depth_of(path),
                path: path.clone(),
                added: per_iter.added,
                dropped_bytes: median(&mut dp).unwrap_or(0.0) as i64,
                dropped_blocks: per_iter.dropped_blocks,
                held: per_iter.held,
                work: per_iter.work,
                composite: composite.contains(path.as_str()),
            })
        })
        .collect();
    cands.into_iter().flatten().collect()
}

/// Module paths of forward nodes, and every prefix of each (the modules that enclose them).
fn forward_module_paths(t: &Trace, step: &Step) -> BTreeSet<String> {
    let mut paths: BTreeSet<String> = BTreeSet::new();
    for n in &step.nodes {
        if n.phase != Phase::Forward {
            continue;
        }
        let Some(m) = n.module else { continue };
        let full = t.kineto.str(m);
        let mut end = 0;
        for (i, ch) in full.char_indices() {
            if ch == '/' {
                paths.insert(full[..i].to_owned());
            }
            end = i + ch.len_utf8();
        }
        paths.insert(full[..end].to_owned());
    }
    paths
}

/// Autograd nodes as they ran by sequence number, and the forward ops that have one, with
/// their module, by start (so each module's forward span is a range of it).
fn autograd_ops(t: &Trace) -> (EvalFns, Vec<FwdSeqOp>) {
    let mut eval_fns = EvalFns::default();
    let mut fwd_seq_ops: Vec<FwdSeqOp> = Vec::new();
    for (oi, o) in t.kineto.ops.iter().enumerate() {
        let Some(seq) = o.seq else { continue };
        if t.kineto.str(o.name).starts_with(EVALUATE_FUNCTION) {
            eval_fns
                .entry(seq)
                .or_default()
                .push((o.start, o.start + o.dur));
        } else if let Some(m) = t.module[oi] {
            fwd_seq_ops.push((o.start, seq, m));
        }
    }
    fwd_seq_ops.sort_unstable();
    (eval_fns, fwd_seq_ops)
}

/// What acting on one module changes in each planned iteration (index into the plan's
/// iterations).
struct PerIteration {
    added: Vec<BTreeMap<Action, Vec<Added>>>,
    /// Activation bytes dropped, one figure per iteration the module ran in.
    dropped_bytes: Vec<i64>,
    dropped_blocks: Vec<Vec<usize>>,
    held: Vec<Vec<Held>>,
    work: Vec<BTreeMap<Action, Vec<Work>>>,
}

impl PerIteration {
    /// The module at `path` over the step's iterations; `None` where no iteration has both
    /// its forward and its backward.
    fn of(
        cx: &Ctx<'_>,
        path: &str,
        n_iters: usize,
        iter_index: &BTreeMap<u32, usize>,
    ) -> Option<Self> {
        let step = cx.step;
        let mut r = PerIteration {
            added: vec![BTreeMap::new(); n_iters],
            dropped_bytes: Vec::new(),
            dropped_blocks: vec![Vec::new(); n_iters],
            held: vec![Vec::new(); n_iters],
            work: vec![BTreeMap::new(); n_iters],
        };
        let module_of = |ni: usize| step.nodes[ni].module.map(|m| cx.t.kineto.str(m));
        let in_module = |ni: usize, phase: Phase| {
            let n = &step.nodes[ni];
            n.phase == phase
                && !(phase == Phase::Forward && n.recompute)
                && module_of(ni).is_some_and(|m| under(m, path))
        };
        for it in &step.iterations {
            let Some(&k) = iter_index.get(&it.index) else {
                continue;
            };
            let fwd: Vec<usize> = it
                .nodes
                .clone()
                .filter(|&ni| in_module(ni, Phase::Forward))
                .collect();
            let bwd: Vec<usize> = it
                .nodes
                .clone()
                .filter(|&ni| in_module(ni, Phase::Backward))
                .collect();
            if fwd.is_empty() || bwd.is_empty() {
                continue;
            }
            // Each call on its own: gradient accumulation runs the module once per
            // micro-batch (forward, backward, forward, ...); taken as one call, its
            // activations were dropped after the last micro-batch's forward and brought back
            // at the first one's backward, which raised the predicted peak (HF Trainer, GPT-2
            // with accumulation 4: every block "added" 3 MiB; measured -14.7%).
            let mut effects: Vec<CallEffects> =
                calls(&fwd, &bwd, |ni| cx.t.op(step.nodes[ni].op).start)
                    .iter()
                    .filter_map(|(f, b)| one_call(cx, path, it, f, b))
                    .collect();
            if effects.is_empty() {
                continue;
            }
            let (mut rec, mut swp, mut rw, mut sw) =
                (Vec::new(), Vec::new(), Vec::new(), Vec::new());
            let mut bytes = 0;
            for e in &mut effects {
                rec.append(&mut e.rec);
                swp.append(&mut e.swp);
                rw.append(&mut e.rw);
                sw.append(&mut e.sw);
                r.dropped_blocks[k].append(&mut e.dropped);
                r.held[k].append(&mut e.held);
                bytes += e.bytes;
            }
            rec.sort_by_key(|x| x.key);
            swp.sort_by_key(|x| x.key);
            rw.sort_by_key(|x| x.ts);
            sw.sort_by_key(|x| x.ts);
            r.added[k].insert(Action::Recompute, rec);
            r.added[k].insert(Action::Swap, swp);
            r.work[k].insert(Action::Recompute, rw);
            r.work[k].insert(Action::Swap, sw);
            r.dropped_bytes.push(bytes);
        }
        (!r.dropped_bytes.is_empty()).then_some(r)
    }
}

/// Blocks the decisions drop, per iteration: each at most once (a plan never counts a tensor
/// twice; nested modules are never both chosen).
pub(super) fn dropped_twice(cands: &[Candidate], chosen: &[Choice]) -> bool {
    let iters = cands.first().map_or(0, |c| c.dropped_blocks.len());
    (0..iters).any(|k| {
        let mut seen = BTreeSet::new();
        chosen
            .iter()
            .flat_map(|&(c, _)| cands[c].dropped_blocks[k].iter())
            .any(|b| !seen.insert(*b))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_module_run_once_per_micro_batch_is_split_into_its_calls() {
        // Gradient accumulation: forward (nodes 1, 2), backward (3), forward (4), backward
        // (5, 6); a backward node before any forward (0) belongs to no call.
        let start = |n: usize| [5, 10, 11, 20, 30, 40, 41][n];
        let c = calls(&[1, 2, 4], &[0, 3, 5, 6], start);
        assert_eq!(c, vec![(vec![1, 2], vec![3]), (vec![4], vec![5, 6])]);
        // One forward and one backward: one call.
        assert_eq!(calls(&[1, 2], &[3], start), vec![(vec![1, 2], vec![3])]);
    }
}
