//! The model: the ingested tables plus the structure the analyses need: which op encloses
//! which on each thread, which op launched each GPU activity, which module each op ran in,
//! and which thread and device are the training loop's.
//!
//! ```text
//!  main thread   [ProfilerStep#3 ............................................]
//!                 [aten::conv2d [aten::convolution [cudaLaunchKernel]]] ...
//!  GPU stream 7                                      [kernel (correlation 42)]
//! ```
//! A kernel belongs to the innermost op that encloses its launching runtime call (same
//! correlation id); that op's outermost node is charged for the kernel's time.

use rustc_hash::FxHashMap;

use super::exec_trace::ExecTrace;
use super::kineto::{CpuOp, KinetoTrace, MemEvent, OpKind, ThreadId};
use super::snapshot::Snapshot;
use super::tables::Loaded;
use crate::diagnostics::Diagnostics;
use crate::intern::StrId;

/// Index into [`KinetoTrace::ops`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OpId(pub u32);

/// Index into [`KinetoTrace::gpu`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GpuId(pub u32);

/// The reconstructed trace.
#[derive(Debug)]
pub struct Trace {
    /// The Kineto trace's tables.
    pub kineto: KinetoTrace,
    /// The memory snapshot, if given.
    pub snapshot: Option<Snapshot>,
    /// The Execution Trace, if given.
    pub exec_trace: Option<ExecTrace>,
    /// Enclosing op of each op on its thread (annotations included).
    pub parent: Vec<Option<OpId>>,
    /// Ops directly inside each op, in time order ([`Trace::children`]).
    pub children: Children,
    /// Ops inside no other op, per thread in time order.
    pub roots: Vec<OpId>,
    /// Ops of each thread, ordered by (start, longer first, file order).
    pub thread_ops: Vec<Vec<OpId>>,
    /// For each GPU activity: the innermost op enclosing its launch, and the launch time.
    pub launch: Vec<Option<(OpId, i64)>>,
    /// `/`-joined module path of each op, when it ran inside `nn.Module` ranges.
    pub module: Vec<Option<StrId>>,
    /// The thread that runs the training loop: the one holding `ProfilerStep#` ranges, else the
    /// one with the most top-level ops outside backward.
    pub main_thread: Option<ThreadId>,
    /// The CUDA device whose allocator events are analysed (the one with the most).
    pub device: Option<i64>,
    /// Allocator events of that device, in time order.
    pub memory: Vec<MemEvent>,
}

/// A Kineto trace's tables from its text: for the unit tests of passes above the model, which
/// build their inputs from text without naming the reader.
#[cfg(test)]
pub(crate) fn kineto_from_bytes(
    path: &std::path::Path,
    text: Vec<u8>,
    gzipped: bool,
    diag: &mut Diagnostics,
) -> Result<KinetoTrace, crate::ingest::Error> {
    crate::ingest::kineto::from_bytes(path, text, gzipped, diag)
}

/// A Kineto trace's tables from a file: for unit tests above the model.
#[cfg(test)]
pub(crate) fn kineto_load(
    path: &std::path::Path,
    diag: &mut Diagnostics,
) -> Result<KinetoTrace, crate::ingest::Error> {
    crate::ingest::kineto::load(path, diag)
}

