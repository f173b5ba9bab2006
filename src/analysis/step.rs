//! Rebuilding the training step: iterations, phases and nodes, with each node's GPU time and
//! memory in each iteration.
//!
//! ```text
//!            |<------------------- iteration k ------------------->|
//!  main      [to][to][conv2d][bn]...[loss]                [Optimizer.step ...][item]
//!  autograd                              [eval_fn: ...Backward0] ...
//!  phase      other   forward ........      backward ............  optimizer     other
//! ```
//! Iterations come from `ProfilerStep#N` ranges. Without them every autograd backward pass
//! closes one iteration: the next one begins at the first host→device input copy after the
//! optimizer (else at the first op with an autograd sequence number).

use rayon::prelude::*;
use rustc_hash::FxHashMap;
use serde::Serialize;

use crate::diagnostics::Diagnostics;
use crate::ingest::kineto::{GpuKind, OpKind, ThreadId};
use crate::intern::StrId;
use crate::model::{GpuId, OpId, Trace, EVALUATE_FUNCTION};

/// How iterations were found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Detection {
    /// `ProfilerStep#N` ranges.
    ProfilerStep,
    /// One iteration per autograd backward pass.
    BackwardCycle,
    /// Neither: the whole trace is one iteration.
    WholeTrace,
}

/// Training phase of a node (the seed's `gtype`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
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
    /// Input copies and anything outside the phases above.
    Other,
}

impl Phase {
    /// Lower-case name used in files.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Forward => "forward",
            Phase::Backward => "backward",
            Phase::Optimizer => "optimizer",
            Phase::ZeroGrad => "zero_grad",
            Phase::Other => "other",
        }
    }
}

/// One node in one iteration.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    /// The op.
    pub op: OpId,
    /// Iteration index (0-based among the profiled iterations).
    pub iteration: u32,
    /// Execution order within the iteration.
    pub rank: u32,
    /// Name stable across iterations.
    pub name: String,
    /// Phase.
    pub phase: Phase,
    /// Autograd function for backward nodes, e.g. `ConvolutionBackward0`.
    pub autograd_fn: Option<StrId>,
    /// Module path (backward nodes inherit their forward op's).
    pub module: Option<StrId>,
    /// Whether it is forward recomputation inside backward (activation checkpointing).
    pub recompute: bool,
    /// Sum of its GPU activities' durations, ns.
    pub gpu_time: i64,
    /// First GPU start to last GPU end, ns (0 without GPU work).
    pub gpu_span: i64,
    /// Number of GPU activities (kernels, memcpys, memsets).
    pub kernels: u32,
    /// CPU duration of the op, ns.
    pub cpu_time: i64,
    /// Allocated bytes just before it started.
    pub active_before: i64,
    /// Highest allocated bytes while it ran.
    pub peak: i64,
    /// Bytes allocated inside it (its thread).
    pub alloc_bytes: i64,
    /// Bytes freed inside it (its thread).
    pub free_bytes: i64,
}

/// One profiled iteration.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Iteration {
    /// 0-based index.
    pub index: u32,
    /// `ProfilerStep#N` or `iteration k`.
    pub label: String,
    /// Start, ns.
    pub start: i64,
    /// End, ns.
    pub end: i64,
    /// Nodes, as a range of [`Step::nodes`].
    pub nodes: std::ops::Range<usize>,
    /// Sum of all GPU activity launched in the iteration, ns.
    pub gpu_time: i64,
    /// Union of those activities' intervals, ns.
    pub gpu_busy: i64,
    /// GPU time of activity launched outside every node, ns.
    pub gpu_unattributed: i64,
    /// Peak allocated bytes inside the iteration.
    pub peak_allocated: Option<i64>,
    /// Backward pass span, ns.
    pub backward: Option<(i64, i64)>,
}

/// The rebuilt step.
#[derive(Debug, Clone)]
pub struct Step {
    /// How iterations were found.
    pub detection: Detection,
    /// Iterations in time order.
    pub iterations: Vec<Iteration>,
    /// Nodes, grouped by iteration, in rank order.
    pub nodes: Vec<Node>,
    /// Top-level ops that fell outside every iteration.
    pub nodes_outside: usize,
}

fn is_autograd_wrapper(name: &str) -> bool {
    if name.starts_with(EVALUATE_FUNCTION)
        || name.starts_with("torch::autograd::")
        || name.starts_with("autograd::")
    {
        return true;
    }
    // Autograd node ranges: `ConvolutionBackward0`, `CheckpointFunctionBackward`, ...
    !name.contains("::")
        && name
            .trim_end_matches(|c: char| c.is_ascii_digit())
            .ends_with("Backward")
}

