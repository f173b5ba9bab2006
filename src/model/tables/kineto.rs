//! The owned, interned tables a Kineto trace becomes (ingest's Kineto reader fills them): threads, CPU ops, runtime calls, GPU
//! activities, collectives, memory events, module spans, flows, and the trace's header.

use std::path::PathBuf;

use crate::intern::{Interner, StrId};
pub use steptrace_formats::summary::TimeConvention;

/// Index of a (pid, tid) pair in [`KinetoTrace::threads`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ThreadId(pub u32);

/// A `pid` or `tid` as written: usually a number, sometimes a label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ThreadKey {
    /// Numeric id.
    Num(i64),
    /// Text label such as "Spans".
    Name(StrId),
}

/// One (pid, tid) pair seen in the trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ThreadInfo {
    /// Process id (0 for GPU device rows).
    pub pid: ThreadKey,
    /// Thread id (the stream for GPU rows).
    pub tid: ThreadKey,
}

/// What kind of CPU-side range an [`CpuOp`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpKind {
    /// An operator (`cat: cpu_op`, older `Operator`): aten ops, autograd nodes, wrappers.
    Op,
    /// A `record_function` range (`cat: user_annotation`): ProfilerStep#N, Optimizer.step#...
    Annotation,
}

/// Whether a runtime call replays a CUDA graph (`cudaGraphLaunch`, the driver's
/// `cuGraphLaunch`, their versioned names). Ingest makes each such call an op of its own, so
/// that the graph's kernels (which carry its correlation id) have a node to be charged to.
pub fn is_graph_launch(name: &str) -> bool {
    name.starts_with("cudaGraphLaunch") || name.starts_with("cuGraphLaunch")
}

/// Operator inputs as recorded with `record_shapes`: raw JSON text, parsed only by the
/// analyses that need it (most ops never are).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OpInputs<'a> {
    /// `Input Dims`.
    pub dims: Option<&'a str>,
    /// `Input type`.
    pub types: Option<&'a str>,
    /// `Concrete Inputs`.
    pub concrete: Option<&'a str>,
}

/// Where an op's [`OpInputs`] lie in [`KinetoTrace::input_text`]: the three texts one after
/// another from `start`, each length 0 when not recorded (no JSON text is empty). Spans into
/// one shared text instead of three boxed strings per op: the parse allocates nothing per op.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct InputSpans {
    /// Offset of the first text.
    pub start: u64,
    /// Length of `Input Dims`.
    pub dims: u32,
    /// Length of `Input type`.
    pub types: u32,
    /// Length of `Concrete Inputs`.
    pub concrete: u32,
}

/// A CPU range: operator or annotation. Times are integer nanoseconds on the trace's clock.
#[derive(Debug, Clone, PartialEq)]
pub struct CpuOp {
    /// Op or annotation name.
    pub name: StrId,
    /// Operator or annotation.
    pub kind: OpKind,
    /// Thread it ran on.
    pub thread: ThreadId,
    /// Start, ns.
    pub start: i64,
    /// Duration, ns (never negative).
    pub dur: i64,
    /// `External id`: links to runtime calls on older traces and to GPU annotations.
    pub ext_id: Option<i64>,
    /// `Record function id`: equals the Execution Trace's `rf_id`.
    pub rf_id: Option<i64>,
    /// Autograd `Sequence number`: forward op ↔ backward node.
    pub seq: Option<i64>,
    /// `Fwd thread id` on backward nodes.
    pub fwd_tid: Option<i64>,
    /// Shapes and types of the inputs, when recorded ([`KinetoTrace::inputs`] reads them).
    pub inputs: InputSpans,
}

impl CpuOp {
    /// End time, ns.
    pub fn end(&self) -> i64 {
        self.start.saturating_add(self.dur)
    }
}

/// A CUDA runtime or driver call (`cudaLaunchKernel`, `cudaMemcpyAsync`, ...).
#[derive(Debug, Clone, PartialEq)]
pub struct RuntimeCall {
    /// API name.
    pub name: StrId,
    /// Calling thread.
    pub thread: ThreadId,
    /// Start, ns.
    pub start: i64,
    /// Duration, ns.
    pub dur: i64,
    /// Correlation id shared with the GPU activity it launched.
    pub correlation: Option<i64>,
}

/// What a GPU activity is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GpuKind {
    /// A kernel.
    Kernel,
    /// A memcpy (any direction).
    Memcpy,
    /// A memset.
    Memset,
}

