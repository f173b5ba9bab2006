//! Where each memory event falls (node, iteration) and the tensors alive before the window, categorised from what they did in it.

use super::*;

/// Each memory event's node (on its thread, at its time) and iteration: independent
/// searches, made on all threads.
pub(super) fn place_events(t: &Trace, step: &Step) -> Vec<(Option<usize>, Option<u32>)> {
    let idx = NodeIndex::new(t, step);
    t.memory
        .par_iter()
        .map(|m| {
            // Iterations are in time order and do not overlap.
            let k = step.iterations.partition_point(|it| it.end < m.ts);
            let iteration = step
                .iterations
                .get(k)
                .filter(|it| m.ts >= it.start)
                .map(|it| it.index);
            (idx.at(m.thread, m.ts), iteration)
        })
        .collect()
}

/// The blocks alive when the window opened, read from the snapshot.
#[derive(Default)]
pub(super) struct PreWindow {
    pub(super) blocks: Vec<Block>,
    /// Per block: allocated with no stack recorded, and the bytes asked for (a block can be
    /// larger: the allocator keeps a remainder too small to split).
    pub(super) stackless: Vec<(bool, i64)>,
    /// Per block: what it is if nothing else names it and it lives through the window.
    pub(super) kept_as: Vec<Option<Category>>,
}

impl PreWindow {
    fn push(&mut self, s: &Snapshot, addr: u64, size: i64, requested: i64, stack: StackId) {
        let frames = s.stack(stack);
        self.stackless.push((frames.is_empty(), requested));
        self.kept_as.push(kept_category(s, frames));
        self.blocks.push(Block {
            addr,
            size,
            alloc: i64::MIN,
            free: None,
            category: category_from_frames(s, frames),
            producer: None,
            freer: None,
            iteration: None,
        });
    }

    /// The blocks the snapshot shows alive at the trace's first memory event on the trace's
    /// device; `None` when it has no history for that device. `made`: the window's blocks
    /// (allocation and free event indices).
    pub(super) fn from_snapshot(
        t: &Trace,
        s: &Snapshot,
        made: &[(usize, Option<usize>)],
    ) -> Option<Self> {
        let dev = t.device.unwrap_or(0).max(0) as usize;
        let entries = s.device_traces.get(dev)?;
        let t0 = t.memory.first().map_or(0, |m| m.ts);
        let t0_us = t.kineto.epoch_us(t0);
        let mut alive: FxHashMap<u64, (u64, &TraceEntry)> = FxHashMap::default();
        for e in entries {
            let Some(ts) = e.time_us else { continue };
            if ts as f64 >= t0_us {
                break;
            }
            match e.action {
                Action::Alloc => {
                    alive.insert(e.addr, (e.size, e));
                }
                Action::FreeRequested | Action::FreeCompleted => {
                    alive.remove(&e.addr);
                }
                _ => {}
            }
        }
        // The segments hold every block alive when the snapshot was taken, each with the
        // stack it was allocated from, whether or not the history saw it: turning history
        // off clears it (capture pauses it while timing steps), and it may start late.
        let seg_blocks: FxHashMap<u64, &crate::model::snapshot::Block> = s
            .segments
            .iter()
            .filter(|g| g.device.max(0) as usize == dev)
            .flat_map(|g| &g.blocks)
            .filter(|b| s.str(b.state).starts_with("active"))
            .map(|b| (b.address, b))
            .collect();
        let mut last_alloc: FxHashMap<u64, Option<i64>> = FxHashMap::default();
        for e in entries.iter().filter(|e| e.action == Action::Alloc) {
            last_alloc.insert(e.addr, e.time_us);
        }
        let mut pre = PreWindow::default();
        let mut v: Vec<_> = alive.into_values().collect();
        v.sort_by_key(|(_, e)| (e.time_us, e.addr));
        for (requested, e) in v {
            // History records the requested size; the allocator (and the trace's Total
            // Allocated) counts the block's, which the segments give while it lives.
            let requested = round_block(requested as i64);
            let size = match seg_blocks.get(&e.addr) {
                Some(b) if last_alloc.get(&e.addr) == Some(&e.time_us) => b.size as i64,
                _ => requested,
            };
            pre.push(s, e.addr, size, requested, e.stack);
        }
        // A block alive at the snapshot that the history never saw allocated was made before
        // the history began. When the history reaches into the window, that is before the
        // window too, unless the trace saw it made.
        let history_reaches_window = entries
            .iter()
            .rev()
            .find_map(|e| e.time_us)
            .is_some_and(|ts| ts as f64 >= t0_us);
        if history_reaches_window {
            let open_at_end: rustc_hash::FxHashSet<u64> = made
                .iter()
                .filter(|(_, f)| f.is_none())
                .map(|&(a, _)| t.memory[a].addr)
                .collect();
            let mut unseen: Vec<_> = seg_blocks
                .values()
                .filter(|b| !last_alloc.contains_key(&b.address))
                .filter(|b| !open_at_end.contains(&b.address))
                .collect();
            unseen.sort_by_key(|b| b.address);
            for b in unseen {
                let requested = round_block(b.requested_size.unwrap_or(b.size) as i64);
                pre.push(s, b.address, b.size as i64, requested, b.stack);
            }
        }
        Some(pre)
    }
}