/// Collects the node ops under `op`: the op itself, unless it is an annotation or an autograd
/// wrapper, in which case its children are searched.
fn collect_nodes(t: &Trace, op: OpId, out: &mut Vec<OpId>) {
    let o = t.op(op);
    let name = t.kineto.str(o.name);
    let transparent =
        o.kind == OpKind::Annotation || (is_autograd_wrapper(name) && !t.children(op).is_empty());
    if transparent {
        for &c in t.children(op) {
            collect_nodes(t, c, out);
        }
    } else {
        out.push(op);
    }
}

/// Per-op facts the reconstruction reads repeatedly, indexed by op.
struct OpFacts {
    /// Nearest `evaluate_function` ancestor's autograd function name.
    autograd_fn: Vec<Option<StrId>>,
    /// Inside `Optimizer.step#` / `Optimizer.zero_grad#` ranges.
    in_optimizer: Vec<bool>,
    in_zero_grad: Vec<bool>,
}

impl OpFacts {
    /// Whether the op runs under an autograd node (backward work).
    fn is_bw(&self, o: OpId) -> bool {
        self.autograd_fn[o.0 as usize].is_some()
    }
}

/// Rebuilds iterations, phases and nodes, in named passes: the node ops, their facts, the
/// autograd threads, the GPU work each node launched, the iteration windows, the nodes of each
/// window, the modules of backward nodes, then each iteration on its own thread.
pub fn compute(t: &mut Trace, diag: &mut Diagnostics) -> Step {
    let node_ops = node_ops(t);
    let facts = op_facts(t, &node_ops);
    let t: &Trace = t;
    let autograd_thread = autograd_threads(t, &node_ops, &facts);
    let gpu = gpu_owners(t, &node_ops);
    let main = t.main_thread;
    let (detection, windows) = find_iterations(
        t,
        &node_ops,
        &|o| facts.is_bw(o),
        &|ni| has_htod(t, &gpu.of_node[ni]),
        main,
    );
    let (per_iter, outside) = assign_to_windows(t, &node_ops, &windows);
    let module_by_seq = module_by_seq(t, &facts, &autograd_thread);
    let ctx = Ctx {
        t,
        node_ops: &node_ops,
        facts: &facts,
        autograd_thread: &autograd_thread,
        gpu: &gpu,
        module_by_seq: &module_by_seq,
        launches: &sorted_launches(t),
        main,
        has_opt_annotations: facts.in_optimizer.iter().any(|&b| b),
    };
    // Iterations are independent: each builds its nodes on its own thread, and they are joined
    // in iteration order, so the output does not depend on the threads.
    let per_window: Vec<(Vec<Node>, Iteration)> = windows
        .par_iter()
        .zip(per_iter)
        .enumerate()
        .map(|(ii, (w, idx))| ctx.build_iteration(ii, w, idx))
        .collect();
    let (mut per_iter_nodes, mut iterations): (Vec<Vec<Node>>, Vec<Iteration>) =
        per_window.into_iter().unzip();
    if detection == Detection::ProfilerStep {
        drop_cut_short(&mut iterations, &mut per_iter_nodes, diag);
    }
    let mut first = 0;
    for (it, own) in iterations.iter_mut().zip(&per_iter_nodes) {
        it.nodes = first..first + own.len();
        first += own.len();
    }
    let nodes = crate::par::concat(&mut per_iter_nodes);
    let unattributed_total: u64 = gpu.unattributed.len() as u64;
    diag.warn_n(
        "gpu_activity_outside_nodes",
        unattributed_total,
        format!("{unattributed_total} GPU activities were launched by ops that are not nodes"),
    );
    if outside > 0 && detection == Detection::ProfilerStep {
        diag.warn_n(
            "nodes_outside_iterations",
            outside as u64,
            format!("{outside} top-level ops lie outside every ProfilerStep range"),
        );
    }
    Step {
        detection,
        iterations,
        nodes,
        nodes_outside: outside,
    }
}

/// The node ops, in root order: each thread's outermost ops, with annotations and autograd
/// wrappers opened ([`collect_nodes`]). Each root's subtree is searched on its own thread.
fn node_ops(t: &Trace) -> Vec<OpId> {
    let mut per_root: Vec<Vec<OpId>> = t
        .roots
        .par_iter()
        .map(|&r| {
            let mut v = Vec::new();
            collect_nodes(t, r, &mut v);
            v
        })
        .collect();
    crate::par::concat(&mut per_root)
}

