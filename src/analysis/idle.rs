//! Why the GPU waits: every gap between two consecutive activities of a CUDA stream,
//! classified as HolisticTraceAnalysis classifies it (`get_idle_time_breakdown`: host wait when
//! the next activity's launch came after the previous activity ended, kernel wait when it did
//! not and the gap is under 30 µs, other for the rest), with host wait split by what the host
//! was doing (building the batch, or just back from waiting for the GPU) and other by a
//! collective on another stream that the activity started after.
//!
//! ```text
//!  host   ..[sync]......[launch k]
//!  stream [p]      gap       [k]        launch after p's end: host wait (here host sync)
//! ```
//! Gaps are summed over the whole trace (HTA's scope) and per iteration (the iteration whose
//! host span holds the late activity's launch, else its start).

use rustc_hash::FxHashMap;
use std::collections::BTreeMap;

use super::kernels::{classify, KernelClass};
use super::step::{Phase, Step};
use crate::intern::StrId;
use crate::model::Trace;
pub use steptrace_formats::summary::{IdleCause, IdleOp, IdleSummary};

/// HTA's `consecutive_kernel_delay` (30, in its trace's µs): a shorter gap after an activity
/// launched in time is the cost of starting the next one.
pub const KERNEL_WAIT_NS: i64 = 30_000;

/// torch.utils.data's range around each batch (`enumerate(DataLoader)#…__next__`).
const DATA_LOADER_NEXT: &str = "enumerate(DataLoader)#";

/// One stream's idle time by cause, over the whole trace or one iteration.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamIdle {
    /// `None`: the whole trace; else the iteration's index.
    pub iteration: Option<u32>,
    /// CUDA device.
    pub device: i64,
    /// CUDA stream.
    pub stream: i64,
    /// Idle time by cause ([`IdleCause::ALL`] order), ns.
    pub idle_ns: [i64; 6],
    /// Gaps by cause.
    pub gaps: [u64; 6],
}

/// Every stream's idle time by cause, and what it is charged to.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Idle {
    /// The whole trace's rows, then each iteration's, streams in (device, stream) order.
    pub streams: Vec<StreamIdle>,
    /// The busiest stream's summary (the headline).
    pub summary: Option<IdleSummary>,
}

/// What the host was doing before a late launch, from what ran on its thread in between.
struct HostFacts {
    /// Host syncs' ends by thread, sorted.
    sync_ends: FxHashMap<u32, Vec<i64>>,
    /// Host time building the batch: disjoint spans, in order.
    data_loading: Vec<(i64, i64)>,
}

impl HostFacts {
    /// The host syncs' ends by thread and the batch's building, from the trace and the step.
    fn of(t: &Trace, step: &Step) -> HostFacts {
        let k = &t.kineto;
        let mut sync_ends: FxHashMap<u32, Vec<i64>> = FxHashMap::default();
        for r in &k.runtime {
            if crate::model::is_host_sync(k.str(r.name)) {
                sync_ends
                    .entry(r.thread.0)
                    .or_default()
                    .push(r.start + r.dur);
            }
        }
        for v in sync_ends.values_mut() {
            v.sort_unstable();
        }
        // The batch's building: the DataLoader's own ranges (Python between its ops included) and
        // the data-loading nodes (a libtorch program's, which has no such range).
        let data_loading: Vec<(i64, i64)> = step
            .nodes
            .iter()
            .filter(|n| n.phase == Phase::DataLoading)
            .map(|n| {
                let op = t.op(n.op);
                (op.start, op.end())
            })
            .chain(
                k.ops
                    .iter()
                    .filter(|o| k.str(o.name).starts_with(DATA_LOADER_NEXT))
                    .map(|o| (o.start, o.end())),
            )
            .collect();
        let data_loading = super::intervals::merged(data_loading);
        HostFacts {
            sync_ends,
            data_loading,
        }
    }

    fn cause(&self, thread: u32, from: i64, launch: i64) -> IdleCause {
        let synced = self.sync_ends.get(&thread).is_some_and(|ends| {
            let i = ends.partition_point(|&e| e < from);
            ends.get(i).is_some_and(|&e| e <= launch)
        });
        if synced {
            return IdleCause::HostSync;
        }
        // Half the host's time before the launch went to building the batch.
        let first = self.data_loading.partition_point(|&(_, e)| e <= from);
        let covered: i64 = self.data_loading[first..]
            .iter()
            .take_while(|&&(s, _)| s < launch)
            .map(|&(s, e)| e.min(launch) - s.max(from))
            .sum();
        if 2 * covered >= launch - from {
            IdleCause::DataLoading
        } else {
            IdleCause::HostWait
        }
    }
}

