//! FLOPs, bytes and arithmetic intensity per node, from the recorded shapes (the trace has no
//! `flops` arg in PyTorch 2.11), and the roofline against the device's peaks.
//!
//! Two conventions, both reported (docs/flops.md has every formula):
//! - **matmul**: `torch.utils.flop_counter.FlopCounterMode`'s: 2·M·N·K for mm/addmm/bmm/
//!   baddbmm/_scaled_mm, its convolution and convolution-backward formulas, and scaled dot
//!   product attention forward and backward (flash, efficient, cuDNN); nothing else.
//! - **all**: those plus elementwise ops, reductions, norms, softmax, losses and the optimizers'
//!   foreach/fused kernels, by per-element constants.
//!
//! FLOPs are counted once per node, at the outermost op of its subtree that has a formula
//! (`aten::linear` has none and defers to its `aten::addmm`; `aten::convolution` has one, so its
//! `aten::cudnn_convolution` is not counted again).

use rayon::prelude::*;
use rustc_hash::FxHashMap;
use serde::Serialize;

use super::step::Step;
use crate::ingest::exec_trace::ExecNode;
use crate::model::{OpId, Trace};

/// Element type of a node's main input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    /// float64.
    Fp64,
    /// float32 on CUDA cores.
    Fp32,
    /// float32 through TF32 tensor cores (cuDNN convolutions by default).
    Tf32,
    /// bfloat16.
    Bf16,
    /// float16.
    Fp16,
    /// 8-bit floats.
    Fp8,
    /// Integers, bools, unknown.
    Other,
}

impl Dtype {
    /// Lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Dtype::Fp64 => "fp64",
            Dtype::Fp32 => "fp32",
            Dtype::Tf32 => "tf32",
            Dtype::Bf16 => "bf16",
            Dtype::Fp16 => "fp16",
            Dtype::Fp8 => "fp8",
            Dtype::Other => "other",
        }
    }

    fn from_type(t: &str) -> Dtype {
        match t {
            "float" => Dtype::Fp32,
            "double" => Dtype::Fp64,
            "c10::BFloat16" => Dtype::Bf16,
            "c10::Half" => Dtype::Fp16,
            t if t.contains("Float8") => Dtype::Fp8,
            _ => Dtype::Other,
        }
    }

    /// Bytes per element of a Kineto `Input type`, when it is a tensor type.
    pub fn size_of(t: &str) -> Option<u64> {
        Some(match t {
            "double" | "long int" | "long" | "int64_t" | "c10::complex<float>" => 8,
            "float" | "int" | "unsigned int" => 4,
            "c10::BFloat16" | "c10::Half" | "short int" | "short" => 2,
            "bool" | "unsigned char" | "signed char" | "char" => 1,
            t if t.contains("Float8") => 1,
            _ => return None,
        })
    }
}

/// One input as recorded: its shape(s) and scalar value text.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Arg {
    /// Shape, for a tensor.
    pub dims: Vec<i64>,
    /// `Input type`.
    pub ty: String,
    /// `Concrete Inputs` text (scalars and scalar lists).
    pub concrete: String,
}

impl Arg {
    fn numel(&self) -> u64 {
        self.dims.iter().map(|&d| d.max(0) as u64).product()
    }
    fn is_tensor(&self) -> bool {
        Dtype::size_of(&self.ty).is_some()
    }
    fn ints(&self) -> Vec<i64> {
        self.concrete
            .trim_matches(|c| c == '[' || c == ']')
            .split(',')
            .filter_map(|x| x.trim().parse().ok())
            .collect()
    }
    fn bools(&self) -> Vec<bool> {
        self.concrete
            .trim_matches(|c| c == '[' || c == ']')
            .split(',')
            .map(|x| x.trim() == "True")
            .collect()
    }
}

/// Parses an op's recorded inputs.
pub fn parse_args(dims: Option<&str>, types: Option<&str>, concrete: Option<&str>) -> Vec<Arg> {
    plain_args(dims, types, concrete).unwrap_or_else(|| parse_args_json(dims, types, concrete))
}

/// The elements of a JSON array's text, as texts, when it is a plain array: no string with an
/// escape in it. `None` for anything else (the JSON parser then decides).
fn plain_elements(text: &str) -> Option<Vec<&str>> {
    let t = json_trim(text).strip_prefix('[')?.strip_suffix(']')?;
    let b = t.as_bytes();
    let mut out = Vec::new();
    if json_trim(t).is_empty() {
        return Some(out);
    }
    let (mut depth, mut start, mut in_str) = (0usize, 0usize, false);
    for (i, &c) in b.iter().enumerate() {
        match c {
            b'\\' | 0..0x20 if in_str => return None,
            b'"' => in_str = !in_str,
            _ if in_str => {}
            b'[' | b'{' => depth += 1,
            b']' | b'}' => depth = depth.checked_sub(1)?,
            b',' if depth == 0 => {
                out.push(json_trim(&t[start..i]));
                start = i + 1;
            }
            _ => {}
        }
    }
    if in_str || depth != 0 {
        return None;
    }
    out.push(json_trim(&t[start..]));
    Some(out)
}