/// Per node op: the autograd function of its nearest `evaluate_function` ancestor (interned
/// without the prefix, as it is reported per node) and whether an optimizer or `zero_grad`
/// range holds it. Ancestors are searched on all threads; names are interned after, in node
/// order, so the string table does not depend on the threads.
fn op_facts(t: &mut Trace, node_ops: &[OpId]) -> OpFacts {
    let found: Vec<(Option<StrId>, bool, bool)> = node_ops
        .par_iter()
        .map(|&o| {
            let mut f = (None, false, false);
            for a in t.ancestors(o) {
                let name_id = t.op(a).name;
                let name = t.kineto.str(name_id);
                if f.0.is_none() && name.starts_with(EVALUATE_FUNCTION) {
                    f.0 = Some(name_id);
                }
                f.1 |= name.starts_with("Optimizer.step#");
                f.2 |= name.starts_with("Optimizer.zero_grad#");
            }
            f
        })
        .collect();
    let n_ops = t.kineto.ops.len();
    let mut facts = OpFacts {
        autograd_fn: vec![None; n_ops],
        in_optimizer: vec![false; n_ops],
        in_zero_grad: vec![false; n_ops],
    };
    let mut fn_names: FxHashMap<StrId, StrId> = FxHashMap::default();
    for (&o, &(eval, opt, zg)) in node_ops.iter().zip(&found) {
        if let Some(name_id) = eval {
            let id = *fn_names.entry(name_id).or_insert_with(|| {
                let f = t.kineto.str(name_id)[EVALUATE_FUNCTION.len()..].to_owned();
                t.kineto.strings.intern(&f)
            });
            facts.autograd_fn[o.0 as usize] = Some(id);
        }
        facts.in_optimizer[o.0 as usize] = opt;
        facts.in_zero_grad[o.0 as usize] = zg;
    }
    facts
}

/// Threads the autograd engine ran on (a backward node ran there), by thread index. Other side
/// threads (data loading, pinning) are not backward work.
fn autograd_threads(t: &Trace, node_ops: &[OpId], facts: &OpFacts) -> Vec<bool> {
    let mut autograd_thread = vec![false; t.kineto.threads.len()];
    for &o in node_ops {
        if facts.is_bw(o) {
            autograd_thread[t.op(o).thread.0 as usize] = true;
        }
    }
    autograd_thread
}

/// The GPU activities each node launched (the launching op or its nearest node ancestor), and
/// those launched by ops under no node, with their launch times.
struct GpuOwners {
    /// By node index.
    of_node: Vec<Vec<GpuId>>,
    unattributed: Vec<(GpuId, i64)>,
}

fn gpu_owners(t: &Trace, node_ops: &[OpId]) -> GpuOwners {
    let mut node_of: Vec<u32> = vec![u32::MAX; t.kineto.ops.len()];
    for (i, &o) in node_ops.iter().enumerate() {
        node_of[o.0 as usize] = i as u32;
    }
    // Each launch's owner is found on all threads.
    let owners: Vec<Option<(Option<u32>, i64)>> = t
        .launch
        .par_iter()
        .map(|l| {
            let (op, launch_ts) = (*l)?;
            let owner = std::iter::once(op)
                .chain(t.ancestors(op))
                .map(|a| node_of[a.0 as usize])
                .find(|&n| n != u32::MAX);
            Some((owner, launch_ts))
        })
        .collect();
    let mut g = GpuOwners {
        of_node: vec![Vec::new(); node_ops.len()],
        unattributed: Vec::new(),
    };
    for (gi, owner) in owners.into_iter().enumerate() {
        match owner {
            Some((Some(n), _)) => g.of_node[n as usize].push(GpuId(gi as u32)),
            Some((None, launch_ts)) => g.unattributed.push((GpuId(gi as u32), launch_ts)),
            None => {}
        }
    }
    g
}

/// Whether a node's GPU work includes a host→device copy (an input batch).
fn has_htod(t: &Trace, gpus: &[GpuId]) -> bool {
    gpus.iter().any(|g| {
        let a = &t.kineto.gpu[g.0 as usize];
        a.kind == GpuKind::Memcpy && t.kineto.str(a.name).contains("HtoD")
    })
}

/// Node indices per window, by the node's start (a window holds `[start, end)`), and how many
/// nodes start outside every window.
fn assign_to_windows(t: &Trace, node_ops: &[OpId], windows: &[Window]) -> (Vec<Vec<usize>>, usize) {
    let window_of: Vec<Option<usize>> = node_ops
        .par_iter()
        .map(|&o| {
            let s = t.op(o).start;
            let w = windows.partition_point(|w| w.1 <= s);
            (w < windows.len() && windows[w].0 <= s).then_some(w)
        })
        .collect();
    let mut per_iter: Vec<Vec<usize>> = vec![Vec::new(); windows.len()];
    let mut outside = 0usize;
    for (ni, w) in window_of.into_iter().enumerate() {
        match w {
            Some(w) => per_iter[w].push(ni),
            None => outside += 1,
        }
    }
    (per_iter, outside)
}

/// The module of forward ops by sequence number, so that backward nodes can name their module.
/// Every op, not only node ops: a node is often a composite (`aten::linear`) whose
/// RecordFunction has no sequence number while the ops under it (`aten::addmm`) do.
fn module_by_seq(t: &Trace, facts: &OpFacts, autograd_thread: &[bool]) -> FxHashMap<i64, StrId> {
    let mut by_seq: FxHashMap<i64, StrId> = FxHashMap::default();
    for oi in 0..t.kineto.ops.len() {
        let o = OpId(oi as u32);
        if let (Some(seq), Some(m)) = (t.op(o).seq, t.module[oi]) {
            // Sequence numbers count per thread: forward recomputed on an autograd thread
            // (checkpointing) numbers its ops from that thread's counter.
            if !facts.is_bw(o) && !autograd_thread[t.op(o).thread.0 as usize] {
                by_seq.entry(seq).or_insert(m);
            }
        }
    }
    by_seq
}