/// The model of a trace made of `events` (Chrome-trace events as JSON text, comma-separated):
/// what the unit tests of the passes that read a model build their inputs from.
#[cfg(test)]
pub(crate) fn from_events(events: &str) -> Trace {
    let text = format!(r#"{{"schemaVersion":1,"traceEvents":[{events}]}}"#);
    let mut d = Diagnostics::default();
    let kineto = crate::ingest::kineto::from_bytes(
        std::path::Path::new("t.json"),
        text.into_bytes(),
        false,
        &mut d,
    )
    .expect("a trace");
    let loaded = Loaded {
        kineto,
        snapshot: None,
        exec_trace: None,
        diagnostics: d,
    };
    Trace::build(loaded, &mut Diagnostics::default())
}

/// Prefix of torch.profiler's step marks (`ProfilerStep#4`).
const PROFILER_STEP: &str = "ProfilerStep#";

/// Prefix of the autograd engine's per-node wrapper op.
pub const EVALUATE_FUNCTION: &str = "autograd::engine::evaluate_function: ";

impl Trace {
    /// Builds the model from what ingest read.
    pub fn build(loaded: Loaded, diag: &mut Diagnostics) -> Trace {
        let Loaded {
            mut kineto,
            snapshot,
            exec_trace,
            diagnostics,
        } = loaded;
        diag.extend(diagnostics);
        let mut thread_ops: Vec<Vec<OpId>> = vec![Vec::new(); kineto.threads.len()];
        for (i, op) in kineto.ops.iter().enumerate() {
            thread_ops[op.thread.0 as usize].push(OpId(i as u32));
        }
        let ops = &kineto.ops;
        sort_thread_ops(ops, &mut thread_ops);
        let is_step_mark = |op: &CpuOp| {
            op.kind == OpKind::Annotation && kineto.str(op.name).starts_with(PROFILER_STEP)
        };
        let parent = build_forest(ops, &thread_ops, &is_step_mark, diag);
        // The rest reads what is built so far and nothing of each other: side by side. Module
        // paths are interned afterwards, in the order they were made, so ids do not depend on
        // the threads.
        let k = &kineto;
        let (
            ((children, roots), launch),
            ((main_thread, (device, memory)), (module, paths, per_call)),
        ) = rayon::join(
            || {
                rayon::join(
                    || children_and_roots(ops.len(), &thread_ops, &parent),
                    || attribute_launches(k, &thread_ops, &parent),
                )
            },
            || {
                rayon::join(
                    || {
                        (
                            find_main_thread(k, &thread_ops, &parent),
                            select_device_memory(k),
                        )
                    },
                    || module_paths(k, &thread_ops),
                )
            },
        );
        let (launch, counts) = launch;
        counts.report(diag);
        if !per_call.is_empty() {
            diag.warn(
                "modules_made_per_call",
                format!(
                    "{} module(s) are made anew in every call of their parent ({}): each is named by its class and place, not torch's instance number, so that every step has the same nodes",
                    per_call.len(),
                    per_call.join(", ")
                ),
            );
        }
        let path_ids: Vec<StrId> = paths.iter().map(|p| kineto.strings.intern(p)).collect();
        let module = module
            .into_iter()
            .map(|m| m.map(|i| path_ids[i as usize]))
            .collect();
        Trace {
            kineto,
            snapshot,
            exec_trace,
            parent,
            children,
            roots,
            thread_ops,
            launch,
            module,
            main_thread,
            device,
            memory,
        }
    }

    /// The op behind an id.
    pub fn op(&self, id: OpId) -> &CpuOp {
        &self.kineto.ops[id.0 as usize]
    }

    /// The name of an op.
    pub fn op_name(&self, id: OpId) -> &str {
        self.kineto.str(self.op(id).name)
    }

    /// The ops directly inside an op, in time order.
    pub fn children(&self, id: OpId) -> &[OpId] {
        self.children.of(id)
    }

    /// Ancestors of an op, innermost first.
    pub fn ancestors(&self, id: OpId) -> impl Iterator<Item = OpId> + '_ {
        std::iter::successors(self.parent[id.0 as usize], move |p| {
            self.parent[p.0 as usize]
        })
    }

    /// The GPU device's name from `deviceProperties`.
    pub fn device_name(&self) -> Option<&str> {
        let dev = self.device.unwrap_or(0);
        let devs = &self.kineto.header.devices;
        devs.iter()
            .find(|d| d.id == dev)
            .or_else(|| devs.first())
            .map(|d| d.name.as_str())
    }
}

