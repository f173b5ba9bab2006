//! What a plan's actions cost: host and GPU time apart ([`Cost`]), the wrappers' own host work
//! measured by the capture's probe ([`Overheads`]), and the rates that turn a module's ops and
//! bytes into time ([`Rates`]). How they add up to a step is [`super::search::Evaluator::step`].

use serde::Serialize;

use crate::analysis::median;

/// Host and GPU time an action adds to a step, s.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Cost {
    /// On the host: launches, Python, the checkpoint's own work.
    pub host_s: f64,
    /// On the GPU: kernels and copies on the compute stream.
    pub gpu_s: f64,
}

impl std::ops::Add for Cost {
    type Output = Cost;
    fn add(self, o: Cost) -> Cost {
        Cost {
            host_s: self.host_s + o.host_s,
            gpu_s: self.gpu_s + o.gpu_s,
        }
    }
}

impl Cost {
    /// Each part's median over the iterations.
    pub(super) fn median(v: &[Cost]) -> Cost {
        let mut h: Vec<f64> = v.iter().map(|c| c.host_s).collect();
        let mut g: Vec<f64> = v.iter().map(|c| c.gpu_s).collect();
        Cost {
            host_s: median(&mut h).unwrap_or(0.0),
            gpu_s: median(&mut g).unwrap_or(0.0),
        }
    }
}

/// The host work a checkpoint or a swap adds beyond its module's own ops, s: the capture
/// shim's probe on the capture's machine ([`crate::ingest::PlanProbe`]), or none where the run
/// has no probe (the prediction then leaves it out, and says so).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Overheads {
    /// A checkpoint's own host time per call.
    pub recompute_call_s: f64,
    /// Per op of the module, beyond the op's replay.
    pub recompute_per_op_s: f64,
    /// The swap hooks' host time per call.
    pub swap_call_s: f64,
    /// Per op of the module.
    pub swap_per_op_s: f64,
    /// `capture_probe` or `none`.
    pub source: &'static str,
}

impl Overheads {
    pub(super) fn of(probe: Option<&crate::ingest::PlanProbe>) -> Overheads {
        match probe {
            Some(p) => Overheads {
                recompute_call_s: p.recompute_call_s,
                recompute_per_op_s: p.recompute_per_op_s,
                swap_call_s: p.swap_call_s,
                swap_per_op_s: p.swap_per_op_s,
                source: "capture_probe",
            },
            None => Overheads {
                source: "none",
                ..Overheads::default()
            },
        }
    }
}

/// What turns a module's measured ops and bytes into time ([`candidates::build_candidates`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct Rates {
    /// The program's own step time over the instrumented one: profiled CPU time to real.
    pub cpu_scale: f64,
    /// Host→device bandwidth for swaps, GB/s.
    pub htod_gbps: f64,
    /// Device→host bandwidth for swaps, GB/s.
    pub dtoh_gbps: f64,
    /// The wrappers' own host work.
    pub overheads: Overheads,
}
