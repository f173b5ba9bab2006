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
pub mod sites;
mod walk;

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

/// Everything the snapshot analysis found.
#[derive(Debug, Clone, Serialize)]
pub struct SnapshotAnalysis {
    /// The snapshot's file name.
    pub file: String,
    /// History entries on all devices.
    pub entries: usize,
    /// Whether the snapshot predates PyTorch 2.1's timed `device_traces`.
    pub legacy_layout: bool,
    /// Earliest `time_us` of any entry or annotation (the zero of every `time_ms`).
    pub t0_us: Option<i64>,
    /// Per device with segments or history, by device index.
    pub devices: Vec<DeviceMemory>,
    /// The allocator's segments at the snapshot's end, memory_viz `stats`'s totals.
    pub segments: SegmentTotals,
    /// One row per segment at the end.
    pub segment_rows: Vec<SegmentRow>,
    /// Private memory pools at the end (CUDA graphs', torch.compile's cudagraph trees'), by
    /// pool id: memory reserved for their graphs' replays, which the default pool cannot
    /// use; left out of the free-memory and fragmentation figures of `segments`.
    pub private_pools: Vec<PrivatePool>,
    /// Annotated ranges (`external_annotations`: `record_function` ranges the allocator saw).
    pub phases: Vec<AnnotatedRange>,
}

/// One device's memory over the history.
#[derive(Debug, Clone, Serialize)]
pub struct DeviceMemory {
    /// Device index.
    pub device: i64,
    /// History entries.
    pub entries: usize,
    /// Allocated and reserved bytes over the history (at most [`TIMELINE_POINTS`]).
    pub timeline: Vec<TimelinePoint>,
    /// Allocated bytes before the first entry (blocks the history never saw made).
    pub start_allocated_bytes: u64,
    /// Allocated bytes at the end (the segments' active blocks).
    pub end_allocated_bytes: u64,
    /// Reserved bytes at the end (the segments' sizes).
    pub end_reserved_bytes: u64,
    /// Most reserved at any entry.
    pub peak_reserved_bytes: u64,
    /// The most allocated at once.
    pub peak: Peak,
    /// Blocks allocated within the history and alive at its end, grouped by stack (by the
    /// stack's text, not by how the pickle shares it), most bytes first, the first [`TOP`]:
    /// what a leak looks like, and what a model's state looks like too.
    pub never_freed: Vec<NeverFreed>,
    /// All of them, before the list is cut: bytes, blocks and stacks.
    pub never_freed_total: NeverFreedTotal,
    /// The [`KEPT_INTERVALS`] largest allocations of the history (ties: the earliest made),
    /// each with its life in entries, in the order they were made: what the interactive view
    /// draws one by one. Only these are kept, whatever the history's length.
    #[serde(skip)]
    pub intervals: Vec<Interval>,
    /// Allocations in the history in all (alive at its start, or made in it).
    pub allocations: usize,
    /// The largest allocation not among [`DeviceMemory::intervals`], bytes.
    pub largest_not_kept: u64,
    /// Entry times, to place annotated ranges in the history.
    #[serde(skip)]
    pub time_index: TimeIndex,
}

/// One point of the timeline.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct TimelinePoint {
    /// History entry index (the state after it).
    pub entry: usize,
    /// Unix-epoch µs of the entry, where recorded.
    pub time_us: Option<i64>,
    /// Bytes in allocated blocks.
    pub allocated_bytes: u64,
    /// Bytes in segments.
    pub reserved_bytes: u64,
}

