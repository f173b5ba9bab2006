//! Tensor identities from the Execution Trace joined to the allocator's blocks: which storage
//! each node instance read and wrote, and which block holds which storage when.

use std::collections::BTreeMap;

use rustc_hash::{FxHashMap, FxHashSet};

use crate::analysis::memory::Memory;
use crate::analysis::step::Step;
use crate::model::{OpId, Trace};

/// Storages each node instance reads and writes, from the Execution Trace.
#[derive(Debug, Clone)]
pub(crate) struct EtUses {
    pub(crate) reads: Vec<FxHashSet<i64>>,
    pub(crate) writes: Vec<Vec<(i64, i64)>>, // (storage, bytes) in order
}

/// The node an op belongs to: itself, or its nearest ancestor that is one (`node_of_op`).
pub(crate) fn enclosing_node(
    t: &Trace,
    node_of_op: &FxHashMap<OpId, usize>,
    o: OpId,
) -> Option<usize> {
    std::iter::once(o)
        .chain(t.ancestors(o))
        .find_map(|a| node_of_op.get(&a).copied())
}

pub(super) fn et_uses(t: &Trace, step: &Step) -> Option<EtUses> {
    let et = t.exec_trace.as_ref()?;
    let mut node_of_op: FxHashMap<OpId, usize> = FxHashMap::default();
    for (i, n) in step.nodes.iter().enumerate() {
        node_of_op.insert(n.op, i);
    }
    let mut reads = vec![FxHashSet::default(); step.nodes.len()];
    let mut writes: Vec<Vec<(i64, i64)>> = vec![Vec::new(); step.nodes.len()];
    let mut joined = 0usize;
    for (oi, op) in t.kineto.ops.iter().enumerate() {
        let Some(e) = op.rf_id.and_then(|r| et.node_by_rf(r)) else {
            continue;
        };
        joined += 1;
        let o = OpId(oi as u32);
        let Some(ni) = enclosing_node(t, &node_of_op, o) else {
            continue;
        };
        for x in &e.inputs {
            reads[ni].insert(x.storage_id);
        }
        if o == step.nodes[ni].op {
            for x in &e.outputs {
                let b = x.numel.max(0) * x.itemsize.max(0);
                if !writes[ni].iter().any(|(s, _)| *s == x.storage_id) {
                    writes[ni].push((x.storage_id, b));
                }
            }
        }
    }
    // An Execution Trace that joins no op (from another run) says nothing about these
    // tensors: liveness then comes from the allocator events, as without one (it
    // claimed `execution_trace` with 0 of 474 ops joined).
    (joined > 0).then_some(EtUses { reads, writes })
}

use crate::analysis::memory::round_block;

/// Tensor identities joined to the allocator's blocks: what each node read and wrote (from
/// the Execution Trace) and the storage each in-window block holds (matched to its producer's
/// outputs by size). Storage ids name memory, which the caching allocator hands out again: one
/// id can stand for several tensors in one iteration, so a use is a block's only while the block
/// holds that memory ([`Identities::readers`], [`Identities::block_read`]).
#[derive(Debug, Clone)]
pub(crate) struct Identities {
    pub(crate) uses: EtUses,
    pub(crate) storage_of_block: FxHashMap<usize, i64>,
    /// Blocks that held each storage id, per iteration, in allocation order.
    blocks_of_storage: FxHashMap<(u32, i64), Vec<usize>>,
    /// Nodes that read each storage id, per iteration, in node order.
    readers_of_storage: FxHashMap<(u32, i64), Vec<usize>>,
    /// Start of each node's op, ns.
    node_start: Vec<i64>,
}