fn json_trim(s: &str) -> &str {
    s.trim_matches([' ', '\t', '\n', '\r'])
}

/// A plain JSON string's content.
fn plain_string(text: &str) -> Option<&str> {
    let s = text.strip_prefix('"')?.strip_suffix('"')?;
    (!s.contains('"')).then_some(s)
}

/// Checks a (nested) list of plain integers.
fn plain_int_lists(text: &str) -> Option<()> {
    for x in plain_elements(text)? {
        if x.starts_with('[') {
            plain_int_lists(x)?;
        } else {
            plain_int(x)?;
        }
    }
    Some(())
}

/// An integer as JSON writes it (no `+`, no leading zeros).
fn plain_int(text: &str) -> Option<i64> {
    let digits = text.strip_prefix('-').unwrap_or(text);
    let ok = match digits.as_bytes() {
        [b'0'] => true,
        [b'1'..=b'9', rest @ ..] => rest.iter().all(u8::is_ascii_digit),
        _ => false,
    };
    ok.then(|| text.parse().ok()).flatten()
}

/// [`parse_args`] for the plain texts Kineto writes (lists of integer lists, of strings),
/// without building JSON values: this was most of the FLOP analysis's time. `None` when the
/// texts are anything else; [`parse_args_json`] reads those, and a test checks the two agree.
fn plain_args(dims: Option<&str>, types: Option<&str>, concrete: Option<&str>) -> Option<Vec<Arg>> {
    fn list(t: Option<&str>) -> Option<Vec<&str>> {
        t.map_or(Some(Vec::new()), plain_elements)
    }
    let (dims, types, conc) = (list(dims)?, list(types)?, list(concrete)?);
    if !conc.iter().chain(&types).all(|c| plain_string(c).is_some()) {
        return None;
    }
    let n = dims.len().max(types.len());
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let d = match dims.get(i) {
            Some(d) if d.starts_with('[') => {
                // A tensor list's entry is a list of shapes: JSON reading keeps only the
                // integers at the top, so nested lists are checked and passed over.
                let mut v = Vec::new();
                for x in plain_elements(d)? {
                    if x.starts_with('[') {
                        plain_int_lists(x)?;
                    } else {
                        v.push(plain_int(x)?);
                    }
                }
                v
            }
            Some(_) => return None,
            None => Vec::new(),
        };
        let ty = match types.get(i) {
            Some(t) => plain_string(t)?.to_string(),
            None => String::new(),
        };
        let concrete = match conc.get(i) {
            Some(c) => plain_string(c)?.to_string(),
            None => String::new(),
        };
        out.push(Arg {
            dims: d,
            ty,
            concrete,
        });
    }
    Some(out)
}

/// [`parse_args`] through JSON values: any text serde_json reads.
fn parse_args_json(dims: Option<&str>, types: Option<&str>, concrete: Option<&str>) -> Vec<Arg> {
    let dims: Vec<serde_json::Value> = dims
        .and_then(|d| serde_json::from_str(d).ok())
        .unwrap_or_default();
    let types: Vec<String> = types
        .and_then(|d| serde_json::from_str(d).ok())
        .unwrap_or_default();
    let conc: Vec<serde_json::Value> = concrete
        .and_then(|d| serde_json::from_str(d).ok())
        .unwrap_or_default();
    let n = dims.len().max(types.len());
    (0..n)
        .map(|i| Arg {
            dims: dims
                .get(i)
                .and_then(|v| v.as_array())
                .map(|a| a.iter().filter_map(|x| x.as_i64()).collect())
                .unwrap_or_default(),
            ty: types.get(i).cloned().unwrap_or_default(),
            concrete: match conc.get(i) {
                Some(serde_json::Value::String(s)) => s.clone(),
                Some(v) => v.to_string(),
                None => String::new(),
            },
        })
        .collect()
}

/// FLOPs and bytes of one op.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpFlops {
    /// FlopCounterMode's convention.
    pub matmul: u64,
    /// All FLOPs.
    pub all: u64,
}

fn prod(v: &[i64]) -> u64 {
    v.iter().map(|&d| d.max(0) as u64).product()
}

