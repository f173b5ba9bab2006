//! Which node owns each GPU activity, and the host-side facts that join them: launches in time order, backward spans, pageable copies, iterations cut short.

use super::*;

/// The GPU activities each node launched (the launching op or its nearest node ancestor), and
/// those launched by ops under no node, with their launch times.
pub(super) struct GpuOwners {
    /// By node index.
    pub(super) of_node: Vec<Vec<GpuId>>,
    pub(super) unattributed: Vec<(GpuId, i64)>,
}

/// Each op's node index (`u32::MAX` for ops that are not nodes).
pub(super) fn node_index(t: &Trace, node_ops: &[OpId]) -> Vec<u32> {
    let mut node_of: Vec<u32> = vec![u32::MAX; t.kineto.ops.len()];
    for (i, &o) in node_ops.iter().enumerate() {
        node_of[o.0 as usize] = i as u32;
    }
    node_of
}

pub(super) fn gpu_owners(t: &Trace, node_ops: &[OpId], node_of: &[u32]) -> GpuOwners {
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
pub(super) fn has_htod(t: &Trace, gpus: &[GpuId]) -> bool {
    gpus.iter().any(|g| {
        let a = &t.kineto.gpu[g.0 as usize];
        a.kind == GpuKind::Memcpy && t.kineto.str(a.name).contains("HtoD")
    })
}

/// Node indices per window, by the node's start (a window holds `[start, end)`), and how many
/// nodes start outside every window.
pub(super) fn assign_to_windows(
    t: &Trace,
    node_ops: &[OpId],
    windows: &[Window],
) -> (Vec<Vec<usize>>, usize) {
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
pub(super) fn module_by_seq(
    t: &Trace,
    facts: &OpFacts,
    autograd_thread: &[bool],
) -> FxHashMap<i64, StrId> {
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
pub(super) fn sorted_launches(t: &Trace) -> Vec<(i64, usize)> {
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
pub(super) struct BackwardSpans {
    /// From the first backward node's start to the last one's end.
    pub(super) extent: Option<(i64, i64)>,
    /// The backward nodes' spans, merged.
    pub(super) spans: Vec<(i64, i64)>,
}

impl BackwardSpans {
    pub(super) fn new(t: &Trace, bw: &[OpId]) -> BackwardSpans {
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

    pub(super) fn contains(&self, ts: i64) -> bool {
        let k = self.spans.partition_point(|s| s.0 <= ts);
        k > 0 && ts < self.spans[k - 1].1
    }
}

/// Says when the batch's copies to the device read pageable memory (a DataLoader without
/// `pin_memory`): such a copy is staged through a pinned buffer by the driver, runs at a
/// fraction of the link's speed and blocks the host until it is done. Median per iteration,
/// said where it is 1% of the iteration's GPU time and 50 µs or more.
pub(super) fn pageable_copies(
    t: &Trace,
    gpu: &GpuOwners,
    node_of: &[u32],
    per_iter_nodes: &[Vec<Node>],
    iterations: &[Iteration],
    diag: &mut Diagnostics,
) {
    let mut per_iter: Vec<f64> = per_iter_nodes
        .iter()
        .map(|nodes| {
            nodes
                .iter()
                .filter(|n| n.phase == Phase::DataLoading)
                .flat_map(|n| &gpu.of_node[node_of[n.op.0 as usize] as usize])
                .map(|g| &t.kineto.gpu[g.0 as usize])
                .filter(|a| a.kind == GpuKind::Memcpy)
                .filter(|a| {
                    let name = t.kineto.str(a.name);
                    name.contains("HtoD") && name.contains("Pageable")
                })
                .map(|a| a.dur as f64)
                .sum()
        })
        .collect();
    let ns = crate::analysis::median(&mut per_iter).unwrap_or(0.0);
    let mut gpu_time: Vec<f64> = iterations.iter().map(|i| i.gpu_time as f64).collect();
    let gpu_time = crate::analysis::median(&mut gpu_time).unwrap_or(0.0);
    // 1% of the iteration's GPU time and 50 µs at least: a toy model's few kilobytes are not
    // worth a word.
    if ns >= 50_000.0 && ns * 100.0 >= gpu_time {
        diag.warn(
            "input_copy_from_pageable_memory",
            format!(
                "the batch's copy to the device reads pageable memory: {:.2} ms of GPU time an iteration ({:.0}% of it, in data_loading); a DataLoader with pin_memory=True and .to(device, non_blocking=True) copies from pinned memory, faster and without holding the host",
                ns * 1e-6,
                100.0 * ns / gpu_time.max(1.0)
            ),
        );
    }
}

/// Leaves out the last iteration when the window ended inside it: the program ended inside a
/// ProfilerStep range (a schedule longer than the run: the range runs on to the profiler's stop
/// and holds a fraction of a step; nanoGPT's bench.py: 9.1 s and one node against 0.11 s and
/// 346), or a libtorch window closed after a backward pass and before the optimizer (a loop
/// whose step boundary capture found mid-step). Left in, its nodes read "missing in some
/// iterations" and its figures are a part-step's; left out, it is said once.
pub(super) fn drop_cut_short(
    iterations: &mut Vec<Iteration>,
    per_iter_nodes: &mut Vec<Vec<Node>>,
    diag: &mut Diagnostics,
) {
    let Some(why) = cut_short(per_iter_nodes) else {
        return;
    };
    if let (Some(it), Some(_)) = (iterations.pop(), per_iter_nodes.pop()) {
        diag.warn(
            "last_iteration_cut_short",
            format!(
                "{}: the window ended inside this step ({why}); it is left out of every per-node and per-iteration figure",
                it.label
            ),
        );
    }
}