/// Orders each thread's ops by start, longer first on equal starts (so a parent precedes the
/// child it encloses), annotations before ops (record_function ranges wrap the ops they time),
/// then file order. Sorted by copied keys (not compared through the op table), each thread's
/// list on its own core.
fn sort_thread_ops(ops: &[CpuOp], thread_ops: &mut [Vec<OpId>]) {
    use rayon::prelude::*;
    thread_ops.par_iter_mut().for_each(|list| {
        // The last member holds the id, so no two keys are equal and any sort gives the one
        // order; the stable one is quickest on lists nearly in order already.
        let mut keys: Vec<(i64, std::cmp::Reverse<i64>, u64)> = list
            .iter()
            .map(|&id| {
                let op = &ops[id.0 as usize];
                let is_op = u64::from(op.kind == OpKind::Op);
                (
                    op.start,
                    std::cmp::Reverse(op.dur),
                    is_op << 32 | u64::from(id.0),
                )
            })
            .collect();
        keys.sort();
        for (slot, k) in list.iter_mut().zip(&keys) {
            *slot = OpId(k.2 as u32);
        }
    });
}

/// Nests each thread's ops by time with a stack.
///
/// ```text
///  [Optimizer.step#SGD.step ......]            A
///               [ProfilerStep#4 ..........]    B: starts inside A, ends after it
///                  [aten::to]                  C
/// ```
/// A range that overlaps the top of the stack without fitting inside it (B, opened by a step
/// hook that runs inside `optimizer.step()`) is not its child: the ranges it outlives are closed
/// and B hangs from the innermost one that contains it whole. Without this, every op of the
/// next step would sit under A.
///
/// Such overlaps are counted (`overlapping_ops`), except where one of the two is a profiler
/// step mark (`is_step_mark`): torch.profiler opens `ProfilerStep#N` wherever `step()` is
/// called, and a step hook (steptrace's capture, or a user's) calls it inside
/// `optimizer.step()`, so every captured Python program with an optimizer overlapped that way
/// (five warnings per run on each such corpus program) and the warning said nothing
/// about the program.
fn build_forest(
    ops: &[CpuOp],
    thread_ops: &[Vec<OpId>],
    is_step_mark: &(dyn Fn(&CpuOp) -> bool + Sync),
    diag: &mut Diagnostics,
) -> Vec<Option<OpId>> {
    use rayon::prelude::*;
    // Times in the warning are from the first op, in ms: epoch nanoseconds say nothing.
    let t0 = ops.iter().map(|o| o.start).min().unwrap_or(0);
    let ms = |t: i64| (t - t0) as f64 / 1e6;
    // Each thread's ops nest on their own: one thread's parents on each core, each as a list
    // beside the thread's ops, then laid out by op id.
    let per_thread: Vec<(Vec<Option<OpId>>, u64, String)> = thread_ops
        .par_iter()
        .map(|list| {
            let mut parents = Vec::with_capacity(list.len());
            let mut overlaps = 0u64;
            let mut example = String::new();
            let mut stack: Vec<OpId> = Vec::new();
            for &id in list {
                let op = &ops[id.0 as usize];
                while let Some(&top) = stack.last() {
                    let t = &ops[top.0 as usize];
                    let ended =
                        t.end() <= op.start && !(op.dur == 0 && t.dur == 0 && t.end() == op.start);
                    if ended {
                        stack.pop();
                    } else if t.end() < op.end() {
                        let counted = !is_step_mark(op) && !is_step_mark(t);
                        overlaps += u64::from(counted);
                        if counted && example.is_empty() {
                            example = format!(
                                "a range at +{:.3} ms starts inside the one at +{:.3} ms (from the trace's first op) and ends after it",
                                ms(op.start),
                                ms(t.start)
                            );
                        }
                        stack.pop();
                    } else {
                        break;
                    }
                }
                parents.push(stack.last().copied());
                stack.push(id);
            }
            (parents, overlaps, example)
        })
        .collect();
    let mut parent = vec![None; ops.len()];
    let mut overlaps = 0u64;
    let mut example = String::new();
    for (list, (parents, n, ex)) in thread_ops.iter().zip(per_thread) {
        for (&id, p) in list.iter().zip(parents) {
            parent[id.0 as usize] = p;
        }
        overlaps += n;
        // The first thread's example, as a walk of the threads in order would find it.
        if example.is_empty() {
            example = ex;
        }
    }
    diag.warn_n("overlapping_ops", overlaps, example);
    parent
}