/// `conv_flop_count` of torch.utils.flop_counter.
pub fn conv_flop_count(x: &[i64], w: &[i64], out: &[i64], transposed: bool) -> u64 {
    if x.len() < 3 || w.len() < 3 || out.len() < 3 {
        return 0;
    }
    let conv_shape = if transposed { &x[2..] } else { &out[2..] };
    2 * prod(conv_shape)
        * prod(&w[2..])
        * x[0].max(0) as u64
        * w[0].max(0) as u64
        * w[1].max(0) as u64
}

/// Convolution hyper-parameters, as recorded in `Concrete Inputs`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConvParams {
    /// Per spatial dim (one value broadcasts).
    pub stride: Vec<i64>,
    /// Per spatial dim.
    pub padding: Vec<i64>,
    /// Per spatial dim.
    pub dilation: Vec<i64>,
    /// Transposed convolution.
    pub transposed: bool,
    /// Per spatial dim, transposed only.
    pub output_padding: Vec<i64>,
    /// Groups.
    pub groups: i64,
}

/// Output shape of a convolution.
pub fn conv_out_shape(x: &[i64], w: &[i64], p: &ConvParams) -> Vec<i64> {
    let nsp = x.len().saturating_sub(2);
    let at = |v: &[i64], i: usize, d: i64| {
        if v.is_empty() {
            d
        } else {
            v[i.min(v.len() - 1)]
        }
    };
    let c_out = if p.transposed {
        w.get(1).copied().unwrap_or(0) * p.groups.max(1)
    } else {
        w.first().copied().unwrap_or(0)
    };
    let mut out = vec![x.first().copied().unwrap_or(0), c_out];
    for i in 0..nsp {
        let (inp, k) = (x[2 + i], w.get(2 + i).copied().unwrap_or(1));
        let (s, pad, d) = (
            at(&p.stride, i, 1),
            at(&p.padding, i, 0),
            at(&p.dilation, i, 1),
        );
        let o = if p.transposed {
            (inp - 1) * s - 2 * pad + d * (k - 1) + at(&p.output_padding, i, 0) + 1
        } else {
            (inp + 2 * pad - d * (k - 1) - 1).div_euclid(s.max(1)) + 1
        };
        out.push(o.max(0));
    }
    out
}

fn swap01(v: &[i64]) -> Vec<i64> {
    let mut v = v.to_vec();
    if v.len() >= 2 {
        v.swap(0, 1);
    }
    v
}

/// Which ops carry a formula. `None`: not a FLOP op (composites defer to their children).
fn family(name: &str) -> Option<&'static str> {
    let base = name.strip_prefix("aten::")?;
    Some(match base {
        "mm" | "addmm" | "bmm" | "baddbmm" | "_scaled_mm" | "addbmm" => "matmul",
        "convolution"
        | "_convolution"
        | "convolution_overrideable"
        | "cudnn_convolution"
        | "cudnn_convolution_transpose" => "conv",
        "convolution_backward" | "convolution_backward_overrideable" => "conv_backward",
        "_scaled_dot_product_flash_attention"
        | "_scaled_dot_product_efficient_attention"
        | "_scaled_dot_product_cudnn_attention" => "sdpa",
        "_scaled_dot_product_flash_attention_backward"
        | "_scaled_dot_product_efficient_attention_backward"
        | "_scaled_dot_product_cudnn_attention_backward" => "sdpa_backward",
        b if b.starts_with("_foreach_") || b.starts_with("_fused_") => "optimizer",
        "native_layer_norm"
        | "layer_norm"
        | "native_batch_norm"
        | "cudnn_batch_norm"
        | "_batch_norm_impl_index"
        | "batch_norm"
        | "native_group_norm"
        | "group_norm"
        | "rms_norm"
        | "_fused_rms_norm" => "norm",
        "native_layer_norm_backward"
        | "cudnn_batch_norm_backward"
        | "native_batch_norm_backward"
        | "native_group_norm_backward" => "norm_backward",
        "_softmax" | "_log_softmax" | "softmax" | "log_softmax" => "softmax",
        "_softmax_backward_data" | "_log_softmax_backward_data" => "softmax_backward",
        "sum" | "mean" | "amax" | "max" | "min" | "norm" | "linalg_vector_norm" | "var" | "std"
        | "prod" | "nll_loss_forward" | "nll_loss" | "nll_loss_backward" | "mse_loss" => {
            "reduction"
        }
        "embedding"
        | "embedding_dense_backward"
        | "index_select"
        | "gather"
        | "copy_"
        | "to"
        | "_to_copy"
        | "clone"
        | "contiguous"
        | "cat"
        | "stack"
        | "fill_"
        | "zero_"
        | "zeros"
        | "ones"
        | "empty"
        | "empty_like"
        | "empty_strided"
        | "view"
        | "reshape"
        | "t"
        | "transpose"
        | "permute"
        | "as_strided"
        | "expand"
        | "slice"
        | "select"
        | "split"
        | "chunk"
        | "unsqueeze"
        | "squeeze"
        | "detach"
        | "item"
        | "_local_scalar_dense"
        | "max_pool2d_with_indices"
        | "max_pool2d_with_indices_backward" => "memory",
        "add"
        | "add_"
        | "sub"
        | "sub_"
        | "mul"
        | "mul_"
        | "div"
        | "div_"
        | "relu"
        | "relu_"
        | "threshold_backward"
        | "gelu"
        | "gelu_backward"
        | "silu"
        | "silu_backward"
        | "sigmoid"
        | "tanh"
        | "exp"
        | "log"
        | "sqrt"
        | "rsqrt"
        | "pow"
        | "neg"
        | "where"
        | "clamp"
        | "clamp_min"
        | "addcmul"
        | "addcdiv"
        | "lerp"
        | "abs"
        | "native_dropout"
        | "native_dropout_backward"
        | "hardtanh"
        | "hardtanh_backward"
        | "leaky_relu" => "elementwise",
        _ => return None,
    })
}

