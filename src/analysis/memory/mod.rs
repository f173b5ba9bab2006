//! Tensor memory: every allocator block alive during the profile, what it is (category), who
//! made it, who freed it, and the breakdown by category at any moment.
//!
//! ```text
//!  snapshot history (from program start) ──▶ blocks alive when the window opens: parameters,
//!                                             optimizer state, last step's gradients (by stack)
//!  trace [memory] events (the window)    ──▶ blocks made in the window: category by the phase
//!                                             that made them and how long they live
//!  Total Allocated (the trace)           ──▶ the truth each breakdown adds up to: what the two
//!                                             sources cannot name is OTHER
//! ```
//!
//! In-window rule (a block's allocating node's phase, then its lifetime):
//! forward → ACT if alive when the iteration's backward starts, else TEMP; backward → GRAD if
//! alive after the backward pass, else TEMP; optimizer → OPT_STATE if alive after the iteration,
//! else TEMP; input copies before the forward → INPUT; anything else → TEMP if freed in its
//! iteration, else OTHER.

use rayon::prelude::*;
use rustc_hash::FxHashMap;

use super::step::Step;
use crate::diagnostics::Diagnostics;
use crate::model::kineto::ThreadId;
use crate::model::snapshot::{Action, Snapshot, StackId, TraceEntry};
use crate::model::Trace;

mod naming;
mod replay;
#[cfg(test)]
mod tests;
mod timeline;

use naming::{
    category_from_frames, in_window_category, kept_category, name_stackless, workspace_sized,
};
pub use replay::{replay, replay_input, Replay};
pub use steptrace_formats::summary::{Category, CATEGORIES, CATEGORY_COUNT};
pub use timeline::{timeline, TimelineRow};

/// One allocator block.
#[derive(Debug, Clone, PartialEq)]
pub struct Block {
    /// Address.
    pub addr: u64,
    /// Bytes.
    pub size: i64,
    /// Allocation time, trace ns (`i64::MIN` for blocks made before the window).
    pub alloc: i64,
    /// Free time, trace ns; `None` if alive at the end.
    pub free: Option<i64>,
    /// Category.
    pub category: Category,
    /// Index into `step.nodes` of the node that allocated it.
    pub producer: Option<usize>,
    /// Index into `step.nodes` of the node that freed it.
    pub freer: Option<usize>,
    /// Iteration it was allocated in.
    pub iteration: Option<u32>,
}

/// Bytes per category, in [`CATEGORIES`] order.
pub type Breakdown = [i64; CATEGORY_COUNT];

/// The blocks of the profile and the allocator's own totals.
#[derive(Debug, Clone, Default)]
pub struct Memory {
    /// Blocks, made-before-the-window first, then in allocation order.
    pub blocks: Vec<Block>,
    /// Bytes alive before the window that neither the snapshot nor a later free accounts for.
    pub unexplained_before: i64,
    /// Whether pre-window blocks come from a snapshot.
    pub from_snapshot: bool,
    /// For each allocator event of the trace, in order: its block, node and iteration.
    pub events: Vec<EventPlace>,
}

/// Where one allocator event of the trace falls.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EventPlace {
    /// The block (index into [`Memory::blocks`]) it allocates or frees.
    pub block: Option<usize>,
    /// The node (index into `Step::nodes`) running on its thread at its time.
    pub node: Option<usize>,
    /// The iteration holding its time.
    pub iteration: Option<u32>,
}

impl Memory {
    /// The block allocator event `ei` allocates or frees.
    pub fn event_block(&self, ei: usize) -> Option<usize> {
        self.events.get(ei).and_then(|e| e.block)
    }
}

/// Finds the node (index into `step.nodes`) running on `thread` at `ts`.
struct NodeIndex {
    per_thread: FxHashMap<ThreadId, Vec<(i64, i64, usize)>>,
}

impl NodeIndex {
    fn new(t: &Trace, step: &Step) -> NodeIndex {
        let mut per_thread: FxHashMap<ThreadId, Vec<(i64, i64, usize)>> = FxHashMap::default();
        for (i, n) in step.nodes.iter().enumerate() {
            let o = t.op(n.op);
            per_thread
                .entry(o.thread)
                .or_default()
                .push((o.start, o.end(), i));
        }
        for v in per_thread.values_mut() {
            v.sort_unstable();
        }
        NodeIndex { per_thread }
    }

    fn at(&self, thread: ThreadId, ts: i64) -> Option<usize> {
        let v = self.per_thread.get(&thread)?;
        let i = v.partition_point(|x| x.0 <= ts);
        let (s, e, n) = *v.get(i.checked_sub(1)?)?;
        (ts >= s && ts <= e).then_some(n)
    }
}

/// Bytes the caching allocator hands out for a request: whole 512-byte units.
pub fn round_block(bytes: i64) -> i64 {
    ((bytes.max(1) + 511) / 512) * 512
}

