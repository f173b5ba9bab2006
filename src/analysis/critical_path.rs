//! The critical path of each profiled iteration (single rank): walked back from the step's
//! end, each stretch is what the step waited for there. A GPU activity waited for the later of
//! its launch call, the activity before it on its stream and, where it started as another
//! stream's activity ended with both of those long done, that activity; the host waited for
//! the GPU inside a synchronising call that returned only after GPU work ended; between them,
//! the host's own work. The stretches tile the iteration, first launch to the later of the
//! host's end and its GPU work's end, so their kinds split its length.
//!
//! The host's stretches are profiled host time: the profiler's host work is in them, which is
//! why a host-bound path is also given at the program's own speed (summary).

use std::collections::BTreeMap;

pub use steptrace_formats::summary::{CriticalPathSummary, PathKind, PathOp};

use crate::model::kineto::GpuKind;
use crate::model::step::{Iteration, Step};
use crate::model::Trace;

/// A cross-stream edge is taken where an activity started this soon after another stream's
/// activity ended, and its own stream and launch were ready this long before.
const CROSS_STREAM_TOUCH_NS: i64 = 10_000;
const CROSS_STREAM_SLACK_NS: i64 = 30_000;

/// One stretch of the path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    /// Start, ns.
    pub start: i64,
    /// End, ns.
    pub end: i64,
    /// What the step waited for over it.
    pub kind: PathKind,
    /// The GPU activity it is, or waited for (index in the trace's GPU table).
    pub gpu: Option<u32>,
    /// For host stretches: the node whose op covers it (index in the step's nodes), where one does.
    pub node: Option<u32>,
}

/// One iteration's path, its stretches in time order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IterPath {
    /// The iteration's index.
    pub iteration: u32,
    /// Its stretches, in time order, each starting where the one before ends.
    pub segments: Vec<Segment>,
}

impl IterPath {
    /// Its length by kind, ns, indexed by [`PathKind::index`].
    pub fn by_kind(&self) -> [i64; PathKind::ALL.len()] {
        let mut v = [0i64; PathKind::ALL.len()];
        for s in &self.segments {
            v[s.kind.index()] += s.end - s.start;
        }
        v
    }

    /// Its length, ns.
    pub fn length(&self) -> i64 {
        match (self.segments.first(), self.segments.last()) {
            (Some(a), Some(b)) => b.end - a.start,
            _ => 0,
        }
    }
}

/// The paths of the profiled iterations.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CriticalPath {
    /// One per profiled iteration with GPU work.
    pub iterations: Vec<IterPath>,
}

/// Where the walk stands: at a GPU activity's end (cut at `until`), or on the host at a time.
#[derive(Debug, Clone, Copy)]
enum At {
    Gpu { g: usize, until: i64 },
    Host(i64),
}

/// The lookups the walk needs, built once for the trace.
struct Index<'a> {
    t: &'a Trace,
    calls: &'a [Option<u32>],
    /// Each activity's predecessor on its (device, stream).
    prev_on_stream: Vec<Option<u32>>,
    /// Activities by end, with their ends.
    by_end: Vec<(i64, u32)>,
    /// Synchronising runtime calls by end: (end, start).
    syncs: Vec<(i64, i64)>,
}