impl GpuKind {
    /// As the files write it.
    pub fn as_str(self) -> &'static str {
        match self {
            GpuKind::Kernel => "kernel",
            GpuKind::Memcpy => "memcpy",
            GpuKind::Memset => "memset",
        }
    }
}

/// A kernel, memcpy or memset on the GPU timeline.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuActivity {
    /// Kernel or copy name.
    pub name: StrId,
    /// Kind.
    pub kind: GpuKind,
    /// Start, ns.
    pub start: i64,
    /// Duration, ns.
    pub dur: i64,
    /// CUDA device index.
    pub device: i64,
    /// CUDA stream.
    pub stream: i64,
    /// Correlation id of the launching runtime call.
    pub correlation: Option<i64>,
    /// Bytes moved (memcpy, memset).
    pub bytes: Option<i64>,
    /// The collective a communication kernel runs, when the trace says (boxed: few kernels
    /// have one).
    pub collective: Option<Box<Collective>>,
}

/// A collective's metadata, as PyTorch records it on the NCCL kernel (`Collective name`,
/// `Process Group Name`, message sizes, `dtype`). Nothing numbers the collective: it is known
/// across ranks by its order within its process group.
#[derive(Debug, Clone, PartialEq)]
pub struct Collective {
    /// `allreduce`, `broadcast`, `allgather`, ...
    pub op: StrId,
    /// Process group name (`0` for the default group).
    pub pg: StrId,
    /// Element type (`Float`, `BFloat16`, ...).
    pub dtype: StrId,
    /// Input and output elements.
    pub in_nelems: Option<i64>,
    /// Output elements.
    pub out_nelems: Option<i64>,
}

/// An allocator event (`[memory]` instant): one allocation (`bytes > 0`) or free (`< 0`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemEvent {
    /// Thread that allocated or freed.
    pub thread: ThreadId,
    /// Time, ns.
    pub ts: i64,
    /// Block address.
    pub addr: u64,
    /// Signed size.
    pub bytes: i64,
    /// Allocator's allocated bytes after the event.
    pub total_allocated: i64,
    /// Allocator's reserved bytes after the event.
    pub total_reserved: i64,
    /// c10 device type (1 = CUDA, 0 = CPU).
    pub device_type: i64,
    /// Device index.
    pub device_id: i64,
}

/// An `nn.Module: Name_k` range recorded with `with_modules` (or `with_stack`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModuleSpan {
    /// Module label without the `nn.Module: ` prefix, e.g. `Conv2d_3`.
    pub name: StrId,
    /// Thread.
    pub thread: ThreadId,
    /// Start, ns.
    pub start: i64,
    /// Duration, ns.
    pub dur: i64,
}

/// One end of a `fwdbwd` flow: the start sits in a forward op, the end in its backward node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowEnd {
    /// Flow id.
    pub id: i64,
    /// Thread.
    pub thread: ThreadId,
    /// Time, ns.
    pub ts: i64,
    /// `ph: s` (true) or `ph: f`.
    pub is_start: bool,
}

/// A GPU from `deviceProperties`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct DeviceInfo {
    /// Device index.
    pub id: i64,
    /// Name, e.g. "NVIDIA H200".
    pub name: String,
    /// Memory, bytes.
    pub total_memory_bytes: Option<i64>,
    /// Compute capability, e.g. (9, 0).
    pub compute_capability: Option<(i64, i64)>,
    /// Multiprocessors.
    pub num_sms: Option<i64>,
}

/// The trace's top-level members.
#[derive(Debug, Clone, PartialEq)]
pub struct Header {
    /// `schemaVersion`.
    pub schema_version: Option<i64>,
    /// `baseTimeNanoseconds`, when present.
    pub base_time_ns: Option<i64>,
    /// How to turn `ts` into wall-clock time.
    pub time_convention: TimeConvention,
    /// `deviceProperties`.
    pub devices: Vec<DeviceInfo>,
    /// Recording flags: record_shapes, profile_memory, with_stack, with_modules, with_flops.
    pub flags: [Option<bool>; 5],
    /// `cuda_runtime_version`.
    pub cuda_runtime_version: Option<i64>,
    /// Rank under torch.distributed.
    pub rank: Option<i64>,
    /// World size under torch.distributed.
    pub world_size: Option<i64>,
}

/// How much of a truncated trace was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Truncation {
    /// Byte offset (in the decompressed text) where the first incomplete event starts.
    pub at_byte: usize,
    /// Bytes after that point that could not be used.
    pub bytes_lost: usize,
    /// Whether the gzip stream itself ended early.
    pub gzip_stream_cut: bool,
}