/// An op with no children and no entry in the table: one FLOP per output element if it is a
/// computing op (`aten::` and not a view, copy or factory). Composites (`aten::linear`,
/// `aten::conv2d`, `aten::cross_entropy_loss`) have children and are looked through instead.
fn leaf_default(name: &str) -> Option<&'static str> {
    name.starts_with("aten::").then_some("elementwise")
}

/// FLOPs of an op with a formula. `et` gives tensor-list sizes the Kineto trace leaves out.
pub fn op_flops(name: &str, args: &[Arg], et: Option<&ExecNode>) -> Option<OpFlops> {
    op_flops_as(family(name)?, name, args, et)
}

fn op_flops_as(
    fam: &'static str,
    name: &str,
    args: &[Arg],
    et: Option<&ExecNode>,
) -> Option<OpFlops> {
    let base = name.trim_start_matches("aten::");
    let d = |i: usize| args.get(i).map(|a| a.dims.as_slice()).unwrap_or(&[]);
    let mm = |a: &[i64], b: &[i64]| -> u64 {
        match (a.len(), b.len()) {
            (2, 2) => 2 * prod(a) * b[1].max(0) as u64,
            (3, 3) => 2 * prod(a) * b[2].max(0) as u64,
            _ => 0,
        }
    };
    let out_numel = || -> u64 {
        if let Some(e) = et {
            let n: i64 = e.outputs.iter().map(|t| t.numel).sum();
            if n > 0 {
                return n as u64;
            }
        }
        args.iter()
            .filter(|a| a.is_tensor())
            .map(Arg::numel)
            .max()
            .unwrap_or(0)
    };
    let in_numel = || -> u64 {
        if let Some(e) = et {
            if let Some(t) = e.inputs.first() {
                return t.numel.max(0) as u64;
            }
        }
        args.iter()
            .find(|a| a.is_tensor())
            .map(Arg::numel)
            .unwrap_or(0)
    };
    let f = match fam {
        "matmul" => {
            let v = match base {
                "mm" | "_scaled_mm" => mm(d(0), d(1)),
                "bmm" => mm(d(0), d(1)),
                "addmm" | "baddbmm" | "addbmm" => mm(d(1), d(2)),
                _ => 0,
            };
            OpFlops { matmul: v, all: v }
        }
        "conv" => {
            let c = |i: usize| args.get(i).map(Arg::ints).unwrap_or_default();
            let (x, w) = (d(0), d(1));
            let p = if base == "cudnn_convolution" {
                ConvParams {
                    stride: c(3),
                    padding: c(2),
                    dilation: c(4),
                    transposed: false,
                    output_padding: vec![],
                    groups: c(5).first().copied().unwrap_or(1),
                }
            } else {
                ConvParams {
                    stride: c(3),
                    padding: c(4),
                    dilation: c(5),
                    transposed: args.get(6).is_some_and(|a| a.concrete == "True"),
                    output_padding: c(7),
                    groups: c(8).first().copied().unwrap_or(1),
                }
            };
            let out = conv_out_shape(x, w, &p);
            let v = conv_flop_count(x, w, &out, p.transposed);
            OpFlops { matmul: v, all: v }
        }
        "conv_backward" => {
            let (go, x, w) = (d(0), d(1), d(2));
            let transposed = args.get(7).is_some_and(|a| a.concrete == "True");
            let mask = args
                .get(10)
                .map(Arg::bools)
                .unwrap_or_else(|| vec![true, true, false]);
            let mut v = 0;
            if mask.first().copied().unwrap_or(true) {
                v += conv_flop_count(go, w, x, !transposed);
            }
            if mask.get(1).copied().unwrap_or(true) {
                v += if transposed {
                    conv_flop_count(&swap01(go), &swap01(x), &swap01(w), false)
                } else {
                    conv_flop_count(&swap01(x), &swap01(go), &swap01(w), false)
                };
            }
            OpFlops { matmul: v, all: v }
        }
        "sdpa" | "sdpa_backward" => {
            let off = usize::from(fam == "sdpa_backward");
            let (q, k, v) = (d(off), d(off + 1), d(off + 2));
            if q.len() != 4 || k.len() != 4 || v.len() != 4 {
                return Some(OpFlops::default());
            }
            let (b, h, sq, dq) = (q[0] as u64, q[1] as u64, q[2] as u64, q[3] as u64);
            let (sk, dv) = (k[2] as u64, v[3] as u64);
            let x = if fam == "sdpa" {
                2 * b * h * sq * sk * (dq + dv)
            } else {
                2 * b * h * sq * sk * (3 * dq + 2 * dv)
            };
            OpFlops { matmul: x, all: x }
        }
        "optimizer" => {
            // Tensor lists are empty in Kineto's Input Dims; the ET has their sizes.
            let elems: u64 = match et {
                Some(e) => {
                    // The ET flattens every tensor list; one list's elements is the total over
                    // the number of lists.
                    let total = e.inputs.iter().map(|t| t.numel.max(0) as u64).sum::<u64>();
                    let n_lists = args.iter().filter(|a| a.ty == "TensorList").count().max(1);
                    total / n_lists as u64
                }
                None => 0,
            };
            // Per element: fused Adam(W) ~ 16 operations; one foreach op ~ 1 (addcmul/addcdiv/
            // lerp ~ 2-3).
            let per = if base.starts_with("_fused_adam") {
                16
            } else if base.contains("addcmul") || base.contains("addcdiv") || base.contains("lerp")
            {
                3
            } else {
                1
            };
            OpFlops {
                matmul: 0,
                all: per * elems,
            }
        }
        "norm" => OpFlops {
            matmul: 0,
            all: 5 * in_numel(),
        },
        "norm_backward" => OpFlops {
            matmul: 0,
            all: 10 * out_numel().max(in_numel()),
        },
        "softmax" => OpFlops {
            matmul: 0,
            all: 5 * in_numel(),
        },
        "softmax_backward" => OpFlops {
            matmul: 0,
            all: 3 * in_numel(),
        },
        "reduction" => OpFlops {
            matmul: 0,
            all: in_numel(),
        },
        "memory" => OpFlops::default(),
        _ => OpFlops {
            matmul: 0,
            all: out_numel(),
        },
    };
    Some(f)
}

