//! Copies autocast keeps: under `torch.autocast`, a parameter cast to the autocast dtype is
//! cached for the whole autocast region (torch caches casts of leaf tensors that require
//! grad), so a checkpoint of the module that made it does not free it at its last forward
//! reader: it goes when the region exits, at the forward pass's end.
//!
//! Seen on the HuggingFace Trainer (GPT-2, bf16, `sample_traces/plan/hf_trainer_small`): with
//! the whole `transformer` and `lm_head` recomputed, the bf16 copies of every Conv1D weight and
//! of the tied embedding were freed only after the loss, and the peak, set by the loss inside
//! the forward, came 2.0% over the prediction that had them freed at their last reader.

use rustc_hash::{FxHashMap, FxHashSet};

use crate::analysis::liveness::{enclosing_node, Identities};
use crate::analysis::memory::Memory;
use crate::analysis::step::{Phase, Step};
use crate::model::{OpId, Trace};

/// Blocks made by a dtype cast (`aten::_to_copy`) in the forward whose every tensor input is
/// a storage no block of the iteration holds: a tensor made before the window, a parameter
/// (activations, made in the iteration, are never cached). Needs the Execution Trace (which
/// tensors each cast read); without it, none.
pub(super) fn autocast_copies(
    t: &Trace,
    step: &Step,
    mem: &Memory,
    ids: Option<&Identities>,
    made_by: &std::collections::BTreeMap<usize, Vec<usize>>,
) -> FxHashSet<usize> {
    let mut out = FxHashSet::default();
    let (Some(ids), Some(et)) = (ids, t.exec_trace.as_ref()) else {
        return out;
    };
    // Names are interned: one lookup, then a comparison of ids per op.
    let Some(to_copy) = t.kineto.strings.get("aten::_to_copy") else {
        return out;
    };
    let node_of_op: FxHashMap<OpId, usize> = step
        .nodes
        .iter()
        .enumerate()
        .filter(|(_, n)| n.phase == Phase::Forward)
        .map(|(i, n)| (n.op, i))
        .collect();
    for (oi, op) in t.kineto.ops.iter().enumerate() {
        if op.name != to_copy {
            continue;
        }
        let Some(e) = op.rf_id.and_then(|r| et.node_by_rf(r)) else {
            continue;
        };
        let Some(ni) = enclosing_node(t, &node_of_op, OpId(oi as u32)) else {
            continue;
        };
        let from_before = !e.inputs.is_empty()
            && e.inputs
                .iter()
                .all(|x| ids.block_read(step, mem, ni, x.storage_id).is_none());
        if !from_before {
            continue;
        }
        let (s, end) = (op.start, op.start + op.dur);
        for &bi in made_by.get(&ni).map(Vec::as_slice).unwrap_or(&[]) {
            let a = mem.blocks[bi].alloc;
            if s <= a && a <= end {
                out.insert(bi);
            }
        }
    }
    out
}

/// Starts of the step's backward nodes, sorted: where each micro-batch's forward pass (and
/// the autocast region around it) has ended.
pub(super) fn backward_starts(t: &Trace, step: &Step) -> Vec<i64> {
    let mut v: Vec<i64> = step
        .nodes
        .iter()
        .filter(|n| n.phase == Phase::Backward)
        .map(|n| t.op(n.op).start)
        .collect();
    v.sort_unstable();
    v
}
