//! One chunk's events classified into tables with chunk-local string and thread ids: what a
//! complete event's `cat` makes it, and how each kind of event is kept.

use rustc_hash::FxHashMap;

use super::raw::{self, IdOrName, RawEvent};
use super::time::{time_ns, BadTime};
use super::*;
use crate::intern::Interner;

/// What a complete (`ph: X`) event's `cat` makes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Category {
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
pub(super) type LocalThreadKey = (ThreadKey, ThreadKey);

/// The longest event name kept whole (kernel names of deep C++ templates run to a few KB): a
/// name past it is cut there, with a warning. Every table and output repeats a node's name (a
/// 300 MB name took 4.4 GB of memory and wrote 600 MB files); the text of a real op name
/// never comes near this.
const MAX_NAME_BYTES: usize = 64 << 10;

/// What one chunk yields: tables with chunk-local string and thread ids.
#[derive(Default)]
pub(super) struct Partial {
    pub(super) strings: Interner,
    pub(super) threads: Vec<LocalThreadKey>,
    pub(super) thread_index: FxHashMap<LocalThreadKey, ThreadId>,
    pub(super) ops: Vec<CpuOp>,
    pub(super) runtime: Vec<RuntimeCall>,
    pub(super) gpu: Vec<GpuActivity>,
    pub(super) memory: Vec<MemEvent>,
    pub(super) modules: Vec<ModuleSpan>,
    pub(super) flows: Vec<FlowEnd>,
    pub(super) process_names: Vec<(i64, String)>,
    /// (kind, message) of anomalies, in order.
    pub(super) anomalies: Vec<(&'static str, String)>,
    /// Ops' input texts; their spans are relative to this piece until merged.
    pub(super) input_text: String,
    /// Elements of `traceEvents` walked.
    pub(super) elements: usize,
    /// Complete events of activity steptrace does not analyse, by category.
    pub(super) unanalysed: FxHashMap<String, usize>,
}

/// Whether a complete event's category is activity of a kind steptrace does not analyse:
/// MTIA's (its device's `mtia_ccp_events`, its host's `mtia_runtime`…) and the CUPTI range
/// profiler's (`cuda_profiler_range`). Left out of every GPU figure, so they are named.
pub(super) fn unanalysed_device(cat: &str) -> bool {
    let c = cat.as_bytes();
    (c.len() >= 4 && c[..4].eq_ignore_ascii_case(b"mtia"))
        || cat.eq_ignore_ascii_case("cuda_profiler_range")
}

impl Partial {
    /// An empty piece sized for `bytes` of Kineto text, so that its tables do not grow (and
    /// copy) a dozen times each: growing them was 2% of a whole run's CPU samples on the
    /// benchmark trace. Sized for the densest kind of each table (an op every 400 bytes where
    /// no Python stack is recorded), then cut back by [`Partial::shrink`]. Measured on the
    /// default command (16 alternating runs): wall time within the noise (0.445 → 0.450 s
    /// median), peak RSS 184 → 174 MB.
    pub(super) fn for_text(bytes: usize) -> Partial {
        Partial {
            ops: Vec::with_capacity(bytes / 400),
            runtime: Vec::with_capacity(bytes / 1500),
            gpu: Vec::with_capacity(bytes / 1500),
            memory: Vec::with_capacity(bytes / 1500),
            input_text: String::with_capacity(bytes / 4),
            ..Partial::default()
        }
    }

    /// Gives back what [`Partial::for_text`] reserved and the piece did not use: the pieces
    /// stay until they are merged, and the next piece's tables can take it.
    pub(super) fn shrink(&mut self) {
        self.ops.shrink_to_fit();
        self.runtime.shrink_to_fit();
        self.gpu.shrink_to_fit();
        self.memory.shrink_to_fit();
        self.input_text.shrink_to_fit();
    }

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

