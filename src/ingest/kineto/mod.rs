//! Kineto Chrome traces (`torch.profiler` `export_chrome_trace`, `tensorboard_trace_handler`,
//! libtorch `ProfilerResult::save`): the file is read once, `traceEvents` is cut into chunks at
//! event boundaries, and the chunks are parsed and converted on all threads into owned,
//! interned event tables. Chunks are merged in file order, so the tables do not depend on the
//! number of threads.

mod fast;
pub(crate) mod raw;

use std::path::{Path, PathBuf};

use rustc_hash::FxHashMap;

use self::raw::{time_ns, BadTime, IdOrName, RawEvent, RawHeader};
use super::json_scan;
use super::source;
use super::Error;
use crate::diagnostics::Diagnostics;
use crate::intern::{Interner, StrId};

/// Bytes of `traceEvents` per parse task. Small enough that a 10 MB trace still spreads over
/// several threads, large enough that per-task overhead is noise (see docs/performance.md).
const CHUNK_BYTES: usize = 2 << 20;

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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GpuKind {
    /// A kernel.
    Kernel,
    /// A memcpy (any direction).
    Memcpy,
    /// A memset.
    Memset,
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

/// How `ts` relates to wall-clock time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TimeConvention {
    /// `ts` in µs relative to `baseTimeNanoseconds` (PyTorch 2.4+).
    RelativeToBase,
    /// `ts` in absolute Unix-epoch µs (older PyTorch).
    AbsoluteEpoch,
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

impl EventsSpan {
    fn new(buf: &[u8], arr_start: usize, end: Option<usize>, cut_at: Option<usize>) -> EventsSpan {
        // The last byte that is not white space before `limit`, at or after the `[`.
        let last_non_ws = |limit: usize| {
            let mut i = limit.min(buf.len());
            while i > arr_start && matches!(buf[i - 1], b' ' | b'\n' | b'\r' | b'\t') {
                i -= 1;
            }
            i.saturating_sub(1).max(arr_start)
        };
        let limit = match end {
            // `end` is just past the `]`.
            Some(e) => e.saturating_sub(1),
            None => cut_at.unwrap_or(buf.len()),
        };
        let last = last_non_ws(limit);
        let (insert_at, has_elements) = if last <= arr_start {
            (arr_start + 1, false)
        } else if end.is_none() && buf[last] == b',' {
            // A truncated array: the comma after the last complete element goes too.
            (last, true)
        } else {
            (last + 1, true)
        };
        EventsSpan {
            insert_at,
            has_elements,
            complete: end.is_some_and(|e| object_closes(buf, e)),
        }
    }
}

/// Whether the text from `i` (just past the events array) is the rest of the top-level object:
/// more members, then `}` and nothing but white space. A trace cut after its events array is
/// not (its annotated copy closes the object itself).
fn object_closes(buf: &[u8], mut i: usize) -> bool {
    loop {
        i = json_scan::skip_ws(buf, i);
        match buf.get(i) {
            Some(b'}') => return json_scan::skip_ws(buf, i + 1) == buf.len(),
            Some(b',') => {
                i = json_scan::skip_ws(buf, i + 1);
                if buf.get(i) != Some(&b'"') {
                    return false;
                }
                let Some(k) = json_scan::skip_string(buf, i) else {
                    return false;
                };
                i = json_scan::skip_ws(buf, k);
                if buf.get(i) != Some(&b':') {
                    return false;
                }
                i = json_scan::skip_ws(buf, i + 1);
                let Some(v) = json_scan::skip_value(buf, i) else {
                    return false;
                };
                i = v;
            }
            _ => return false,
        }
    }
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

/// Reads and parses a Kineto trace file (`.json` or gzip).
pub fn load(path: &Path, diag: &mut Diagnostics) -> Result<KinetoTrace, Error> {
    let src = source::read_expecting(path, source::Expect::JsonObject)?;
    let mut t = from_bytes(path, src.bytes, src.truncated_gzip, diag)?;
    t.gzipped = src.gzipped;
    Ok(t)
}

/// Parses Kineto trace text already in memory.
pub fn from_bytes(
    path: &Path,
    buf: impl Into<source::Bytes>,
    gzip_cut: bool,
    diag: &mut Diagnostics,
) -> Result<KinetoTrace, Error> {
    from_bytes_chunked(path, buf.into(), gzip_cut, CHUNK_BYTES, diag)
}

/// [`from_bytes`] with a chosen parse-task size (tests and benchmarks vary it; the result must
/// not depend on it).
pub fn from_bytes_chunked(
    path: &Path,
    buf: impl Into<source::Bytes>,
    gzip_cut: bool,
    chunk_bytes: usize,
    diag: &mut Diagnostics,
) -> Result<KinetoTrace, Error> {
    let buf: source::Bytes = buf.into();
    let fmt_err = |what: String| Error::Format {
        path: path.to_path_buf(),
        what,
    };
    if json_scan::skip_ws(&buf, 0) >= buf.len() {
        return Err(fmt_err("the file is empty".into()));
    }
    let found = json_scan::find_top_level_key(&buf, b"traceEvents").map_err(|off| {
        if off == 0 || buf.get(json_scan::skip_ws(&buf, 0)) != Some(&b'{') {
            fmt_err("not a JSON object (a Chrome trace starts with '{')".into())
        } else {
            fmt_err(format!("malformed JSON near byte {off}"))
        }
    })?;
    let Some(found) = found else {
        return Err(fmt_err(
            "JSON without a \"traceEvents\" array: not a Chrome trace".into(),
        ));
    };
    let arr_start = found.value_start;
    let (partials, array) =
        json_scan::walk_array_parallel(&buf, arr_start, chunk_bytes.max(1), |from, limit| {
            parse_piece(&buf, from, limit)
        })
        .map_err(|off| {
            fmt_err(format!(
                "\"traceEvents\" is not a well-formed array (byte {off})"
            ))
        })?;
    let elements = partials.iter().map(|p| p.elements).sum();

    let header = parse_header(&buf, arr_start, array.end).map_err(fmt_err)?;
    // Python's json keeps the last of two `traceEvents`, this reader the first; text after
    // the object is another writer's leftovers. Neither passes silently (issue 22).
    if let Some((again, trailing)) = array
        .end
        .and_then(|e| json_scan::rest_of_object(&buf, e, b"traceEvents"))
    {
        if again {
            diag.warn(
                "duplicate_trace_events",
                format!(
                    "{}: the object has a second \"traceEvents\"; the first is analysed",
                    path.display()
                ),
            );
        }
        if let Some(at) = trailing {
            diag.warn(
                "trailing_data",
                format!(
                    "{}: text after the trace's object, from byte {at} of {}; ignored",
                    path.display(),
                    buf.len()
                ),
            );
        }
    }
    let truncated = match (array.end, array.cut_at) {
        (None, cut) => {
            let at = cut.unwrap_or(buf.len());
            Some(Truncation {
                at_byte: at,
                bytes_lost: buf.len() - at,
                gzip_stream_cut: gzip_cut,
            })
        }
        (Some(_), _) if gzip_cut => Some(Truncation {
            at_byte: buf.len(),
            bytes_lost: 0,
            gzip_stream_cut: true,
        }),
        _ => None,
    };
    if let Some(t) = truncated {
        diag.warn(
            "truncated_trace",
            format!(
                "{}: the trace ends early (byte {} of the text{}); analysed the {} complete events before it",
                path.display(),
                t.at_byte,
                if t.gzip_stream_cut { ", gzip stream cut" } else { "" },
                elements
            ),
        );
    }

    let mut trace = KinetoTrace {
        path: path.to_path_buf(),
        header,
        strings: Interner::new(),
        threads: Vec::new(),
        ops: Vec::new(),
        runtime: Vec::new(),
        gpu: Vec::new(),
        memory: Vec::new(),
        modules: Vec::new(),
        flows: Vec::new(),
        process_names: Vec::new(),
        event_count: elements,
        truncated,
        text_bytes: buf.len(),
        gzipped: false,
        events_span: EventsSpan::new(&buf, arr_start, array.end, array.cut_at),
        input_text: String::new(),
    };
    // Unmapping a large file takes milliseconds of page-table work that nothing waits for.
    source::drop_aside(buf);
    merge(&mut trace, partials, diag);
    if trace.ops.is_empty() && trace.gpu.is_empty() && trace.memory.is_empty() {
        diag.warn(
            "empty_trace",
            format!("{}: no operator, kernel or memory events", path.display()),
        );
    }
    Ok(trace)
}

fn parse_header(buf: &[u8], arr_start: usize, arr_end: Option<usize>) -> Result<Header, String> {
    // The header is the document with the events array replaced by `[]`; for a truncated file
    // whatever followed the array is gone, so close the object instead.
    let mut text = Vec::with_capacity(arr_start + 64);
    text.extend_from_slice(&buf[..arr_start]);
    text.extend_from_slice(b"[]");
    match arr_end {
        Some(end) => text.extend_from_slice(&buf[end..]),
        None => text.push(b'}'),
    }
    // A header that does not parse (odd member types) is not worth refusing the events.
    let raw: RawHeader = serde_json::from_slice(&text).unwrap_or_default();
    let base = raw.base_time_ns.i64();
    let devices = raw
        .device_properties
        .unwrap_or_default()
        .into_iter()
        .map(|d| DeviceInfo {
            id: d.id.i64().unwrap_or(0),
            name: d.name.unwrap_or_default(),
            total_memory_bytes: d.total_global_mem.i64(),
            compute_capability: d.compute_major.i64().zip(d.compute_minor.i64()),
            num_sms: d.num_sms.i64(),
        })
        .collect();
    let flag = |l: raw::Lenient| l.i64().map(|v| v != 0);
    let (rank, world_size) = raw
        .distributed_info
        .map(|d| (d.rank.i64(), d.world_size.i64()))
        .unwrap_or((None, None));
    Ok(Header {
        schema_version: raw.schema_version.i64(),
        base_time_ns: base,
        time_convention: if base.is_some() {
            TimeConvention::RelativeToBase
        } else {
            TimeConvention::AbsoluteEpoch
        },
        devices,
        flags: [
            flag(raw.record_shapes),
            flag(raw.profile_memory),
            flag(raw.with_stack),
            flag(raw.with_modules),
            flag(raw.with_flops),
        ],
        cuda_runtime_version: raw.cuda_runtime_version.i64(),
        rank,
        world_size,
    })
}

/// What a complete (`ph: X`) event's `cat` makes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Category {
    Op(OpKind),
    Runtime,
    Gpu(GpuKind),
    Python,
    Other,
}

impl Category {
    /// Case does not matter: older writers used `Operator`, `Runtime`, `Kernel`.
    fn of(cat: &str) -> Category {
        const NAMES: [(&str, Category); 12] = [
            ("cpu_op", Category::Op(OpKind::Op)),
            ("kernel", Category::Gpu(GpuKind::Kernel)),
            ("cuda_runtime", Category::Runtime),
            ("python_function", Category::Python),
            ("user_annotation", Category::Op(OpKind::Annotation)),
            ("operator", Category::Op(OpKind::Op)),
            ("runtime", Category::Runtime),
            ("cuda_driver", Category::Runtime),
            ("gpu_memcpy", Category::Gpu(GpuKind::Memcpy)),
            ("memcpy", Category::Gpu(GpuKind::Memcpy)),
            ("gpu_memset", Category::Gpu(GpuKind::Memset)),
            ("memset", Category::Gpu(GpuKind::Memset)),
        ];
        NAMES
            .iter()
            .find(|(n, _)| cat.eq_ignore_ascii_case(n))
            .map_or(Category::Other, |&(_, c)| c)
    }
}

/// Local thread key before merging: strings are chunk-local ids.
type LocalThreadKey = (ThreadKey, ThreadKey);

/// What one chunk yields: tables with chunk-local string and thread ids.
#[derive(Default)]
struct Partial {
    strings: Interner,
    threads: Vec<LocalThreadKey>,
    thread_index: FxHashMap<LocalThreadKey, ThreadId>,
    ops: Vec<CpuOp>,
    runtime: Vec<RuntimeCall>,
    gpu: Vec<GpuActivity>,
    memory: Vec<MemEvent>,
    modules: Vec<ModuleSpan>,
    flows: Vec<FlowEnd>,
    process_names: Vec<(i64, String)>,
    /// (kind, message) of anomalies, in order.
    anomalies: Vec<(&'static str, String)>,
    /// Ops' input texts; their spans are relative to this piece until merged.
    input_text: String,
    /// Elements of `traceEvents` walked.
    elements: usize,
}

impl Partial {
    fn key(&mut self, v: &Option<IdOrName<'_>>) -> ThreadKey {
        match v {
            Some(IdOrName::Num(n)) => ThreadKey::Num(*n),
            Some(IdOrName::Name(s)) => ThreadKey::Name(self.strings.intern(s)),
            None => ThreadKey::Num(-1),
        }
    }

    fn thread(&mut self, ev: &RawEvent<'_>) -> ThreadId {
        let k = (self.key(&ev.pid), self.key(&ev.tid));
        if let Some(&t) = self.thread_index.get(&k) {
            return t;
        }
        let t = ThreadId(self.threads.len() as u32);
        self.threads.push(k);
        self.thread_index.insert(k, t);
        t
    }

    fn add(&mut self, ev: &RawEvent<'_>, offset: usize) {
        let ph = ev.ph.0.as_deref().unwrap_or("");
        let cat = ev.cat.0.as_deref().unwrap_or("");
        let name = ev.name.0.as_deref().unwrap_or("");
        match ph {
            "X" => self.add_complete(ev, cat, name, offset),
            "i" | "I" if name == "[memory]" => self.add_memory(ev, offset),
            "s" | "f" if cat == "fwdbwd" => {
                let (Ok(ts), Some(id)) = (time_ns(&ev.ts), ev.id.as_ref()) else {
                    return;
                };
                let id = match id {
                    IdOrName::Num(n) => *n,
                    IdOrName::Name(s) => s.parse().unwrap_or(-1),
                };
                let thread = self.thread(ev);
                self.flows.push(FlowEnd {
                    id,
                    thread,
                    ts,
                    is_start: ph == "s",
                });
            }
            "M" if name == "process_name" => {
                if let (Some(IdOrName::Num(pid)), Some(args)) = (&ev.pid, &ev.args) {
                    if let Some(n) = &args.name.0 {
                        self.process_names.push((*pid, n.to_string()));
                    }
                }
            }
            _ => {}
        }
    }

    fn add_complete(&mut self, ev: &RawEvent<'_>, cat: &str, name: &str, offset: usize) {
        let start = match time_ns(&ev.ts) {
            Ok(t) => t,
            Err(BadTime::Missing) => {
                self.anomalies.push((
                    "event_without_time",
                    format!("'{name}' at byte {offset} has no usable ts"),
                ));
                return;
            }
            Err(BadTime::OutOfRange) => {
                let ts = ev.ts.0.as_deref().unwrap_or_default();
                self.anomalies.push((
                    "timestamp_out_of_range",
                    format!("'{name}' at byte {offset} has ts {ts}; skipped"),
                ));
                return;
            }
        };
        let dur = match time_ns(&ev.dur) {
            Ok(d) if d >= 0 => d,
            Err(BadTime::Missing) => 0,
            _ => {
                let dur = ev.dur.0.as_deref().unwrap_or_default();
                self.anomalies.push((
                    "negative_duration",
                    format!("'{name}' at byte {offset} has duration {dur}; taken as 0"),
                ));
                0
            }
        };
        let default_args = raw::RawArgs::default();
        let args = ev.args.as_ref().unwrap_or(&default_args);
        match Category::of(cat) {
            Category::Op(kind) => {
                let inputs = if args.input_dims.is_some() || args.input_type.is_some() {
                    self.keep_inputs(args.input_dims, args.input_type, args.concrete_inputs)
                } else {
                    InputSpans::default()
                };
                let thread = self.thread(ev);
                let name = self.strings.intern(name);
                self.ops.push(CpuOp {
                    name,
                    kind,
                    thread,
                    start,
                    dur,
                    ext_id: args.ext_id.i64(),
                    rf_id: args.rf_id.i64(),
                    seq: args.seq.i64().filter(|&s| s >= 0),
                    fwd_tid: args.fwd_tid.i64(),
                    inputs,
                });
            }
            Category::Runtime => {
                let thread = self.thread(ev);
                let name = self.strings.intern(name);
                self.runtime.push(RuntimeCall {
                    name,
                    thread,
                    start,
                    dur,
                    correlation: args.correlation.i64(),
                });
            }
            Category::Gpu(kind) => {
                let stream = args.stream.i64().unwrap_or(match ev.tid {
                    Some(IdOrName::Num(t)) => t,
                    _ => -1,
                });
                let device = args.device.i64().unwrap_or(match ev.pid {
                    Some(IdOrName::Num(p)) => p,
                    _ => 0,
                });
                let name = self.strings.intern(name);
                let collective = args.collective.0.as_deref().map(|op| {
                    Box::new(Collective {
                        op: self.strings.intern(op),
                        pg: self.strings.intern(args.pg_name.0.as_deref().unwrap_or("")),
                        dtype: self.strings.intern(args.dtype.0.as_deref().unwrap_or("")),
                        in_nelems: args.in_nelems.i64(),
                        out_nelems: args.out_nelems.i64(),
                    })
                });
                self.gpu.push(GpuActivity {
                    name,
                    kind,
                    start,
                    dur,
                    device,
                    stream,
                    correlation: args.correlation.i64(),
                    bytes: args.bytes.i64(),
                    collective,
                });
            }
            Category::Python => {
                if let Some(m) = name.strip_prefix("nn.Module: ") {
                    let thread = self.thread(ev);
                    let name = self.strings.intern(m);
                    self.modules.push(ModuleSpan {
                        name,
                        thread,
                        start,
                        dur,
                    });
                }
            }
            Category::Other => {}
        }
    }

    /// Copies an op's input texts into this piece's text; texts over 4 GiB are not kept.
    fn keep_inputs(
        &mut self,
        dims: Option<&str>,
        types: Option<&str>,
        concrete: Option<&str>,
    ) -> InputSpans {
        let start = self.input_text.len() as u64;
        let mut put = |t: Option<&str>| match t.map(|t| (t, u32::try_from(t.len()))) {
            Some((t, Ok(len))) => {
                self.input_text.push_str(t);
                len
            }
            _ => 0,
        };
        let spans = InputSpans {
            start,
            dims: put(dims),
            types: put(types),
            concrete: put(concrete),
        };
        if spans.dims == 0 && spans.types == 0 && spans.concrete == 0 {
            return InputSpans::default();
        }
        spans
    }

    fn add_memory(&mut self, ev: &RawEvent<'_>, offset: usize) {
        let Some(args) = &ev.args else {
            return;
        };
        let (Ok(ts), Some(bytes)) = (time_ns(&ev.ts), args.signed_bytes.i64()) else {
            self.anomalies.push((
                "malformed_memory_event",
                format!("[memory] at byte {offset} lacks ts or Bytes"),
            ));
            return;
        };
        // A counter past i64 (`Total Allocated: 18446744073709551615`, an unsigned underflow
        // in the writer) is unknown, and said so (issue 22: it became a peak of -1 bytes).
        let over = |l: raw::Lenient| matches!(l, raw::Lenient::UInt(_));
        if over(args.total_allocated) || over(args.total_reserved) {
            self.anomalies.push((
                "memory_counter_out_of_range",
                format!("[memory] at byte {offset} has a counter past 2^63: taken as unknown"),
            ));
        }
        let thread = self.thread(ev);
        self.memory.push(MemEvent {
            thread,
            ts,
            addr: args.addr.u64().unwrap_or(0),
            bytes,
            total_allocated: args.total_allocated.i64().unwrap_or(-1),
            total_reserved: args.total_reserved.i64().unwrap_or(-1),
            device_type: args.device_type.i64().unwrap_or(-1),
            device_id: args.device_id.i64().unwrap_or(-1),
        });
    }
}

/// Whether the event starting at `buf[0]` is one steptrace never uses, recognised from the
/// first bytes without parsing: Python function ranges other than `nn.Module` ones (half of a
/// `with_stack` trace) and `ac2g` flows (the correlation id is also on both ends' args).
/// Kineto writes `ph` and `cat` first; an event laid out otherwise is simply parsed.
fn skippable(buf: &[u8]) -> bool {
    use memchr::memmem::Finder;
    use std::sync::LazyLock;
    // Built once: constructing a searcher per event cost more than parsing the event.
    static CAT: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\"cat\""));
    static MODULE: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"nn.Module: "));
    // Kineto's layout of a complete event, checked first: searching for `"cat"` in every
    // event was a tenth of the parse.
    const COMPLETE: &[u8] = b"{\"ph\": \"X\", \"cat\": ";
    const PYTHON_NAME: &[u8] = b"\"python_function\", \"name\": \"";
    if let Some(rest) = buf.strip_prefix(COMPLETE) {
        if let Some(name) = rest.strip_prefix(PYTHON_NAME) {
            return !name.starts_with(b"nn.Module: ");
        }
        if !rest.starts_with(b"\"python_function\"") && !rest.starts_with(b"\"ac2g\"") {
            return false;
        }
    }
    let head = &buf[..buf.len().min(96)];
    let Some(i) = CAT.find(head) else {
        return false;
    };
    // The value after `"cat"`, `:` and optional spaces.
    let rest = &head[i + 5..];
    let rest = rest.strip_prefix(b":").unwrap_or(rest);
    let start = rest.iter().position(|&c| c != b' ').unwrap_or(rest.len());
    let value = &rest[start..];
    if value.starts_with(b"\"ac2g\"") {
        return true;
    }
    if value.starts_with(b"\"python_function\"") {
        return MODULE.find(&buf[..buf.len().min(192)]).is_none();
    }
    false
}