/// Every launch's time with its GPU activity's index, sorted: each iteration reads its slice.
fn sorted_launches(t: &Trace) -> Vec<(i64, usize)> {
    let mut launches: Vec<(i64, usize)> = t
        .launch
        .iter()
        .enumerate()
        .filter_map(|(gi, l)| l.map(|(_, ts)| (ts, gi)))
        .collect();
    launches.par_sort_unstable();
    launches
}

/// The spans where an iteration's backward passes run. An iteration with several (a GAN's
/// discriminator and generator, gradient accumulation's micro-batches) runs forward work on
/// the main thread between them: that is not backward.
struct BackwardSpans {
    /// From the first backward node's start to the last one's end.
    extent: Option<(i64, i64)>,
    /// The backward nodes' spans, merged.
    spans: Vec<(i64, i64)>,
}

impl BackwardSpans {
    fn new(t: &Trace, bw: &[OpId]) -> BackwardSpans {
        let extent = (!bw.is_empty()).then(|| {
            (
                bw.iter().map(|&o| t.op(o).start).min().unwrap_or(0),
                bw.iter().map(|&o| t.op(o).end()).max().unwrap_or(0),
            )
        });
        let mut spans: Vec<(i64, i64)> =
            bw.iter().map(|&o| (t.op(o).start, t.op(o).end())).collect();
        spans.sort_unstable();
        BackwardSpans {
            extent,
            spans: merge_spans(spans),
        }
    }

    fn contains(&self, ts: i64) -> bool {
        let k = self.spans.partition_point(|s| s.0 <= ts);
        k > 0 && ts < self.spans[k - 1].1
    }
}

/// What every iteration's build reads.
struct Ctx<'a> {
    t: &'a Trace,
    node_ops: &'a [OpId],
    facts: &'a OpFacts,
    autograd_thread: &'a [bool],
    gpu: &'a GpuOwners,
    module_by_seq: &'a FxHashMap<i64, StrId>,
    launches: &'a [(i64, usize)],
    main: Option<ThreadId>,
    /// Whether the program marks its optimizer (`Optimizer.step#` ranges).
    has_opt_annotations: bool,
}

