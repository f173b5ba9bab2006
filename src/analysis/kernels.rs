//! Kernel-level results from the GPU timeline alone: per kernel (memcpy, memset) name and per
//! stream. They need no CPU operator, so they are what a GPU-only trace (an inference server's,
//! or one recorded with `ProfilerActivity.CUDA` only) yields (item 7); for other
//! traces they are the same table over the whole trace.

use serde::Serialize;
use std::collections::BTreeMap;

use super::intervals::{intersection_len, merged, total_len, union_len};
use super::step::{Detection, Step};
use crate::model::kineto::GpuKind;
use crate::model::Trace;
pub use steptrace_formats::summary::{CollectiveOverlap, Temporal};

/// One kernel (or memcpy, memset) name over the whole trace.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KernelStat {
    /// Name.
    pub name: String,
    /// Kernel, memcpy or memset.
    pub kind: GpuKind,
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

/// HolisticTraceAnalysis's kernel classes (`hta.utils.utils.get_kernel_type`), decided by name
/// alone so that the two tools classify every kernel alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelClass {
    /// `^nccl.*Kernel`.
    Communication,
    /// `^Memcpy`, `^Memset`, `^dma`.
    Memory,
    /// Anything not matching `^nccl.*Kernel`, `.*Memcpy`, `^Memset` or `.*Sync`.
    Computation,
    /// The rest (e.g. a kernel named `...Memcpy...` or `...Sync...`).
    Other,
}

/// The class of a GPU activity named `name`.
pub fn classify(name: &str) -> KernelClass {
    let nccl = name.starts_with("nccl") && name[4..].contains("Kernel");
    if nccl {
        KernelClass::Communication
    } else if name.starts_with("Memcpy") || name.starts_with("Memset") || name.starts_with("dma") {
        KernelClass::Memory
    } else if name.contains("Memcpy") || name.contains("Sync") {
        // HTA's compute test is `not re.match("(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)")`.
        KernelClass::Other
    } else {
        KernelClass::Computation
    }
}

/// The collective an NCCL kernel runs, from its name (`ncclDevKernel_AllGather_RING_LL(…)`,
/// `ncclKernel_ReduceScatter_…`): `AllGather`, `ReduceScatter`, `AllReduce`, … .
pub fn collective_of(name: &str) -> Option<&str> {
    let rest = name
        .strip_prefix("ncclDevKernel_")
        .or_else(|| name.strip_prefix("ncclKernel_"))?;
    let end = rest.find(['_', '(']).unwrap_or(rest.len());
    (end > 0).then(|| &rest[..end])
}

/// Where the GPU's time goes over the trace ([`Temporal`]). With two or more `ProfilerStep#N`
/// iterations in `step`, only activities launched before the last one starts count: HTA leaves
/// out GPU work launched from the last profiled step on (it may be cut), and so do we; it
/// joins kernels to their launches by correlation id, so an activity with no known launch is
/// left out too.
pub fn temporal(t: &Trace, step: &Step) -> (Temporal, BTreeMap<String, CollectiveOverlap>) {
    let gpu = counted_activities(t, step);
    let iv = |keep: &dyn Fn(KernelClass) -> bool| -> Vec<(i64, i64)> {
        merged(
            gpu.iter()
                .filter(|g| keep(classify(t.kineto.str(g.name))))
                .map(|g| (g.start, g.start + g.dur.max(0)))
                .collect(),
        )
    };
    let all = iv(&|_| true);
    let (Some(first), Some(last)) = (all.first(), all.last()) else {
        return (Temporal::default(), BTreeMap::new());
    };
    let span_ns = last.1 - first.0;
    let idle_ns = span_ns - total_len(&all);
    let comp = iv(&|c| c == KernelClass::Computation);
    let comm = iv(&|c| c == KernelClass::Communication);
    let compute_ns = total_len(&comp);
    let communication_ns = total_len(&comm);
    let temporal = Temporal {
        span_ns,
        idle_ns,
        compute_ns,
        non_compute_ns: span_ns - idle_ns - compute_ns,
        communication_ns,
        memory_ns: total_len(&iv(&|c| c == KernelClass::Memory)),
        comm_comp_overlap_pct: super::percent(
            intersection_len(&comm, &comp) as f64,
            communication_ns as f64,
        ),
    };
    (temporal, collective_overlap(t, &gpu, &comp))
}