/// The ops directly inside each op, all in one table: a list per op was 166,000 small
/// allocations on a 250 MB trace (3.3 ms to build on one thread; this table, 1.1 ms).
#[derive(Debug, Clone, Default)]
pub struct Children {
    /// Where each op's children start in `ids`; one more entry than ops.
    starts: Vec<u32>,
    ids: Vec<OpId>,
}

impl Children {
    /// The ops directly inside `id`, in time order.
    pub fn of(&self, id: OpId) -> &[OpId] {
        let i = id.0 as usize;
        &self.ids[self.starts[i] as usize..self.starts[i + 1] as usize]
    }
}

/// Ops directly inside each op, and the ops inside none, each in thread then time order.
fn children_and_roots(
    n_ops: usize,
    thread_ops: &[Vec<OpId>],
    parent: &[Option<OpId>],
) -> (Children, Vec<OpId>) {
    // Counted first, then placed: each parent's slots are filled in the order the threads'
    // lists give its children.
    let mut starts = vec![0u32; n_ops + 1];
    for p in parent.iter().flatten() {
        starts[p.0 as usize + 1] += 1;
    }
    for i in 0..n_ops {
        starts[i + 1] += starts[i];
    }
    let mut next: Vec<u32> = starts[..n_ops].to_vec();
    let mut ids = vec![OpId(0); starts[n_ops] as usize];
    let mut roots: Vec<OpId> = Vec::new();
    for list in thread_ops {
        for &o in list {
            match parent[o.0 as usize] {
                Some(p) => {
                    let slot = &mut next[p.0 as usize];
                    ids[*slot as usize] = o;
                    *slot += 1;
                }
                None => roots.push(o),
            }
        }
    }
    (Children { starts, ids }, roots)
}

/// What launch attribution found wrong, reported once it is done.
struct LaunchCounts {
    duplicates: u64,
    no_launch: u64,
    no_op: u64,
}

impl LaunchCounts {
    fn report(&self, diag: &mut Diagnostics) {
        let LaunchCounts {
            duplicates,
            no_launch,
            no_op,
        } = *self;
        diag.warn_n(
            "duplicate_correlation_ids",
            duplicates,
            format!("{duplicates} CUDA runtime calls reuse a correlation id"),
        );
        diag.warn_n(
            "gpu_activity_without_launch",
            no_launch,
            format!(
                "{no_launch} GPU activities have no CUDA runtime call with their correlation id"
            ),
        );
        diag.warn_n(
            "launch_outside_ops",
            no_op,
            format!("{no_op} GPU activities were launched outside any CPU op"),
        );
    }
}

/// The innermost op on `thread` that encloses time `t`.
fn enclosing_op(ops: &[CpuOp], list: &[OpId], parent: &[Option<OpId>], t: i64) -> Option<OpId> {
    let idx = list.partition_point(|&o| ops[o.0 as usize].start <= t);
    let mut cur = if idx == 0 { None } else { Some(list[idx - 1]) };
    while let Some(o) = cur {
        if ops[o.0 as usize].end() >= t {
            return Some(o);
        }
        cur = parent[o.0 as usize];
    }
    None
}

