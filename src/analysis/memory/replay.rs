//! The allocator's events replayed: which block each event makes or frees.

use rustc_hash::FxHashMap;

use crate::model::Trace;

/// The allocator's events replayed in order: which block each event makes or frees. It needs
/// nothing of the step, so [`crate::analysis::run`] makes it beside the step's reconstruction.
#[derive(Debug, Default)]
pub struct Replay {
    /// Blocks made in the window, in allocation order: (allocating event, freeing event).
    pub(super) blocks: Vec<(usize, Option<usize>)>,
    /// For each event: the block (index into `blocks`) it makes or frees. [`super::compute`] puts
    /// the blocks made before the window first and shifts these indices by their number.
    pub(super) event_block: Vec<Option<usize>>,
    /// Frees of blocks made before the window, as event indices.
    pub(super) early_frees: Vec<usize>,
}

/// Replays allocator events given as (address, signed bytes), in time order.
pub fn replay(events: &[(u64, i64)]) -> Replay {
    let mut r = Replay {
        event_block: vec![None; events.len()],
        ..Replay::default()
    };
    let mut open: FxHashMap<u64, usize> = FxHashMap::default();
    for (ei, &(addr, bytes)) in events.iter().enumerate() {
        if bytes > 0 {
            open.insert(addr, r.blocks.len());
            r.event_block[ei] = Some(r.blocks.len());
            r.blocks.push((ei, None));
        } else if let Some(b) = open.remove(&addr) {
            r.blocks[b].1 = Some(ei);
            r.event_block[ei] = Some(b);
        } else {
            r.early_frees.push(ei);
        }
    }
    r
}

/// The (address, signed bytes) of each allocator event, for [`replay`].
pub fn replay_input(t: &Trace) -> Vec<(u64, i64)> {
    t.memory.iter().map(|m| (m.addr, m.bytes)).collect()
}