impl Ctx<'_> {
    /// The phase of node `ni` of an iteration whose backward passes are `bw`. `seen_compute`:
    /// whether a forward node of the iteration launched GPU work before this one (updated).
    fn phase(&self, ni: usize, bw: &BackwardSpans, seen_compute: &mut bool) -> Phase {
        let (t, o) = (self.t, self.node_ops[ni]);
        let op = t.op(o);
        let gpus = &self.gpu.of_node[ni];
        if self.facts.in_zero_grad[o.0 as usize] {
            Phase::ZeroGrad
        } else if self.facts.in_optimizer[o.0 as usize] {
            Phase::Optimizer
        } else if self.facts.is_bw(o)
            || (Some(op.thread) != self.main && self.autograd_thread[op.thread.0 as usize])
        {
            Phase::Backward
        } else if Some(op.thread) != self.main {
            Phase::Other
        } else {
            match bw.extent {
                Some((bs, be)) if op.start >= bs && op.start < be && bw.contains(op.start) => {
                    Phase::Backward
                }
                Some((_, be)) if op.start >= be => {
                    if self.has_opt_annotations || is_dtoh_read(t, gpus) {
                        Phase::Other
                    } else {
                        Phase::Optimizer
                    }
                }
                _ => {
                    // A loss read for logging (`.item()`) and the input copies before the
                    // first compute op are not forward work. Compute is what runs on the GPU:
                    // a DataLoader's CPU-side ops (`empty`, `set_` of a received batch) come
                    // before the copies too.
                    if is_dtoh_read(t, gpus) || (!*seen_compute && has_htod(t, gpus)) {
                        Phase::Other
                    } else {
                        *seen_compute |= !gpus.is_empty();
                        Phase::Forward
                    }
                }
            }
        }
    }

    /// A node's module: its own, or for a backward node the module of the forward op with its
    /// autograd node's sequence number.
    fn module(&self, o: OpId, phase: Phase) -> Option<StrId> {
        let t = self.t;
        t.module[o.0 as usize].or_else(|| {
            if phase != Phase::Backward {
                return None;
            }
            t.ancestors(o)
                .find(|a| t.kineto.str(t.op(*a).name).starts_with(EVALUATE_FUNCTION))
                .and_then(|a| t.op(a).seq)
                .and_then(|s| self.module_by_seq.get(&s).copied())
        })
    }

    /// Iteration `ii` over `window`, from its nodes `idx` (node indices).
    fn build_iteration(
        &self,
        ii: usize,
        window: &Window,
        mut idx: Vec<usize>,
    ) -> (Vec<Node>, Iteration) {
        let (t, main) = (self.t, self.main);
        let (ws, we, label) = window;
        idx.sort_by_key(|&ni| {
            let o = t.op(self.node_ops[ni]);
            (o.start, Some(o.thread) != main, o.thread, self.node_ops[ni])
        });
        let bw_ops: Vec<OpId> = idx
            .iter()
            .map(|&ni| self.node_ops[ni])
            .filter(|&o| self.facts.is_bw(o))
            .collect();
        let bw = BackwardSpans::new(t, &bw_ops);
        let mut nodes = Vec::with_capacity(idx.len());
        let mut counters: FxHashMap<(Phase, Option<StrId>, StrId), u32> = FxHashMap::default();
        let mut seen_compute = false;
        for (rank, &ni) in idx.iter().enumerate() {
            let o = self.node_ops[ni];
            let op = t.op(o);
            let phase = self.phase(ni, &bw, &mut seen_compute);
            let module = self.module(o, phase);
            // Forward ops inside backward recompute checkpointed activations: they run under
            // an autograd node but are not the node's own backward formula.
            let recompute = phase == Phase::Backward && t.module[o.0 as usize].is_some();
            let k = counters.entry((phase, module, op.name)).or_insert(0);
            let name = match module {
                Some(m) => format!(
                    "{}:{}/{}#{}",
                    phase.as_str(),
                    t.kineto.str(m),
                    t.kineto.str(op.name),
                    k
                ),
                None => format!("{}:{}#{}", phase.as_str(), t.kineto.str(op.name), k),
            };
            *k += 1;
            let (gpu_time, gpu_span, kernels) = gpu_totals(t, &self.gpu.of_node[ni]);
            let mem = node_memory(t, op.thread, op.start, op.end());
            nodes.push(Node {
                op: o,
                iteration: ii as u32,
                rank: rank as u32,
                name,
                phase,
                autograd_fn: self.facts.autograd_fn[o.0 as usize],
                module,
                recompute,
                gpu_time,
                gpu_span,
                kernels,
                cpu_time: op.dur,
                active_before: mem.0,
                peak: mem.1,
                alloc_bytes: mem.2,
                free_bytes: mem.3,
            });
        }
        // Iteration totals over everything launched in its window.
        let mut acts: Vec<(i64, i64)> = Vec::new();
        let mut gpu_time = 0;
        let lo = self.launches.partition_point(|l| l.0 < *ws);
        for &(_, gi) in self.launches[lo..].iter().take_while(|l| l.0 < *we) {
            let g = &t.kineto.gpu[gi];
            gpu_time += g.dur;
            acts.push((g.start, g.start + g.dur));
        }
        let gpu_unattributed: i64 = self
            .gpu
            .unattributed
            .iter()
            .filter(|(_, ts)| *ts >= *ws && *ts < *we)
            .map(|(g, _)| t.kineto.gpu[g.0 as usize].dur)
            .sum();
        let mlo = t.memory.partition_point(|m| m.ts < *ws);
        let peak_allocated = t.memory[mlo..]
            .iter()
            .take_while(|m| m.ts <= *we)
            .map(|m| m.total_allocated)
            .max();
        let iteration = Iteration {
            index: ii as u32,
            label: label.clone(),
            start: *ws,
            end: *we,
            nodes: 0..nodes.len(),
            gpu_time,
            gpu_busy: super::intervals::union_len(acts),
            gpu_unattributed,
            peak_allocated,
            backward: bw.extent,
        };
        (nodes, iteration)
    }
}

/// Leaves out the last ProfilerStep iteration when the program ended inside it (a schedule
/// longer than the run): the range runs on to the profiler's stop and holds a fraction of a
/// step (nanoGPT's bench.py: 9.1 s and one node against 0.11 s and 346).
fn drop_cut_short(
    iterations: &mut Vec<Iteration>,
    per_iter_nodes: &mut Vec<Vec<Node>>,
    diag: &mut Diagnostics,
) {
    if !cut_short(iterations, per_iter_nodes) {
        return;
    }
    if let (Some(it), Some(own)) = (iterations.pop(), per_iter_nodes.pop()) {
        diag.warn(
            "last_iteration_cut_short",
            format!(
                "{} holds {} node(s) and no backward pass where the other iterations have them: the program ended inside it; it is left out",
                it.label,
                own.len()
            ),
        );
    }
}

/// Whether a node's GPU work is a device→host read (`.item()`, printing a loss).
fn is_dtoh_read(t: &Trace, gpus: &[GpuId]) -> bool {
    !gpus.is_empty()
        && gpus.iter().all(|g| {
            let a = &t.kineto.gpu[g.0 as usize];
            a.kind == GpuKind::Memcpy && t.kineto.str(a.name).contains("DtoH")
        })
}