fn attribute_launches(
    k: &KinetoTrace,
    thread_ops: &[Vec<OpId>],
    parent: &[Option<OpId>],
) -> (Vec<Option<(OpId, i64)>>, LaunchCounts) {
    use rayon::prelude::*;
    let mut by_corr: FxHashMap<i64, usize> = FxHashMap::default();
    let mut duplicates = 0u64;
    for (i, r) in k.runtime.iter().enumerate() {
        if let Some(c) = r.correlation {
            // The first launch with an id keeps it: a repeated id is corrupt data, counted.
            match by_corr.entry(c) {
                std::collections::hash_map::Entry::Occupied(_) => duplicates += 1,
                std::collections::hash_map::Entry::Vacant(v) => {
                    v.insert(i);
                }
            }
        }
    }
    // `None`: no launch with the activity's correlation id; `Some(None)`: a launch outside
    // every op.
    let found: Vec<Option<Option<(OpId, i64)>>> = k
        .gpu
        .par_iter()
        .map(|g| {
            let &ri = g.correlation.and_then(|c| by_corr.get(&c))?;
            let r = &k.runtime[ri];
            let op = enclosing_op(&k.ops, &thread_ops[r.thread.0 as usize], parent, r.start);
            Some(op.map(|o| (o, r.start)))
        })
        .collect();
    // A trace with no runtime calls at all (GPU-only) has no launches to miss: that is said
    // once, as `no_cpu_operators`, not once per kernel.
    let no_launch = if k.runtime.is_empty() {
        0
    } else {
        found.iter().filter(|f| f.is_none()).count() as u64
    };
    let no_op = found.iter().filter(|f| matches!(f, Some(None))).count() as u64;
    let counts = LaunchCounts {
        duplicates,
        no_launch,
        no_op,
    };
    (found.into_iter().map(Option::flatten).collect(), counts)
}

/// The `/`-joined path of `nn.Module` ranges enclosing each op on its thread, as an index into
/// the paths returned beside (made in module-range order, for the caller to intern), and the
/// paths of modules made anew in each call ([`module_names`]).
fn module_paths(
    k: &KinetoTrace,
    thread_ops: &[Vec<OpId>],
) -> (Vec<Option<u32>>, Vec<String>, Vec<String>) {
    let mut out = vec![None; k.ops.len()];
    let mut paths: Vec<String> = Vec::new();
    let mut per_call: Vec<String> = Vec::new();
    if k.modules.is_empty() {
        return (out, paths, per_call);
    }
    // Paths already made, so a path repeated in every iteration is one string.
    let mut known: FxHashMap<String, u32> = FxHashMap::default();
    let mut per_thread: Vec<Vec<usize>> = vec![Vec::new(); k.threads.len()];
    for (i, m) in k.modules.iter().enumerate() {
        per_thread[m.thread.0 as usize].push(i);
    }
    for (t, spans) in per_thread.iter_mut().enumerate() {
        if spans.is_empty() {
            continue;
        }
        let mods = &k.modules;
        spans.sort_by(|&a, &b| {
            let (x, y) = (&mods[a], &mods[b]);
            x.start
                .cmp(&y.start)
                .then(y.dur.cmp(&x.dur))
                .then(a.cmp(&b))
        });
        // Nest the module ranges and name each by its path from the root module.
        let mut parent: Vec<Option<usize>> = vec![None; spans.len()];
        let mut stack: Vec<usize> = Vec::new();
        for (pos, &mi) in spans.iter().enumerate() {
            let m = k.modules[mi];
            while let Some(&top) = stack.last() {
                let tm = k.modules[spans[top]];
                if tm.start + tm.dur < m.start + m.dur {
                    stack.pop();
                } else {
                    break;
                }
            }
            parent[pos] = stack.last().copied();
            stack.push(pos);
        }
        let names: Vec<&str> = spans
            .iter()
            .map(|&mi| k.strings.resolve(mods[mi].name))
            .collect();
        let mut path: Vec<u32> = Vec::with_capacity(spans.len());
        for (pos, name) in module_names(&names, &parent, &mut per_call)
            .into_iter()
            .enumerate()
        {
            let full = match parent[pos] {
                Some(p) => format!("{}/{}", paths[path[p] as usize], name),
                None => name,
            };
            let next = paths.len() as u32;
            let id = *known.entry(full).or_insert_with_key(|full| {
                paths.push(full.clone());
                next
            });
            path.push(id);
        }
        for &o in &thread_ops[t] {
            let op = &k.ops[o.0 as usize];
            let idx = spans.partition_point(|&mi| k.modules[mi].start <= op.start);
            let mut cur = idx.checked_sub(1);
            while let Some(p) = cur {
                let m = k.modules[spans[p]];
                if m.start + m.dur >= op.start + op.dur {
                    out[o.0 as usize] = Some(path[p]);
                    break;
                }
                cur = parent[p];
            }
        }
    }
    per_call.sort();
    per_call.dedup();
    (out, paths, per_call)
}