impl Identities {
    /// Nodes that read block `bi` while it held its storage (its producer included when it
    /// reads it); `None` when the block was not matched to a storage.
    pub(crate) fn readers<'a>(
        &'a self,
        step: &Step,
        mem: &'a Memory,
        bi: usize,
    ) -> Option<impl Iterator<Item = usize> + 'a> {
        let s = *self.storage_of_block.get(&bi)?;
        let b = &mem.blocks[bi];
        let it = b.producer.map(|p| step.nodes[p].iteration)?;
        let rs = self
            .readers_of_storage
            .get(&(it, s))
            .map_or(&[][..], Vec::as_slice);
        Some(rs.iter().copied().filter(move |&ni| {
            let st = self.node_start[ni];
            st >= b.alloc && b.free.is_none_or(|f| st <= f)
        }))
    }

    /// The block that held storage `s` when node `ni` ran (the latest made before it).
    pub(crate) fn block_read(&self, step: &Step, mem: &Memory, ni: usize, s: i64) -> Option<usize> {
        let st = self.node_start[ni];
        self.blocks_of_storage
            .get(&(step.nodes[ni].iteration, s))?
            .iter()
            .rev()
            .copied()
            .find(|&bi| mem.blocks[bi].alloc <= st)
    }
}

fn exact_size(asked: i64, block: i64) -> bool {
    asked == block
}

/// A large-pool block given whole: at most 1 MiB over what was asked (rounded to 512 B).
fn unsplit_block(asked: i64, block: i64) -> bool {
    const SMALL_SIZE: i64 = 1 << 20;
    asked > SMALL_SIZE && block > asked && block - asked <= SMALL_SIZE
}

pub(crate) fn identities(t: &Trace, step: &Step, mem: &Memory) -> Option<Identities> {
    let u = et_uses(t, step)?;
    let mut storage_of_block: FxHashMap<usize, i64> = FxHashMap::default();
    let mut blocks_of_storage: FxHashMap<(u32, i64), Vec<usize>> = FxHashMap::default();
    let mut by_producer: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for (bi, b) in mem.blocks.iter().enumerate() {
        if let Some(p) = b.producer {
            by_producer.entry(p).or_default().push(bi);
        }
    }
    for (p, bis) in by_producer {
        let mut taken = vec![false; u.writes[p].len()];
        let mut matched = vec![false; bis.len()];
        // Exact sizes first, then blocks the allocator handed out whole: a cached block up to
        // 1 MiB larger than asked for is not split (CUDACachingAllocator splits a large block
        // only when more than kSmallSize, 1 MiB, would remain). Without the second pass a
        // ResNet-50 block output (51,380,224 B in a 52,428,800 B block) had no identity, and a
        // checkpoint of its Bottleneck was taken to free it though the next block saves it.
        for pass in [exact_size as fn(i64, i64) -> bool, unsplit_block] {
            for (j, &bi) in bis.iter().enumerate() {
                if matched[j] {
                    continue;
                }
                let size = mem.blocks[bi].size;
                let Some(k) = (0..u.writes[p].len())
                    .find(|&k| !taken[k] && pass(round_block(u.writes[p][k].1), size))
                else {
                    continue;
                };
                (taken[k], matched[j]) = (true, true);
                let s = u.writes[p][k].0;
                storage_of_block.insert(bi, s);
                blocks_of_storage
                    .entry((step.nodes[p].iteration, s))
                    .or_default()
                    .push(bi);
            }
        }
    }
    // Blocks are in allocation order within a producer, not across producers.
    for v in blocks_of_storage.values_mut() {
        v.sort_by_key(|&bi| (mem.blocks[bi].alloc, bi));
    }
    let mut readers_of_storage: FxHashMap<(u32, i64), Vec<usize>> = FxHashMap::default();
    for (ni, r) in u.reads.iter().enumerate() {
        for s in r {
            readers_of_storage
                .entry((step.nodes[ni].iteration, *s))
                .or_default()
                .push(ni);
        }
    }
    let node_start = step.nodes.iter().map(|n| t.op(n.op).start).collect();
    Some(Identities {
        uses: u,
        storage_of_block,
        blocks_of_storage,
        readers_of_storage,
        node_start,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_large_block_given_whole_matches_what_was_asked_within_one_mib() {
        // ResNet-50's block output: 51,380,224 B asked, a 52,428,800 B cached block given.
        assert!(unsplit_block(51_380_224, 52_428_800));
        assert!(!exact_size(51_380_224, 52_428_800));
        // More than 1 MiB over would have been split; small-pool sizes are exact.
        assert!(!unsplit_block(51_380_224, 52_428_801 + (1 << 20)));
        assert!(!unsplit_block(4096, 8192));
        assert!(!unsplit_block(2 << 20, 2 << 20));
    }
}