/// The GPU activities [`temporal`] counts: with two or more `ProfilerStep#N` iterations, those
/// launched before the last one starts.
fn counted_activities<'a>(t: &'a Trace, step: &Step) -> Vec<&'a crate::model::kineto::GpuActivity> {
    let cut = (step.detection == Detection::ProfilerStep && step.iterations.len() >= 2)
        .then(|| step.iterations.iter().map(|i| i.start).max())
        .flatten();
    t.kineto
        .gpu
        .iter()
        .enumerate()
        .filter(|&(i, _)| match cut {
            Some(c) => t.launch[i].is_some_and(|(_, at)| at < c),
            None => true,
        })
        .map(|(_, g)| g)
        .collect()
}

/// Each collective's kernels among `gpu` against the computation `comp` (merged) beside them:
/// over the activities [`temporal`] counts, so that the parts add up to its communication
/// time where the kinds do not overlap each other.
fn collective_overlap(
    t: &Trace,
    gpu: &[&crate::model::kineto::GpuActivity],
    comp: &[(i64, i64)],
) -> BTreeMap<String, CollectiveOverlap> {
    let mut by: BTreeMap<String, Vec<(i64, i64)>> = BTreeMap::new();
    for g in gpu {
        let name = t.kineto.str(g.name);
        if classify(name) != KernelClass::Communication {
            continue;
        }
        let kind = collective_of(name).unwrap_or("other");
        by.entry(kind.to_owned())
            .or_default()
            .push((g.start, g.start + g.dur.max(0)));
    }
    by.into_iter()
        .map(|(k, iv)| {
            let iv = merged(iv);
            let c = CollectiveOverlap {
                communication_ns: total_len(&iv),
                overlapped_ns: intersection_len(&iv, comp),
            };
            (k, c)
        })
        .collect()
}

/// Sums up every GPU activity of the trace.
pub fn compute(t: &Trace) -> Kernels {
    let gpu = &t.kineto.gpu;
    if gpu.is_empty() {
        return Kernels::default();
    }
    let total: i64 = gpu.iter().map(|g| g.dur.max(0)).sum();
    let mut by: std::collections::BTreeMap<(&str, GpuKind), Vec<i64>> = Default::default();
    let mut streams: std::collections::BTreeMap<(i64, i64), Vec<(i64, i64)>> = Default::default();
    for g in gpu {
        let d = g.dur.max(0);
        by.entry((t.kineto.str(g.name), g.kind))
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
                share_pct: super::percent(sum as f64, total as f64).unwrap_or(0.0),
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
            .into_iter()
            .map(|((device, stream), iv)| StreamStat {
                device,
                stream,
                activities: iv.len(),
                busy_ns: union_len(iv),
            })
            .collect(),
        span_ns: end - start,
        busy_ns: union_len(
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

    /// The collective of an NCCL kernel, by its name as NCCL 2.x names its kernels.
    #[test]
    fn collectives_are_named_from_nccl_kernel_names() {
        for (name, want) in [
            (
                "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
                Some("AllGather"),
            ),
            (
                "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
                Some("ReduceScatter"),
            ),
            (
                "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)",
                Some("AllReduce"),
            ),
            (
                "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)",
                Some("SendRecv"),
            ),
            ("volta_sgemm_128x64_nn", None),
        ] {
            assert_eq!(collective_of(name), want, "{name}");
        }
    }

    use super::*;

    #[test]
    fn kernels_are_classed_as_holistic_trace_analysis_does() {
        // HTA's regexes, `^nccl.*Kernel` (communication), `^Memcpy|^Memset|^dma`
        // (memory), and compute unless `^nccl.*Kernel|.*Memcpy|^Memset|.*Sync` matches.
        use KernelClass::*;
        for (name, want) in [
            (
                "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
                Communication,
            ),
            ("ncclKernel", Communication),
            ("nccl_helper(float*)", Computation),
            ("Memcpy HtoD (Pageable -> Device)", Memory),
            ("Memset (Device)", Memory),
            ("dma_copy", Memory),
            (
                "void at::native::vectorized_elementwise_kernel<4>",
                Computation,
            ),
            ("void cub::DeviceMemcpy::BatchMemcpyKernel", Other),
            ("cudaDeviceSynchronize_like_kernel", Other),
            ("void fooMemset(int*)", Computation),
        ] {
            assert_eq!(classify(name), want, "{name}");
        }
    }
}