/// The most memory allocated at once on a device.
#[derive(Debug, Clone, Serialize)]
pub struct Peak {
    /// Bytes allocated.
    pub allocated_bytes: u64,
    /// The entry after which it is reached first (`None`: before the first entry).
    pub entry: Option<usize>,
    /// Its time, where recorded.
    pub time_us: Option<i64>,
    /// The innermost annotated range around it (`ProfilerStep#3`, `Optimizer.step#...`).
    pub phase: Option<String>,
    /// Blocks alive at it, largest first.
    pub alive: Vec<AliveBlock>,
    /// Bytes alive at it by the code that allocated them.
    pub by_kind: Vec<KindBytes>,
    /// Bytes alive at it by innermost Python frame of the program (or of a library).
    pub by_python_frame: Vec<Site>,
    /// Bytes alive at it by innermost C++ frame that is not allocator or dispatcher plumbing.
    pub by_cpp_frame: Vec<Site>,
    /// Bytes alive at it by whole stack, in torch's flame-graph form (`_memory_viz memory`).
    pub stacks: Vec<(String, u64)>,
}

/// A block alive at the peak.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct AliveBlock {
    /// Address.
    pub addr: u64,
    /// Bytes (the allocator's block size).
    pub size: u64,
    /// CUDA stream.
    pub stream: i64,
    /// Where it was allocated.
    #[serde(skip)]
    pub stack: StackId,
    /// The entry that made it (`None`: before the history).
    pub made_at: Option<usize>,
    /// The entry that freed it (`None`: alive at the end).
    pub freed_at: Option<usize>,
    /// What kind of code made it.
    pub kind: SiteKind,
}

/// An allocation's life, in history entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interval {
    /// Address.
    pub addr: u64,
    /// Bytes.
    pub size: u64,
    /// Made at (`None`: before the history).
    pub made: Option<u32>,
    /// Freed at (`None`: alive at the end).
    pub freed: Option<u32>,
    /// Where it was allocated.
    pub stack: StackId,
}

/// Every block allocated within the history and never freed in it, however many stacks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct NeverFreedTotal {
    /// Bytes.
    pub bytes: u64,
    /// Blocks.
    pub blocks: usize,
    /// Distinct stacks.
    pub stacks: usize,
}

/// Blocks of one stack allocated within the history and never freed in it.
#[derive(Debug, Clone, Serialize)]
pub struct NeverFreed {
    /// The stack, torch's flame-graph form.
    pub stack: String,
    /// Innermost frame of the program's own code.
    pub site: String,
    /// What kind of code.
    pub kind: SiteKind,
    /// Blocks.
    pub blocks: usize,
    /// Bytes.
    pub bytes: u64,
    /// First and last entry that made one.
    pub first_entry: usize,
    /// Last.
    pub last_entry: usize,
}

/// One segment at the end.
#[derive(Debug, Clone, Serialize)]
pub struct SegmentRow {
    /// Device.
    pub device: i64,
    /// Base address.
    pub address: u64,
    /// Stream.
    pub stream: i64,
    /// `large` or `small` pool.
    pub pool: String,
    /// Bytes.
    pub total_bytes: u64,
    /// Asked-for bytes in active blocks.
    pub allocated_bytes: u64,
    /// Rounding inside active blocks.
    pub free_internal_bytes: u64,
    /// Inactive blocks.
    pub free_external_bytes: u64,
    /// Blocks.
    pub blocks: usize,
    /// Active blocks.
    pub active_blocks: usize,
}

/// An annotated range from `external_annotations`.
#[derive(Debug, Clone, Serialize)]
pub struct AnnotatedRange {
    /// Range name.
    pub name: String,
    /// Device.
    pub device: i64,
    /// Start, Unix-epoch µs.
    pub start_us: i64,
    /// End (`None`: no END recorded).
    pub end_us: Option<i64>,
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
        legacy_layout: s.legacy_layout,
        t0_us,
        devices,
        segments,
        segment_rows,
        private_pools,
        phases,
    }
}