/// What idle time before activity `gi` is charged to: for host causes the outermost op around
/// its launch (the node that launched late; `None` for a launch outside every op), else the
/// activity itself, or the collective it waited for. An interned name: the gaps are many, the
/// names few, and they are made text once ([`headline`]).
fn charged_to(t: &Trace, gi: usize, cause: IdleCause, waited_for: Option<usize>) -> Option<StrId> {
    let k = &t.kineto;
    match cause {
        IdleCause::CommunicationWait => Some(k.gpu[waited_for.unwrap_or(gi)].name),
        IdleCause::KernelWait | IdleCause::Other => Some(k.gpu[gi].name),
        _ => t.launch[gi].map(|(op, _)| {
            let mut top = op;
            while let Some(p) = t.parent[top.0 as usize] {
                if k.ops[p.0 as usize].kind != crate::model::kineto::OpKind::Op {
                    break;
                }
                top = p;
            }
            t.op(top).name
        }),
    }
}

/// Classifies every stream's gaps; `calls` is [`crate::model::launch_calls`]'s.
pub fn compute(t: &Trace, step: &Step, calls: &[Option<u32>]) -> Idle {
    let k = &t.kineto;
    if k.gpu.is_empty() {
        return Idle::default();
    }
    // Each activity's launch: the calling thread and the call's start.
    let launch: Vec<Option<(u32, i64)>> = calls
        .iter()
        .map(|c| {
            c.map(|i| &k.runtime[i as usize])
                .map(|r| (r.thread.0, r.start))
        })
        .collect();
    let host = HostFacts::of(t, step);
    // Collectives' ends per device, sorted: what a late activity may have waited for.
    let mut comm_ends: BTreeMap<i64, Vec<(i64, usize)>> = BTreeMap::new();
    let mut by_stream: BTreeMap<(i64, i64), Vec<usize>> = BTreeMap::new();
    for (i, g) in k.gpu.iter().enumerate() {
        by_stream.entry((g.device, g.stream)).or_default().push(i);
        if classify(k.str(g.name)) == KernelClass::Communication {
            comm_ends
                .entry(g.device)
                .or_default()
                .push((g.start + g.dur, i));
        }
    }
    for v in comm_ends.values_mut() {
        v.sort_unstable();
    }
    let iter_of = |ts: i64| {
        let its = &step.iterations;
        let i = its.partition_point(|it| it.start <= ts);
        (i > 0 && ts < its[i - 1].end).then(|| (i - 1) as u32)
    };
    let mut rows: BTreeMap<(Option<u32>, i64, i64), StreamIdle> = BTreeMap::new();
    let mut charged: BTreeMap<(i64, i64, IdleCause, Option<StrId>), i64> = BTreeMap::new();
    for (&(device, stream), ids) in &mut by_stream {
        ids.sort_by_key(|&i| (k.gpu[i].start, i));
        for w in ids.windows(2) {
            let (p, gi) = (&k.gpu[w[0]], w[1]);
            let g = &k.gpu[gi];
            let prev_end = p.start + p.dur;
            let gap = g.start - prev_end;
            if gap <= 0 {
                continue;
            }
            let mut waited_for = None;
            let cause = match launch[gi] {
                Some((thread, l)) if l > prev_end => host.cause(thread, prev_end, l),
                _ if gap < KERNEL_WAIT_NS => IdleCause::KernelWait,
                _ => {
                    let ends = comm_ends.get(&device).map(Vec::as_slice).unwrap_or(&[]);
                    let i = ends.partition_point(|&(e, _)| e < prev_end);
                    let last = ends[i..].iter().take_while(|&&(e, _)| e <= g.start).last();
                    match last {
                        Some(&(_, c)) if k.gpu[c].stream != stream => {
                            waited_for = Some(c);
                            IdleCause::CommunicationWait
                        }
                        _ => IdleCause::Other,
                    }
                }
            };
            let ci = cause.index();
            let at = launch[gi].map_or(g.start, |(_, l)| l);
            let it = iter_of(at);
            // The whole trace's row, and the iteration's where the gap falls in one.
            for scope in std::iter::once(None).chain(it.map(Some)) {
                let row = rows.entry((scope, device, stream)).or_insert(StreamIdle {
                    iteration: scope,
                    device,
                    stream,
                    idle_ns: [0; 6],
                    gaps: [0; 6],
                });
                row.idle_ns[ci] += gap;
                row.gaps[ci] += 1;
            }
            if it.is_some() {
                *charged
                    .entry((device, stream, cause, charged_to(t, gi, cause, waited_for)))
                    .or_default() += gap;
            }
        }
    }
    let streams: Vec<StreamIdle> = rows.into_values().collect();
    let summary = headline(t, step, &streams, &charged);
    Idle { streams, summary }
}