impl<'a> Index<'a> {
    fn new(t: &'a Trace, calls: &'a [Option<u32>]) -> Index<'a> {
        let k = &t.kineto;
        let mut order: Vec<u32> = (0..k.gpu.len() as u32).collect();
        order.sort_by_key(|&g| {
            let a = &k.gpu[g as usize];
            (a.device, a.stream, a.start, g)
        });
        let mut prev_on_stream = vec![None; k.gpu.len()];
        for w in order.windows(2) {
            let (a, b) = (&k.gpu[w[0] as usize], &k.gpu[w[1] as usize]);
            if (a.device, a.stream) == (b.device, b.stream) {
                prev_on_stream[w[1] as usize] = Some(w[0]);
            }
        }
        let mut by_end: Vec<(i64, u32)> = k
            .gpu
            .iter()
            .enumerate()
            .map(|(i, a)| (a.start + a.dur, i as u32))
            .collect();
        by_end.sort_unstable();
        let mut syncs: Vec<(i64, i64)> = t
            .host_sync_spans()
            .into_iter()
            .map(|(s, e)| (e, s))
            .collect();
        syncs.sort_unstable();
        Index {
            t,
            calls,
            prev_on_stream,
            by_end,
            syncs,
        }
    }

    fn end(&self, g: usize) -> i64 {
        let a = &self.t.kineto.gpu[g];
        a.start + a.dur
    }

    /// The activity of device `device` (another stream than `stream`) that ended last at or
    /// before `t`.
    fn last_ended_elsewhere(&self, t: i64, device: i64, stream: i64) -> Option<usize> {
        let k = &self.t.kineto;
        let hi = self.by_end.partition_point(|&(e, _)| e <= t);
        self.by_end[..hi]
            .iter()
            .rev()
            .take(64)
            .map(|&(_, g)| g as usize)
            .find(|&g| k.gpu[g].device == device && k.gpu[g].stream != stream)
    }

    /// The activity that ended last at or before `t`, ending after `after`.
    fn last_ended(&self, t: i64, after: i64) -> Option<usize> {
        let hi = self.by_end.partition_point(|&(e, _)| e <= t);
        hi.checked_sub(1)
            .map(|i| self.by_end[i])
            .filter(|&(e, _)| e > after)
            .map(|(_, g)| g as usize)
    }
}

fn gpu_kind(k: GpuKind) -> PathKind {
    match k {
        GpuKind::Kernel => PathKind::Kernel,
        GpuKind::Memcpy => PathKind::Memcpy,
        GpuKind::Memset => PathKind::Memset,
    }
}

/// One iteration's path: walked back from the later of its host end and `last` (the end of
/// the GPU work its host launched that ends last), to its start.
fn walk(ix: &Index<'_>, start: i64, end: i64, last: Option<usize>) -> Vec<Segment> {
    let k = &ix.t.kineto;
    let mut at = match last {
        Some(g) if ix.end(g) > end => At::Gpu {
            g,
            until: ix.end(g),
        },
        _ => At::Host(end),
    };
    let mut out: Vec<Segment> = Vec::new();
    let seg = |out: &mut Vec<Segment>, s: i64, e: i64, kind: PathKind, gpu: Option<usize>| {
        let s = s.max(start);
        if e > s {
            out.push(Segment {
                start: s,
                end: e,
                kind,
                gpu: gpu.map(|g| g as u32),
                node: None,
            });
        }
    };
    // Each step moves strictly back in time or to an earlier activity; the bound is a guard.
    for _ in 0..(4 * (k.gpu.len() + ix.syncs.len()) + 8) {
        match at {
            At::Host(t) => {
                if t <= start {
                    break;
                }
                // The last synchronising call that ended by `t` and inside the iteration.
                let hi = ix.syncs.partition_point(|&(e, _)| e <= t);
                let found = hi
                    .checked_sub(1)
                    .map(|i| ix.syncs[i])
                    .filter(|s| s.0 > start);
                let Some((s_end, s_start)) = found else {
                    seg(&mut out, start, t, PathKind::Host, None);
                    break;
                };
                seg(&mut out, s_end, t, PathKind::Host, None);
                // The host waited where GPU work ended inside the call.
                match ix.last_ended(s_end, s_start) {
                    Some(g) => {
                        seg(&mut out, ix.end(g), s_end, PathKind::Sync, Some(g));
                        at = At::Gpu {
                            g,
                            until: ix.end(g),
                        };
                    }
                    None => {
                        seg(&mut out, s_start, s_end, PathKind::Host, None);
                        at = At::Host(s_start);
                    }
                }
            }
            At::Gpu { g, until } => {
                let a = &k.gpu[g];
                seg(&mut out, a.start, until, gpu_kind(a.kind), Some(g));
                if a.start <= start {
                    break;
                }
                let launch = ix.calls[g].map(|r| k.runtime[r as usize].start);
                let prev = ix.prev_on_stream[g].map(|p| p as usize);
                let ready_prev = prev.map(|p| ix.end(p));
                let ready = launch.max(ready_prev);
                let cross = ix
                    .last_ended_elsewhere(a.start, a.device, a.stream)
                    .filter(|&c| {
                        a.start - ix.end(c) <= CROSS_STREAM_TOUCH_NS
                            && ready.is_none_or(|r| a.start - r > CROSS_STREAM_SLACK_NS)
                    });
                at = if let Some(c) = cross {
                    seg(&mut out, ix.end(c), a.start, PathKind::CrossStream, Some(g));
                    At::Gpu {
                        g: c,
                        until: ix.end(c).min(a.start),
                    }
                } else if ready_prev.is_some() && ready_prev >= launch {
                    let p = prev.expect("ready_prev is prev's end");
                    let r = ix.end(p).min(a.start);
                    seg(&mut out, r, a.start, PathKind::StreamGap, Some(g));
                    At::Gpu { g: p, until: r }
                } else if let Some(l) = launch {
                    let l = l.min(a.start);
                    seg(&mut out, l, a.start, PathKind::LaunchDelay, Some(g));
                    At::Host(l)
                } else {
                    // Neither launched from this trace's host nor queued behind anything: the
                    // path starts with it.
                    break;
                };
            }
        }
    }
    out.reverse();
    out
}

