//! `summary.json`: one analysed run's figures. `steptrace analyze` writes it; `compare`, the
//! Python module and any other reader read it back with the same type ([`Summary::from_json`]).
//!
//! Schema version [`FORMAT_VERSION`]: a reader refuses a newer one with one line; a file
//! without `format_version` (written before it was added) is version 1. The closed sets a
//! summary names (phases, memory categories, dtypes, where a figure came from) are enums whose
//! serde names are the words the file holds; maps keyed by them are written in the order of
//! those words, as they always were.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use crate::ReadError;
use crate::StepTimeSource;

/// The schema version this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;

/// Training phase of a node (the seed's `gtype`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Forward pass (the loss included).
    Forward,
    /// Autograd backward pass.
    Backward,
    /// Optimizer step.
    Optimizer,
    /// `zero_grad`.
    ZeroGrad,
    /// Building the batch: a Python DataLoader's `__next__` (its `enumerate(DataLoader)#`
    /// range); in a program without such ranges (libtorch), the host-only main-thread ops
    /// before the iteration's first input copy, a batch made on the device outside every
    /// module before the forward, and host-only ops after the optimizer's last GPU work; and
    /// the batch's copy to the device (a host→device copy outside every module that autograd
    /// does not differentiate), with its GPU time, wherever it falls in the step.
    DataLoading,
    /// Reads back to the host (`.item()`) and anything outside the phases above.
    Other,
}

impl Phase {
    /// Every phase, in [`Phase::index`] order.
    pub const ALL: [Phase; 6] = [
        Phase::Forward,
        Phase::Backward,
        Phase::Optimizer,
        Phase::ZeroGrad,
        Phase::DataLoading,
        Phase::Other,
    ];

    /// Its place in [`Phase::ALL`] (a table indexed by phase).
    pub fn index(self) -> usize {
        self as usize
    }

    /// The phase a name in the files names ([`Phase::as_str`]).
    pub fn from_name(s: &str) -> Option<Phase> {
        Phase::ALL.into_iter().find(|p| p.as_str() == s)
    }

    /// Lower-case name used in files.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Forward => "forward",
            Phase::Backward => "backward",
            Phase::Optimizer => "optimizer",
            Phase::ZeroGrad => "zero_grad",
            Phase::DataLoading => "data_loading",
            Phase::Other => "other",
        }
    }
}

impl Named for Phase {
    fn name(self) -> &'static str {
        self.as_str()
    }
    fn from_name(s: &str) -> Option<Self> {
        Phase::from_name(s)
    }
}

/// What an allocation holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
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
    /// Library workspaces (cuBLAS/cuBLASLt): made inside a matmul the first time a thread
    /// and stream ran one, kept for the process's life.
    Workspace,
    /// What no source can name.
    Other,
}

/// How many categories there are.
pub const CATEGORY_COUNT: usize = 8;

/// All categories, in output order.
pub const CATEGORIES: [Category; CATEGORY_COUNT] = [
    Category::Param,
    Category::Grad,
    Category::OptState,
    Category::Activation,
    Category::Input,
    Category::Temporary,
    Category::Workspace,
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
            Category::Workspace => "WORKSPACE",
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
            Category::Workspace => "workspace",
            Category::Other => "other",
        }
    }

    /// The category a lower-case key names ([`Category::key`]).
    pub fn from_key(s: &str) -> Option<Category> {
        CATEGORIES.into_iter().find(|c| c.key() == s)
    }

    /// Position in [`CATEGORIES`].
    pub fn index(self) -> usize {
        self as usize
    }
}

impl Named for Category {
    fn name(self) -> &'static str {
        self.key()
    }
    fn from_name(s: &str) -> Option<Self> {
        Category::from_key(s)
    }
}

/// Element type of a node's main input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    /// float64.
    Fp64,
    /// float32 on CUDA cores.
    Fp32,
    /// float32 through TF32 tensor cores (cuDNN convolutions by default).
    Tf32,
    /// bfloat16.
    Bf16,
    /// float16.
    Fp16,
    /// 8-bit floats.
    Fp8,
    /// Integers, bools, unknown.
    Other,
}

impl Dtype {
    /// Lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Dtype::Fp64 => "fp64",
            Dtype::Fp32 => "fp32",
            Dtype::Tf32 => "tf32",
            Dtype::Bf16 => "bf16",
            Dtype::Fp16 => "fp16",
            Dtype::Fp8 => "fp8",
            Dtype::Other => "other",
        }
    }
}

/// How iterations were found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Detection {
    /// `ProfilerStep#N` ranges.
    ProfilerStep,
    /// One iteration per autograd backward pass.
    BackwardCycle,
    /// Neither: the whole trace is one iteration.
    WholeTrace,
}

/// How a Kineto trace's `ts` relates to wall-clock time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimeConvention {
    /// `ts` in µs relative to `baseTimeNanoseconds` (PyTorch 2.4+).
    RelativeToBase,
    /// `ts` in absolute Unix-epoch µs (older PyTorch).
    AbsoluteEpoch,
}

