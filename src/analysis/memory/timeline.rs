//! `memory_timeline.csv`'s rows: the breakdown after every allocator event.

use super::{Breakdown, Category, EventPlace, Memory, CATEGORY_COUNT};
use crate::model::Trace;

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
    let mut cur = [0i64; CATEGORY_COUNT];
    for b in mem.blocks.iter().filter(|b| b.alloc == i64::MIN) {
        cur[b.category.index()] += b.size;
    }
    t.memory
        .iter()
        .zip(&mem.events)
        .map(
            |(
                m,
                &EventPlace {
                    block,
                    node,
                    iteration,
                },
            )| {
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
            },
        )
        .collect()
}