/// Device peaks for the roofline.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Peaks {
    /// Which table row matched (or `override`).
    pub device: String,
    /// Dense TFLOP/s by dtype.
    pub tflops: Vec<(Dtype, f64)>,
    /// Memory bandwidth, GB/s.
    pub bandwidth_gbps: f64,
}

impl Peaks {
    /// Peak FLOP/s for a dtype.
    pub fn flops(&self, d: Dtype) -> Option<f64> {
        let d = if d == Dtype::Other { Dtype::Fp32 } else { d };
        self.tflops
            .iter()
            .find(|(x, _)| *x == d)
            .map(|(_, v)| v * 1e12)
    }
}

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
fn dtype_for(ty: &str, conv: bool) -> Dtype {
    let d = Dtype::from_type(ty);
    if d == Dtype::Fp32 && conv {
        Dtype::Tf32
    } else {
        d
    }
}

/// One node instance's FLOPs and traffic.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct NodeFlops {
    /// FlopCounterMode convention.
    pub matmul: u64,
    /// All FLOPs.
    pub all: u64,
    /// Bytes read (tensor inputs) plus written (tensor outputs).
    pub bytes: u64,
    /// Element type of the main input.
    pub dtype: Option<Dtype>,
    /// Whether output sizes came from the Execution Trace (else estimated).
    pub exact_bytes: bool,
}

/// Parsed arguments by their texts. The same shapes recur in every iteration, so each thread
/// keeps what it has parsed: parsing was most of the FLOP stage.
#[derive(Default)]
struct ArgCache<'t>(FxHashMap<InputTexts<'t>, Vec<Arg>>);

/// An op's `Input Dims`, `Input type` and `Concrete Inputs` texts.
type InputTexts<'t> = (Option<&'t str>, Option<&'t str>, Option<&'t str>);