/// Where activation liveness comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LivenessSource {
    /// Tensor identities of the Execution Trace.
    ExecutionTrace,
    /// Allocator events and autograd sequence numbers only.
    MemoryEvents,
}

/// Where a host↔device bandwidth comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BandwidthSource {
    /// The trace's pinned memcpy events of at least 1 MiB.
    Measured,
    /// No such copies: a PCIe 4.0 x16 figure.
    Default,
    /// Given by the user (`--swap-bw`, `--bandwidth`).
    Override,
    /// Capture's probe of pinned copies on the capture's machine.
    CaptureProbe,
}

impl BandwidthSource {
    /// As written in the files.
    pub fn as_str(self) -> &'static str {
        match self {
            BandwidthSource::Measured => "measured",
            BandwidthSource::Default => "default",
            BandwidthSource::Override => "override",
            BandwidthSource::CaptureProbe => "capture_probe",
        }
    }
}

/// Host↔device bandwidth used for swap times.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SwapBandwidth {
    /// Host to device, GB/s.
    pub htod_gbps: f64,
    /// Device to host, GB/s.
    pub dtoh_gbps: f64,
    /// Where the figures come from.
    pub source: BandwidthSource,
}

/// Where the GPU's time goes over the whole trace, by HolisticTraceAnalysis's definitions
/// (`get_temporal_breakdown`, `get_comm_comp_overlap`; docs/analysis.md): every GPU activity
/// on any stream, overlaps merged; with two or more `ProfilerStep#N` ranges, only activities
/// launched before the last one starts. `span_ns` runs from the first activity's start to the
/// last one's end; idle is the span with nothing running; computation the merged time of
/// computation kernels; non-computation the rest (communication, memory, other).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Temporal {
    /// First activity's start to last activity's end, ns (HTA's `kernel_time`).
    pub span_ns: i64,
    /// Span with no activity running, ns.
    pub idle_ns: i64,
    /// Merged time of computation kernels, ns.
    pub compute_ns: i64,
    /// Span minus idle minus computation, ns.
    pub non_compute_ns: i64,
    /// Merged time of communication kernels (NCCL), ns.
    pub communication_ns: i64,
    /// Merged time of memory activities (memcpy, memset), ns.
    pub memory_ns: i64,
    /// Share of communication time that runs beside computation, percent; `None` without
    /// communication kernels.
    pub comm_comp_overlap_pct: Option<f64>,
}

impl Temporal {
    /// `ns` as a percentage of the span; `None` for an empty timeline.
    pub fn pct(&self, ns: i64) -> Option<f64> {
        (self.span_ns > 0).then(|| 100.0 * ns as f64 / self.span_ns as f64)
    }

    /// Communication time with no computation beside it, ns: what the step waits for
    /// communication (HTA's overlap, as torchtitan reports exposed communication). `None`
    /// without communication kernels.
    pub fn exposed_communication_ns(&self) -> Option<i64> {
        self.comm_comp_overlap_pct
            .map(|p| (self.communication_ns as f64 * (1.0 - p / 100.0)).round() as i64)
    }
}

/// Why a CUDA stream sat idle between two of its activities: HolisticTraceAnalysis's three
/// causes (host wait, kernel wait, other; [`IdleCause::hta`]), with host wait split by what
/// the host was doing and other by a collective the stream waited for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IdleCause {
    /// The next activity was launched after the previous one ended (HTA's host wait): the
    /// host was busy with its own work (Python, the framework, the profiler).
    HostWait,
    /// Host wait while the host built the batch (a data-loading node).
    DataLoading,
    /// Host wait right after the host waited for the GPU (`cudaStreamSynchronize`,
    /// `.item()`, a copy to the host): the queue drained, and the host had to fill it again.
    HostSync,
    /// Launched in time, and a gap under 30 µs: the cost of starting the next kernel.
    KernelWait,
    /// Launched in time, and the activity started as a collective on another stream ended:
    /// it waited for the communication.
    CommunicationWait,
    /// Launched in time, longer than a kernel wait, cause unknown (an event from another
    /// stream, a copy engine).
    Other,
}

impl IdleCause {
    /// Every cause, in this order.
    pub const ALL: [IdleCause; 6] = [
        IdleCause::HostWait,
        IdleCause::DataLoading,
        IdleCause::HostSync,
        IdleCause::KernelWait,
        IdleCause::CommunicationWait,
        IdleCause::Other,
    ];

    /// Its place in [`IdleCause::ALL`] (a table indexed by cause).
    pub fn index(self) -> usize {
        self as usize
    }

