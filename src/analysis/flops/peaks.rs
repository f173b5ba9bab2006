//! The roofline's device peaks: NVIDIA datasheet figures by GPU name, and the dtype each
//! kernel family runs in.

use super::Dtype;
pub use steptrace_formats::summary::Peaks;

/// NVIDIA datasheet peaks (dense, no sparsity): TFLOP/s fp64, fp32, tf32, bf16, fp16, fp8 and
/// memory GB/s. Sources in docs/flops.md.
const PEAK_TABLE: &[(&str, [f64; 6], f64)] = &[
    ("H200", [34.0, 67.0, 494.7, 989.4, 989.4, 1978.9], 4800.0),
    (
        "H100 PCIe",
        [26.0, 51.0, 378.0, 756.0, 756.0, 1513.0],
        2000.0,
    ),
    (
        "H100 NVL",
        [30.0, 60.0, 417.0, 835.0, 835.0, 1671.0],
        3900.0,
    ),
    ("H100", [34.0, 67.0, 494.7, 989.4, 989.4, 1978.9], 3350.0),
    (
        "A100-SXM4-80GB",
        [9.7, 19.5, 156.0, 312.0, 312.0, 0.0],
        2039.0,
    ),
    (
        "A100-PCIE-80GB",
        [9.7, 19.5, 156.0, 312.0, 312.0, 0.0],
        1935.0,
    ),
    (
        "A100 80GB PCIe",
        [9.7, 19.5, 156.0, 312.0, 312.0, 0.0],
        1935.0,
    ),
    ("A100", [9.7, 19.5, 156.0, 312.0, 312.0, 0.0], 1555.0),
    ("L40S", [1.4, 91.6, 183.0, 362.0, 362.0, 733.0], 864.0),
    ("L4", [0.5, 30.3, 60.0, 121.0, 121.0, 242.0], 300.0),
    ("A10", [0.98, 31.2, 62.5, 125.0, 125.0, 0.0], 600.0),
    ("RTX 4090", [1.3, 82.6, 82.6, 165.2, 165.2, 330.3], 1008.0),
    ("V100", [7.8, 15.7, 15.7, 15.7, 125.0, 0.0], 900.0),
    ("T4", [0.25, 8.1, 8.1, 8.1, 65.0, 0.0], 320.0),
];

/// Peaks for a GPU name from the trace's `deviceProperties`, if the table knows it.
pub fn peaks_for(name: &str) -> Option<Peaks> {
    let (row, v, bw) = PEAK_TABLE.iter().find(|(k, _, _)| name.contains(k))?;
    let dts = [
        Dtype::Fp64,
        Dtype::Fp32,
        Dtype::Tf32,
        Dtype::Bf16,
        Dtype::Fp16,
        Dtype::Fp8,
    ];
    Some(Peaks {
        device: (*row).to_owned(),
        tflops: dts
            .iter()
            .zip(v)
            .filter(|(_, x)| **x > 0.0)
            .map(|(d, x)| (*d, *x))
            .collect(),
        bandwidth_gbps: *bw,
    })
}

/// The dtype a kernel runs in: cuDNN runs fp32 convolutions on TF32 tensor cores unless
/// `torch.backends.cudnn.allow_tf32` is turned off (it is on by default); fp32 matmuls stay fp32
/// (`torch.backends.cuda.matmul.allow_tf32` is off by default).
pub(super) fn dtype_for(ty: &str, conv: bool) -> Dtype {
    let d = super::dtype_of_type(ty);
    if d == Dtype::Fp32 && conv {
        Dtype::Tf32
    } else {
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peak_table_matches_names() {
        let h = peaks_for("NVIDIA H200").unwrap();
        assert_eq!(h.bandwidth_gbps, 4800.0);
        assert_eq!(h.flops(Dtype::Bf16), Some(989.4e12));
        assert_eq!(
            peaks_for("NVIDIA H100 80GB HBM3").unwrap().bandwidth_gbps,
            3350.0
        );
        assert_eq!(
            peaks_for("NVIDIA H100 PCIe").unwrap().bandwidth_gbps,
            2000.0
        );
        assert!(peaks_for("Imaginary GPU").is_none());
        // A dtype the GPU has no peak for (the A100's fp8) is absent, not a peak of 0: a
        // roofline against 0 TFLOP/s would put every fp8 kernel at an infinite % of peak.
        // (cargo-mutants found this untested.)
        let a = peaks_for("NVIDIA A100-SXM4-40GB").unwrap();
        assert_eq!(a.flops(Dtype::Fp8), None);
        assert_eq!(a.flops(Dtype::Bf16), Some(312.0e12));
    }

    /// cuDNN runs fp32 convolutions on TF32 tensor cores by default; fp32 matmuls and every
    /// other dtype keep theirs (cargo-mutants found this untested).
    #[test]
    fn fp32_convolutions_run_in_tf32_and_nothing_else_changes_dtype() {
        assert_eq!(dtype_for("float", true), Dtype::Tf32);
        assert_eq!(dtype_for("float", false), Dtype::Fp32);
        assert_eq!(dtype_for("c10::BFloat16", true), Dtype::Bf16);
        assert_eq!(dtype_for("c10::Half", false), Dtype::Fp16);
    }
}
