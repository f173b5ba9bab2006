//! Kernel launches (HolisticTraceAnalysis's `get_cuda_kernel_launch_stats`): for each GPU
//! activity launched by `cudaLaunchKernel`, `cudaLaunchKernelExC`, `cudaMemcpyAsync` or
//! `cudaMemsetAsync`, the launch call's host time, the activity's GPU time, and the launch
//! delay (from the call's end to the activity's start, 0 where it started first). Kernels that
//! run shorter than their own launch are what makes a step launch-bound: the host cannot queue
//! work as fast as the GPU finishes it.

use crate::model::Trace;

/// The launch calls HTA pairs with their GPU work.
const LAUNCHES: [&str; 4] = [
    "cudaLaunchKernel",
    "cudaLaunchKernelExC",
    "cudaMemcpyAsync",
    "cudaMemsetAsync",
];

/// HTA's `runtime_cutoff` (µs): a launch call longer than this is an outlier; a kernel shorter
/// than a call within it, a short kernel.
pub const RUNTIME_CUTOFF_NS: i64 = 50_000;
/// HTA's `launch_delay_cutoff` (µs): a longer delay is an outlier.
pub const LAUNCH_DELAY_CUTOFF_NS: i64 = 100_000;

/// One launched activity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Launch {
    /// Index of the GPU activity in the trace.
    pub gpu: u32,
    /// The correlation id the call and the activity share.
    pub correlation: i64,
    /// The launch call's duration on the host, ns.
    pub cpu_ns: i64,
    /// The activity's duration on the GPU, ns.
    pub gpu_ns: i64,
    /// From the call's end to the activity's start, ns (0 where the activity started first).
    pub delay_ns: i64,
}

impl Launch {
    /// A kernel the GPU ran in less time than the host took to launch it (HTA's short kernel:
    /// a launch call within the runtime cutoff).
    pub fn short(&self) -> bool {
        self.cpu_ns <= RUNTIME_CUTOFF_NS && self.gpu_ns < self.cpu_ns
    }
}

/// The launches of the trace, in GPU activity order, and their counts.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Launches {
    /// Each launched activity.
    pub each: Vec<Launch>,
    /// Activities shorter than their launch call.
    pub short: usize,
    /// Launch calls longer than [`RUNTIME_CUTOFF_NS`].
    pub runtime_outliers: usize,
    /// Launch delays longer than [`LAUNCH_DELAY_CUTOFF_NS`].
    pub delay_outliers: usize,
    /// Median launch delay, ns (lower median).
    pub median_delay_ns: i64,
}

/// Pairs every launch call with its activity; `calls` is [`crate::model::launch_calls`]'s.
pub fn compute(t: &Trace, calls: &[Option<u32>]) -> Launches {
    let k = &t.kineto;
    let each: Vec<Launch> = k
        .gpu
        .iter()
        .zip(calls)
        .enumerate()
        .filter_map(|(i, (g, call))| {
            let r = &k.runtime[(*call)? as usize];
            if !LAUNCHES.contains(&k.str(r.name)) {
                return None;
            }
            Some(Launch {
                gpu: i as u32,
                correlation: g.correlation?,
                cpu_ns: r.dur,
                gpu_ns: g.dur,
                delay_ns: (g.start - r.start - r.dur).max(0),
            })
        })
        .collect();
    let mut delays: Vec<i64> = each.iter().map(|l| l.delay_ns).collect();
    delays.sort_unstable();
    Launches {
        short: each.iter().filter(|l| l.short()).count(),
        runtime_outliers: each.iter().filter(|l| l.cpu_ns > RUNTIME_CUTOFF_NS).count(),
        delay_outliers: each
            .iter()
            .filter(|l| l.delay_ns > LAUNCH_DELAY_CUTOFF_NS)
            .count(),
        median_delay_ns: delays
            .get(delays.len().saturating_sub(1) / 2)
            .copied()
            .unwrap_or(0),
        each,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A kernel of 2 µs launched by a 5 µs call that starts 3 µs after the call ends (short, a
    /// delay of 3), and a 200 µs one whose call ends after it started (delay clipped to 0).
    #[test]
    fn each_launch_has_its_calls_time_its_kernels_time_and_the_delay_between() {
        let t = crate::model::from_events(
            r#"{"ph":"X","cat":"cpu_op","name":"aten::add","pid":1,"tid":1,"ts":0,"dur":10},
{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":1,"dur":5,"args":{"correlation":1}},
{"ph":"X","cat":"kernel","name":"small","pid":0,"tid":7,"ts":9,"dur":2,"args":{"stream":7,"device":0,"correlation":1}},
{"ph":"X","cat":"cpu_op","name":"aten::mm","pid":1,"tid":1,"ts":20,"dur":10},
{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":21,"dur":8,"args":{"correlation":2}},
{"ph":"X","cat":"kernel","name":"big","pid":0,"tid":7,"ts":27,"dur":200,"args":{"stream":7,"device":0,"correlation":2}}"#,
        );
        let l = compute(&t, &crate::model::launch_calls(&t.kineto));
        let got: Vec<(i64, i64, i64, bool)> = l
            .each
            .iter()
            .map(|x| {
                (
                    x.cpu_ns / 1000,
                    x.gpu_ns / 1000,
                    x.delay_ns / 1000,
                    x.short(),
                )
            })
            .collect();
        assert_eq!(got, [(5, 2, 3, true), (8, 200, 0, false)]);
        assert_eq!((l.short, l.runtime_outliers, l.delay_outliers), (1, 0, 0));
        assert_eq!(l.median_delay_ns, 0);
    }
}
