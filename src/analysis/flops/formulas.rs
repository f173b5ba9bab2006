//! FLOPs and bytes of one op from its recorded inputs: FlopCounterMode's formulas (matmuls,
//! convolutions and their backward, attention) and per-element constants for everything else
//! (docs/flops.md).

use super::args::Arg;
use super::is_tensor;
use crate::model::exec_trace::ExecNode;

/// FLOPs and bytes of one op.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpFlops {
    /// FlopCounterMode's convention.
    pub matmul: u64,
    /// All FLOPs.
    pub all: u64,
}

/// A dimension as a count (a negative one, which no shape has, counts 0).
fn dim(d: i64) -> u64 {
    d.max(0) as u64
}

/// The product of factors, saturating at `u64::MAX`: a count past 2^64 (an mm of 5.4e19 FLOPs
/// from a hostile shape) stays the largest count instead of wrapping to a small one.
pub(crate) fn sat(factors: impl IntoIterator<Item = u64>) -> u64 {
    factors.into_iter().fold(1u64, u64::saturating_mul)
}

fn prod(v: &[i64]) -> u64 {
    sat(v.iter().map(|&d| dim(d)))
}

/// `conv_flop_count` of torch.utils.flop_counter.
pub fn conv_flop_count(x: &[i64], w: &[i64], out: &[i64], transposed: bool) -> u64 {
    if x.len() < 3 || w.len() < 3 || out.len() < 3 {
        return 0;
    }
    let conv_shape = if transposed { &x[2..] } else { &out[2..] };
    sat([
        2,
        prod(conv_shape),
        prod(&w[2..]),
        dim(x[0]),
        dim(w[0]),
        dim(w[1]),
    ])
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
        w.get(1)
            .copied()
            .unwrap_or(0)
            .saturating_mul(p.groups.max(1))
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
        // In i128: recorded shapes and strides are data, and their products can pass i64.
        let (inp, k, s, pad, d) = (inp as i128, k as i128, s as i128, pad as i128, d as i128);
        let o = if p.transposed {
            (inp - 1) * s - 2 * pad + d * (k - 1) + at(&p.output_padding, i, 0) as i128 + 1
        } else {
            (inp + 2 * pad - d * (k - 1) - 1).div_euclid(s.max(1)) + 1
        };
        out.push(o.clamp(0, i64::MAX as i128) as i64);
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

/// Which formula an op's FLOPs follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Family {
    /// Matrix products (`mm`, `addmm`, `bmm`, …): 2·m·k·n.
    Matmul,
    /// Forward convolutions.
    Conv,
    /// `convolution_backward`: its gradients' products.
    ConvBackward,
    /// Scaled dot-product attention, forward.
    Sdpa,
    /// Scaled dot-product attention, backward.
    SdpaBackward,
    /// Fused and `_foreach_` optimizer kernels.
    Optimizer,
    /// Layer, batch, group and RMS norms, forward.
    Norm,
    /// Their backward.
    NormBackward,
    /// Softmax and log-softmax, forward.
    Softmax,
    /// Their backward.
    SoftmaxBackward,
    /// Reductions and losses: one FLOP per input element.
    Reduction,
    /// Copies, views and factories: no FLOPs.
    Memory,
    /// One FLOP per output element.
    Elementwise,
}

