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
mod pre_window;
mod queries;
mod replay;
#[cfg(test)]
mod tests;
mod timeline;
use self::pre_window::{place_events, PreWindow};

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
