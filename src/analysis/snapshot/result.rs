//! What a snapshot's analysis holds: devices' memory, the timeline, the peak and what was alive at it, intervals, segments.

use super::*;

/// Everything the snapshot analysis found.
#[derive(Debug, Clone, Serialize)]
pub struct SnapshotAnalysis {
    /// The snapshot's file name.
    pub file: String,
    /// History entries on all devices.
    pub entries: usize,
    /// Devices past [`super::MAX_DEVICES`] not analysed (the smallest).
    pub devices_left_out: usize,
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