    /// Its name in summary.json and the tables.
    pub fn as_str(self) -> &'static str {
        match self {
            IdleCause::HostWait => "host_wait",
            IdleCause::DataLoading => "data_loading",
            IdleCause::HostSync => "host_sync",
            IdleCause::KernelWait => "kernel_wait",
            IdleCause::CommunicationWait => "communication_wait",
            IdleCause::Other => "other",
        }
    }

    /// HolisticTraceAnalysis's category it falls under (`get_idle_time_breakdown`).
    pub fn hta(self) -> &'static str {
        match self {
            IdleCause::HostWait | IdleCause::DataLoading | IdleCause::HostSync => "host_wait",
            IdleCause::KernelWait => "kernel_wait",
            IdleCause::CommunicationWait | IdleCause::Other => "other",
        }
    }
}

/// What a stretch of a step's critical path is ([`CriticalPathSummary`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PathKind {
    /// The host's own work (profiled: the profiler's host work is in it).
    Host,
    /// From a launch call's start to its activity's start, the GPU having nothing before it.
    LaunchDelay,
    /// A kernel running.
    Kernel,
    /// A copy running.
    Memcpy,
    /// A memset running.
    Memset,
    /// Between two activities of one stream, the second launched in time.
    StreamGap,
    /// An activity that waited for another stream's work (an event, a collective).
    CrossStream,
    /// The host waiting in a synchronising call after the GPU work it waited for ended.
    Sync,
}

impl PathKind {
    /// Every kind, in this order.
    pub const ALL: [PathKind; 8] = [
        PathKind::Host,
        PathKind::LaunchDelay,
        PathKind::Kernel,
        PathKind::Memcpy,
        PathKind::Memset,
        PathKind::StreamGap,
        PathKind::CrossStream,
        PathKind::Sync,
    ];

    /// Its place in [`PathKind::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// Its name in summary.json and the tables.
    pub fn as_str(self) -> &'static str {
        match self {
            PathKind::Host => "host",
            PathKind::LaunchDelay => "launch_delay",
            PathKind::Kernel => "kernel",
            PathKind::Memcpy => "memcpy",
            PathKind::Memset => "memset",
            PathKind::StreamGap => "stream_gap",
            PathKind::CrossStream => "cross_stream",
            PathKind::Sync => "sync",
        }
    }

    /// Whether the GPU is running work of its own over it.
    pub fn is_gpu_work(self) -> bool {
        matches!(self, PathKind::Kernel | PathKind::Memcpy | PathKind::Memset)
    }
}

/// An op on the critical path and how much of it the path holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PathOp {
    /// The node (host work) or the op that launched it (GPU work), by name.
    pub op: String,
    /// Its time on the path per iteration (the iterations' sum over their number), s.
    pub path_s: f64,
}

/// The critical path of the profiled iterations (single rank): what each stretch of the step
/// waited for, walked back from its end.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CriticalPathSummary {
    /// The path's length per iteration (first launch to the later of the host's and the GPU's
    /// end; the iterations' sum over their number), s.
    pub length_s: f64,
    /// Its length by kind, per iteration, s.
    pub per_iteration_s: BTreeMap<PathKind, f64>,
    /// The host's share of the path (host and sync kinds), under the profiler.
    pub host_share: f64,
    /// The step a host that cost nothing would leave: the GPU's busy time per iteration
    /// (median), what CUDA graphs or a faster host tend to at most, s.
    pub host_free_step_s: f64,
    /// `host` where such a host would take a tenth or more off the step (the program's own
    /// where capture timed it, else the profiled one), else `gpu`.
    pub bound: String,
    /// The host's time on the path at the program's own speed: profiled host time times the
    /// program's host time over the profiled one (its step less the host's lead over the
    /// profiled step); `None` without the program's own step time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_s_at_program_speed: Option<f64>,
    /// The ops holding most of the path (at most 10, most first).
    pub top_ops: Vec<PathOp>,
}

/// An op idle time is charged to: the outermost op around the late launch (host causes), the
/// collective waited for, or the activity that started late.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IdleOp {
    /// Its name (a node name where the op is a node).
    pub op: String,
    /// Idle time charged to it per iteration (the iterations' sum over their number), s.
    pub idle_s: f64,
}

/// Why the GPU waits, on the stream that does the most work.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IdleSummary {
    /// CUDA device.
    pub device: i64,
    /// CUDA stream.
    pub stream: i64,
    /// Idle time per iteration by cause (the iterations' sum over their number), s.
    pub per_iteration_s: BTreeMap<IdleCause, f64>,
    /// Per cause, the ops most of it is charged to (at most 5, most first).
    pub top_ops: BTreeMap<IdleCause, Vec<IdleOp>>,
}

/// Kernel launches summed up (HolisticTraceAnalysis's `get_cuda_kernel_launch_stats`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LaunchSummary {
    /// GPU activities paired with their launch call.
    pub launches: usize,
    /// Of those, ran shorter on the GPU than their launch call took on the host (a call of at
    /// most 50 µs): work the host cannot queue as fast as the GPU finishes it.
    pub shorter_than_launch: usize,
    /// Launch calls over 50 µs.
    pub runtime_outliers: usize,
    /// Launch delays over 100 µs.
    pub delay_outliers: usize,
    /// Median launch delay (the call's end to the activity's start), s.
    pub median_delay_s: f64,
}

