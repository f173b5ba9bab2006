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
use serde::Serialize;

use super::step::{Phase, Step};
use crate::diagnostics::Diagnostics;
use crate::ingest::kineto::ThreadId;
use crate::ingest::snapshot::{Action, Snapshot};
use crate::model::Trace;

/// What an allocation holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    /// Parameters.
    Param,
    /// Parameter gradients.
    Grad,
    /// Optimizer state.
    OptState,
    /// Activations: made in forward, alive when backward starts.
    Activation,
    /// Inputs copied to the device.
    Input,
    /// Short-lived: freed in the phase that made them.
    Temporary,
    /// Anything else: workspaces, what no source can name.
    Other,
}

/// All categories, in output order.
pub const CATEGORIES: [Category; 7] = [
    Category::Param,
    Category::Grad,
    Category::OptState,
    Category::Activation,
    Category::Input,
    Category::Temporary,
    Category::Other,
];

impl Category {
    /// Upper-case name (node_stats.csv `node_type`).
    pub fn as_str(self) -> &'static str {
        match self {
            Category::Param => "PARAM",
            Category::Grad => "GRAD",
            Category::OptState => "OPT_STATE",
            Category::Activation => "ACT",
            Category::Input => "INPUT",
            Category::Temporary => "TEMP",
            Category::Other => "OTHER",
        }
    }

    /// Lower-case key (summary.json, memory_timeline.csv).
    pub fn key(self) -> &'static str {
        match self {
            Category::Param => "param",
            Category::Grad => "grad",
            Category::OptState => "opt_state",
            Category::Activation => "activation",
            Category::Input => "input",
            Category::Temporary => "temporary",
            Category::Other => "other",
        }
    }

    /// Position in [`CATEGORIES`] (and in a [`Breakdown`]).
    pub(crate) fn index(self) -> usize {
        CATEGORIES.iter().position(|c| *c == self).expect("listed")
    }
}

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
pub type Breakdown = [i64; 7];

/// The blocks of the profile and the allocator's own totals.
#[derive(Debug, Clone, Default)]
pub struct Memory {
    /// Blocks, made-before-the-window first, then in allocation order.
    pub blocks: Vec<Block>,
    /// Bytes alive before the window that neither the snapshot nor a later free accounts for.
    pub unexplained_before: i64,
    /// Whether pre-window blocks come from a snapshot.
    pub from_snapshot: bool,
    /// For each allocator event of the trace (in order): the block it allocates or frees.
    pub event_block: Vec<Option<usize>>,
    /// For each allocator event: the node (index into `Step::nodes`) running on its thread at
    /// its time, and the iteration holding that time.
    pub event_place: Vec<(Option<usize>, Option<u32>)>,
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

/// Category of a block made before the window, from its allocation stack.
fn category_from_frames(s: &Snapshot, frames: &[crate::ingest::snapshot::FrameId]) -> Category {
    if frames.is_empty() {
        // Allocated off the Python thread: the autograd engine's device threads. What survives
        // to the window from there is last step's gradients.
        return Category::Grad;
    }
    for f in frames {
        let fr = &s.frames[f.0 as usize];
        let (name, file) = (s.str(fr.name), s.str(fr.filename));
        if file.contains("/optim/") || name.contains("torch::optim::") {
            return Category::OptState;
        }
        if (file.ends_with("nn/modules/module.py")
            && matches!(name, "_apply" | "cuda" | "to" | "<lambda>"))
            || name.contains("torch::nn::Module::to")
            || (file.contains("/nn/modules/") && name == "__init__")
        {
            return Category::Param;
        }
        if name.contains("torch::autograd::Engine")
            || (file.contains("autograd/") && name == "backward")
        {
            return Category::Grad;
        }
    }
    Category::Other
}

/// The allocator's events replayed in order: which block each event makes or frees. It needs
/// nothing of the step, so [`crate::analysis::run`] makes it beside the step's reconstruction.
#[derive(Debug, Default)]
pub struct Replay {
    /// Blocks made in the window, in allocation order: (allocating event, freeing event).
    blocks: Vec<(usize, Option<usize>)>,
    /// For each event: the block (index into `blocks`) it makes or frees. [`compute`] puts
    /// the blocks made before the window first and shifts these indices by their number.
    event_block: Vec<Option<usize>>,
    /// Frees of blocks made before the window, as event indices.
    early_frees: Vec<usize>,
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

/// Builds the blocks and their categories from the events' [`replay`].
pub fn compute(t: &Trace, step: &Step, replay: Replay, diag: &mut Diagnostics) -> Memory {
    let idx = NodeIndex::new(t, step);
    let Replay {
        blocks: made,
        mut event_block,
        early_frees,
    } = replay;
    // Each event's node and iteration are independent searches, made on all threads.
    let place: Vec<(Option<usize>, Option<u32>)> = t
        .memory
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
        .collect();
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
            b.category = in_window_category(step, &b);
            b
        })
        .collect();
    // (addr, bytes, ts, node, event index) of frees of blocks made before the window.
    let early_frees: Vec<(u64, i64, i64, Option<usize>, usize)> = early_frees
        .into_iter()
        .map(|ei| {
            let m = &t.memory[ei];
            (m.addr, -m.bytes, m.ts, place[ei].0, ei)
        })
        .collect();