/// Whether the fast event reader and serde_json agree on the event at the start of `buf`:
/// where the fast reader accepts it, serde_json must read the same event, ending at the same
/// byte. The fuzz target `kineto_event` and a property test hold the fast reader to this.
#[doc(hidden)]
pub fn fast_reader_agrees(buf: &[u8]) -> bool {
    let mut fast = RawEvent::default();
    let Ok(end) = fast::event(buf, 0, &mut fast) else {
        return true;
    };
    matches!(serde_event(buf), Some(Ok((slow, e))) if slow == fast && e == end)
}

/// Whether the block-wise skip of a container ends where the plain structural skip does,
/// wherever it answers (fuzz target `kineto_event`, property test).
#[doc(hidden)]
pub fn container_skip_agrees(buf: &[u8]) -> bool {
    match json_scan::skip_container(buf, 0) {
        Some(end) => json_scan::skip_value(buf, 0) == Some(end),
        None => true,
    }
}

/// The event at the start of `buf` as serde_json reads it, with the index past it; `None` for
/// text holding no value.
fn serde_event(buf: &[u8]) -> Option<Result<(RawEvent<'_>, usize), serde_json::Error>> {
    let mut s = serde_json::Deserializer::from_slice(buf).into_iter::<RawEvent>();
    Some(s.next()?.map(|ev| (ev, s.byte_offset())))
}