/// One kind of collective's kernels on a rank (FSDP2's all-gathers against its
/// reduce-scatters): their merged time, and how much of it ran beside computation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CollectiveOverlap {
    /// Merged time of this collective's kernels, ns.
    pub communication_ns: i64,
    /// The part of it with a computation kernel running beside it, ns.
    pub overlapped_ns: i64,
}

impl CollectiveOverlap {
    /// The part with no computation beside it, ns.
    pub fn exposed_ns(&self) -> i64 {
        self.communication_ns - self.overlapped_ns
    }
}

/// GPU, CPU and wall time of one phase per iteration.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct PhaseTime {
    /// GPU time (kernels, copies, sets) of its nodes, s.
    pub gpu_s: f64,
    /// Host time of its nodes (their own durations, summed), s.
    pub cpu_s: f64,
    /// Wall time of the phase in the iteration: its nodes' spans and the host code between
    /// two of them (what a framework's timer around the phase measures), s.
    pub wall_s: f64,
}

impl PhaseTime {
    /// Its host figure for display: the wall time, or the nodes' own host time where the
    /// trace gives no wall time (a phase whose nodes lie outside the iterations' spans).
    pub fn host_s(&self) -> f64 {
        if self.wall_s > 0.0 {
            self.wall_s
        } else {
            self.cpu_s
        }
    }
}

/// How the snapshot's clock lines up with the trace's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SnapshotJoin {
    /// Snapshot file name.
    pub file: String,
    /// History entries (all devices).
    pub entries: usize,
    /// Segments alive at snapshot time.
    pub segments: usize,
    /// Bytes reserved in those segments.
    pub reserved_bytes: u64,
    /// Whether the history starts before the trace's first event (it then holds parameters and
    /// optimizer state allocated earlier).
    pub history_before_trace: bool,
    /// Median of snapshot `time_us` − trace time for `ProfilerStep#N` starts found in
    /// `external_annotations`, µs.
    pub annotation_offset_us: Option<f64>,
    /// How many ranges matched.
    pub annotation_matches: usize,
    /// Median of the same difference over allocations matched by address and size, µs.
    pub alloc_offset_us: Option<f64>,
    /// How many allocations matched.
    pub alloc_matches: usize,
}

/// How the Execution Trace joins the Kineto trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecTraceJoin {
    /// File name.
    pub file: String,
    /// `schema`.
    pub schema: String,
    /// Nodes in the ET.
    pub nodes: usize,
    /// Kineto ops with a `Record function id`.
    pub ops_with_rf_id: usize,
    /// Of those, how many have an ET node with the same `rf_id` and name.
    pub ops_matched: usize,
}

/// Device peaks for the roofline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Peaks {
    /// Which table row matched (or `override`).
    pub device: String,
    /// Dense TFLOP/s by dtype.
    pub tflops: Vec<(Dtype, f64)>,
    /// Memory bandwidth, GB/s.
    pub bandwidth_gbps: f64,
}

impl Peaks {
    /// Peak FLOP/s for a dtype.
    pub fn flops(&self, d: Dtype) -> Option<f64> {
        let d = if d == Dtype::Other { Dtype::Fp32 } else { d };
        self.tflops
            .iter()
            .find(|(x, _)| *x == d)
            .map(|(_, v)| v * 1e12)
    }
}

/// A private memory pool at the snapshot's end.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PrivatePool {
    /// Device.
    pub device: i64,
    /// `segment_pool_id`, as `a,b`.
    pub id: String,
    /// Segments in it.
    pub segments: usize,
    /// Bytes reserved for it.
    pub reserved_bytes: u64,
    /// Bytes of its blocks allocated at the end (a graph's outputs still alive; its
    /// intermediates are reused by every replay and show as free).
    pub allocated_bytes: u64,
}

/// CUDA graph replays in the profiled iterations (summary.json's `cuda_graphs`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CudaGraphs {
    /// Whether every replay's FLOPs are in the FLOPs figures (counted when capture recorded
    /// the graph); else they are left out, and a warning says so.
    pub flops_counted: bool,
    /// Graph replays per iteration (median).
    pub replays_per_iteration: f64,
    /// GPU time of the replays' kernels per iteration (median), s.
    pub gpu_time_per_iteration_s: f64,
    /// Their share of the iteration's GPU time (median iteration), %.
    pub share_of_gpu_time_pct: f64,
    /// Bytes reserved on the device at the snapshot (every pool, default and private): what
    /// the step holds of the device, torch's `memory_reserved`; `None` without a snapshot.
    pub reserved_bytes: Option<u64>,
    /// The private pools at the snapshot, with what each holds reserved.
    pub private_pools: Vec<PrivatePool>,
}