fn gpu_totals(t: &Trace, gpus: &[GpuId]) -> (i64, i64, u32) {
    if gpus.is_empty() {
        return (0, 0, 0);
    }
    let mut sum = 0;
    let (mut lo, mut hi) = (i64::MAX, i64::MIN);
    for g in gpus {
        let a = &t.kineto.gpu[g.0 as usize];
        sum += a.dur;
        lo = lo.min(a.start);
        hi = hi.max(a.start + a.dur);
    }
    (sum, hi - lo, gpus.len() as u32)
}

/// (active before, peak, allocated, freed) for a node running on `thread` over `[s, e]`.
fn node_memory(t: &Trace, thread: ThreadId, s: i64, e: i64) -> (i64, i64, i64, i64) {
    let mem = &t.memory;
    if mem.is_empty() {
        return (0, 0, 0, 0);
    }
    let i = mem.partition_point(|m| m.ts < s);
    let before = if i > 0 {
        mem[i - 1].total_allocated
    } else {
        // Nothing earlier: the state before the first event is its total minus its own size.
        mem[0].total_allocated - mem[0].bytes
    };
    let (mut peak, mut alloc, mut free) = (before, 0, 0);
    for m in mem[i..].iter().take_while(|m| m.ts <= e) {
        peak = peak.max(m.total_allocated);
        if m.thread == thread {
            if m.bytes > 0 {
                alloc += m.bytes;
            } else {
                free -= m.bytes;
            }
        }
    }
    (before, peak, alloc, free)
}

type Window = (i64, i64, String);

fn find_iterations(
    t: &Trace,
    node_ops: &[OpId],
    is_bw: &dyn Fn(OpId) -> bool,
    has_htod: &dyn Fn(usize) -> bool,
    main: Option<ThreadId>,
) -> (Detection, Vec<Window>) {
    let mut steps: Vec<Window> = t
        .kineto
        .ops
        .iter()
        .filter(|o| {
            o.kind == OpKind::Annotation && t.kineto.str(o.name).starts_with("ProfilerStep#")
        })
        .map(|o| (o.start, o.end(), t.kineto.str(o.name).to_owned()))
        .collect();
    if !steps.is_empty() {
        steps.sort_by_key(|w| w.0);
        return (Detection::ProfilerStep, steps);
    }
    // Main-thread nodes that are not backward, in time order, with their node index.
    let mut main_nodes: Vec<(i64, i64, usize)> = node_ops
        .iter()
        .enumerate()
        .filter(|(_, &o)| Some(t.op(o).thread) == main && !is_bw(o))
        .map(|(i, &o)| (t.op(o).start, t.op(o).end(), i))
        .collect();
    main_nodes.sort();
    let mut bw: Vec<(i64, i64)> = node_ops
        .iter()
        .filter(|&&o| is_bw(o))
        .map(|&o| (t.op(o).start, t.op(o).end()))
        .collect();
    bw.sort();
    let all_start = node_ops.iter().map(|&o| t.op(o).start).min();
    let all_end = node_ops.iter().map(|&o| t.op(o).end()).max();
    let (Some(all_start), Some(all_end)) = (all_start, all_end) else {
        return (Detection::WholeTrace, Vec::new());
    };
    if bw.is_empty() {
        return (
            Detection::WholeTrace,
            vec![(all_start, all_end + 1, "iteration 0".into())],
        );
    }
    // Backward passes: runs of backward nodes with no main-thread node starting in between.
    let mut passes: Vec<(i64, i64)> = Vec::new();
    for &(s, e) in &bw {
        if let Some(last) = passes.last_mut() {
            let lo = main_nodes.partition_point(|m| m.0 < last.1);
            let interrupted = main_nodes.get(lo).is_some_and(|m| m.0 < s);
            if !interrupted {
                last.1 = last.1.max(e);
                continue;
            }
        }
        passes.push((s, e));
    }
    // Cut before pass k: the first input copy after pass k-1 (or the trace start), else the
    // first main-thread op with an autograd sequence number, else pass k's start. What comes
    // before the first cut is the tail of an iteration the profiler did not see whole.
    let mut bounds = Vec::with_capacity(passes.len() + 1);
    let mut prev_end = all_start;
    for &(next_start, end) in &passes {
        let lo = main_nodes.partition_point(|m| m.0 < prev_end);
        let hi = main_nodes.partition_point(|m| m.0 < next_start);
        let gap = &main_nodes[lo..hi];
        let cut = gap
            .iter()
            .find(|m| has_htod(m.2))
            .or_else(|| gap.iter().find(|m| t.op(node_ops[m.2]).seq.is_some()))
            .map_or(next_start, |m| m.0);
        bounds.push(cut);
        prev_end = end;
    }
    bounds.push(all_end + 1);
    let windows = bounds
        .windows(2)
        .enumerate()
        .map(|(i, b)| (b[0], b[1], format!("iteration {i}")))
        .collect();
    (Detection::BackwardCycle, windows)
}