/// Reads the event at the start of `buf` with the fast reader only (benches); the index past it,
/// or `None` where serde_json would have to read it.
#[doc(hidden)]
pub fn fast_event_end(buf: &[u8]) -> Option<usize> {
    fast::event(buf, 0, &mut RawEvent::default()).ok()
}

/// Reads the event at the start of `buf` with serde_json only (benches); the index past it.
#[doc(hidden)]
pub fn serde_event_end(buf: &[u8]) -> Option<usize> {
    serde_event(buf)?.ok().map(|(_, end)| end)
}

/// Parses the events of one piece of `traceEvents`: from `from` until an element starts at or
/// past `limit`.
fn parse_piece(buf: &[u8], from: usize, limit: usize) -> (Partial, json_scan::Stop) {
    let mut p = Partial::default();
    let stop = json_scan::walk_elements(buf, from, limit, |pos| {
        let end = parse_element(&mut p, buf, pos);
        p.elements += usize::from(end.is_some());
        end
    });
    (p, stop)
}

/// Parses the element at `pos` into `p`; returns the index past it, or `None` when the text
/// ends inside it.
fn parse_element(p: &mut Partial, buf: &[u8], pos: usize) -> Option<usize> {
    if skippable(&buf[pos..]) {
        return json_scan::skip_container(buf, pos).or_else(|| json_scan::skip_value(buf, pos));
    }
    // Filled in place: an event is some 500 bytes, and moving it out of the reader and into
    // `add` showed in the profile.
    let mut ev = RawEvent::default();
    if let Ok(end) = fast::event(buf, pos, &mut ev) {
        p.add(&ev, pos);
        return Some(end);
    }
    match serde_event(&buf[pos..])? {
        Ok((ev, used)) => {
            p.add(&ev, pos);
            Some(pos + used)
        }
        Err(e) => {
            // One malformed event does not spoil the rest: skip it structurally. If even that
            // fails, the text ends inside it.
            let next = json_scan::skip_value(buf, pos)?;
            p.anomalies.push((
                "malformed_event",
                format!("event at byte {pos} could not be read ({e}); skipped"),
            ));
            Some(next)
        }
    }
}

