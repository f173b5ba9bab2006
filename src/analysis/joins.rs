//! How the side files line up with the Kineto trace: the snapshot's clock, and the Execution
//! Trace's nodes by record-function id.

use super::{file_name, median, memory, Diagnostics, Step, Trace};
use crate::model::snapshot::Action;
pub use steptrace_formats::summary::{ExecTraceJoin, SnapshotJoin};

/// Lines up the snapshot's clock with the trace's, through `ProfilerStep#N` annotations and
/// through allocations seen by both (same address and size).
pub(super) fn snapshot_join(t: &Trace, step: &Step, diag: &mut Diagnostics) -> SnapshotJoin {
    let s = t.snapshot.as_ref().expect("called with a snapshot");
    let k = &t.kineto;
    let mut ann: Vec<f64> = Vec::new();
    for it in &step.iterations {
        if let Some(a) = s
            .annotations
            .iter()
            .find(|a| a.start && s.str(a.name) == it.label)
        {
            ann.push(a.time_us as f64 - k.epoch_us(it.start));
        }
    }
    // Allocations: each trace alloc against the nearest snapshot alloc of the same block.
    let mut by_block: rustc_hash::FxHashMap<(u64, u64), Vec<i64>> =
        rustc_hash::FxHashMap::default();
    for dev in &s.device_traces {
        for e in dev {
            if e.action == Action::Alloc {
                if let Some(ts) = e.time_us {
                    // History holds the requested size, the trace the allocator's block size.
                    let size = memory::round_block(e.size as i64) as u64;
                    by_block.entry((e.addr, size)).or_default().push(ts);
                }
            }
        }
    }
    let mut allocs: Vec<f64> = Vec::new();
    for m in t.memory.iter().filter(|m| m.bytes > 0) {
        if let Some(times) = by_block.get(&(m.addr, m.bytes as u64)) {
            let te = k.epoch_us(m.ts);
            if let Some(best) = times
                .iter()
                .map(|&x| x as f64 - te)
                .min_by(|a, b| a.abs().total_cmp(&b.abs()))
            {
                allocs.push(best);
            }
        }
    }
    let first_trace_ts = k.ops.iter().map(|o| o.start).min().map(|t0| k.epoch_us(t0));
    let first_snap = s
        .device_traces
        .iter()
        .flatten()
        .filter_map(|e| e.time_us)
        .min();
    let join = SnapshotJoin {
        file: file_name(&s.path),
        entries: s.device_traces.iter().map(Vec::len).sum(),
        segments: s.segments.len(),
        reserved_bytes: s.segments.iter().map(|g| g.total_size).sum(),
        history_before_trace: matches!((first_snap, first_trace_ts), (Some(a), Some(b)) if (a as f64) < b),
        annotation_matches: ann.len(),
        annotation_offset_us: median(&mut ann),
        alloc_matches: allocs.len(),
        alloc_offset_us: median(&mut allocs),
    };
    // Measured on PyTorch 2.11: both clocks agree to ~0.1 ms. Beyond 1 ms, joins by time are
    // not to be trusted.
    for (what, off) in [
        ("ProfilerStep annotations", join.annotation_offset_us),
        ("allocations", join.alloc_offset_us),
    ] {
        if let Some(o) = off {
            if o.abs() > 1000.0 {
                diag.warn(
                    "snapshot_clock_mismatch",
                    format!("snapshot and trace clocks differ by {o:.0} µs (median over {what})"),
                );
            }
        }
    }
    if join.annotation_matches == 0 && join.alloc_matches == 0 {
        diag.warn(
            "snapshot_not_joined",
            format!(
                "{}: no annotation or allocation matches the trace; is it from the same run?",
                join.file
            ),
        );
    }
    join
}

pub(super) fn exec_trace_join(t: &Trace) -> Option<ExecTraceJoin> {
    let et = t.exec_trace.as_ref()?;
    let mut with = 0;
    let mut matched = 0;
    for o in &t.kineto.ops {
        if let Some(rf) = o.rf_id {
            with += 1;
            if et
                .node_by_rf(rf)
                .is_some_and(|n| et.strings.resolve(n.name) == t.kineto.str(o.name))
            {
                matched += 1;
            }
        }
    }
    Some(ExecTraceJoin {
        file: file_name(&et.path),
        schema: et.schema.clone(),
        nodes: et.nodes.len(),
        ops_with_rf_id: with,
        ops_matched: matched,
    })
}

/// For each device of a snapshot analysis, and each of its kept allocations
/// ([`DeviceMemory::intervals`](crate::analysis::snapshot::DeviceMemory)), the trace's node
/// that made it, where the trace saw it: the allocation event of the same block (address and
/// the allocator's size) nearest in time once the clocks are lined up, within 1 ms. Only the
/// trace's device and the profiled window can answer; every other allocation has `None`.
pub fn snapshot_makers(
    t: &Trace,
    a: &super::Analysis,
    sa: &crate::analysis::snapshot::SnapshotAnalysis,
) -> Vec<Vec<Option<usize>>> {
    let Some(s) = t.snapshot.as_ref() else {
        return sa
            .devices
            .iter()
            .map(|d| vec![None; d.intervals.len()])
            .collect();
    };
    let k = &t.kineto;
    // Snapshot time − trace time, µs, as the join measured it.
    let offset = a
        .summary
        .snapshot
        .as_ref()
        .and_then(|j| j.alloc_offset_us.or(j.annotation_offset_us))
        .unwrap_or(0.0);
    let mut made: rustc_hash::FxHashMap<(u64, u64), Vec<(f64, usize)>> =
        rustc_hash::FxHashMap::default();
    for b in &a.memory.blocks {
        if let (Some(n), true) = (b.producer, b.alloc != i64::MIN) {
            let key = (b.addr, b.size as u64);
            made.entry(key).or_default().push((k.epoch_us(b.alloc), n));
        }
    }
    let device = t.device.unwrap_or(0);
    sa.devices
        .iter()
        .map(|d| {
            let trace = usize::try_from(d.device)
                .ok()
                .and_then(|i| s.device_traces.get(i))
                .filter(|_| d.device == device);
            d.intervals
                .iter()
                .map(|v| {
                    let e = trace?.get(v.made? as usize)?;
                    let at = e.time_us? as f64 - offset;
                    let size = memory::round_block(v.size as i64) as u64;
                    let (dt, n) = made
                        .get(&(v.addr, size))?
                        .iter()
                        .map(|&(x, n)| ((x - at).abs(), n))
                        .min_by(|p, q| p.0.total_cmp(&q.0))?;
                    (dt <= 1000.0).then_some(n)
                })
                .collect()
        })
        .collect()
}