/// Where events can be added to the trace's own text: the annotated trace is that text with
/// steptrace's events put in at one point, so that every original byte around them is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EventsSpan {
    /// Byte offset (in the decompressed text) just past the last complete element of
    /// `traceEvents`, or past its `[` when it has none.
    pub insert_at: usize,
    /// Whether `traceEvents` has a complete element before `insert_at` (added events then need
    /// a comma before them).
    pub has_elements: bool,
    /// Whether the array and the document end properly after `insert_at`; if not (a truncated
    /// trace), what follows is dropped and the array and object are closed instead.
    pub complete: bool,
}

/// Everything steptrace takes from one Kineto trace.
#[derive(Debug, Clone)]
pub struct KinetoTrace {
    /// The file it came from.
    pub path: PathBuf,
    /// Top-level members.
    pub header: Header,
    /// Names of ops, kernels, modules, labels.
    pub strings: Interner,
    /// (pid, tid) pairs, indexed by [`ThreadId`].
    pub threads: Vec<ThreadInfo>,
    /// CPU operators and annotations, in file order.
    pub ops: Vec<CpuOp>,
    /// CUDA runtime and driver calls.
    pub runtime: Vec<RuntimeCall>,
    /// Kernels, memcpys, memsets.
    pub gpu: Vec<GpuActivity>,
    /// Allocator events, sorted by time (stable).
    pub memory: Vec<MemEvent>,
    /// `nn.Module` ranges.
    pub modules: Vec<ModuleSpan>,
    /// `fwdbwd` flow ends.
    pub flows: Vec<FlowEnd>,
    /// Process names from `M` events.
    pub process_names: Vec<(i64, String)>,
    /// Elements of `traceEvents` read.
    pub event_count: usize,
    /// Set when the file ended early.
    pub truncated: Option<Truncation>,
    /// Uncompressed size, bytes.
    pub text_bytes: usize,
    /// Whether the file is gzip (the annotated trace mirrors it).
    pub gzipped: bool,
    /// Where added events go in the text.
    pub events_span: EventsSpan,
    /// The texts behind every op's [`InputSpans`].
    pub input_text: String,
    /// For a single-stream gzip input: where its compressed stream can be resumed near
    /// `events_span.insert_at`, so the annotated trace compresses only the rest.
    pub gzip_resume: Option<GzipResume>,
}

/// A deflate block start in a gzip input at or before where added events go, with the text
/// from there to the end: the input's compressed bytes before that bit are kept as they are,
/// and only this text (with the added events) is compressed again (as zlib's `gzappend`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GzipResume {
    /// Size of the input file, checked before its bytes are reused.
    pub file_len: u64,
    /// The input's last 8 bytes (the gzip trailer: CRC-32 and size), checked likewise.
    pub trailer: [u8; 8],
    /// Bit offset of the block start in the file (from each byte's least significant bit).
    pub bit: u64,
    /// Bytes of text before the block.
    pub text_at: usize,
    /// CRC-32 of those bytes.
    pub crc: u32,
    /// The text from the block start to the end.
    pub tail: Vec<u8>,
}

impl KinetoTrace {
    /// Converts a trace time (ns) to Unix-epoch µs, the memory snapshot's clock.
    pub fn epoch_us(&self, t_ns: i64) -> f64 {
        self.epoch_ns(t_ns) as f64 / 1000.0
    }

    /// Converts a trace time (ns) to Unix-epoch ns, exactly.
    pub fn epoch_ns(&self, t_ns: i64) -> i64 {
        let base = match self.header.time_convention {
            TimeConvention::RelativeToBase => self.header.base_time_ns.unwrap_or(0),
            TimeConvention::AbsoluteEpoch => 0,
        };
        base.saturating_add(t_ns)
    }

    /// The string behind an id.
    pub fn str(&self, id: StrId) -> &str {
        self.strings.resolve(id)
    }

    /// An op's recorded inputs.
    pub fn inputs(&self, op: &CpuOp) -> OpInputs<'_> {
        let s = op.inputs;
        let mut at = usize::try_from(s.start).unwrap_or(usize::MAX);
        let mut take = |len: u32| {
            let len = len as usize;
            let text = self.input_text.get(at..at.saturating_add(len));
            at = at.saturating_add(len);
            text.filter(|t| !t.is_empty())
        };
        OpInputs {
            dims: take(s.dims),
            types: take(s.types),
            concrete: take(s.concrete),
        }
    }
}