    // Blocks made before the window.
    let before_total = t.memory.first().map_or(0, |m| m.total_allocated - m.bytes);
    let t0 = t.memory.first().map_or(0, |m| m.ts);
    let mut pre: Vec<Block> = Vec::new();
    let mut from_snapshot = false;
    if let Some(s) = t.snapshot.as_ref().filter(|s| {
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
    }) {
        let dev = t.device.unwrap_or(0).max(0) as usize;
        if let Some(entries) = s.device_traces.get(dev) {
            from_snapshot = true;
            let t0_us = t.kineto.epoch_us(t0);
            let mut alive: FxHashMap<u64, (u64, crate::ingest::snapshot::TraceEntry)> =
                FxHashMap::default();
            for e in entries {
                let Some(ts) = e.time_us else { continue };
                if ts as f64 >= t0_us {
                    break;
                }
                match e.action {
                    Action::Alloc => {
                        alive.insert(e.addr, (e.size, e.clone()));
                    }
                    Action::FreeRequested | Action::FreeCompleted => {
                        alive.remove(&e.addr);
                    }
                    _ => {}
                }
            }
            let mut v: Vec<_> = alive.into_values().collect();
            v.sort_by_key(|(_, e)| (e.time_us, e.addr));
            for (size, e) in v {
                pre.push(Block {
                    addr: e.addr,
                    // History records the requested size; the allocator (and the trace's
                    // Total Allocated) counts whole 512-byte units.
                    size: round_block(size as i64),
                    alloc: i64::MIN,
                    free: None,
                    category: category_from_frames(s, s.stack(e.stack)),
                    producer: None,
                    freer: None,
                    iteration: None,
                });
            }
            // Made off the Python thread and still alive: gradients mirror the parameters one
            // for one, so a block sized like an unmatched parameter is one; the rest (the
            // autograd threads' cuBLAS workspaces) is not.
            let mut param_sizes: FxHashMap<i64, usize> = FxHashMap::default();
            for b in pre.iter().filter(|b| b.category == Category::Param) {
                *param_sizes.entry(b.size).or_default() += 1;
            }
            for b in pre.iter_mut().filter(|b| b.category == Category::Grad) {
                match param_sizes.get_mut(&b.size) {
                    Some(n) if *n > 0 => *n -= 1,
                    _ => b.category = Category::Other,
                }
            }
        }
    }
    // Match early frees to pre-window blocks; what the snapshot did not have stays unnamed.
    let mut by_addr: FxHashMap<u64, usize> =
        pre.iter().enumerate().map(|(i, b)| (b.addr, i)).collect();
    let mut unmatched: i64 = 0;
    let shift = pre.len();
    for e in event_block.iter_mut().flatten() {
        *e += shift;
    }
    for (addr, bytes, ts, node, ei) in early_frees {
        match by_addr.remove(&addr) {
            Some(i) => {
                pre[i].free = Some(ts);
                pre[i].freer = node;
                event_block[ei] = Some(i);
            }
            None => unmatched += bytes,
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
        event_block,
        event_place: place,
    }
}

fn in_window_category(step: &Step, b: &Block) -> Category {
    let Some(it) = b.iteration.map(|i| &step.iterations[i as usize]) else {
        return Category::Other;
    };
    let freed_in = |end: i64| b.free.is_some_and(|f| f <= end);
    let Some(n) = b.producer.map(|p| &step.nodes[p]) else {
        return if freed_in(it.end) {
            Category::Temporary
        } else {
            Category::Other
        };
    };
    match n.phase {
        Phase::Forward => match it.backward {
            Some((bs, _)) if freed_in(bs) => Category::Temporary,
            None if freed_in(it.end) => Category::Temporary,
            _ => Category::Activation,
        },
        Phase::Backward => match it.backward {
            Some((_, be)) if freed_in(be) => Category::Temporary,
            _ => Category::Grad,
        },
        Phase::Optimizer => {
            if freed_in(it.end) {
                Category::Temporary
            } else {
                Category::OptState
            }
        }
        Phase::Other if it.backward.is_none_or(|(bs, _)| b.alloc < bs) && !freed_in(b.alloc) => {
            if freed_in(it.end)
                && it
                    .backward
                    .is_some_and(|(bs, _)| b.free.is_some_and(|f| f < bs))
            {
                Category::Temporary
            } else {
                Category::Input
            }
        }
        _ => {
            if freed_in(it.end) {
                Category::Temporary
            } else {
                Category::Other
            }
        }
    }
}

impl Memory {
    /// Bytes by category alive at `ts` (trace ns), given the allocator's total then: what the
    /// blocks do not explain is OTHER, so the parts always add up to `total`.
    pub fn breakdown_at(&self, ts: i64, total: i64) -> Breakdown {
        let mut b = [0i64; 7];
        for blk in &self.blocks {
            if blk.alloc <= ts && blk.free.is_none_or(|f| f > ts) {
                b[blk.category.index()] += blk.size;
            }
        }
        let known: i64 = b.iter().sum();
        b[Category::Other.index()] += total - known;
        b
    }

