//! flops.csv's rows: each aligned node's FLOPs, bytes and time (medians over the iterations)
//! placed on the roofline against the device's peaks.

use rustc_hash::FxHashMap;
use serde::Serialize;

use super::{Dtype, NodeFlops, Peaks};
use crate::analysis::step::Step;
use crate::model::Trace;

/// One row of `flops.csv`: an aligned node with medians over iterations and its roofline.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FlopRow {
    /// Rank in the aligned step.
    pub rank: u32,
    /// Node name.
    pub node_name: String,
    /// Op name of the node.
    pub op: String,
    /// Phase.
    pub gtype: crate::model::Phase,
    /// Module path.
    pub module: String,
    /// All FLOPs.
    pub flops: u64,
    /// FlopCounterMode FLOPs.
    pub matmul_flops: u64,
    /// Bytes read and written.
    pub bytes: u64,
    /// FLOPs per byte.
    pub arithmetic_intensity: f64,
    /// Element type.
    pub dtype: Dtype,
    /// Median GPU time, s.
    pub gpu_time_s: f64,
    /// Achieved TFLOP/s over the GPU time.
    pub achieved_tflops: f64,
    /// Achieved GB/s over the GPU time.
    pub achieved_gbps: f64,
    /// Percent of the dtype's peak FLOP/s.
    pub pct_peak_flops: Option<f64>,
    /// Percent of peak bandwidth.
    pub pct_peak_bandwidth: Option<f64>,
    /// What bounds it by the device's machine balance for the dtype; `None` (written empty)
    /// without peaks or FLOPs.
    #[serde(serialize_with = "bound_name")]
    pub bound: Option<Bound>,
}

fn bound_name<S: serde::Serializer>(b: &Option<Bound>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(b.map_or("", Bound::as_str))
}

/// What bounds a node on the roofline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    /// Its arithmetic intensity is at or above the machine balance.
    Compute,
    /// Below it.
    Memory,
}

impl Bound {
    /// As the files write it.
    pub fn as_str(self) -> &'static str {
        match self {
            Bound::Compute => "compute",
            Bound::Memory => "memory",
        }
    }
}

/// Aggregates node instances by aligned node (medians; FLOPs do not change between
/// iterations) and places each on the roofline.
pub fn rows(
    t: &Trace,
    step: &Step,
    nf: &[NodeFlops],
    stats: &[crate::analysis::NodeStat],
    peaks: Option<&Peaks>,
) -> Vec<FlopRow> {
    let mut by_name: FxHashMap<&str, Vec<usize>> = FxHashMap::default();
    for (i, n) in step.nodes.iter().enumerate() {
        by_name.entry(n.name.as_str()).or_default().push(i);
    }
    stats
        .iter()
        .map(|s| {
            let idx = &by_name[s.node_name.as_str()];
            let med = |f: &dyn Fn(&NodeFlops) -> u64| {
                let mut v: Vec<i64> = idx
                    .iter()
                    .map(|&i| i64::try_from(f(&nf[i])).unwrap_or(i64::MAX))
                    .collect();
                crate::analysis::median_low(&mut v).unwrap_or(0) as u64
            };
            let (flops, matmul, bytes) = (med(&|x| x.all), med(&|x| x.matmul), med(&|x| x.bytes));
            let dtype = nf[idx[0]].dtype.unwrap_or(Dtype::Other);
            let time = s.median_run_time_s;
            let ai = if bytes > 0 {
                flops as f64 / bytes as f64
            } else {
                0.0
            };
            let (tf, gb) = if time > 0.0 {
                (flops as f64 / time / 1e12, bytes as f64 / time / 1e9)
            } else {
                (0.0, 0.0)
            };
            let peak_f = peaks.and_then(|p| p.flops(dtype));
            let peak_bw = peaks.map(|p| p.bandwidth_gbps);
            let bound = match (peak_f, peak_bw) {
                (Some(pf), Some(bw)) if flops > 0 && bytes > 0 => {
                    // Machine balance: FLOPs the device can do per byte it can move.
                    Some(if ai >= pf / (bw * 1e9) {
                        Bound::Compute
                    } else {
                        Bound::Memory
                    })
                }
                _ => None,
            };
            FlopRow {
                rank: s.rank,
                node_name: s.node_name.clone(),
                op: t.kineto.str(s.op).to_owned(),
                gtype: s.gtype,
                module: s
                    .module
                    .map_or(String::new(), |m| t.kineto.str(m).to_owned()),
                flops,
                matmul_flops: matmul,
                bytes,
                arithmetic_intensity: ai,
                dtype,
                gpu_time_s: time,
                achieved_tflops: tf,
                achieved_gbps: gb,
                pct_peak_flops: peak_f.filter(|_| time > 0.0).map(|p| 100.0 * tf * 1e12 / p),
                pct_peak_bandwidth: peak_bw.filter(|_| time > 0.0).map(|b| 100.0 * gb / b),
                bound,
            }
        })
        .collect()
}