impl<'t> ArgCache<'t> {
    /// The arguments of op `o`.
    fn of(&mut self, t: &'t Trace, o: OpId) -> &[Arg] {
        let i = t.kineto.inputs(t.op(o));
        self.0
            .entry((i.dims, i.types, i.concrete))
            .or_insert_with(|| parse_args(i.dims, i.types, i.concrete))
    }
}

/// FLOPs of every node instance, in `step.nodes` order, with the per-op-type FlopCounterMode
/// counts of the whole profile (`aten::addmm` → `aten.addmm`).
pub fn compute(t: &Trace, step: &Step) -> (Vec<NodeFlops>, FxHashMap<String, u64>) {
    let et_index: FxHashMap<i64, &ExecNode> = t
        .exec_trace
        .as_ref()
        .map(|et| {
            et.nodes
                .iter()
                .filter_map(|n| Some((n.rf_id?, n)))
                .collect()
        })
        .unwrap_or_default();
    let et_of = |o: OpId| t.op(o).rf_id.and_then(|r| et_index.get(&r).copied());
    // Nodes on all threads; each returns its FLOPs by op type, summed afterwards in node order.
    let per_node: Vec<(NodeFlops, Vec<(String, u64)>)> = step
        .nodes
        .par_iter()
        .map_init(ArgCache::default, |cache, n| {
            let mut by_type: Vec<(String, u64)> = Vec::new();
            let mut nf = NodeFlops::default();
            // Element type of the heaviest FLOP op (under autocast the node's own inputs may
            // still be fp32 while its matmul runs in bf16).
            let mut heaviest: (u64, Option<Dtype>) = (0, None);
            // Outermost ops with a formula in the node's subtree.
            let mut stack = vec![n.op];
            while let Some(o) = stack.pop() {
                let name = t.op_name(o);
                let leaf = t.children(o).is_empty();
                let fam = family(name).or_else(|| if leaf { leaf_default(name) } else { None });
                if let Some(fam) = fam {
                    let args = cache.of(t, o);
                    if let Some(f) = op_flops_as(fam, name, args, et_of(o)) {
                        nf.matmul += f.matmul;
                        nf.all += f.all;
                        if f.all > heaviest.0 {
                            let conv = matches!(fam, "conv" | "conv_backward");
                            heaviest = (
                                f.all,
                                args.iter()
                                    .find(|a| a.is_tensor())
                                    .map(|a| dtype_for(&a.ty, conv)),
                            );
                        }
                        if f.matmul > 0 {
                            by_type.push((name.replacen("::", ".", 1), f.matmul));
                        }
                    }
                    continue;
                }
                stack.extend(t.children(o).iter().rev());
            }
            // Traffic of the node as a whole: its own inputs and outputs.
            let args = cache.of(t, n.op);
            let conv_like = matches!(family(t.op_name(n.op)), Some("conv" | "conv_backward"))
                || t.op_name(n.op).starts_with("aten::conv");
            nf.dtype = heaviest.1.or_else(|| {
                args.iter()
                    .find(|a| a.is_tensor())
                    .map(|a| dtype_for(&a.ty, conv_like))
            });
            let input_bytes: u64 = args
                .iter()
                .filter_map(|a| Dtype::size_of(&a.ty).map(|s| s * a.numel()))
                .sum();
            match et_of(n.op) {
                Some(e) => {
                    let io = |v: &[crate::ingest::exec_trace::TensorRef]| -> u64 {
                        v.iter()
                            .map(|x| (x.numel.max(0) * x.itemsize.max(0)) as u64)
                            .sum()
                    };
                    nf.bytes = io(&e.inputs).max(input_bytes) + io(&e.outputs);
                    nf.exact_bytes = true;
                }
                None => nf.bytes = input_bytes + n.alloc_bytes.max(0) as u64,
            }
            (nf, by_type)
        })
        .collect();
    let mut by_type: FxHashMap<String, u64> = FxHashMap::default();
    let out = per_node
        .into_iter()
        .map(|(nf, types)| {
            for (name, f) in types {
                *by_type.entry(name).or_default() += f;
            }
            nf
        })
        .collect();
    (out, by_type)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arg(dims: &[i64], ty: &str, concrete: &str) -> Arg {
        Arg {
            dims: dims.to_vec(),
            ty: ty.into(),
            concrete: concrete.into(),
        }
    }

    #[test]
    fn matmul_family() {
        let f = op_flops(
            "aten::mm",
            &[arg(&[512, 512], "float", ""), arg(&[512, 256], "float", "")],
            None,
        )
        .unwrap();
        assert_eq!(f.matmul, 2 * 512 * 512 * 256);
        let f = op_flops(
            "aten::addmm",
            &[
                arg(&[10], "float", ""),
                arg(&[8, 512], "float", ""),
                arg(&[512, 10], "float", ""),
            ],
            None,
        )
        .unwrap();
        assert_eq!(f.matmul, 2 * 8 * 512 * 10);
        let f = op_flops(
            "aten::bmm",
            &[arg(&[4, 3, 5], "float", ""), arg(&[4, 5, 7], "float", "")],
            None,
        )
        .unwrap();
        assert_eq!(f.matmul, 2 * 4 * 3 * 5 * 7);
        assert!(
            op_flops("aten::linear", &[], None).is_none(),
            "composite: defers to its children"
        );
        assert!(op_flops("aten::conv2d", &[], None).is_none());
    }

    #[test]
    fn convolution_forward_and_backward() {
        // ResNet stem: 8x3x64x64, 64x3x7x7, stride 2, padding 3 -> 8x64x32x32.
        let args = [
            arg(&[8, 3, 64, 64], "float", ""),
            arg(&[64, 3, 7, 7], "float", ""),
            arg(&[], "", ""),
            arg(&[], "ScalarList", "[2, 2]"),
            arg(&[], "ScalarList", "[3, 3]"),
            arg(&[], "ScalarList", "[1, 1]"),
            arg(&[], "Scalar", "False"),
            arg(&[], "ScalarList", "[0, 0]"),
            arg(&[], "Scalar", "1"),
        ];
        let f = op_flops("aten::convolution", &args, None).unwrap();
        assert_eq!(f.matmul, 2 * 8 * 32 * 32 * 64 * 3 * 7 * 7);
        let p = ConvParams {
            stride: vec![2, 2],
            padding: vec![3, 3],
            dilation: vec![1, 1],
            groups: 1,
            ..Default::default()
        };
        assert_eq!(
            conv_out_shape(&[8, 3, 64, 64], &[64, 3, 7, 7], &p),
            vec![8, 64, 32, 32]
        );
        // Backward of a 3x3 conv, both gradients: twice the forward.
        let mut b = vec![
            arg(&[8, 512, 2, 2], "float", ""),
            arg(&[8, 512, 2, 2], "float", ""),
            arg(&[512, 512, 3, 3], "float", ""),
        ];
        for c in [
            "[0]",
            "[1, 1]",
            "[1, 1]",
            "[1, 1]",
            "False",
            "[0, 0]",
            "1",
            "[True, True, False]",
        ] {
            b.push(arg(&[], "ScalarList", c));
        }
        let fwd = 2 * 8 * 2 * 2 * 512 * 512 * 9;
        assert_eq!(
            op_flops("aten::convolution_backward", &b, None)
                .unwrap()
                .matmul,
            2 * fwd
        );
        b[10] = arg(&[], "ScalarList", "[False, True, False]");
        assert_eq!(
            op_flops("aten::convolution_backward", &b, None)
                .unwrap()
                .matmul,
            fwd
        );
        // Grouped and transposed shapes.
        let t = ConvParams {
            stride: vec![2, 2],
            padding: vec![1, 1],
            dilation: vec![1, 1],
            transposed: true,
            output_padding: vec![1, 1],
            groups: 2,
        };
        assert_eq!(
            conv_out_shape(&[1, 4, 5, 5], &[4, 2, 3, 3], &t),
            vec![1, 4, 10, 10]
        );
    }

    #[test]
    fn attention_forward_and_backward() {
        let q = arg(&[4, 4, 128, 64], "c10::BFloat16", "");
        let f = op_flops(
            "aten::_scaled_dot_product_cudnn_attention",
            &[q.clone(), q.clone(), q.clone()],
            None,
        )
        .unwrap();
        assert_eq!(f.matmul, 2 * 4 * 4 * 128 * 128 * (64 + 64));
        let b = op_flops(
            "aten::_scaled_dot_product_cudnn_attention_backward",
            &[q.clone(), q.clone(), q.clone(), q],
            None,
        )
        .unwrap();
        assert_eq!(b.matmul, 2 * 4 * 4 * 128 * 128 * (3 * 64 + 2 * 64));
    }

    #[test]
    fn other_ops_count_only_in_all() {
        let f = op_flops(
            "aten::gelu",
            &[arg(&[4, 128, 1024], "c10::BFloat16", "")],
            None,
        )
        .unwrap();
        assert_eq!((f.matmul, f.all), (0, 4 * 128 * 1024));
        let f = op_flops("aten::_log_softmax", &[arg(&[512, 512], "float", "")], None).unwrap();
        assert_eq!((f.matmul, f.all), (0, 5 * 512 * 512));
        assert_eq!(
            op_flops("aten::view", &[arg(&[8, 8], "float", "")], None).unwrap(),
            OpFlops::default()
        );
    }

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
    }

    #[test]
    fn plain_and_json_argument_readers_agree_on_every_sample_op() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("sample_traces");
        let mut checked = 0;
        for dir in std::fs::read_dir(&root).unwrap() {
            let dir = dir.unwrap().path();
            let Some(trace) = ["trace.json.gz", "trace_rank0.json.gz"]
                .iter()
                .map(|f| dir.join(f))
                .find(|p| p.exists())
            else {
                continue;
            };
            let mut d = crate::diagnostics::Diagnostics::default();
            let k = crate::ingest::kineto::load(&trace, &mut d).unwrap();
            for op in &k.ops {
                let i = k.inputs(op);
                if i.dims.is_none() && i.types.is_none() {
                    continue;
                }
                let plain = plain_args(i.dims, i.types, i.concrete);
                assert!(plain.is_some(), "{:?}", i);
                assert_eq!(plain.unwrap(), parse_args_json(i.dims, i.types, i.concrete));
                checked += 1;
            }
        }
        assert!(checked > 10_000, "{checked}");
    }

    #[test]
    fn plain_and_json_argument_readers_agree() {
        let cases: &[[Option<&str>; 3]] = &[
            [
                Some("[[], [8, 10], [8]]"),
                Some(r#"["float", "long int", "Scalar"]"#),
                Some(r#"["", "", "1"]"#),
            ],
            [Some("[[2,3],[3,4]]"), None, None],
            [
                Some("[[1, 2], []]"),
                Some(r#"["float", "float"]"#),
                Some(r#"["", "[1, 2]", "extra"]"#),
            ],
            [Some("[[[1, 2], [3]]]"), Some(r#"["TensorList"]"#), None],
            [Some("[[[1, 2], [3,]]]"), Some(r#"["TensorList"]"#), None],
            [Some("[[[1, 2], 7]]"), None, None],
            [Some("[[1.5]]"), None, None],
            [Some("[[01]]"), None, None],
            [Some("[[1],]"), None, None],
            [Some("[null]"), Some("[null]"), None],
            [Some("[[1]]"), Some(r#"["a\"b"]"#), None],
            [
                Some("[[1]]"),
                Some(r#"["float"]"#),
                Some(r#"["1", garbage]"#),
            ],
            [Some("[[1]"), Some(r#"["float"]"#), None],
            [
                Some(" [ [ 1 , -2 ] ] "),
                Some(r#"[ "float" ]"#),
                Some(r#"[ "" ]"#),
            ],
            [None, Some(r#"["float", "int"]"#), Some(r#"[1, "x"]"#)],
        ];
        for [d, t, c] in cases {
            assert_eq!(
                parse_args(*d, *t, *c),
                parse_args_json(*d, *t, *c),
                "{d:?} {t:?} {c:?}"
            );
        }
        assert!(plain_args(Some("[[], [8, 10]]"), Some(r#"["float", "float"]"#), None).is_some());
    }

    #[test]
    fn parses_recorded_inputs() {
        let a = parse_args(
            Some("[[8, 3], [], [[1, 2], [3]]]"),
            Some(r#"["float", "ScalarList", "TensorList"]"#),
            Some(r#"["", "[2, 2]", ""]"#),
        );
        assert_eq!(a[0].dims, vec![8, 3]);
        assert_eq!(a[1].ints(), vec![2, 2]);
        assert!(!a[2].is_tensor());
    }
}

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
    pub gtype: &'static str,
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
    pub dtype: &'static str,
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
    /// `compute` or `memory` by the device's machine balance for the dtype; empty without peaks
    /// or FLOPs.
    pub bound: &'static str,
}

/// Aggregates node instances by aligned node (medians; FLOPs do not change between
/// iterations) and places each on the roofline.
pub fn rows(
    t: &Trace,
    step: &Step,
    nf: &[NodeFlops],
    stats: &[super::NodeStat],
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
                let mut v: Vec<i64> = idx.iter().map(|&i| f(&nf[i]) as i64).collect();
                super::median_low(&mut v).unwrap_or(0) as u64
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
                    if ai >= pf / (bw * 1e9) {
                        "compute"
                    } else {
                        "memory"
                    }
                }
                _ => "",
            };
            FlopRow {
                rank: s.rank,
                node_name: s.node_name.clone(),
                op: t.kineto.str(s.op).to_owned(),
                gtype: s.gtype.as_str(),
                module: s
                    .module
                    .map_or(String::new(), |m| t.kineto.str(m).to_owned()),
                flops,
                matmul_flops: matmul,
                bytes,
                arithmetic_intensity: ai,
                dtype: dtype.as_str(),
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