/// What checkpointing and swapping a module cost on the machine a run was captured on,
/// measured by the capture shim at the program's exit on a chain of tiny ops: host
/// time that a trace cannot show at its real size, since the profiler's Python tracing inflates
/// Python-heavy code far more than ops.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PlanProbe {
    /// A non-reentrant checkpoint's own host time per call (set-up, RNG state), s.
    pub recompute_call_s: f64,
    /// Its host time per op of the module, beyond the op's replay (saved-tensor hooks in the
    /// forward and the recompute), s.
    pub recompute_per_op_s: f64,
    /// Of the checkpoint's time per call, what its forward call takes, s (the rest is the
    /// backward's); `None` in a capture by an older steptrace. Recorded for the step model's
    /// checks: `steptrace plan` still puts half of the checkpoint's own work in each phase
    /// (docs/planner.md, "Where the checkpoint's own work lands").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recompute_forward_call_s: Option<f64>,
    /// Of its time per op, what the forward takes (the hooks pack once there; the recompute
    /// packs again and the backward unpacks), s; `None` in a capture by an older steptrace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recompute_forward_per_op_s: Option<f64>,
    /// The swap hooks' host time per call, s.
    pub swap_call_s: f64,
    /// Their host time per op (pack and unpack, the copies' launches), s.
    pub swap_per_op_s: f64,
    /// Pinned device→host bandwidth, GB/s.
    pub dtoh_gbps: f64,
    /// Pinned host→device bandwidth, GB/s.
    pub htod_gbps: f64,
}

/// Which clock timed a step boundary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimingClock {
    /// CUDA events recorded on the stream at each boundary.
    CudaEvents,
    /// The host's clock when the CPU reached the boundary.
    Host,
}

/// Why capture's timing phase stopped before its medians settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimingStop {
    /// It timed as many steps as it may (`--timing-max-steps`).
    StepCap,
    /// It ran as long as it may (`--timing-max-s`).
    TimeCap,
}

impl TimingStop {
    /// As written in the files.
    pub fn as_str(self) -> &'static str {
        match self {
            TimingStop::StepCap => "step_cap",
            TimingStop::TimeCap => "time_cap",
        }
    }

    /// From the word the files hold.
    pub fn from_name(s: &str) -> Option<Self> {
        match s {
            "step_cap" => Some(TimingStop::StepCap),
            "time_cap" => Some(TimingStop::TimeCap),
            _ => None,
        }
    }
}

/// The timing phase of a planned capture whose steps alternated with and without the plan:
/// what the plan adds, measured in one process.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PlanTimedBothWays {
    /// Median step with the plan, s.
    pub step_time_with_s: f64,
    /// Median step without it, s.
    pub step_time_without_s: f64,
    /// Which clock: CUDA events where the shim had them, else the host's. The host clock
    /// reads a boundary when the CPU reaches it; a program that waits for the GPU after its
    /// boundary (`loss.item()` after the optimizer step) then counts each step's GPU time in
    /// the next step's interval, which with alternating steps moves the plan's cost into the
    /// steps without it (nanoGPT's bench.py: 49.7 and 30.7 ms on the host clock, 42.8 and
    /// 36.6 ms on the stream).
    pub clock: TimingClock,
    /// Steps timed with it.
    pub steps_with: usize,
    /// Steps timed without it.
    pub steps_without: usize,
    /// Where the timing phase stopped at a cap before both medians settled: the figures are
    /// then rough ones (nanoGPT's bench.py leaves room for medians of 2 steps each way);
    /// `None` when they settled.
    pub stopped_at: Option<TimingStop>,
}