/// Whether the last iteration is a step the program never finished: under half the median
/// node count of the others and no backward pass where they have one, or under a tenth of it.
fn cut_short(iterations: &[Iteration], nodes: &[Vec<Node>]) -> bool {
    let n = iterations.len();
    if n < 2 {
        return false;
    }
    let mut counts: Vec<i64> = nodes[..n - 1].iter().map(|v| v.len() as i64).collect();
    let Some(median) = super::median_low(&mut counts) else {
        return false;
    };
    let last = nodes[n - 1].len() as i64;
    let others_backward = iterations[..n - 1].iter().any(|i| i.backward.is_some());
    (iterations[n - 1].backward.is_none() && others_backward && last * 2 < median)
        || last * 10 < median
}

/// Merges sorted (start, end) spans that overlap or touch into their union, in order.
fn merge_spans(spans: Vec<(i64, i64)>) -> Vec<(i64, i64)> {
    let mut out: Vec<(i64, i64)> = Vec::with_capacity(spans.len());
    for (s, e) in spans {
        match out.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A CPU op on host thread `tid` over `[ts, ts + dur)` µs.
    fn op(name: &str, tid: u32, ts: u32, dur: u32, args: &str) -> String {
        format!(
            r#"{{"ph":"X","cat":"cpu_op","name":"{name}","pid":1,"tid":{tid},"ts":{ts},"dur":{dur},"args":{{{args}}}}}"#
        )
    }

    fn annotation(name: &str, tid: u32, ts: u32, dur: u32) -> String {
        format!(
            r#"{{"ph":"X","cat":"user_annotation","name":"{name}","pid":1,"tid":{tid},"ts":{ts},"dur":{dur}}}"#
        )
    }

    /// A launch at `ts` on thread `tid` and the GPU activity it runs (`cat`: kernel or
    /// gpu_memcpy), joined by correlation id `corr`.
    fn launch(tid: u32, ts: u32, corr: u32, cat: &str, name: &str, dur: u32) -> String {
        format!(
            r#"{{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":{tid},"ts":{ts},"dur":1,"args":{{"correlation":{corr}}}}},
            {{"ph":"X","cat":"{cat}","name":"{name}","pid":0,"tid":7,"ts":{},"dur":{dur},"args":{{"device":0,"stream":7,"correlation":{corr}}}}}"#,
            ts + 2
        )
    }

    /// One ProfilerStep on main thread 1: an input copy, a linear (its addmm launches a
    /// kernel), a loss read with `.item()`, the backward of the addmm on autograd thread 2,
    /// and a parameter update; one more op after the step. `optimizer`: the update runs in an
    /// `Optimizer.step#` range.
    fn step_trace(optimizer: bool) -> Trace {
        let mut ev = vec![
            annotation("ProfilerStep#1", 1, 0, 100),
            op("aten::copy_", 1, 10, 3, ""),
            launch(
                1,
                11,
                1,
                "gpu_memcpy",
                "Memcpy HtoD (Pageable -> Device)",
                1,
            ),
            op("aten::linear", 1, 20, 10, ""),
            op("aten::addmm", 1, 21, 8, r#""Sequence number":5"#),
            launch(1, 22, 2, "kernel", "gemm", 3),
            op("aten::item", 1, 35, 2, ""),
            launch(
                1,
                35,
                3,
                "gpu_memcpy",
                "Memcpy DtoH (Device -> Pageable)",
                1,
            ),
            op(
                "autograd::engine::evaluate_function: AddmmBackward0",
                2,
                40,
                10,
                r#""Sequence number":5"#,
            ),
            op("aten::mm", 2, 41, 8, ""),
            launch(2, 42, 4, "kernel", "gemm_bw", 4),
            op("aten::add_", 1, 60, 2, ""),
            launch(1, 60, 5, "kernel", "add", 1),
            op("aten::zeros", 1, 200, 1, ""),
        ];
        if optimizer {
            ev.push(annotation("Optimizer.step#SGD.step", 1, 59, 4));
        }
        crate::model::from_events(&ev.join(","))
    }

    fn by_name<'a>(s: &'a Step, name: &str) -> &'a Node {
        s.nodes.iter().find(|n| n.name == name).unwrap_or_else(|| {
            panic!(
                "no {name} in {:?}",
                s.nodes.iter().map(|n| &n.name).collect::<Vec<_>>()
            )
        })
    }

    // Issue 21: the phase rule of one iteration, pass by pass on a trace small enough to read.
    #[test]
    fn each_node_gets_its_phase_its_gpu_work_and_its_iteration() {
        let mut t = step_trace(false);
        let mut d = Diagnostics::default();
        let s = compute(&mut t, &mut d);
        assert_eq!(s.detection, Detection::ProfilerStep);
        assert_eq!(s.iterations.len(), 1);
        let names: Vec<&str> = s.nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(
            names,
            [
                // The input copy before the first compute op is not forward work.
                "other:aten::copy_#0",
                "forward:aten::linear#0",
                // A loss read for logging.
                "other:aten::item#0",
                "backward:aten::mm#0",
                // After the backward pass, with no optimizer ranges: the update.
                "optimizer:aten::add_#0",
            ]
        );
        let mm = by_name(&s, "backward:aten::mm#0");
        assert_eq!(
            mm.autograd_fn.map(|f| t.kineto.str(f)),
            Some("AddmmBackward0")
        );
        // Each node owns what it (or an op under it) launched: ns from µs.
        assert_eq!(by_name(&s, "forward:aten::linear#0").gpu_time, 3_000);
        assert_eq!(mm.gpu_time, 4_000);
        assert_eq!(mm.kernels, 1);
        // From the first backward node to the last (the autograd wrapper is opened).
        assert_eq!(s.iterations[0].backward, Some((41_000, 49_000)));
        // The op after the ProfilerStep range lies outside every iteration.
        assert_eq!(s.nodes_outside, 1);
    }

    #[test]
    fn with_optimizer_ranges_only_what_they_hold_is_the_optimizer() {
        let mut t = step_trace(true);
        let s = compute(&mut t, &mut Diagnostics::default());
        assert!(s.nodes.iter().any(|n| n.name == "optimizer:aten::add_#0"));
        // The same trace without the range, and an op after backward outside it: other.
        let mut ev = vec![
            annotation("ProfilerStep#1", 1, 0, 100),
            op("aten::linear", 1, 20, 10, ""),
            op(
                "autograd::engine::evaluate_function: AddmmBackward0",
                2,
                40,
                10,
                "",
            ),
            op("aten::mm", 2, 41, 8, ""),
            annotation("Optimizer.step#SGD.step", 1, 59, 4),
            op("aten::add_", 1, 60, 2, ""),
            op("aten::clone", 1, 70, 2, ""),
        ];
        ev.push(launch(1, 21, 1, "kernel", "gemm", 3));
        let mut t = crate::model::from_events(&ev.join(","));
        let s = compute(&mut t, &mut Diagnostics::default());
        assert_eq!(
            by_name(&s, "optimizer:aten::add_#0").phase,
            Phase::Optimizer
        );
        assert_eq!(by_name(&s, "other:aten::clone#0").phase, Phase::Other);
    }

    #[test]
    fn gpu_work_launched_under_no_node_is_counted_apart() {
        // An annotation is opened, not a node: a launch directly under it has no node.
        let ev = [
            annotation("ProfilerStep#1", 1, 0, 100),
            annotation("my_range", 1, 10, 20),
            launch(1, 12, 1, "kernel", "k", 2),
            op("aten::relu", 1, 40, 5, ""),
            launch(1, 41, 2, "kernel", "relu", 1),
        ];
        let t = crate::model::from_events(&ev.join(","));
        let nodes = node_ops(&t);
        assert_eq!(nodes.len(), 1, "the op under the annotations");
        let g = gpu_owners(&t, &nodes);
        assert_eq!(g.of_node[0].len(), 1);
        assert_eq!(g.unattributed.len(), 1);
        assert_eq!(g.unattributed[0].1, 12_000, "with its launch time");
    }

    #[test]
    fn backward_spans_leave_out_the_gaps_between_passes() {
        let ev = [
            op("autograd::engine::evaluate_function: A", 2, 10, 10, ""),
            op("autograd::engine::evaluate_function: B", 2, 15, 10, ""),
            op("autograd::engine::evaluate_function: C", 2, 50, 10, ""),
        ];
        let t = crate::model::from_events(&ev.join(","));
        let bw: Vec<OpId> = (0..3).map(OpId).collect();
        let spans = BackwardSpans::new(&t, &bw);
        assert_eq!(spans.extent, Some((10_000, 60_000)));
        assert_eq!(spans.spans, [(10_000, 25_000), (50_000, 60_000)]);
        assert!(spans.contains(24_999));
        assert!(!spans.contains(25_000));
        assert!(!spans.contains(40_000), "a gap between passes");
        assert!(spans.contains(50_000));
    }

    #[test]
    fn merge_spans_joins_overlapping_and_touching_spans_only() {
        assert_eq!(
            merge_spans(vec![(0, 5), (3, 8), (8, 9), (12, 15), (13, 14)]),
            [(0, 9), (12, 15)]
        );
        assert!(merge_spans(vec![]).is_empty());
    }

    #[test]
    fn autograd_wrappers_are_recognised() {
        assert!(is_autograd_wrapper(
            "autograd::engine::evaluate_function: MmBackward0"
        ));
        assert!(is_autograd_wrapper("MmBackward0"));
        assert!(is_autograd_wrapper("CheckpointFunctionBackward"));
        assert!(is_autograd_wrapper("torch::autograd::AccumulateGrad"));
        assert!(!is_autograd_wrapper("aten::convolution_backward"));
        assert!(!is_autograd_wrapper("c10d::allreduce_"));
    }
}