/// Builds the blocks and their categories from the events' [`replay`].
pub fn compute(t: &Trace, step: &Step, replay: Replay, diag: &mut Diagnostics) -> Memory {
    let Replay {
        blocks: made,
        mut event_block,
        early_frees,
    } = replay;
    let place = place_events(t, step);
    let blocks: Vec<Block> = made
        .par_iter()
        .map(|&(a, f)| {
            let m = &t.memory[a];
            let mut b = Block {
                addr: m.addr,
                size: m.bytes,
                alloc: m.ts,
                free: f.map(|f| t.memory[f].ts),
                category: Category::Other,
                producer: place[a].0,
                freer: f.and_then(|f| place[f].0),
                iteration: place[a].1,
            };
            b.category = in_window_category(t, step, &b);
            b
        })
        .collect();

    // Blocks made before the window.
    let before_total = t.memory.first().map_or(0, |m| m.total_allocated - m.bytes);
    let snapshot = t.snapshot.as_ref().filter(|s| {
        if s.legacy_layout {
            diag.warn(
                "legacy_snapshot",
                format!(
                    "{}: a snapshot from before PyTorch 2.1 (no timed history): memory made before the window is OTHER",
                    s.path.display()
                ),
            );
        }
        !s.legacy_layout
    });
    let pre_window = snapshot.and_then(|s| PreWindow::from_snapshot(t, s, &made));
    let from_snapshot = pre_window.is_some();
    let PreWindow {
        blocks: mut pre,
        stackless,
        kept_as,
    } = pre_window.unwrap_or_default();
    // Match early frees to pre-window blocks; what the snapshot did not have stays unnamed.
    let mut by_addr: FxHashMap<u64, usize> =
        pre.iter().enumerate().map(|(i, b)| (b.addr, i)).collect();
    let mut unmatched: i64 = 0;
    let shift = pre.len();
    for e in event_block.iter_mut().flatten() {
        *e += shift;
    }
    for ei in early_frees {
        let m = &t.memory[ei];
        match by_addr.remove(&m.addr) {
            Some(i) => {
                pre[i].free = Some(m.ts);
                pre[i].freer = place[ei].0;
                event_block[ei] = Some(i);
            }
            None => unmatched -= m.bytes,
        }
    }
    if from_snapshot {
        name_stackless(&mut pre, &stackless);
    }
    for (i, b) in pre.iter_mut().enumerate() {
        if b.category == Category::Other && b.free.is_none() {
            if workspace_sized(b.size) {
                b.category = Category::Workspace;
            } else if let Some(c) = kept_as.get(i).copied().flatten() {
                b.category = c;
            }
        }
    }
    let known: i64 = pre.iter().map(|b| b.size).sum();
    let unexplained = before_total - known;
    // Allocations made before memory history started recording cannot be named; only a large
    // share is worth a warning (the samples leave 0.4-1.1% unnamed).
    if from_snapshot && unexplained.abs() * 20 > before_total.max(1) {
        diag.warn(
            "snapshot_blocks_mismatch",
            format!(
                "{} bytes alive before the window are not in the snapshot's history ({} freed in the window without a known allocation); counted as OTHER",
                unexplained, unmatched
            ),
        );
    }
    pre.extend(blocks);
    Memory {
        blocks: pre,
        unexplained_before: unexplained,
        from_snapshot,
        events: event_block
            .into_iter()
            .zip(place)
            .map(|(block, (node, iteration))| EventPlace {
                block,
                node,
                iteration,
            })
            .collect(),
    }
}

/// Each memory event's node (on its thread, at its time) and iteration: independent
/// searches, made on all threads.
fn place_events(t: &Trace, step: &Step) -> Vec<(Option<usize>, Option<u32>)> {
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
struct PreWindow {
    blocks: Vec<Block>,
    /// Per block: allocated with no stack recorded, and the bytes asked for (a block can be
    /// larger: the allocator keeps a remainder too small to split).
    stackless: Vec<(bool, i64)>,
    /// Per block: what it is if nothing else names it and it lives through the window.
    kept_as: Vec<Option<Category>>,
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
    fn from_snapshot(t: &Trace, s: &Snapshot, made: &[(usize, Option<usize>)]) -> Option<Self> {
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

impl Memory {
    /// Bytes by category alive at `ts` (trace ns), given the allocator's total then: what the
    /// blocks do not explain is OTHER, so the parts always add up to `total`.
    pub fn breakdown_at(&self, ts: i64, total: i64) -> Breakdown {
        let mut b = [0i64; CATEGORY_COUNT];
        for blk in &self.blocks {
            if blk.alloc <= ts && blk.free.is_none_or(|f| f > ts) {
                b[blk.category.index()] += blk.size;
            }
        }
        let known: i64 = b.iter().sum();
        b[Category::Other.index()] += total - known;
        b
    }

    /// [`Memory::breakdown_at`] keyed by each category's summary name.
    pub fn breakdown_by_key(
        &self,
        ts: i64,
        total: i64,
    ) -> std::collections::BTreeMap<Category, i64> {
        CATEGORIES
            .iter()
            .zip(self.breakdown_at(ts, total))
            .map(|(c, b)| (*c, b))
            .collect()
    }

    /// For every node (index into `step.nodes`, `n` of them): the category holding most of the
    /// bytes it allocated; OTHER when it allocated nothing. One pass over the blocks.
    pub fn node_categories(&self, n: usize) -> Vec<Category> {
        let mut bytes: Vec<Breakdown> = vec![[0; CATEGORY_COUNT]; n];
        for b in &self.blocks {
            if let Some(p) = b.producer.filter(|&p| p < n) {
                bytes[p][b.category.index()] += b.size;
            }
        }
        bytes
            .iter()
            .map(|by| {
                // Most bytes; ties go to the category listed first.
                let mut best: Option<(i64, Category)> = None;
                for (i, &v) in by.iter().enumerate() {
                    if v > 0 && best.is_none_or(|(bv, _)| v > bv) {
                        best = Some((v, CATEGORIES[i]));
                    }
                }
                best.map_or(Category::Other, |(_, c)| c)
            })
            .collect()
    }
}