/// `summary.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// This file's schema version ([`FORMAT_VERSION`]).
    #[serde(default = "crate::version_one")]
    pub format_version: u32,
    /// steptrace version.
    pub steptrace_version: String,
    /// Name of what was analysed: the run directory's or the trace file's stem.
    pub name: String,
    /// Trace file name.
    pub trace: String,
    /// Profiled iterations.
    pub iterations: usize,
    /// How they were found.
    pub iteration_detection: Detection,
    /// Their labels.
    pub iteration_labels: Vec<String>,
    /// Nodes in the aligned step (union over iterations).
    pub nodes_per_iteration: usize,
    /// The step time: the program's own (timed by capture with nothing recorded) when the run
    /// directory has it, else the median iteration span under the profiler, s.
    pub step_time_s: f64,
    /// Median iteration span under the profiler, s (includes the profiler's own overhead).
    pub step_time_instrumented_s: f64,
    /// Where `step_time_s` comes from: `after_window` (capture timed the steps after its window,
    /// the rest of the run), `timing_phase` (steps before the window) or `instrumented`.
    pub step_time_source: StepTimeSource,
    /// `step_time_instrumented_s / step_time_s`, when the program's own time is known.
    pub profiler_overhead: Option<f64>,
    /// A planned capture's timing phase with steps alternating with and without the plan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan_timed_both_ways: Option<PlanTimedBothWays>,
    /// How far the host ran ahead of the GPU at the end of the program's own steps, s (capture's
    /// timing phase): host time a step can gain before the GPU waits for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_lead_s: Option<f64>,
    /// The program's own `optimizer.step()` host time, s (capture's timing phase): in a
    /// distributed run, this rank's host speed at the same work as the others'.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub optimizer_step_host_s: Option<f64>,
    /// The program's own host time of its model's outermost forward call, s (capture's timing
    /// phase, Python programs): the profiler slows a Python forward more than the autograd
    /// engine's backward, and the plan's step model scales each by its own figure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forward_host_s: Option<f64>,
    /// The program's own host time of a backward call, s (as `forward_host_s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backward_host_s: Option<f64>,
    /// What checkpointing and swapping cost on the capture's machine (its manifest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan_probe: Option<PlanProbe>,
    /// Where the GPU's time goes over the whole trace (HolisticTraceAnalysis's temporal
    /// breakdown and communication/computation overlap), ns.
    pub gpu_breakdown: Temporal,
    /// Communication by collective (NCCL kernels' `AllGather`, `ReduceScatter`, …): its time
    /// and the part of it beside computation, over the same activities as `gpu_breakdown`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub collective_overlap: BTreeMap<String, CollectiveOverlap>,
    /// Each iteration's span, s.
    pub step_times_s: Vec<f64>,
    /// Median union of GPU activity per iteration, s.
    pub gpu_busy_s: f64,
    /// The GPU's utilisation: `gpu_busy_s` over the program's own step time (`step_time_s`
    /// where capture timed it, nothing recorded); `None` where the program's own step is not
    /// known. Kernels run as long under the profiler as without it, so the busy time measured
    /// in the profiled iterations stands for the program's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_utilization: Option<f64>,
    /// `gpu_busy_s` over the profiled step (`step_time_instrumented_s`): the share the trace
    /// shows, lowered by the profiler's own host work wherever the step is host-bound.
    #[serde(default)]
    pub gpu_utilization_profiled: f64,
    /// Why the GPU waits: the idle time of its busiest stream by cause (`idle_time.csv` has
    /// every stream); `None` without GPU activity in the iterations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle: Option<IdleSummary>,
    /// The profiled iterations' critical path; `None` without GPU activity in them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub critical_path: Option<CriticalPathSummary>,
    /// Kernel launches: how many ran shorter than their own launch; `None` without launches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launches: Option<LaunchSummary>,
    /// Median sum of GPU activity durations per iteration, s.
    pub gpu_time_s: f64,
    /// Largest `Total Allocated` inside the profiled iterations.
    pub peak_allocated_bytes: Option<i64>,
    /// Node during which that peak happened.
    pub peak_node: Option<String>,
    /// Iteration label of the peak.
    pub peak_iteration: Option<String>,
    /// GPU name.
    pub device: Option<String>,
    /// GPU memory, bytes.
    pub device_memory_bytes: Option<i64>,
    /// How `ts` maps to wall-clock time.
    pub time_convention: TimeConvention,
    /// Events in `traceEvents`.
    pub trace_events: usize,
    /// Whether the trace ended early.
    pub truncated: bool,
    /// Snapshot join, when a snapshot was given.
    pub snapshot: Option<SnapshotJoin>,
    /// Execution Trace join, when one was given.
    pub execution_trace: Option<ExecTraceJoin>,
    /// All FLOPs of one iteration (aligned nodes, medians).
    pub flops_per_iteration: u64,
    /// FLOPs of one iteration in FlopCounterMode's convention (matmul, convolution, attention).
    pub matmul_flops_per_iteration: u64,
    /// GPU, CPU and wall time per iteration by phase (forward, backward, optimizer, data
    /// loading, ...): its nodes' medians summed, and the median of its wall time.
    #[serde(with = "by_name")]
    pub time_by_phase: BTreeMap<Phase, PhaseTime>,
    /// Median time per iteration between phases: no phase's work ran (the framework's code
    /// between them, the profiler's step), s.
    pub between_phases_s: f64,
    /// All FLOPs per iteration by phase.
    #[serde(with = "by_name")]
    pub flops_by_phase: BTreeMap<Phase, u64>,
    /// FLOPs per iteration by phase in FlopCounterMode's convention (matmul, convolution,
    /// attention): what FlopCounterMode counts around the forward and around the backward.
    #[serde(with = "by_name")]
    pub matmul_flops_by_phase: BTreeMap<Phase, u64>,
    /// Bytes read and written per iteration by the nodes.
    pub bytes_per_iteration: u64,
    /// Whether node traffic and optimizer FLOPs come from the Execution Trace (exact) or are
    /// estimated from allocations (no ET: foreach optimizer kernels then count 0).
    pub flops_from_execution_trace: bool,
    /// The roofline's peaks.
    pub peaks: Option<Peaks>,
    /// Where activation liveness comes from.
    pub liveness_source: LivenessSource,
    /// Bytes by category at the peak; adds up exactly to `peak_allocated_bytes`.
    #[serde(with = "by_name")]
    pub peak_breakdown_bytes: BTreeMap<Category, i64>,
    /// Activations found (per iteration, aligned).
    pub activations: usize,
    /// Bytes alive when the window opened that no snapshot block accounts for (counted OTHER).
    pub unexplained_before_window_bytes: i64,
    /// Host↔device bandwidth used for swap times.
    pub swap_bandwidth: SwapBandwidth,
    /// Backward passes per iteration (median) where there are several: gradient
    /// accumulation's micro-batches, or a step with several losses (absent with one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backward_passes_per_iteration: Option<u32>,
    /// torch's `max_memory_allocated` over the whole run, from its first step to its exit,
    /// where capture read it (absent otherwise): what a plan must keep under its budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_peak_allocated_bytes: Option<i64>,
    /// CUDA graph replays in the iterations and the private pools they hold (absent without
    /// replays).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda_graphs: Option<CudaGraphs>,
    /// Anomalies, one line per kind.
    pub warnings: Vec<String>,
}

