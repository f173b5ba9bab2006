//! Activation instances: every block a node made in the forward and a backward node read,
//! once per iteration, with its use window and the chain of nodes that would rebuild it.

use rustc_hash::{FxHashMap, FxHashSet};

use super::{Identities, Ranks};
use crate::analysis::memory::{Category, Memory};
use crate::analysis::step::{Phase, Step};
use crate::model::Trace;

/// One activation block of one iteration.
pub(super) struct Inst {
    pub(super) name: String,
    /// (creation, last forward use, first backward use, last backward use), as ranks.
    pub(super) ranks: (u32, u32, u32, u32),
    pub(super) size: i64,
    /// Nodes to run again to rebuild it (the producer first).
    pub(super) chain: Vec<usize>,
    pub(super) storage: i64,
    pub(super) producer: usize,
}

/// The use window of an activation made at rank `c`: its last forward use, then its first and
/// last backward uses as found (else the backward node that frees it, else right after its last
/// forward use), ordered so that creation ≤ last forward use < first backward use ≤ last.
pub(super) fn use_window(
    c: u32,
    fw_last: u32,
    bw_first: Option<u32>,
    bw_last: Option<u32>,
    freer_bw: Option<u32>,
) -> (u32, u32, u32, u32) {
    let bw_first = bw_first.or(freer_bw).unwrap_or(fw_last + 1);
    let bw_last = bw_last.or(freer_bw).unwrap_or(bw_first).max(bw_first);
    let bw_first = bw_first.max(fw_last + 1);
    let bw_last = bw_last.max(bw_first);
    (c, fw_last, bw_first, bw_last)
}

/// Every activation block made by a node, as one instance per iteration, named after its
/// producer and its order among the producer's activations.
pub(super) fn instances(
    t: &Trace,
    step: &Step,
    mem: &Memory,
    ids: Option<&Identities>,
    ranks: &Ranks<'_>,
    bw_by_seq: &FxHashMap<(u32, i64), usize>,
) -> Vec<Inst> {
    let mut insts: Vec<Inst> = Vec::new();
    let mut counter: FxHashMap<usize, u32> = FxHashMap::default();
    for (bi, b) in mem.blocks.iter().enumerate() {
        if b.category != Category::Activation {
            continue;
        }
        let Some(p) = b.producer else { continue };
        let it = step.nodes[p].iteration;
        let k = counter.entry(p).or_insert(0);
        let name = format!("{}/act{}", step.nodes[p].name, k);
        *k += 1;
        let c = ranks.rank(p);
        let (mut fw_last, mut bw_first, mut bw_last) = (c, None::<u32>, None::<u32>);
        let storage = ids.and_then(|i| i.storage_of_block.get(&bi).copied());
        match ids.and_then(|i| i.readers(step, mem, bi)) {
            Some(readers) => {
                for ni in readers {
                    let n = &step.nodes[ni];
                    if ni == p {
                        continue;
                    }
                    let r = ranks.rank(ni);
                    match n.phase {
                        Phase::Forward => fw_last = fw_last.max(r),
                        Phase::Backward => {
                            bw_first = Some(bw_first.map_or(r, |x| x.min(r)));
                            bw_last = Some(bw_last.map_or(r, |x| x.max(r)));
                        }
                        _ => {}
                    }
                }
            }
            None => {
                // No identities: the producer's autograd node reads it first; whoever frees it
                // in backward is its last reader.
                if let Some(&bn) = t
                    .op(step.nodes[p].op)
                    .seq
                    .and_then(|s| bw_by_seq.get(&(it, s)))
                {
                    bw_first = Some(ranks.rank(bn));
                }
            }
        }
        if ids.is_some() && storage.is_some() && bw_first.is_none() {
            // Alive at backward but never read by it (the loss value, outputs a Python
            // variable still holds): not an activation backward needs.
            continue;
        }
        let freer_bw = b
            .freer
            .filter(|&f| step.nodes[f].phase == Phase::Backward)
            .map(|f| ranks.rank(f));
        insts.push(Inst {
            name,
            ranks: use_window(c, fw_last, bw_first, bw_last, freer_bw),
            size: b.size,
            chain: ids.map_or_else(|| vec![p], |ids| rebuild_chain(ids, step, mem, p)),
            storage: storage.unwrap_or(-1),
            producer: p,
        });
    }
    insts
}

/// What recomputing the activations of node `p` runs: `p`, and the producers of what it read
/// that was freed before backward (temporaries), transitively, within the iteration's forward.
pub(super) fn rebuild_chain(ids: &Identities, step: &Step, mem: &Memory, p: usize) -> Vec<usize> {
    let mut chain = vec![p];
    let mut stack = vec![p];
    let mut seen: FxHashSet<usize> = FxHashSet::from_iter([p]);
    while let Some(n) = stack.pop() {
        for s in &ids.uses.reads[n] {
            let Some(src) = ids.block_read(step, mem, n, *s) else {
                continue;
            };
            let sb = &mem.blocks[src];
            if sb.category == Category::Temporary {
                if let Some(q) = sb
                    .producer
                    .filter(|q| step.nodes[*q].phase == Phase::Forward)
                {
                    if seen.insert(q) {
                        chain.push(q);
                        stack.push(q);
                    }
                }
            }
        }
    }
    chain
}
