//! One iteration's nodes: each node's phase, module, GPU work and memory, from what every
//! iteration's build shares ([`Ctx`]).

use rustc_hash::FxHashMap;

use super::{has_htod, BackwardSpans, GpuOwners, Iteration, Node, OpFacts, Phase, Window};
use crate::intern::StrId;
use crate::model::kineto::{GpuKind, ThreadId};
use crate::model::{GpuId, OpId, Trace, EVALUATE_FUNCTION};

/// What every iteration's build reads.
pub(super) struct Ctx<'a> {
    pub(super) t: &'a Trace,
    pub(super) node_ops: &'a [OpId],
    pub(super) facts: &'a OpFacts,
    pub(super) autograd_thread: &'a [bool],
    pub(super) gpu: &'a GpuOwners,
    pub(super) module_by_seq: &'a FxHashMap<i64, StrId>,
    pub(super) launches: &'a [(i64, usize)],
    pub(super) main: Option<ThreadId>,
    /// Whether the program marks its optimizer (`Optimizer.step#` ranges).
    pub(super) has_opt_annotations: bool,
    /// Per node: forward work that autograd differentiates ([`super::differentiated`]).
    pub(super) differentiated: &'a [bool],
    /// Whether the trace has any GPU activity.
    pub(super) has_gpu: bool,
    /// Whether the program marks its DataLoader's `__next__` (Python).
    pub(super) has_dataloader_annotations: bool,
    /// [`super::phase_ranges`].
    pub(super) phase_ranges: &'a [(i64, i64, Phase)],
}

/// What one iteration's phases read beyond [`Ctx`]: its backward passes, the nodes of
/// `Optimizer.step` closures that are the closure's own forward work, and where a libtorch
/// loop's data loading begins.
pub(super) struct IterPhases {
    pub(super) bw: BackwardSpans,
    /// Node indices inside an `Optimizer.step` range that belong to a closure's forward pass.
    closure: rustc_hash::FxHashSet<usize>,
    /// Node indices of the host-only tail after the optimizer (data loading, no ranges).
    data_tail: rustc_hash::FxHashSet<usize>,
    /// Start of the iteration's first main-thread input copy that comes before any compute
    /// and before its backward pass, in a program that marks no DataLoader range.
    first_copy: Option<i64>,
    /// Start of the iteration's first differentiated main-thread node (its forward work), when
    /// the iteration has a backward pass.
    first_forward: Option<i64>,
}