fn by_kind(alive: &[AliveBlock]) -> Vec<KindBytes> {
    let mut v: Vec<KindBytes> = SITE_KINDS
        .iter()
        .map(|&kind| KindBytes {
            kind,
            bytes: 0,
            blocks: 0,
        })
        .collect();
    for b in alive {
        let k = &mut v[b.kind as usize];
        k.bytes += b.size;
        k.blocks += 1;
    }
    v.retain(|k| k.blocks > 0);
    v.sort_by_key(|k| (std::cmp::Reverse(k.bytes), k.kind));
    v
}

/// The never-freed blocks grouped by their stack's text (two stacks of equal frames are one
/// group whether or not the pickle shared the object), the first [`TOP`] by bytes, and the
/// totals over all of them, taken before the cut (100 stacks of 1 MiB are 100 MiB, not the
/// 50 MiB the list holds).
fn never_freed(s: &Snapshot, intervals: &[Interval]) -> (Vec<NeverFreed>, NeverFreedTotal) {
    let mut text: FxHashMap<StackId, std::rc::Rc<str>> = FxHashMap::default();
    let mut by_stack: FxHashMap<std::rc::Rc<str>, NeverFreed> = FxHashMap::default();
    let mut total = NeverFreedTotal::default();
    for v in intervals {
        let Some(m) = v.made else { continue };
        let m = m as usize;
        let key = text
            .entry(v.stack)
            .or_insert_with(|| collapsed_line(s, 0, v.stack).into())
            .clone();
        let n = by_stack.entry(key.clone()).or_insert_with(|| NeverFreed {
            stack: key.to_string(),
            site: sites::python_site(s, s.stack(v.stack))
                .or_else(|| sites::cpp_site(s, s.stack(v.stack)))
                .unwrap_or_else(|| sites::NO_STACK.to_owned()),
            kind: sites::kind(s, s.stack(v.stack)),
            blocks: 0,
            bytes: 0,
            first_entry: m,
            last_entry: m,
        });
        n.blocks += 1;
        n.bytes += v.size;
        n.first_entry = n.first_entry.min(m);
        n.last_entry = n.last_entry.max(m);
        total.blocks += 1;
        total.bytes += v.size;
    }
    total.stacks = by_stack.len();
    let mut v: Vec<NeverFreed> = by_stack.into_values().collect();
    v.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.stack.cmp(&b.stack)));
    v.truncate(TOP);
    (v, total)
}

fn phases(s: &Snapshot) -> Vec<AnnotatedRange> {
    let mut open: FxHashMap<(i64, &str), Vec<usize>> = FxHashMap::default();
    let mut v: Vec<AnnotatedRange> = Vec::new();
    let mut ann: Vec<_> = s.annotations.iter().collect();
    ann.sort_by_key(|a| (a.time_us, !a.start));
    for a in ann {
        let name = s.str(a.name);
        if a.start {
            open.entry((a.device, name)).or_default().push(v.len());
            v.push(AnnotatedRange {
                name: name.to_owned(),
                device: a.device,
                start_us: a.time_us,
                end_us: None,
            });
        } else if let Some(i) = open.get_mut(&(a.device, name)).and_then(Vec::pop) {
            v[i].end_us = Some(a.time_us);
        }
    }
    v
}

/// The shortest range on `device` around `t`.
fn innermost_phase(phases: &[AnnotatedRange], device: i64, t: i64) -> Option<String> {
    phases
        .iter()
        .filter(|p| p.device == device && p.start_us <= t && p.end_us.is_some_and(|e| t <= e))
        .min_by_key(|p| p.end_us.unwrap_or(i64::MAX) - p.start_us)
        .map(|p| p.name.clone())
}