    pub(super) fn add(&mut self, ev: &RawEvent<'_>, offset: usize) {
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
        let cut;
        let name = if name.len() > MAX_NAME_BYTES {
            let mut end = MAX_NAME_BYTES;
            while !name.is_char_boundary(end) {
                end -= 1;
            }
            self.anomalies.push((
                "long_name_cut",
                format!(
                    "an event name of {} bytes at byte {offset}: its first {} KiB kept",
                    name.len(),
                    MAX_NAME_BYTES >> 10
                ),
            ));
            cut = format!("{}…", &name[..end]);
            cut.as_str()
        } else {
            name
        };
        let Some((start, dur)) = self.times(ev, name, offset) else {
            return;
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
                let graph = crate::model::kineto::is_graph_launch(name);
                let name = self.strings.intern(name);
                if graph {
                    self.graph_launch_op(name, thread, start, dur, args.ext_id.i64());
                }
                self.runtime.push(RuntimeCall {
                    name,
                    thread,
                    start,
                    dur,
                    correlation: args.correlation.i64(),
                });
            }
            Category::Gpu(kind) => self.push_gpu(ev, args, kind, name, (start, dur)),
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
            Category::Other => {
                if unanalysed_device(cat) {
                    match self.unanalysed.get_mut(cat) {
                        Some(n) => *n += 1,
                        None => {
                            self.unanalysed.insert(cat.to_owned(), 1);
                        }
                    }
                }
            }
        }
    }

    /// An event's start and duration, ns; `None` (with the anomaly named) where its start is
    /// missing or out of range. A bad duration is taken as 0, said once per kind.
    #[inline]
    fn times(&mut self, ev: &RawEvent<'_>, name: &str, offset: usize) -> Option<(i64, i64)> {
        let start = match time_ns(&ev.ts) {
            Ok(t) => t,
            Err(BadTime::Missing) => {
                self.anomalies.push((
                    "event_without_time",
                    format!("'{name}' at byte {offset} has no usable ts"),
                ));
                return None;
            }
            Err(BadTime::OutOfRange) => {
                let ts = ev.ts.0.as_deref().unwrap_or_default();
                self.anomalies.push((
                    "timestamp_out_of_range",
                    format!("'{name}' at byte {offset} has ts {ts}; skipped"),
                ));
                return None;
            }
        };
        let dur = match time_ns(&ev.dur) {
            Ok(d) if d >= 0 => d,
            Err(BadTime::Missing) => 0,
            bad => {
                let dur = ev.dur.0.as_deref().unwrap_or_default();
                // A duration past what nanoseconds in an i64 hold (292 years) is not negative:
                // each is named for what it is.
                let kind = if matches!(bad, Err(BadTime::OutOfRange)) {
                    "duration_out_of_range"
                } else {
                    "negative_duration"
                };
                self.anomalies.push((
                    kind,
                    format!("'{name}' at byte {offset} has duration {dur}; taken as 0"),
                ));
                0
            }
        };
        Some((start, dur))
    }

    /// A kernel, memcpy or memset, with its collective's metadata where NCCL gave it.
    #[inline]
    fn push_gpu(
        &mut self,
        ev: &RawEvent<'_>,
        args: &raw::RawArgs<'_>,
        kind: GpuKind,
        name: &str,
        (start, dur): (i64, i64),
    ) {
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

    /// A CUDA graph's replay as an op of its own: every kernel of the graph carries the
    /// launch's correlation id, and no operator runs on the host while it replays, so the
    /// launch becomes the node its GPU work is charged to, wherever it is launched (inside a
    /// compiled region's node in the forward, or directly under `CompiledFunctionBackward`'s
    /// annotation in the backward, where no node encloses it).
    fn graph_launch_op(
        &mut self,
        name: crate::intern::StrId,
        thread: ThreadId,
        start: i64,
        dur: i64,
        ext_id: Option<i64>,
    ) {
        self.ops.push(CpuOp {
            name,
            kind: OpKind::Op,
            thread,
            start,
            dur,
            ext_id,
            rf_id: None,
            seq: None,
            fwd_tid: None,
            inputs: InputSpans::default(),
        });
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
        // in the writer) is unknown, and said so (it became a peak of -1 bytes).
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