impl Ctx<'_> {
    /// The phase of node `ni` of an iteration whose backward passes are `bw`. `seen_compute`:
    /// whether a forward node of the iteration launched GPU work before this one (updated).
    pub(super) fn phase(&self, ni: usize, ip: &IterPhases, seen_compute: &mut bool) -> Phase {
        let (t, o) = (self.t, self.node_ops[ni]);
        let op = t.op(o);
        let gpus = &self.gpu.of_node[ni];
        let bw = &ip.bw;
        let main = Some(op.thread) == self.main;
        if self.facts.in_zero_grad[o.0 as usize] {
            Phase::ZeroGrad
        } else if self.facts.is_bw(o) || (!main && self.autograd_thread[op.thread.0 as usize]) {
            Phase::Backward
        } else if self.facts.in_data_loading[o.0 as usize] {
            Phase::DataLoading
        } else if self.facts.in_optimizer[o.0 as usize].is_some()
            && !(main && ip.closure.contains(&ni))
        {
            // An optimizer's own work; a closure it calls (Lightning's training step, LBFGS)
            // runs the forward pass inside the range, and that is classified as forward work
            // wherever it runs.
            Phase::Optimizer
        } else if !main {
            Phase::Other
        } else if ip.data_tail.contains(&ni) || self.is_input_copy(ni) {
            Phase::DataLoading
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
                    // first compute op are not forward work (a read inside a module's forward,
                    // `torch.equal` in `nn.Transformer`'s mask check, is: a recompute of the
                    // module waits there again). Compute is what runs on the GPU:
                    // a DataLoader's CPU-side ops (`empty`, `set_` of a received batch) come
                    // before the copies too, and where the program marks no DataLoader range
                    // (libtorch), the host-only ops before the first copy build the batch.
                    if is_dtoh_read(t, gpus) && t.module[o.0 as usize].is_none() {
                        Phase::Other
                    } else if !*seen_compute
                        && gpus.is_empty()
                        && ip.first_copy.is_some_and(|c| op.start < c)
                    {
                        Phase::DataLoading
                    } else if ip.first_forward.is_some_and(|f| op.start < f)
                        && !self.differentiated[ni]
                        && t.module[o.0 as usize].is_none()
                        && !gpus.is_empty()
                    {
                        // A batch made on the device before the model runs (random data:
                        // `torch.randint(..., device=...)`), outside every module: torch's
                        // classifier names it INPUT.
                        Phase::DataLoading
                    } else {
                        *seen_compute |= !gpus.is_empty();
                        Phase::Forward
                    }
                }
            }
        }
    }

    /// Whether main-thread node `ni` copies the batch to the device: its GPU work holds a
    /// host→device copy, it runs outside every module, and autograd does not differentiate it
    /// (`batch.to(device)`, Lightning's `transfer_batch_to_device`). Wherever it falls in the
    /// step (before the forward, or between micro-batches of gradient accumulation), that is
    /// data loading, not forward work.
    fn is_input_copy(&self, ni: usize) -> bool {
        let o = self.node_ops[ni];
        has_htod(self.t, &self.gpu.of_node[ni])
            && self.t.module[o.0 as usize].is_none()
            && !self.differentiated[ni]
    }

    /// The closures' forward work and the data-loading tail of the iteration whose nodes are
    /// `idx` (in time order).
    ///
    /// ```text
    ///  main   [Optimizer.step ........................................................]
    ///          [upd] [fwd][fwd][loss][zero_grad]          [upd][upd] [fwd][fwd] ...
    ///  engine                                    [bwd][bwd]                      [bwd]
    ///                ^ closure: from a differentiated node to the next backward pass
    /// ```
    fn iter_phases(&self, idx: &[usize], bw: BackwardSpans) -> IterPhases {
        let t = self.t;
        let on_main = |ni: usize| Some(t.op(self.node_ops[ni]).thread) == self.main;
        let mut closure = rustc_hash::FxHashSet::default();
        let mut by_range: FxHashMap<OpId, Vec<usize>> = FxHashMap::default();
        for &ni in idx {
            if let Some(r) = self.facts.in_optimizer[self.node_ops[ni].0 as usize] {
                if on_main(ni) && !self.facts.is_bw(self.node_ops[ni]) {
                    by_range.entry(r).or_default().push(ni);
                }
            }
        }
        for members in by_range.values() {
            // Start of the closure's latest differentiated node: the closure's forward runs
            // from there until a backward pass begins; what follows is the optimizer's update,
            // until the next closure.
            let mut forward_from: Option<i64> = None;
            for &ni in members {
                let start = t.op(self.node_ops[ni]).start;
                // A module's forward starts the closure's forward too: its first ops may make
                // nothing autograd differentiates (an attention mask).
                if self.differentiated[ni] || t.module[self.node_ops[ni].0 as usize].is_some() {
                    forward_from = Some(start);
                } else if let Some(f) = forward_from {
                    let k = bw.spans.partition_point(|s| s.0 < f);
                    if bw.spans.get(k).is_some_and(|s| s.0 < start) {
                        forward_from = None;
                    }
                }
                // Main-thread work while a backward pass runs is the pass's (the main rules
                // below say so).
                if forward_from.is_some() || bw.contains(start) {
                    closure.insert(ni);
                }
            }
        }
        // A loop without optimizer ranges (a hand-written update; libtorch): after the
        // backward pass the update launches GPU work, and the host-only ops after the last of
        // it build the next batch (word_language_model's `get_batch` slices and
        // `repackage_hidden` detaches before a step boundary at the next forward). A libtorch
        // loop's cut at its input copy puts such ops at the next iteration's start instead.
        let mut data_tail = rustc_hash::FxHashSet::default();
        if let (Some((_, be)), false, true) = (bw.extent, self.has_opt_annotations, self.has_gpu) {
            let after: Vec<usize> = idx
                .iter()
                .copied()
                .filter(|&ni| on_main(ni) && t.op(self.node_ops[ni]).start >= be)
                .filter(|&ni| !self.facts.is_bw(self.node_ops[ni]))
                .collect();
            if let Some(last_gpu) = after
                .iter()
                .rposition(|&ni| !self.gpu.of_node[ni].is_empty())
            {
                data_tail.extend(after[last_gpu + 1..].iter().copied());
            }
        }
        let first_copy = if self.has_dataloader_annotations {
            None
        } else {
            idx.iter()
                .copied()
                .filter(|&ni| on_main(ni) && !self.facts.is_bw(self.node_ops[ni]))
                .find(|&ni| !self.gpu.of_node[ni].is_empty())
                .filter(|&ni| has_htod(t, &self.gpu.of_node[ni]))
                .map(|ni| t.op(self.node_ops[ni]).start)
                .filter(|&c| bw.extent.is_none_or(|(bs, _)| c < bs))
        };
        let first_forward = bw.extent.and_then(|_| {
            idx.iter()
                .copied()
                .find(|&ni| on_main(ni) && self.differentiated[ni])
                .map(|ni| t.op(self.node_ops[ni]).start)
        });
        IterPhases {
            bw,
            closure,
            data_tail,
            first_copy,
            first_forward,
        }
    }

    /// A node's module: its own, or for a backward node the module of the forward op with its
    /// autograd node's sequence number.
    pub(super) fn module(&self, o: OpId, phase: Phase) -> Option<StrId> {
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

    /// The iteration `[start, end)` of `nodes` split by phase: each node's span, and the
    /// ranges that are wholly one phase's ([`super::phase_ranges`]).
    fn wall(&self, nodes: &[Node], start: i64, end: i64) -> super::PhaseWall {
        let t = self.t;
        let mut spans: Vec<(i64, i64, Phase)> = nodes
            .iter()
            .map(|n| {
                let op = t.op(n.op);
                (op.start, op.end(), n.phase)
            })
            .collect();
        let r = self.phase_ranges;
        let lo = r.partition_point(|x| x.0 < start);
        spans.extend(r[lo..].iter().take_while(|x| x.0 < end));
        super::wall::split(&mut spans, start, end)
    }

    /// Iteration `ii` over `window`, from its nodes `idx` (node indices).
    pub(super) fn build_iteration(
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
        let ip = self.iter_phases(&idx, BackwardSpans::new(t, &bw_ops));
        let bw = &ip.bw;
        let mut nodes = Vec::with_capacity(idx.len());
        let mut counters: FxHashMap<(Phase, Option<StrId>, StrId), u32> = FxHashMap::default();
        let mut seen_compute = false;
        for (rank, &ni) in idx.iter().enumerate() {
            let o = self.node_ops[ni];
            let op = t.op(o);
            let phase = self.phase(ni, &ip, &mut seen_compute);
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
            gpu_busy: crate::analysis::intervals::union_len(acts),
            gpu_unattributed,
            peak_allocated,
            backward: bw.extent,
            backward_passes: backward_passes(&nodes),
            wall: self.wall(&nodes, *ws, *we),
        };
        (nodes, iteration)
    }
}

/// The backward passes among an iteration's nodes (in start order): a backward node after
/// forward work (or first) opens one.
fn backward_passes(nodes: &[Node]) -> u32 {
    let mut passes = 0;
    let mut in_pass = false;
    for n in nodes {
        match n.phase {
            Phase::Backward if !in_pass => {
                passes += 1;
                in_pass = true;
            }
            Phase::Forward => in_pass = false,
            _ => {}
        }
    }
    passes
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

/// Merges sorted (start, end) spans that overlap or touch into their union, in order.
pub(super) fn merge_spans(spans: Vec<(i64, i64)>) -> Vec<(i64, i64)> {
    let mut out: Vec<(i64, i64)> = Vec::with_capacity(spans.len());
    for (s, e) in spans {
        match out.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out
}