/// Marks each host stretch with the node whose op covers its end, splitting it at node
/// boundaries, so that the ops on the path are named.
fn name_host(t: &Trace, step: &Step, it: &Iteration, segs: Vec<Segment>) -> Vec<Segment> {
    let mut spans: Vec<(i64, i64, u32)> = step.nodes[it.nodes.clone()]
        .iter()
        .enumerate()
        .map(|(k, n)| {
            let o = t.op(n.op);
            (o.start, o.end(), (it.nodes.start + k) as u32)
        })
        .filter(|s| s.1 > s.0)
        .collect();
    spans.sort_unstable();
    let mut out = Vec::with_capacity(segs.len());
    for s in segs {
        if s.kind != PathKind::Host {
            out.push(s);
            continue;
        }
        let mut cur = s.start;
        // The nodes that overlap it: those starting inside it, and of those starting before
        // it the last few hundred (a thread's nodes do not overlap, and few threads run them).
        let lo = spans.partition_point(|x| x.0 < s.start);
        let hi = spans.partition_point(|x| x.0 < s.end);
        let mut pieces: Vec<(i64, i64, u32)> = spans[lo.saturating_sub(256)..hi]
            .iter()
            .filter(|x| x.1 > s.start)
            .map(|&(a, b, n)| (a.max(s.start), b.min(s.end), n))
            .collect();
        pieces.sort_unstable();
        for (a, b, n) in pieces {
            if b <= cur {
                continue;
            }
            let a = a.max(cur);
            if a > cur {
                out.push(Segment {
                    start: cur,
                    end: a,
                    ..s
                });
            }
            out.push(Segment {
                start: a,
                end: b,
                node: Some(n),
                ..s
            });
            cur = b;
        }
        if s.end > cur {
            out.push(Segment { start: cur, ..s });
        }
    }
    // Host stretches cut at syncs that waited for nothing, or at node edges, join again where
    // they are charged alike.
    let mut joined: Vec<Segment> = Vec::with_capacity(out.len());
    for s in out {
        match joined.last_mut() {
            Some(l)
                if l.kind == PathKind::Host
                    && s.kind == PathKind::Host
                    && l.node == s.node
                    && l.end == s.start =>
            {
                l.end = s.end
            }
            _ => joined.push(s),
        }
    }
    joined
}