impl Summary {
    /// Whether FLOPs and bytes were counted at all: a trace recorded without input shapes
    /// gives neither, and its 0 is "not measured", not "nothing computed".
    pub fn flops_counted(&self) -> bool {
        self.flops_per_iteration > 0 || self.bytes_per_iteration > 0
    }

    /// Reads a `summary.json`, refusing one written for a newer schema.
    pub fn from_json(text: &str) -> Result<Summary, ReadError> {
        crate::read_versioned(text.as_bytes(), FORMAT_VERSION)
    }
}

/// A closed set written by name: map keys of the file.
pub trait Named: Sized + Copy + Ord {
    /// The word the file holds.
    fn name(self) -> &'static str;
    /// The value a word names.
    fn from_name(s: &str) -> Option<Self>;
}

/// Maps keyed by a [`Named`] enum, written in the order of the names (as when they were keyed
/// by the names themselves), read back by name.
mod by_name {
    use std::collections::BTreeMap;

    use serde::de::Error as _;
    use serde::ser::SerializeMap;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::Named;

    pub fn serialize<K: Named, V: Serialize, S: Serializer>(
        m: &BTreeMap<K, V>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        let mut entries: Vec<(&str, &V)> = m.iter().map(|(k, v)| (k.name(), v)).collect();
        entries.sort_by_key(|e| e.0);
        let mut map = s.serialize_map(Some(entries.len()))?;
        for (k, v) in entries {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }

    pub fn deserialize<'de, K: Named, V: Deserialize<'de>, D: Deserializer<'de>>(
        d: D,
    ) -> Result<BTreeMap<K, V>, D::Error> {
        let raw: BTreeMap<String, V> = BTreeMap::deserialize(d)?;
        raw.into_iter()
            .map(|(k, v)| {
                K::from_name(&k)
                    .map(|k| (k, v))
                    .ok_or_else(|| D::Error::custom(format!("unknown key `{k}`")))
            })
            .collect()
    }
}

/// Entries of a map keyed by a [`Named`] enum in the order the file writes them (by name).
pub fn by_name_order<K: Named, V>(m: &BTreeMap<K, V>) -> Vec<(K, &V)> {
    let mut v: Vec<(K, &V)> = m.iter().map(|(k, v)| (*k, v)).collect();
    v.sort_by_key(|e| e.0.name());
    v
}

// A memory snapshot analysed alone (`analyze snapshot.pickle`) writes its own summary.json.

/// What kind of code allocated a block, from its frames alone (no trace to say).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SiteKind {
    /// `torch.optim` (or `torch::optim`) outside a closure's forward: optimizer state and
    /// the step's temporaries.
    Optimizer,
    /// The autograd engine: gradients and the backward's temporaries.
    Backward,
    /// Inside an `nn.Module`'s forward.
    ModuleForward,
    /// `torch.utils.data`: batches made by the data loader (pinned copies, collation).
    DataLoading,
    /// Moving or building the model (`Module.to`/`cuda`, a module's `__init__`): parameters
    /// and buffers.
    ModelSetup,
    /// cuBLAS/cuBLASLt workspaces.
    Workspace,
    /// Python frames, none of the above: the program's own code (inputs, caches).
    Program,
    /// No frames recorded: made on a thread without Python (the autograd engine's device
    /// threads with `stacks="python"`) or before stacks were recorded.
    NoStack,
    /// C++ frames only, none of the above.
    Other,
}

/// Every kind, in output order (the enum's order; `SiteKind as usize` indexes it).
pub const SITE_KINDS: [SiteKind; 9] = [
    SiteKind::Optimizer,
    SiteKind::Backward,
    SiteKind::ModuleForward,
    SiteKind::DataLoading,
    SiteKind::ModelSetup,
    SiteKind::Workspace,
    SiteKind::Program,
    SiteKind::NoStack,
    SiteKind::Other,
];

