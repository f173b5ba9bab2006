//! The tables a CUDA caching-allocator memory snapshot becomes (ingest's pickle reader fills
//! them): frames, stacks, segments and blocks alive at its end, and each device's history.

use std::path::PathBuf;

use crate::intern::{Interner, StrId};

/// Index of a frame in [`Snapshot::frames`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FrameId(pub u32);

/// One stack frame (Python or C++).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Frame {
    /// Function.
    pub name: StrId,
    /// File.
    pub filename: StrId,
    /// Line (0 for C++ frames without line info).
    pub line: i64,
}

/// What a trace entry records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Action {
    /// A block handed to a tensor.
    Alloc,
    /// The tensor released the block (stream uses may still be pending).
    FreeRequested,
    /// The block returned to the cache.
    FreeCompleted,
    /// cudaMalloc of a new segment.
    SegmentAlloc,
    /// cudaFree of a segment.
    SegmentFree,
    /// Segment mapped (expandable segments).
    SegmentMap,
    /// Segment unmapped.
    SegmentUnmap,
    /// Snapshot taken.
    Snapshot,
    /// Out of memory.
    Oom,
    /// An action this reader does not know.
    Other,
}

/// One allocator history entry of `device_traces`.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceEntry {
    /// What happened.
    pub action: Action,
    /// Block or segment address.
    pub addr: u64,
    /// Bytes.
    pub size: u64,
    /// CUDA stream.
    pub stream: i64,
    /// Unix-epoch µs (absent before PyTorch 2.1).
    pub time_us: Option<i64>,
    /// Stack at the event ([`Snapshot::stack`] gives its frames, innermost first).
    pub stack: StackId,
}

/// Index of a distinct stack in [`Snapshot::stacks`]: millions of history entries share a few
/// thousand stacks, so each entry holds 4 bytes instead of a vector of frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StackId(pub u32);

/// A segment (one cudaMalloc) alive when the snapshot was taken.
#[derive(Debug, Clone, PartialEq)]
pub struct Segment {
    /// Device index.
    pub device: i64,
    /// Base address.
    pub address: u64,
    /// Size, bytes.
    pub total_size: u64,
    /// Bytes in allocated blocks.
    pub allocated_size: u64,
    /// Stream.
    pub stream: i64,
    /// "large" or "small" pool.
    pub segment_type: Option<StrId>,
    /// `segment_pool_id`: `(0, 0)` is the allocator's default pool; any other is a private
    /// pool (a CUDA graph's, torch.compile's cudagraph trees, `torch.cuda.MemPool`), whose
    /// memory stays reserved for its graphs whether or not a block is allocated in it.
    pub pool: Option<(i64, i64)>,
    /// Blocks: (address, size, state).
    pub blocks: Vec<Block>,
}

/// A block inside a segment.
#[derive(Debug, Clone, PartialEq)]
pub struct Block {
    /// Address.
    pub address: u64,
    /// Size, bytes.
    pub size: u64,
    /// Requested size.
    pub requested_size: Option<u64>,
    /// `active_allocated`, `active_pending_free`, `active_awaiting_free`, `inactive`.
    pub state: StrId,
    /// Where it was allocated (`frames`): kept on the block itself, so it outlives a history
    /// that was cleared or had not started (empty when the block was made unrecorded).
    pub stack: StackId,
}

/// A `record_function` range boundary recorded by the allocator (`external_annotations`).
#[derive(Debug, Clone, PartialEq)]
pub struct Annotation {
    /// `START` (true) or `END`.
    pub start: bool,
    /// Range name, e.g. `ProfilerStep#3`.
    pub name: StrId,
    /// Device.
    pub device: i64,
    /// Unix-epoch µs.
    pub time_us: i64,
}

/// Where a read hands the history's entries as it reads them, list by list, in the order
/// each list holds them: an analysis that keeps only what it reports never holds the
/// hundreds of millions of entries of a 10 GB snapshot.
pub trait HistorySink {
    /// Entries appended, in order, to the history list numbered `list` (a number the reader
    /// chose; [`Snapshot::streamed`] says which device's list each is).
    fn entries(&mut self, list: usize, batch: Vec<TraceEntry>);
}

/// Everything steptrace takes from a memory snapshot.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// The file.
    pub path: PathBuf,
    /// Names, file names, states.
    pub strings: Interner,
    /// Distinct frames.
    pub frames: Vec<Frame>,
    /// Distinct stacks, innermost frame first.
    pub stacks: Vec<Box<[FrameId]>>,
    /// Segments alive at snapshot time.
    pub segments: Vec<Segment>,
    /// History per device, in recorded order (empty for a streamed read: see
    /// [`Snapshot::streamed`]).
    pub device_traces: Vec<Vec<TraceEntry>>,
    /// For a read that streamed the history to a [`HistorySink`] instead of keeping it: per
    /// device, in `device_traces`' order, the list number its entries went to (`None`: no
    /// entry).
    pub streamed: Vec<Option<usize>>,
    /// `external_annotations`.
    pub annotations: Vec<Annotation>,
    /// Whether the pickle's layout predates `device_traces` timestamps.
    pub legacy_layout: bool,
}

impl Snapshot {
    /// The string behind an id.
    pub fn str(&self, id: StrId) -> &str {
        self.strings.resolve(id)
    }

    /// The frames of a stack, innermost first.
    pub fn stack(&self, id: StackId) -> &[FrameId] {
        self.stacks.get(id.0 as usize).map_or(&[], |s| s)
    }
}