/// For each GPU activity, the runtime call that launched it: the index in
/// [`KinetoTrace::runtime`] of the first call with its correlation id (a repeated id is corrupt
/// data, counted by the model's launch attribution). What the idle-time, queue and launch
/// analyses pair activities with.
pub fn launch_calls(k: &KinetoTrace) -> Vec<Option<u32>> {
    let mut by_corr: FxHashMap<i64, u32> = FxHashMap::default();
    for (i, r) in k.runtime.iter().enumerate() {
        if let Some(c) = r.correlation {
            by_corr.entry(c).or_insert(i as u32);
        }
    }
    k.gpu
        .iter()
        .map(|g| g.correlation.and_then(|c| by_corr.get(&c).copied()))
        .collect()
}

/// Whether a CUDA runtime (or driver) call makes the host wait for the GPU: a stream, device
/// or event synchronisation, or a blocking copy (`.item()`, `torch.equal`, `.cpu()` reach the
/// runtime as `cudaMemcpyAsync` and then `cudaStreamSynchronize`).
pub fn is_host_sync(runtime_call: &str) -> bool {
    matches!(
        runtime_call,
        "cudaStreamSynchronize"
            | "cudaDeviceSynchronize"
            | "cudaEventSynchronize"
            | "cudaMemcpy"
            | "cudaMemcpy2D"
            | "cuStreamSynchronize"
            | "cuCtxSynchronize"
            | "cuEventSynchronize"
            | "cuMemcpyDtoH_v2"
    )
}

impl Trace {
    /// The host synchronisations' spans (start, end; ns), every thread's, by start
    /// ([`is_host_sync`]): where the host waited for the GPU.
    pub fn host_sync_spans(&self) -> Vec<(i64, i64)> {
        let k = &self.kineto;
        let mut v: Vec<(i64, i64)> = k
            .runtime
            .iter()
            .filter(|r| is_host_sync(k.str(r.name)))
            .map(|r| (r.start, r.start + r.dur))
            .collect();
        v.sort_unstable();
        v
    }

    /// The host synchronisations' starts by thread ([`is_host_sync`]), sorted: whether an op
    /// waited for the GPU is a range query on its thread.
    pub fn host_syncs(&self) -> Vec<(ThreadId, i64)> {
        let k = &self.kineto;
        let mut v: Vec<(ThreadId, i64)> = k
            .runtime
            .iter()
            .filter(|r| is_host_sync(k.str(r.name)))
            .map(|r| (r.thread, r.start))
            .collect();
        v.sort_unstable();
        v
    }
}

/// A module's class from torch's instance name (`Block_10` → `Block`; a name without a
/// number is its own class).
pub fn module_class(instance: &str) -> &str {
    match instance.rsplit_once('_') {
        Some((c, k)) if !c.is_empty() && !k.is_empty() && k.bytes().all(|b| b.is_ascii_digit()) => {
            c
        }
        _ => instance,
    }
}