    /// For every node (index into `step.nodes`, `n` of them): the category holding most of the
    /// bytes it allocated; OTHER when it allocated nothing. One pass over the blocks.
    pub fn node_categories(&self, n: usize) -> Vec<Category> {
        let mut bytes: Vec<[i64; 7]> = vec![[0; 7]; n];
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

/// One row of `memory_timeline.csv`: the state after one allocator event.
#[derive(Debug, Clone, PartialEq)]
pub struct TimelineRow {
    /// Trace ns.
    pub ts: i64,
    /// Iteration label, when inside one.
    pub iteration: Option<u32>,
    /// Rank of the node running on the event's thread, when one is.
    pub node: Option<usize>,
    /// `Total Allocated`.
    pub total: i64,
    /// By category.
    pub breakdown: Breakdown,
}

/// The breakdown after every allocator event, computed incrementally in event order: each
/// event moves its block's bytes in or out of the block's category; what no block explains is
/// OTHER, so every row adds up to `Total Allocated`.
pub fn timeline(t: &Trace, mem: &Memory) -> Vec<TimelineRow> {
    let mut cur = [0i64; 7];
    for b in mem.blocks.iter().filter(|b| b.alloc == i64::MIN) {
        cur[b.category.index()] += b.size;
    }
    t.memory
        .iter()
        .zip(&mem.event_block)
        .zip(&mem.event_place)
        .map(|((m, &block), &(node, iteration))| {
            if let Some(bi) = block {
                let b = &mem.blocks[bi];
                let c = b.category.index();
                cur[c] += if m.bytes > 0 { b.size } else { -b.size };
            }
            let mut b = cur;
            let known: i64 = b.iter().sum();
            b[Category::Other.index()] += m.total_allocated - known;
            TimelineRow {
                ts: m.ts,
                iteration,
                node,
                total: m.total_allocated,
                breakdown: b,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replay_pairs_frees_with_the_latest_allocation_at_their_address() {
        let events = [
            (0x10, 512),  // 0: block 0
            (0x20, -512), // 1: made before the window
            (0x10, 1024), // 2: block 1 at the same address; block 0 is never freed
            (0x10, -1024),
            (0x10, 0), // 4: nothing open at 0x10 any more: an early free
            (0x30, 512),
        ];
        let r = replay(&events);
        assert_eq!(r.blocks, [(0, None), (2, Some(3)), (5, None)]);
        assert_eq!(
            r.event_block,
            [Some(0), None, Some(1), Some(1), None, Some(2)]
        );
        assert_eq!(r.early_frees, [1, 4]);
    }
}
