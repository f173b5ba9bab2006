//! A memory snapshot on its own (the memory_viz workflow): each device's allocated and reserved
//! memory over the recorded history, the peak and what is alive at it, where that memory was
//! allocated (by Python frame, by C++ frame, by kind of code, and as collapsed stacks for a
//! flame graph), the segments and their fragmentation as memory_viz's `stats` gives them,
//! allocations the history never saw freed, and the annotated ranges (steps, optimizer) as
//! phases.
//!
//! The replay follows memory_viz's Active Memory Timeline: the state at the snapshot's end is
//! its segments' `active_allocated` blocks; walking the history back from there gives the state
//! before its first entry, and walking it forward again gives the memory at every entry. A
//! block counts from its `alloc` to its `free_completed` (the moment the allocator takes it
//! back, as `torch.cuda.max_memory_allocated` counts), at the allocator's size for it.

mod compare;
mod result;
pub mod sites;
mod totals;
mod walk;
pub use self::result::{
    AliveBlock, AnnotatedRange, DeviceMemory, Interval, NeverFreed, NeverFreedTotal, Peak,
    SegmentRow, SnapshotAnalysis, TimelinePoint,
};
pub use self::totals::end_stacks;
pub(crate) use self::totals::segment_totals;
use self::totals::{by_kind, innermost_phase, never_freed, phases, sorted};

use rustc_hash::FxHashMap;
use serde::Serialize;

use crate::model::snapshot::{Action, Snapshot, StackId, TraceEntry};

pub use compare::{compare, Growth, SiteBy};
pub use sites::{collapsed_line, format_frame, torch_keeps_frame, Site, SiteKind, SITE_KINDS};
pub use steptrace_formats::summary::{KindBytes, PrivatePool, SegmentTotals};
use walk::device_memory;
pub use walk::{Replay, ReplayThread, TimeIndex};

/// Most points of a device's timeline kept for the outputs: beyond this, each bucket of
/// entries keeps its highest point (so the peak and every spike stay visible).
pub const TIMELINE_POINTS: usize = 10_000;

/// Most never-freed stacks kept, and top sites written.
pub const TOP: usize = 50;

/// Allocations kept one by one for the interactive view (memory_viz draws 15,000 at most by
/// default and summarises the rest); the view lays each out in the browser.
pub const KEPT_INTERVALS: usize = 5_000;

/// Most devices analysed: a machine has a few (16 GPUs on the largest hosts); each costs its
/// timeline and its part of the page, so a snapshot naming thousands (a forged one) would cost
/// memory and output out of proportion to what it holds.
pub const MAX_DEVICES: usize = 64;

/// Cuts `devices` (sorted) to the [`MAX_DEVICES`] with the most segment bytes and history
/// entries, kept in device order; returns how many were left out.
fn keep_largest_devices(
    s: &Snapshot,
    r: &Replay,
    lists: &[Option<usize>],
    devices: &mut Vec<i64>,
) -> usize {
    if devices.len() <= MAX_DEVICES {
        return 0;
    }
    let mut weight: rustc_hash::FxHashMap<i64, (u64, usize)> = Default::default();
    for g in &s.segments {
        weight.entry(g.device).or_default().0 += g.total_size;
    }
    for (d, l) in lists.iter().enumerate() {
        if let Some(l) = l {
            weight.entry(d as i64).or_default().1 += r.len(*l);
        }
    }
    let n = devices.len();
    devices.sort_by_key(|d| {
        let w = weight.get(d).copied().unwrap_or_default();
        (std::cmp::Reverse(w), *d)
    });
    devices.truncate(MAX_DEVICES);
    devices.sort_unstable();
    n - MAX_DEVICES
}

/// The warning for the devices past [`MAX_DEVICES`] left out, if any.
pub fn devices_left_out_warning(a: &SnapshotAnalysis, path: &std::path::Path) -> Option<String> {
    (a.devices_left_out > 0).then(|| {
        format!(
            "{}: the snapshot names {} devices; the {MAX_DEVICES} with the most memory and history are analysed, {} left out",
            path.display(),
            a.devices.len() + a.devices_left_out,
            a.devices_left_out
        )
    })
}

/// Analyses a snapshot whose history was read whole (`device_traces`).
pub fn analyze(s: &Snapshot) -> SnapshotAnalysis {
    let mut r = Replay::default();
    for (d, t) in s.device_traces.iter().enumerate() {
        r.feed(d, t);
    }
    let lists: Vec<Option<usize>> = (0..s.device_traces.len()).map(Some).collect();
    finish(s, r, &lists)
}

/// Analyses a snapshot whose history a read streamed to `r` (see
/// `ingest::snapshot::load_streamed`).
pub fn analyze_streamed(s: &Snapshot, r: Replay) -> SnapshotAnalysis {
    finish(s, r, &s.streamed)
}

/// The analysis from each device's replayed history list (`lists[d]`: device `d`'s).
fn finish(s: &Snapshot, mut r: Replay, lists: &[Option<usize>]) -> SnapshotAnalysis {
    let mut devices: Vec<i64> = s.segments.iter().map(|g| g.device).collect();
    devices.extend(
        lists
            .iter()
            .enumerate()
            .filter(|(_, l)| l.is_some_and(|l| r.has(l)))
            .map(|(i, _)| i as i64),
    );
    devices.sort_unstable();
    devices.dedup();
    let devices_left_out = keep_largest_devices(s, &r, lists, &mut devices);
    let phases = phases(s);
    let t0_us = r
        .t_min()
        .into_iter()
        .chain(s.annotations.iter().map(|a| a.time_us))
        .min();
    let devices: Vec<DeviceMemory> = devices
        .into_iter()
        .map(|d| {
            let list = usize::try_from(d)
                .ok()
                .and_then(|d| lists.get(d).copied().flatten());
            device_memory(s, d, list.and_then(|l| r.take(l)), &phases)
        })
        .collect();
    let (segments, segment_rows, private_pools) = segment_totals(s);
    SnapshotAnalysis {
        file: s
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        entries: devices.iter().map(|d| d.entries).sum(),
        devices_left_out,
        legacy_layout: s.legacy_layout,
        t0_us,
        devices,
        segments,
        segment_rows,
        private_pools,
        phases,
    }
}

#[cfg(test)]
mod tests;
