//! Queue length per CUDA stream: the operations the host has enqueued and the GPU has not
//! started, as HolisticTraceAnalysis counts them (`get_queue_length_time_series`): one more at
//! each launch call that enqueues work (`cudaLaunchKernel`, `cudaLaunchKernelExC`,
//! `cuLaunchKernel`, `cudaMemcpyAsync`, `cudaMemsetAsync`), one fewer as that work starts on
//! the GPU. A queue that stays near 0 is a GPU waiting on its host (launch-bound); a long one,
//! a host running ahead of a busy GPU.

use std::collections::BTreeMap;

use crate::model::Trace;

/// The launch calls whose work HTA counts in a queue.
const LAUNCHES: [&str; 5] = [
    "cudaLaunchKernel",
    "cudaLaunchKernelExC",
    "cuLaunchKernel",
    "cudaMemcpyAsync",
    "cudaMemsetAsync",
];

/// One stream's queue over the trace.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamQueue {
    /// CUDA device.
    pub device: i64,
    /// CUDA stream.
    pub stream: i64,
    /// Changes of the queue's length (two per operation: its launch and its start).
    pub points: u64,
    /// Mean of the length over its change points (HTA's `mean`).
    pub mean: f64,
    /// Median of the length over its change points (HTA's `50%`, pandas' interpolation).
    pub median: f64,
    /// Longest queue.
    pub max: i64,
    /// Mean length over time, from the first launch to the last start: the operations waiting
    /// on average.
    pub time_mean: f64,
}

/// Every stream's queue, in (device, stream) order; `calls` is
/// [`crate::model::launch_calls`]'s.
pub fn compute(t: &Trace, calls: &[Option<u32>]) -> Vec<StreamQueue> {
    let k = &t.kineto;
    // (time, +1 launch / -1 start) per stream; a launch sorts before a start at one instant.
    let mut changes: BTreeMap<(i64, i64), Vec<(i64, i64)>> = BTreeMap::new();
    for (g, call) in k.gpu.iter().zip(calls) {
        let Some(r) = call.map(|i| &k.runtime[i as usize]) else {
            continue;
        };
        if !LAUNCHES.contains(&k.str(r.name)) {
            continue;
        }
        let l = r.start;
        let v = changes.entry((g.device, g.stream)).or_default();
        v.push((l, 1));
        v.push((g.start, -1));
    }
    changes
        .into_iter()
        .map(|((device, stream), mut v)| {
            v.sort_unstable_by_key(|&(ts, d)| (ts, -d));
            summarize(device, stream, &v)
        })
        .collect()
}

fn summarize(device: i64, stream: i64, v: &[(i64, i64)]) -> StreamQueue {
    let mut len = 0i64;
    let mut lengths = Vec::with_capacity(v.len());
    let mut area = 0i128;
    for (i, &(ts, d)) in v.iter().enumerate() {
        len += d;
        lengths.push(len);
        if let Some(&(next, _)) = v.get(i + 1) {
            area += i128::from(len) * i128::from(next - ts);
        }
    }
    let span = v.last().map_or(0, |l| l.0) - v.first().map_or(0, |f| f.0);
    let n = lengths.len().max(1) as f64;
    let mean = lengths.iter().sum::<i64>() as f64 / n;
    let max = lengths.iter().copied().max().unwrap_or(0);
    lengths.sort_unstable();
    StreamQueue {
        device,
        stream,
        points: lengths.len() as u64,
        mean,
        median: quantile(&lengths, 0.5),
        max,
        time_mean: if span > 0 {
            area as f64 / span as f64
        } else {
            0.0
        },
    }
}

/// The `q` quantile of sorted values, interpolated linearly between neighbours (pandas'
/// `describe`).
fn quantile(sorted: &[i64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let pos = q * (sorted.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    let f = pos - lo as f64;
    sorted[lo] as f64 * (1.0 - f) + sorted[hi] as f64 * f
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Three kernels launched at 1, 11 and 21 µs, each starting 25 µs after its launch (26,
    /// 36, 46): the queue is 1, 2, 3, then 2, 1, 0.
    #[test]
    fn the_queue_counts_launched_work_not_yet_started() {
        let mut ev = String::new();
        for i in 0..3 {
            let l = 10 * i;
            ev += &format!(
                r#"{{"ph":"X","cat":"cpu_op","name":"aten::mm","pid":1,"tid":1,"ts":{l},"dur":2}},
{{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":{l1},"dur":1,"args":{{"correlation":{c}}}}},
{{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":{s},"dur":5,"args":{{"stream":7,"device":0,"correlation":{c}}}}},"#,
                l1 = l + 1,
                c = i + 1,
                s = l + 26
            );
        }
        ev.pop();
        let t = crate::model::from_events(&ev);
        let q = compute(&t, &crate::model::launch_calls(&t.kineto));
        assert_eq!(q.len(), 1);
        let s = &q[0];
        assert_eq!((s.device, s.stream, s.points, s.max), (0, 7, 6, 3));
        assert!((s.mean - 1.5).abs() < 1e-12, "{}", s.mean);
        assert!((s.median - 1.5).abs() < 1e-12);
        // 1 for 10 µs, 2 for 10, 3 for 5, 2 for 10, 1 for 10: 75 µs over the 45 µs span.
        assert!((s.time_mean - 75.0 / 45.0).abs() < 1e-9, "{}", s.time_mean);
    }
}