/// Which ops carry a formula. `None`: not a FLOP op (composites defer to their children).
pub(super) fn family(name: &str) -> Option<Family> {
    let base = name.strip_prefix("aten::")?;
    Some(match base {
        "mm" | "addmm" | "bmm" | "baddbmm" | "_scaled_mm" | "addbmm" => Family::Matmul,
        "convolution"
        | "_convolution"
        | "convolution_overrideable"
        | "cudnn_convolution"
        | "cudnn_convolution_transpose" => Family::Conv,
        "convolution_backward" | "convolution_backward_overrideable" => Family::ConvBackward,
        "_scaled_dot_product_flash_attention"
        | "_scaled_dot_product_efficient_attention"
        | "_scaled_dot_product_cudnn_attention" => Family::Sdpa,
        "_scaled_dot_product_flash_attention_backward"
        | "_scaled_dot_product_efficient_attention_backward"
        | "_scaled_dot_product_cudnn_attention_backward" => Family::SdpaBackward,
        b if b.starts_with("_foreach_") || b.starts_with("_fused_") => Family::Optimizer,
        "native_layer_norm"
        | "layer_norm"
        | "native_batch_norm"
        | "cudnn_batch_norm"
        | "_batch_norm_impl_index"
        | "batch_norm"
        | "native_group_norm"
        | "group_norm"
        | "rms_norm"
        | "_fused_rms_norm" => Family::Norm,
        "native_layer_norm_backward"
        | "cudnn_batch_norm_backward"
        | "native_batch_norm_backward"
        | "native_group_norm_backward" => Family::NormBackward,
        "_softmax" | "_log_softmax" | "softmax" | "log_softmax" => Family::Softmax,
        "_softmax_backward_data" | "_log_softmax_backward_data" => Family::SoftmaxBackward,
        "sum" | "mean" | "amax" | "max" | "min" | "norm" | "linalg_vector_norm" | "var" | "std"
        | "prod" | "nll_loss_forward" | "nll_loss" | "nll_loss_backward" | "mse_loss" => {
            Family::Reduction
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
        | "max_pool2d_with_indices_backward" => Family::Memory,
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
        | "leaky_relu" => Family::Elementwise,
        _ => return None,
    })
}

/// An op with no children and no entry in the table: one FLOP per output element if it is a
/// computing op (`aten::` and not a view, copy or factory). Composites (`aten::linear`,
/// `aten::conv2d`, `aten::cross_entropy_loss`) have children and are looked through instead.
pub(super) fn leaf_default(name: &str) -> Option<Family> {
    name.starts_with("aten::").then_some(Family::Elementwise)
}

/// FLOPs of an op with a formula. `et` gives tensor-list sizes the Kineto trace leaves out.
pub fn op_flops(name: &str, args: &[Arg], et: Option<&ExecNode>) -> Option<OpFlops> {
    op_flops_as(family(name)?, name, args, et)
}

pub(super) fn op_flops_as(
    fam: Family,
    name: &str,
    args: &[Arg],
    et: Option<&ExecNode>,
) -> Option<OpFlops> {
    let base = name.trim_start_matches("aten::");
    let d = |i: usize| dims(args, i);
    let mm = |a: &[i64], b: &[i64]| -> u64 {
        match (a.len(), b.len()) {
            (2, 2) => sat([2, prod(a), dim(b[1])]),
            (3, 3) => sat([2, prod(a), dim(b[2])]),
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
            .filter(|a| is_tensor(a))
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
            .find(|a| is_tensor(a))
            .map(Arg::numel)
            .unwrap_or(0)
    };
    let f = match fam {
        Family::Matmul => {
            let v = match base {
                "mm" | "_scaled_mm" => mm(d(0), d(1)),
                "bmm" => mm(d(0), d(1)),
                "addmm" | "baddbmm" | "addbmm" => mm(d(1), d(2)),
                _ => 0,
            };
            OpFlops { matmul: v, all: v }
        }
        Family::Conv => {
            let v = conv_flops(base, args);
            OpFlops { matmul: v, all: v }
        }
        Family::ConvBackward => {
            let v = conv_backward_flops(args);
            OpFlops { matmul: v, all: v }
        }
        Family::Sdpa | Family::SdpaBackward => {
            let x = sdpa_flops(fam == Family::SdpaBackward, args);
            OpFlops { matmul: x, all: x }
        }
        Family::Optimizer => OpFlops {
            matmul: 0,
            all: optimizer_flops(base, args, et),
        },
        Family::Norm => OpFlops {
            matmul: 0,
            all: in_numel().saturating_mul(5),
        },
        Family::NormBackward => OpFlops {
            matmul: 0,
            all: out_numel().max(in_numel()).saturating_mul(10),
        },
        Family::Softmax => OpFlops {
            matmul: 0,
            all: in_numel().saturating_mul(5),
        },
        Family::SoftmaxBackward => OpFlops {
            matmul: 0,
            all: in_numel().saturating_mul(3),
        },
        Family::Reduction => OpFlops {
            matmul: 0,
            all: in_numel(),
        },
        Family::Memory => OpFlops::default(),
        Family::Elementwise => OpFlops {
            matmul: 0,
            all: out_numel(),
        },
    };
    Some(f)
}

/// The shape of argument `i` (empty where it has none).
fn dims(args: &[Arg], i: usize) -> &[i64] {
    args.get(i).map(|a| a.dims.as_slice()).unwrap_or(&[])
}

/// A forward convolution's FLOPs, from its input and weight shapes and its parameters (the
/// argument order of `cudnn_convolution` differs from `convolution`'s).
fn conv_flops(base: &str, args: &[Arg]) -> u64 {
    let c = |i: usize| args.get(i).map(Arg::ints).unwrap_or_default();
    let (x, w) = (dims(args, 0), dims(args, 1));
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
    conv_flop_count(x, w, &out, p.transposed)
}

/// `convolution_backward`'s FLOPs: the input gradient and the weight gradient, each where its
/// output mask asks for it.
fn conv_backward_flops(args: &[Arg]) -> u64 {
    let (go, x, w) = (dims(args, 0), dims(args, 1), dims(args, 2));
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
    v
}

/// Scaled dot-product attention's FLOPs (forward, or `backward` with the gradient first).
fn sdpa_flops(backward: bool, args: &[Arg]) -> u64 {
    let off = usize::from(backward);
    let (q, k, v) = (dims(args, off), dims(args, off + 1), dims(args, off + 2));
    if q.len() != 4 || k.len() != 4 || v.len() != 4 {
        return 0;
    }
    let (b, h, sq, dq) = (dim(q[0]), dim(q[1]), dim(q[2]), dim(q[3]));
    let (sk, dv) = (dim(k[2]), dim(v[3]));
    let heads = if backward {
        sat([3, dq]).saturating_add(sat([2, dv]))
    } else {
        dq.saturating_add(dv)
    };
    sat([2, b, h, sq, sk, heads])
}

/// An optimizer op's FLOPs: operations per element times the elements of one tensor list.
fn optimizer_flops(base: &str, args: &[Arg], et: Option<&ExecNode>) -> u64 {
    // Tensor lists are empty in Kineto's Input Dims; the ET has their sizes.
    let elems: u64 = match et {
        Some(e) => {
            // The ET flattens every tensor list; one list's elements is the total over the
            // number of lists.
            let total = e.inputs.iter().map(|t| t.numel.max(0) as u64).sum::<u64>();
            let n_lists = args.iter().filter(|a| a.ty == "TensorList").count().max(1);
            total / n_lists as u64
        }
        None => 0,
    };
    // Per element: fused Adam(W) ~ 16 operations; one foreach op ~ 1 (addcmul/addcdiv/lerp
    // ~ 2-3).
    let per: u64 = if base.starts_with("_fused_adam") {
        16
    } else if base.contains("addcmul") || base.contains("addcdiv") || base.contains("lerp") {
        3
    } else {
        1
    };
    per.saturating_mul(elems)
}

#[cfg(test)]
mod tests;