/// Each module range's name within its parent, given the ranges' names (`Linear_3`: the class
/// and torch's instance number) in start order and their parents. A module's place is its
/// parent's place, its class and how many ranges of that class came before it in the same
/// parent call. Where every range at one place names the same instance, that name is kept;
/// where they name several (a module made inside its parent's `forward`, as HF models make
/// `CrossEntropyLoss()` in every call), the instance number would make each call a new node,
/// so the name is the class and the place (`CrossEntropyLoss_*`, `…_*1` for the second of the
/// class in one call), and the place is pushed onto `per_call` (once). Roots keep their names.
fn module_names(
    names: &[&str],
    parent: &[Option<usize>],
    per_call: &mut Vec<String>,
) -> Vec<String> {
    // Each range's place, an index into `places`; a place is keyed by (parent's place, class,
    // how many of that class came before in the parent's call).
    let mut place_of: FxHashMap<(Option<u32>, &str, u32), u32> = FxHashMap::default();
    let mut seen: FxHashMap<(usize, &str), u32> = FxHashMap::default();
    let mut place: Vec<u32> = Vec::with_capacity(names.len());
    // Per place: its first range, whether another instance appeared there, and its `k`.
    struct Place {
        first: usize,
        varies: bool,
        kth: u32,
    }
    let mut places: Vec<Place> = Vec::new();
    for (pos, &n) in names.iter().enumerate() {
        let key = match parent[pos] {
            None => (None, n, 0),
            Some(p) => {
                let c = module_class(n);
                let counter = seen.entry((p, c)).or_insert(0);
                let kth = *counter;
                *counter += 1;
                (Some(place[p]), c, kth)
            }
        };
        let next = places.len() as u32;
        let id = *place_of.entry(key).or_insert(next);
        if id == next {
            places.push(Place {
                first: pos,
                varies: false,
                kth: key.2,
            });
        } else if names[places[id as usize].first] != n {
            places[id as usize].varies = true;
        }
        place.push(id);
    }
    let star = |p: &Place, n: &str| match p.kth {
        0 => format!("{}_*", module_class(n)),
        kth => format!("{}_*{kth}", module_class(n)),
    };
    per_call.extend(
        places
            .iter()
            .filter(|p| p.varies)
            .map(|p| star(p, names[p.first])),
    );
    names
        .iter()
        .enumerate()
        .map(|(pos, &n)| {
            let p = &places[place[pos] as usize];
            if p.varies {
                star(p, n)
            } else {
                n.to_owned()
            }
        })
        .collect()
}

/// The training loop's thread: where `ProfilerStep#` ranges are, else the thread with the most
/// top-level ops that are not autograd engine work.
fn find_main_thread(
    k: &KinetoTrace,
    thread_ops: &[Vec<OpId>],
    parent: &[Option<OpId>],
) -> Option<ThreadId> {
    for op in &k.ops {
        if op.kind == OpKind::Annotation && k.str(op.name).starts_with(PROFILER_STEP) {
            return Some(op.thread);
        }
    }
    let mut best: Option<(usize, ThreadId)> = None;
    for (t, list) in thread_ops.iter().enumerate() {
        let n = list
            .iter()
            .filter(|&&o| {
                parent[o.0 as usize].is_none()
                    && !k
                        .str(k.ops[o.0 as usize].name)
                        .starts_with(EVALUATE_FUNCTION)
            })
            .count();
        if n > 0 && best.is_none_or(|(b, _)| n > b) {
            best = Some((n, ThreadId(t as u32)));
        }
    }
    best.map(|(_, t)| t)
}

/// Allocator events of the CUDA device with the most of them (ties: lowest index).
fn select_device_memory(k: &KinetoTrace) -> (Option<i64>, Vec<MemEvent>) {
    use rayon::prelude::*;
    // (device, events): a trace names a handful of devices, so a short list beats a map.
    let mut counts: Vec<(i64, usize)> = Vec::new();
    for m in &k.memory {
        if m.device_type == 1 {
            match counts.iter_mut().find(|(d, _)| *d == m.device_id) {
                Some((_, n)) => *n += 1,
                None => counts.push((m.device_id, 1)),
            }
        }
    }
    // The most events; the lowest id among equals.
    let device = counts
        .iter()
        .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))
        .map(|&(d, _)| d);
    let device = device.or_else(|| k.gpu.first().map(|g| g.device));
    let memory = k
        .memory
        .par_iter()
        .filter(|m| m.device_type == 1 && Some(m.device_id) == device)
        .copied()
        .collect();
    (device, memory)
}

#[cfg(test)]
#[path = "trace_tests.rs"]
mod tests;