/// memory_viz `stats`'s totals and rows, and the private pools. A private pool's segments
/// count in the reserved bytes (torch's `memory_reserved` holds them) but not in the free and
/// fragmentation figures: their free blocks are a graph's workspace, reused by each replay,
/// not memory the program's other allocations can take.
pub(crate) fn segment_totals(s: &Snapshot) -> (SegmentTotals, Vec<SegmentRow>, Vec<PrivatePool>) {
    let mut t = SegmentTotals {
        segments: s.segments.len(),
        ..Default::default()
    };
    let mut rows = Vec::with_capacity(s.segments.len());
    let mut pools: std::collections::BTreeMap<(i64, (i64, i64)), PrivatePool> = Default::default();
    for g in &s.segments {
        let private = g.pool.filter(|&p| p != (0, 0));
        let kind = g
            .segment_type
            .map(|p| s.str(p).to_owned())
            .unwrap_or_default();
        let mut r = SegmentRow {
            device: g.device,
            address: g.address,
            stream: g.stream,
            pool: match private {
                Some((a, b)) => format!("{kind} private {a},{b}"),
                None => kind,
            },
            total_bytes: g.total_size,
            allocated_bytes: 0,
            free_internal_bytes: 0,
            free_external_bytes: 0,
            blocks: g.blocks.len(),
            active_blocks: 0,
        };
        for b in &g.blocks {
            if s.str(b.state) == "active_allocated" {
                let asked = b.requested_size.unwrap_or(b.size).min(b.size);
                r.allocated_bytes += asked;
                r.free_internal_bytes += b.size - asked;
                r.active_blocks += 1;
            } else {
                r.free_external_bytes += b.size;
                if s.str(b.state) == "inactive" && private.is_none() {
                    t.largest_free_block_bytes = t.largest_free_block_bytes.max(b.size);
                }
            }
        }
        t.reserved_bytes += g.total_size;
        if let Some(id) = private {
            let p = pools.entry((g.device, id)).or_insert_with(|| PrivatePool {
                device: g.device,
                id: format!("{},{}", id.0, id.1),
                segments: 0,
                reserved_bytes: 0,
                allocated_bytes: 0,
            });
            p.segments += 1;
            p.reserved_bytes += g.total_size;
            p.allocated_bytes += r.allocated_bytes;
            t.allocated_bytes += r.allocated_bytes;
            rows.push(r);
            continue;
        }
        t.allocated_bytes += r.allocated_bytes;
        t.free_internal_bytes += r.free_internal_bytes;
        t.free_external_bytes += r.free_external_bytes;
        rows.push(r);
    }
    let free = t.free_internal_bytes + t.free_external_bytes;
    if free > 0 {
        t.internal_pct = Some(100.0 * t.free_internal_bytes as f64 / free as f64);
    }
    if t.free_external_bytes > 0 {
        t.fragmentation_pct = Some(
            100.0
                * (t.free_external_bytes - t.largest_free_block_bytes.min(t.free_external_bytes))
                    as f64
                / t.free_external_bytes as f64,
        );
    }
    rows.sort_by_key(|r| (r.device, r.address));
    (t, rows, pools.into_values().collect())
}

/// memory_viz `memory`'s flame-graph lines for the state at the snapshot's end: every block
/// of every segment, active or not, at what was asked for, and the rest as `<gaps>`. As torch
/// does, an inactive block keeps the size last asked of it, which can exceed the block (it
/// was split since): its gap is then negative.
pub fn end_stacks(s: &Snapshot) -> Vec<(String, i64)> {
    let mut m: FxHashMap<String, i64> = FxHashMap::default();
    for g in &s.segments {
        for b in &g.blocks {
            let state = s.str(b.state);
            let asked = b.requested_size.unwrap_or(b.size) as i64;
            let prefix = format!("stream_{};{state};", g.stream);
            *m.entry(format!("{prefix}{}", sites::fragment(s, b.stack)))
                .or_default() += asked;
            let gaps = b.size as i64 - asked;
            if gaps != 0 {
                *m.entry(format!("{prefix}<gaps>")).or_default() += gaps;
            }
        }
    }
    let mut v: Vec<(String, i64)> = m.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    v
}

fn sorted(m: FxHashMap<String, u64>) -> Vec<(String, u64)> {
    let mut v: Vec<(String, u64)> = m.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    v
}

#[cfg(test)]
mod tests;