impl SiteKind {
    /// The name in outputs.
    pub fn name(self) -> &'static str {
        match self {
            SiteKind::Optimizer => "optimizer",
            SiteKind::Backward => "backward",
            SiteKind::ModuleForward => "module_forward",
            SiteKind::DataLoading => "data_loading",
            SiteKind::ModelSetup => "model_setup",
            SiteKind::Workspace => "workspace",
            SiteKind::Program => "program",
            SiteKind::NoStack => "no_stack",
            SiteKind::Other => "other",
        }
    }
}

/// Bytes alive at the peak by one site.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Site {
    /// `file.py:line:function` (torch's form).
    pub site: String,
    /// The kind of code most of its bytes came from.
    pub kind: SiteKind,
    /// Bytes.
    pub bytes: u64,
    /// Blocks.
    pub blocks: usize,
}

/// Bytes of one kind of code.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct KindBytes {
    /// The kind.
    pub kind: SiteKind,
    /// Bytes.
    pub bytes: u64,
    /// Blocks.
    pub blocks: usize,
}

/// memory_viz `stats` (`segsum`) totals at the snapshot's end.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct SegmentTotals {
    /// Segments.
    pub segments: usize,
    /// Bytes reserved from CUDA.
    pub reserved_bytes: u64,
    /// Bytes the program asked for, in active blocks.
    pub allocated_bytes: u64,
    /// Bytes inside active blocks beyond what was asked for (the allocator's rounding).
    pub free_internal_bytes: u64,
    /// Bytes in inactive blocks (cached, free for reuse).
    pub free_external_bytes: u64,
    /// Share of the free bytes that are rounding, %.
    pub internal_pct: Option<f64>,
    /// The largest free (inactive) block, bytes: the largest allocation that fits without a
    /// new segment.
    pub largest_free_block_bytes: u64,
    /// Free bytes outside the largest free block, as a share of all free bytes, %
    /// (fragmentation: 0 when free memory is one piece).
    pub fragmentation_pct: Option<f64>,
}

/// `summary.json` of a snapshot analysed alone: the names a trace's summary uses where they
/// mean the same.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SnapshotSummary {
    /// This file's schema version ([`FORMAT_VERSION`]; 1 where absent).
    #[serde(default = "crate::version_one")]
    pub format_version: u32,
    /// Always `memory_snapshot`: what tells this summary from a trace's.
    pub kind: String,
    /// The snapshot's file name.
    pub snapshot: String,
    /// History entries (all devices).
    pub entries: usize,
    /// A snapshot from before PyTorch 2.1 (no history).
    pub legacy_layout: bool,
    /// The most allocated at once on any device.
    pub peak_allocated_bytes: u64,
    /// The most reserved at once on any device.
    pub peak_reserved_bytes: u64,
    /// Per device.
    pub devices: Vec<DeviceSummary>,
    /// memory_viz `stats` totals at the end.
    pub segments: SegmentTotals,
    /// Private pools (CUDA graphs'), left out of the free and fragmentation figures above.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub private_pools: Vec<PrivatePool>,
    /// Annotated ranges found in the history.
    pub phases: usize,
    /// Anomalies, one line per kind.
    pub warnings: Vec<String>,
}

/// One device of a snapshot summary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceSummary {
    /// Device.
    pub device: i64,
    /// History entries.
    pub entries: usize,
    /// The most allocated at once.
    pub peak_allocated_bytes: u64,
    /// The history entry at the peak.
    pub peak_entry: Option<usize>,
    /// When, ms from the first recorded time.
    pub peak_time_ms: Option<f64>,
    /// The annotated range it fell in.
    pub peak_phase: Option<String>,
    /// The most reserved at once.
    pub peak_reserved_bytes: u64,
    /// Allocated at the start of the history.
    pub start_allocated_bytes: u64,
    /// Allocated at its end.
    pub end_allocated_bytes: u64,
    /// Reserved at its end.
    pub end_reserved_bytes: u64,
    /// Blocks alive at the peak.
    pub alive_at_peak: usize,
    /// Bytes at the peak by kind of code.
    pub by_kind: Vec<KindBytes>,
    /// The top Python frames at the peak (10 at most).
    pub top_python_frames: Vec<Site>,
    /// The top C++ frames at the peak (10 at most).
    pub top_cpp_frames: Vec<Site>,
    /// Bytes allocated and never freed.
    pub never_freed_bytes: u64,
}

impl SnapshotSummary {
    /// Reads a snapshot's `summary.json`, refusing one written for a newer schema.
    pub fn from_json(text: &str) -> Result<SnapshotSummary, ReadError> {
        crate::read_versioned(text.as_bytes(), FORMAT_VERSION)
    }
}
