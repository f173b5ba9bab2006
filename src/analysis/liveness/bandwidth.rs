//! The host↔device bandwidth that swap times are priced at.

use super::{BandwidthSource, SwapBandwidth};
use crate::analysis::median;
use crate::model::kineto::GpuKind;
use crate::model::Trace;

/// Host↔device bandwidth of the trace's own copies, as a swap would see it: pinned copies of
/// 1 MiB or more. A swap copies to and from pinned memory; pageable copies and small ones run
/// far below the link's rate (on the H100, a GPT step's 64 KiB pageable input copies went at
/// 11 GB/s where the swaps' pinned copies of 1 MiB and more went at 51-54 GB/s, which made the
/// planner predict a swap plan's step at 2.3-3.4 times what it measured).
fn measured_bandwidth(t: &Trace) -> (Option<f64>, Option<f64>) {
    let mut htod = Vec::new();
    let mut dtoh = Vec::new();
    for g in &t.kineto.gpu {
        if g.kind != GpuKind::Memcpy || g.dur <= 0 {
            continue;
        }
        let Some(b) = g.bytes.filter(|&b| b >= 1 << 20) else {
            continue;
        };
        let gbps = b as f64 / g.dur as f64; // bytes per ns = GB/s
        let name = t.kineto.str(g.name);
        if name.contains("Pageable") {
            continue;
        }
        if name.contains("HtoD") {
            htod.push(gbps);
        } else if name.contains("DtoH") {
            dtoh.push(gbps);
        }
    }
    (median(&mut htod), median(&mut dtoh))
}

/// Host↔device bandwidth when the trace has no large copies: PCIe Gen5 x16 for Hopper,
/// Gen4 for Ampere and Ada, Gen3 otherwise, at about 80% of the link rate.
fn default_bandwidth(device: Option<&str>) -> f64 {
    match device {
        Some(d) if d.contains("H100") || d.contains("H200") => 50.0,
        Some(d)
            if d.contains("A100")
                || d.contains("L40")
                || d.contains("L4")
                || d.contains("A10")
                || d.contains("4090") =>
        {
            25.0
        }
        _ => 12.0,
    }
}

/// The host↔device bandwidth swaps are priced at: the user's, else the trace's own large pinned
/// copies (one direction standing for both when only one was seen), else the GPU's default.
pub(super) fn swap_bandwidth(t: &Trace, override_gbps: Option<f64>) -> SwapBandwidth {
    let both = |gbps: f64, source| SwapBandwidth {
        htod_gbps: gbps,
        dtoh_gbps: gbps,
        source,
    };
    if let Some(b) = override_gbps {
        return both(b, BandwidthSource::Override);
    }
    match measured_bandwidth(t) {
        (Some(h), Some(d)) => SwapBandwidth {
            htod_gbps: h,
            dtoh_gbps: d,
            source: BandwidthSource::Measured,
        },
        (Some(x), None) | (None, Some(x)) => both(x, BandwidthSource::Measured),
        (None, None) => both(default_bandwidth(t.device_name()), BandwidthSource::Default),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace(events: &str) -> Trace {
        crate::model::from_events(events)
    }

    fn copy(name: &str, bytes: u64, dur_us: f64) -> String {
        format!(
            r#"{{"ph":"X","cat":"gpu_memcpy","name":"{name}","pid":0,"tid":7,"ts":1,"dur":{dur_us},"args":{{"device":0,"stream":7,"correlation":1,"bytes":{bytes}}}}}"#
        )
    }
    #[test]
    fn swap_bandwidth_is_the_users_else_measured_else_the_gpus() {
        let mib = 1u64 << 20;
        let t = trace(&copy("Memcpy DtoH (Device -> Pinned)", 2 * mib, 40.0));
        let b = swap_bandwidth(&t, Some(7.5));
        assert_eq!(
            (b.htod_gbps, b.dtoh_gbps, b.source),
            (7.5, 7.5, BandwidthSource::Override)
        );
        // One direction measured stands for both.
        let b = swap_bandwidth(&t, None);
        let d = (2 * mib) as f64 / 40e3;
        assert_eq!(
            (b.htod_gbps, b.dtoh_gbps, b.source),
            (d, d, BandwidthSource::Measured)
        );
        // Nothing measured and no device named: the oldest link's rate.
        let b = swap_bandwidth(&trace(""), None);
        assert_eq!((b.htod_gbps, b.source), (12.0, BandwidthSource::Default));
    }

    // A swap copies to and from pinned memory in large pieces; the trace's pageable
    // or small copies are not its bandwidth.
    #[test]
    fn issue20_swap_bandwidth_comes_from_large_pinned_copies_only() {
        let mib = 1u64 << 20;
        let t = trace(
            &[
                // 64 KiB pageable input copies at about 11 GB/s, as a GPT step's.
                copy("Memcpy HtoD (Pageable -> Device)", 64 << 10, 6.0),
                copy("Memcpy HtoD (Pageable -> Device)", 8 * mib, 800.0),
                copy("Memcpy HtoD (Pinned -> Device)", 512 << 10, 100.0),
                copy("Memcpy HtoD (Pinned -> Device)", 4 * mib, 80.0),
                copy("Memcpy DtoH (Device -> Pinned)", 2 * mib, 40.0),
            ]
            .join(","),
        );
        let (htod, dtoh) = measured_bandwidth(&t);
        let gbps = |b: u64, us: f64| b as f64 / (us * 1e3);
        assert_eq!(htod, Some(gbps(4 * mib, 80.0)));
        assert_eq!(dtoh, Some(gbps(2 * mib, 40.0)));
        // With pageable and small copies only, nothing is measured: the default applies.
        let t = trace(&copy("Memcpy HtoD (Pageable -> Device)", 8 * mib, 800.0));
        assert_eq!(measured_bandwidth(&t), (None, None));
    }
}