fn merge(trace: &mut KinetoTrace, mut partials: Vec<Partial>, diag: &mut Diagnostics) {
    use rayon::prelude::*;
    // First, in piece order, what each piece's local string and thread ids become: ids are
    // given in order of first appearance in the file, whatever the threads.
    let mut thread_index: FxHashMap<(ThreadKey, ThreadKey), ThreadId> = FxHashMap::default();
    let mut maps: Vec<(Vec<StrId>, Vec<ThreadId>)> = Vec::with_capacity(partials.len());
    let mut text_base = 0u64;
    let mut text_bases = Vec::with_capacity(partials.len());
    // The first piece's strings take the first ids, as they would one by one; which of the
    // other pieces' strings it already holds is looked up on all threads, and only the rest
    // are added here, in order. (Looking up every piece's names here was 8 ms on one thread.)
    // (`trace.strings` is still empty here: it starts as the first piece's table.)
    if let Some(first) = partials.first() {
        trace.strings = first.strings.clone();
    }
    let found: Vec<Vec<Option<StrId>>> = partials
        .par_iter()
        .map(|p| trace.strings.lookup(&p.strings))
        .collect();
    for (p, found) in partials.iter().zip(found) {
        let smap = trace.strings.absorb_rest(&p.strings, found);
        let k = |key: ThreadKey| match key {
            ThreadKey::Name(id) => ThreadKey::Name(smap[id.0 as usize]),
            n => n,
        };
        let tmap: Vec<ThreadId> = p
            .threads
            .iter()
            .map(|&(pid, tid)| {
                let key = (k(pid), k(tid));
                *thread_index.entry(key).or_insert_with(|| {
                    trace.threads.push(ThreadInfo {
                        pid: key.0,
                        tid: key.1,
                    });
                    ThreadId(trace.threads.len() as u32 - 1)
                })
            })
            .collect();
        maps.push((smap, tmap));
        text_bases.push(text_base);
        text_base += p.input_text.len() as u64;
    }
    // Then every piece's rows are rewritten to the global ids, each piece on its own thread.
    partials
        .par_iter_mut()
        .zip(&maps)
        .zip(&text_bases)
        .for_each(|((p, (smap, tmap)), &text_base)| {
            let s = |id: StrId| smap[id.0 as usize];
            let t = |id: ThreadId| tmap[id.0 as usize];
            for o in &mut p.ops {
                o.name = s(o.name);
                o.thread = t(o.thread);
                // Ops without inputs keep the all-zero span, wherever their piece began.
                if o.inputs != InputSpans::default() {
                    o.inputs.start += text_base;
                }
            }
            for r in &mut p.runtime {
                r.name = s(r.name);
                r.thread = t(r.thread);
            }
            for g in &mut p.gpu {
                g.name = s(g.name);
                if let Some(c) = &mut g.collective {
                    c.op = s(c.op);
                    c.pg = s(c.pg);
                    c.dtype = s(c.dtype);
                }
            }
            for m in &mut p.memory {
                m.thread = t(m.thread);
            }
            for m in &mut p.modules {
                m.name = s(m.name);
                m.thread = t(m.thread);
            }
            for f in &mut p.flows {
                f.thread = t(f.thread);
            }
        });
    // And the tables are joined, each one's pieces copied side by side: copying (and faulting
    // in) tens of MB on one thread was most of this merge.
    fn take_each<T: Default>(parts: &mut [Partial], f: fn(&mut Partial) -> &mut T) -> Vec<T> {
        parts.iter_mut().map(|p| std::mem::take(f(p))).collect()
    }
    let mut texts = take_each(&mut partials, |p| &mut p.input_text);
    let mut ops = take_each(&mut partials, |p| &mut p.ops);
    let mut runtime = take_each(&mut partials, |p| &mut p.runtime);
    let mut gpu = take_each(&mut partials, |p| &mut p.gpu);
    let mut memory = take_each(&mut partials, |p| &mut p.memory);
    let ((o, r), (g, (m, text))) = rayon::join(
        || {
            rayon::join(
                || crate::par::concat(&mut ops),
                || crate::par::concat(&mut runtime),
            )
        },
        || {
            rayon::join(
                || crate::par::concat(&mut gpu),
                || {
                    rayon::join(
                        || crate::par::concat(&mut memory),
                        || {
                            let mut bytes: Vec<Vec<u8>> = texts
                                .iter_mut()
                                .map(|t| std::mem::take(t).into_bytes())
                                .collect();
                            crate::par::concat(&mut bytes)
                        },
                    )
                },
            )
        },
    );
    trace.ops = o;
    trace.runtime = r;
    trace.gpu = g;
    trace.memory = m;
    // Every piece's text is the text of a `String` (UTF-8), and UTF-8 texts joined are UTF-8.
    // SAFETY: each piece's text was a `String`, so valid UTF-8, and UTF-8 texts joined whole
    // are UTF-8 (checking 20 MB again cost 1.5 ms on the one thread the merge waits on).
    trace.input_text = unsafe { String::from_utf8_unchecked(text) };
    for p in partials {
        trace.modules.extend(p.modules);
        trace.flows.extend(p.flows);
        trace.process_names.extend(p.process_names);
        for (kind, msg) in p.anomalies {
            diag.warn(kind, format!("{}: {msg}", trace.path.display()));
        }
    }
    // Allocator events must be replayed in time order; a stable sort keeps file order on ties,
    // which is the allocator's own order for events of one thread. Usually they are in order
    // already, and checking is cheaper than sorting.
    if !trace.memory.is_sorted_by_key(|m| m.ts) {
        // Stable, on all threads (3 ms on one for 80,000 events).
        trace.memory.par_sort_by_key(|m| m.ts);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> (KinetoTrace, Diagnostics) {
        let mut d = Diagnostics::default();
        let t = from_bytes(Path::new("t.json"), text.as_bytes().to_vec(), false, &mut d).unwrap();
        (t, d)
    }

    const SMALL: &str = r#"{"schemaVersion":1,"deviceProperties":[{"id":0,"name":"GPU X","totalGlobalMem":100}],
      "baseTimeNanoseconds": 1000000000,
      "traceEvents":[
        {"ph":"X","cat":"cpu_op","name":"aten::mm","pid":1,"tid":1,"ts":10.5,"dur":2,"args":{"External id":3,"Sequence number":7,"Input Dims":[[2,3],[3,4]]}},
        {"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":11,"dur":0.5,"args":{"correlation":9}},
        {"ph":"X","cat":"kernel","name":"gemm","pid":0,"tid":7,"ts":12,"dur":1,"args":{"device":0,"stream":7,"correlation":9}},
        {"ph":"i","cat":"cpu_instant_event","s":"t","name":"[memory]","pid":1,"tid":1,"ts":10.6,"args":{"Addr":64,"Bytes":512,"Total Allocated":512,"Total Reserved":2048,"Device Type":1,"Device Id":0}},
        {"ph":"X","cat":"Trace","name":"x","pid":"Spans","tid":"PyTorch Profiler","ts":1,"dur":1}
      ],"traceName":"t"}"#;

    #[test]
    fn parses_tables_and_header() {
        let (t, d) = parse(SMALL);
        assert!(d.is_empty(), "{d:?}");
        assert_eq!(t.header.base_time_ns, Some(1_000_000_000));
        assert_eq!(t.header.devices[0].name, "GPU X");
        assert_eq!(t.ops.len(), 1);
        assert_eq!(t.ops[0].start, 10_500);
        assert_eq!(t.ops[0].seq, Some(7));
        assert_eq!(t.inputs(&t.ops[0]).dims, Some("[[2,3],[3,4]]"));
        assert_eq!(t.inputs(&t.ops[0]).types, None);
        assert_eq!(t.gpu[0].correlation, Some(9));
        assert_eq!(t.runtime[0].correlation, Some(9));
        assert_eq!(t.memory[0].total_allocated, 512);
        assert_eq!(t.event_count, 5);
        assert!(t.truncated.is_none());
        assert_eq!(t.epoch_us(10_500), 1_000_010.5);
    }

    #[test]
    fn truncated_text_keeps_complete_events() {
        let cut = &SMALL[..SMALL.find("\"ph\":\"i\"").unwrap() + 20];
        let (t, d) = parse(cut);
        assert_eq!(t.event_count, 3);
        assert_eq!(t.gpu.len(), 1);
        assert!(t.truncated.is_some());
        assert!(d.count("truncated_trace") == 1);
    }

    #[test]
    fn malformed_event_is_skipped_and_counted() {
        // Issue 21: well-formed JSON that is no event (`args` a string), between two good
        // events: it is skipped and counted, and the events around it are read.
        let text = r#"{"traceEvents":[{"ph":"X","cat":"cpu_op","name":"a","ts":1,"dur":1},
            {"ph":"X","cat":"cpu_op","name":"b","ts":2,"dur":1,"args":"oops"},
            {"ph":"X","cat":"cpu_op","name":"c","pid":1,"tid":1,"ts":3,"dur":1}]}"#;
        let mut d = Diagnostics::default();
        let t = from_bytes(Path::new("t.json"), text.as_bytes().to_vec(), false, &mut d).unwrap();
        assert_eq!(d.count("malformed_event"), 1, "{:?}", d.lines());
        let names: Vec<&str> = t.ops.iter().map(|o| t.strings.resolve(o.name)).collect();
        assert_eq!(names, ["a", "c"]);
        assert_eq!(t.event_count, 3);
    }

    #[test]
    fn negative_duration_is_clamped_and_counted() {
        let text = r#"{"traceEvents":[{"ph":"X","cat":"cpu_op","name":"c","pid":1,"tid":1,"ts":3,"dur":-1}]}"#;
        let (t, d) = parse(text);
        assert_eq!(t.ops[0].dur, 0);
        assert_eq!(d.count("negative_duration"), 1);
        assert_eq!(t.header.time_convention, TimeConvention::AbsoluteEpoch);
    }

    #[test]
    fn skips_unused_events_without_losing_module_ranges() {
        assert!(skippable(
            br#"{"ph": "X", "cat": "python_function", "name": "f.py(3): g", "pid": 1}"#
        ));
        assert!(!skippable(
            br#"{"ph": "X", "cat": "python_function", "name": "nn.Module: Linear_0", "pid": 1}"#
        ));
        assert!(skippable(br#"{"ph":"f","cat":"ac2g","id":3}"#));
        assert!(!skippable(
            br#"{"ph": "X", "cat": "cpu_op", "name": "python_function"}"#
        ));
        assert!(!skippable(
            br#"{"name": "x\"cat\": \"ac2g\"", "ph": "X", "cat": "cpu_op"}"#
        ));
    }

    #[test]
    fn rejects_non_traces() {
        let mut d = Diagnostics::default();
        for bad in ["", "[1,2]", "{\"a\":1}", "{\"traceEvents\": 5}", "not json"] {
            let r = from_bytes(Path::new("x.json"), bad.as_bytes().to_vec(), false, &mut d);
            assert!(r.is_err(), "{bad}");
        }
    }
}