/// The busiest stream's idle time per iteration by cause, and the ops most of it is charged to.
fn headline(
    t: &Trace,
    step: &Step,
    streams: &[StreamIdle],
    charged: &BTreeMap<(i64, i64, IdleCause, Option<StrId>), i64>,
) -> Option<IdleSummary> {
    let n = step.iterations.len();
    if n == 0 {
        return None;
    }
    // The stream that computes most (a collective's kernel spins while it waits for the other
    // ranks: its stream looks busy without doing the step's work); any stream without one.
    let mut busy: BTreeMap<(i64, i64), (i64, i64)> = BTreeMap::new();
    let k = &t.kineto;
    for g in &k.gpu {
        let e = busy.entry((g.device, g.stream)).or_default();
        if classify(k.str(g.name)) == KernelClass::Computation {
            e.0 += g.dur;
        }
        e.1 += g.dur;
    }
    let (&(device, stream), _) = busy.iter().max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))?;
    let mut per_iteration_s = BTreeMap::new();
    for c in IdleCause::ALL {
        let ci = c.index();
        let sum: i64 = streams
            .iter()
            .filter(|r| r.iteration.is_some() && (r.device, r.stream) == (device, stream))
            .map(|r| r.idle_ns[ci])
            .sum();
        per_iteration_s.insert(c, sum as f64 * 1e-9 / n as f64);
    }
    let mut top_ops: BTreeMap<IdleCause, Vec<IdleOp>> = BTreeMap::new();
    for ((d, s, c, name), ns) in charged {
        if (*d, *s) == (device, stream) {
            top_ops.entry(*c).or_default().push(IdleOp {
                op: name
                    .map_or("(launch outside every op)", |n| k.str(n))
                    .to_owned(),
                idle_s: *ns as f64 * 1e-9 / n as f64,
            });
        }
    }
    for v in top_ops.values_mut() {
        v.sort_by(|a, b| b.idle_s.total_cmp(&a.idle_s).then(a.op.cmp(&b.op)));
        v.truncate(5);
    }
    Some(IdleSummary {
        device,
        stream,
        per_iteration_s,
        top_ops,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A step with one gap of each cause, checked by hand (µs):
    ///
    /// ```text
    ///  host    mm@11  relu@200 add@207 [item: sync 241-242] mul@300 allreduce@310 sub@312 div@330 [DataLoader 500-600] mul@610
    ///  s7      [k1 20-120]   90 host  [k2 210-220] 10 kernel [k3 230-240] 65 sync [k4 305-315] 86 comm [k6 401-411] 39 other [k7 450-460] 155 data [k8 615-625]
    ///  s20                                         [allreduce 320-400]
    /// ```
    const EVENTS: &str = r#"
{"ph":"X","cat":"user_annotation","name":"ProfilerStep#1","pid":1,"tid":1,"ts":0,"dur":1000},
{"ph":"X","cat":"cpu_op","name":"aten::mm","pid":1,"tid":1,"ts":10,"dur":5},
{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":11,"dur":1,"args":{"correlation":1}},
{"ph":"X","cat":"kernel","name":"k1","pid":0,"tid":7,"ts":20,"dur":100,"args":{"stream":7,"device":0,"correlation":1}},
{"ph":"X","cat":"cpu_op","name":"aten::relu","pid":1,"tid":1,"ts":195,"dur":10},
{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":200,"dur":1,"args":{"correlation":2}},
{"ph":"X","cat":"kernel","name":"k2","pid":0,"tid":7,"ts":210,"dur":10,"args":{"stream":7,"device":0,"correlation":2}},
{"ph":"X","cat":"cpu_op","name":"aten::add","pid":1,"tid":1,"ts":206,"dur":3},
{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":207,"dur":1,"args":{"correlation":3}},
{"ph":"X","cat":"kernel","name":"k3","pid":0,"tid":7,"ts":230,"dur":10,"args":{"stream":7,"device":0,"correlation":3}},
{"ph":"X","cat":"cpu_op","name":"aten::item","pid":1,"tid":1,"ts":209,"dur":35},
{"ph":"X","cat":"cuda_runtime","name":"cudaStreamSynchronize","pid":1,"tid":1,"ts":210,"dur":32},
{"ph":"X","cat":"cpu_op","name":"aten::mul","pid":1,"tid":1,"ts":299,"dur":2},
{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":300,"dur":1,"args":{"correlation":4}},
{"ph":"X","cat":"kernel","name":"k4","pid":0,"tid":7,"ts":305,"dur":10,"args":{"stream":7,"device":0,"correlation":4}},
{"ph":"X","cat":"cpu_op","name":"c10d::allreduce_","pid":1,"tid":1,"ts":309,"dur":2},
{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":310,"dur":1,"args":{"correlation":5}},
{"ph":"X","cat":"kernel","name":"ncclDevKernel_AllReduce_Sum_f32_RING_LL","pid":0,"tid":20,"ts":320,"dur":80,"args":{"stream":20,"device":0,"correlation":5}},
{"ph":"X","cat":"cpu_op","name":"aten::sub","pid":1,"tid":1,"ts":312,"dur":1},
{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":312.5,"dur":0.2,"args":{"correlation":6}},
{"ph":"X","cat":"kernel","name":"k6","pid":0,"tid":7,"ts":401,"dur":10,"args":{"stream":7,"device":0,"correlation":6}},
{"ph":"X","cat":"cpu_op","name":"aten::div","pid":1,"tid":1,"ts":329,"dur":2},
{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":330,"dur":1,"args":{"correlation":7}},
{"ph":"X","cat":"kernel","name":"k7","pid":0,"tid":7,"ts":450,"dur":10,"args":{"stream":7,"device":0,"correlation":7}},
{"ph":"X","cat":"user_annotation","name":"enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__","pid":1,"tid":1,"ts":500,"dur":100},
{"ph":"X","cat":"cpu_op","name":"aten::mul","pid":1,"tid":1,"ts":609,"dur":2},
{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":610,"dur":1,"args":{"correlation":8}},
{"ph":"X","cat":"kernel","name":"k8","pid":0,"tid":7,"ts":615,"dur":10,"args":{"stream":7,"device":0,"correlation":8}}
"#;

    fn idle() -> Idle {
        let mut t = crate::model::from_events(EVENTS);
        let mut d = crate::diagnostics::Diagnostics::default();
        let step = super::super::step::compute(&mut t, None, &mut d);
        let calls = crate::model::launch_calls(&t.kineto);
        compute(&t, &step, &calls)
    }

    #[test]
    fn each_gap_gets_the_cause_drawn_by_hand() {
        let idle = idle();
        let whole = idle
            .streams
            .iter()
            .find(|r| r.iteration.is_none() && r.stream == 7)
            .expect("stream 7's row");
        let us = |c: IdleCause| whole.idle_ns[c.index()] / 1000;
        assert_eq!(us(IdleCause::HostWait), 90);
        assert_eq!(us(IdleCause::KernelWait), 10);
        assert_eq!(us(IdleCause::HostSync), 65);
        assert_eq!(us(IdleCause::CommunicationWait), 86);
        assert_eq!(us(IdleCause::Other), 39);
        assert_eq!(us(IdleCause::DataLoading), 155);
        assert_eq!(whole.gaps, [1; 6]);
        // The one iteration holds every gap.
        let it = idle
            .streams
            .iter()
            .find(|r| r.iteration == Some(0) && r.stream == 7)
            .unwrap();
        assert_eq!(it.idle_ns, whole.idle_ns);
    }

    #[test]
    fn the_headline_is_the_busiest_stream_with_what_each_cause_is_charged_to() {
        let s = idle().summary.expect("a headline");
        assert_eq!((s.device, s.stream), (0, 7));
        assert!((s.per_iteration_s[&IdleCause::HostWait] - 90e-6).abs() < 1e-12);
        let top = |c: IdleCause| s.top_ops[&c][0].op.clone();
        assert_eq!(top(IdleCause::HostWait), "aten::relu");
        assert_eq!(top(IdleCause::HostSync), "aten::mul");
        assert_eq!(
            top(IdleCause::CommunicationWait),
            "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
        );
        assert_eq!(top(IdleCause::Other), "k7");
    }
}