/// The critical path of each profiled iteration. `calls`: [`crate::model::launch_calls`].
pub fn compute(t: &Trace, step: &Step, calls: &[Option<u32>]) -> CriticalPath {
    if t.kineto.gpu.is_empty() {
        return CriticalPath::default();
    }
    let ix = Index::new(t, calls);
    // Per iteration, the GPU activity launched inside it that ends last.
    let k = &t.kineto;
    let mut last: Vec<Option<usize>> = vec![None; step.iterations.len()];
    for (g, a) in k.gpu.iter().enumerate() {
        let Some(r) = calls[g] else { continue };
        let ts = k.runtime[r as usize].start;
        let i = step.iterations.partition_point(|it| it.start <= ts);
        let Some(i) = i.checked_sub(1).filter(|&i| ts < step.iterations[i].end) else {
            continue;
        };
        if last[i].is_none_or(|l| ix.end(l) < a.start + a.dur) {
            last[i] = Some(g);
        }
    }
    let iterations = step
        .iterations
        .iter()
        .zip(last)
        .map(|(it, l)| IterPath {
            iteration: it.index,
            segments: name_host(t, step, it, walk(&ix, it.start, it.end, l)),
        })
        .filter(|p| !p.segments.is_empty())
        .collect();
    CriticalPath { iterations }
}

/// The step as the summary gives it: the program's own (else the profiled one), the GPU's
/// busy time in it, and the program's host time over the profiled one where known.
#[derive(Debug, Clone, Copy)]
pub struct StepFacts {
    /// The step, s.
    pub step_s: f64,
    /// The GPU's busy time per iteration (median), s.
    pub gpu_busy_s: f64,
    /// The program's host time over the profiled one (`None`: the step is the profiled one).
    pub host_scale: Option<f64>,
}

/// The paths summed up: their length by kind per iteration, the host's share, and the ops
/// holding most of them (host stretches by node, GPU work by its launching op); the verdict
/// from the step against what a free host would leave of it.
pub fn summary(
    t: &Trace,
    step: &Step,
    cp: &CriticalPath,
    facts: StepFacts,
) -> Option<CriticalPathSummary> {
    let n = cp.iterations.len();
    if n == 0 {
        return None;
    }
    let per = |ns: i64| ns as f64 * 1e-9 / n as f64;
    let mut kinds = [0i64; PathKind::ALL.len()];
    let mut ops: BTreeMap<&str, i64> = BTreeMap::new();
    for it in &cp.iterations {
        for (k, v) in it.by_kind().iter().enumerate() {
            kinds[k] += v;
        }
        for s in &it.segments {
            let name = match (s.node, s.gpu) {
                (Some(node), _) => step.nodes[node as usize].name.as_str(),
                (None, Some(g)) if s.kind.is_gpu_work() => {
                    t.launch[g as usize].map_or("", |(op, _)| t.op_name(op))
                }
                _ => "",
            };
            if !name.is_empty() {
                *ops.entry(name).or_default() += s.end - s.start;
            }
        }
    }
    let length: i64 = cp.iterations.iter().map(IterPath::length).sum();
    let host = kinds[PathKind::Host.index()] + kinds[PathKind::Sync.index()];
    let host_share = if length > 0 {
        host as f64 / length as f64
    } else {
        0.0
    };
    let mut top: Vec<(&str, i64)> = ops.into_iter().collect();
    top.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    Some(CriticalPathSummary {
        length_s: per(length),
        per_iteration_s: PathKind::ALL
            .iter()
            .map(|&k| (k, per(kinds[k.index()])))
            .collect(),
        host_share,
        host_free_step_s: facts.gpu_busy_s,
        bound: if facts.gpu_busy_s < 0.9 * facts.step_s {
            "host"
        } else {
            "gpu"
        }
        .into(),
        host_s_at_program_speed: facts
            .host_scale
            .map(|k| per(kinds[PathKind::Host.index()]) * k),
        top_ops: top
            .into_iter()
            .take(10)
            .map(|(op, ns)| PathOp {
                op: op.to_owned(),
                path_s: per(ns),
            })
            .collect(),
    })
}

#[cfg(test)]
mod tests;
