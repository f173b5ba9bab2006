//! Kernel-level results from the GPU timeline alone: per kernel (memcpy, memset) name and per
//! stream. They need no CPU operator, so they are what a GPU-only trace (an inference server's,
//! or one recorded with `ProfilerActivity.CUDA` only) yields (issue 17, item 7); for other
//! traces they are the same table over the whole trace.

use serde::Serialize;

use crate::ingest::kineto::GpuKind;
use crate::model::Trace;

/// One kernel (or memcpy, memset) name over the whole trace.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KernelStat {
    /// Name.
    pub name: String,
    /// `kernel`, `memcpy` or `memset`.
    pub kind: &'static str,
    /// Launches.
    pub count: usize,
    /// Sum of durations, ns.
    pub total_ns: i64,
    /// Median duration, ns (lower median: a duration that occurred).
    pub median_ns: i64,
    /// Longest, ns.
    pub max_ns: i64,
    /// Share of all GPU activity time, percent.
    pub share_pct: f64,
}

/// One stream's work.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StreamStat {
    /// CUDA device.
    pub device: i64,
    /// CUDA stream.
    pub stream: i64,
    /// Activities on it.
    pub activities: usize,
    /// Time with an activity running, ns (overlaps on the stream counted once).
    pub busy_ns: i64,
}

/// The GPU timeline summed up.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Kernels {
    /// Per name, by total time (longest first), then name.
    pub by_name: Vec<KernelStat>,
    /// Per (device, stream), in that order.
    pub streams: Vec<StreamStat>,
    /// From the first activity's start to the last one's end, ns.
    pub span_ns: i64,
    /// Time with any activity running on any stream, ns.
    pub busy_ns: i64,
    /// Sum of kernel durations (not copies), ns.
    pub kernel_ns: i64,
}

fn kind(k: GpuKind) -> &'static str {
    match k {
        GpuKind::Kernel => "kernel",
        GpuKind::Memcpy => "memcpy",
        GpuKind::Memset => "memset",
    }
}

/// Length of the union of `[start, end)` intervals.
fn union_ns(mut iv: Vec<(i64, i64)>) -> i64 {
    super::step::union_len(&mut iv)
}

/// Sums up every GPU activity of the trace.
pub fn compute(t: &Trace) -> Kernels {
    let gpu = &t.kineto.gpu;
    if gpu.is_empty() {
        return Kernels::default();
    }
    let total: i64 = gpu.iter().map(|g| g.dur.max(0)).sum();
    let mut by: std::collections::BTreeMap<(&str, &'static str), Vec<i64>> = Default::default();
    let mut streams: std::collections::BTreeMap<(i64, i64), Vec<(i64, i64)>> = Default::default();
    for g in gpu {
        let d = g.dur.max(0);
        by.entry((t.kineto.str(g.name), kind(g.kind)))
            .or_default()
            .push(d);
        streams
            .entry((g.device, g.stream))
            .or_default()
            .push((g.start, g.start + d));
    }
    let mut by_name: Vec<KernelStat> = by
        .into_iter()
        .map(|((name, kind), mut ds)| {
            ds.sort_unstable();
            let sum: i64 = ds.iter().sum();
            KernelStat {
                name: name.to_owned(),
                kind,
                count: ds.len(),
                total_ns: sum,
                median_ns: ds[(ds.len() - 1) / 2],
                max_ns: ds[ds.len() - 1],
                share_pct: if total > 0 {
                    100.0 * sum as f64 / total as f64
                } else {
                    0.0
                },
            }
        })
        .collect();
    by_name.sort_by(|a, b| b.total_ns.cmp(&a.total_ns).then(a.name.cmp(&b.name)));
    let start = gpu.iter().map(|g| g.start).min().unwrap_or(0);
    let end = gpu
        .iter()
        .map(|g| g.start + g.dur.max(0))
        .max()
        .unwrap_or(0);
    Kernels {
        by_name,
        streams: streams
            .iter()
            .map(|(&(device, stream), iv)| StreamStat {
                device,
                stream,
                activities: iv.len(),
                busy_ns: union_ns(iv.clone()),
            })
            .collect(),
        span_ns: end - start,
        busy_ns: union_ns(
            gpu.iter()
                .map(|g| (g.start, g.start + g.dur.max(0)))
                .collect(),
        ),
        kernel_ns: gpu
            .iter()
            .filter(|g| g.kind == GpuKind::Kernel)
            .map(|g| g.dur.max(0))
            .sum(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn union_counts_overlaps_once() {
        assert_eq!(union_ns(vec![(0, 10), (5, 20), (30, 40)]), 30);
        assert_eq!(union_ns(vec![(30, 40), (0, 10), (10, 12)]), 22);
        assert_eq!(union_ns(Vec::new()), 0);
    }
}
