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

mod formulas;
mod peaks;
mod roofline;

use rayon::prelude::*;
use rustc_hash::FxHashMap;

pub use self::formulas::{conv_flop_count, conv_out_shape, op_flops, ConvParams, OpFlops};
pub use self::peaks::{peaks_for, Peaks};
pub use self::roofline::{rows, Bound, FlopRow};
pub mod args;
pub use args::{parse_args, Arg};

use self::formulas::{family, leaf_default, op_flops_as, Family};
use self::peaks::dtype_for;
use super::step::Step;
use crate::model::exec_trace::ExecNode;
use crate::model::{OpId, Trace};
pub use steptrace_formats::summary::Dtype;

/// The dtype a Kineto `Input type` names.
fn dtype_of_type(t: &str) -> Dtype {
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
pub fn dtype_size_of(t: &str) -> Option<u64> {
    Some(match t {
        "double" | "long int" | "long" | "int64_t" | "c10::complex<float>" => 8,
        "float" | "int" | "unsigned int" => 4,
        "c10::BFloat16" | "c10::Half" | "short int" | "short" => 2,
        "bool" | "unsigned char" | "signed char" | "char" => 1,
        t if t.contains("Float8") => 1,
        _ => return None,
    })
}

/// Whether a recorded input is a tensor (its type is a dtype).
fn is_tensor(a: &Arg) -> bool {
    dtype_size_of(&a.ty).is_some()
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

/// The by-op key of a CUDA graph replay's FLOPs.
pub const GRAPH_REPLAY: &str = "cuda_graph_replay";

/// The FLOPs of a CUDA graph replay, from the range capture's shim opens around each replay:
/// `steptrace::cuda_graph#<k> flops=<n>`, `n` counted with FlopCounterMode's formulas while
/// the graph was recorded (its operators run through the dispatcher only then).
pub fn graph_flops(name: &str) -> Option<u64> {
    let rest = name.strip_prefix("steptrace::cuda_graph#")?;
    rest.split_once(" flops=")?.1.parse().ok()
}

/// A CUDA graph replay's FLOPs added to its node: all of them of FlopCounterMode's kinds
/// (matmuls, convolutions, attention), as the shim counted them.
fn add_replay(nf: &mut NodeFlops, by_type: &mut Vec<(String, u64)>, f: u64) {
    nf.matmul = nf.matmul.saturating_add(f);
    nf.all = nf.all.saturating_add(f);
    by_type.push((GRAPH_REPLAY.to_owned(), f));
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
            // A CUDA graph's replay: the FLOPs capture counted when the graph was recorded, on
            // the range around the launch (the node's parent for a backward graph, inside the
            // node's subtree for a forward one), all of them FlopCounterMode's kinds.
            if let Some(f) = t.parent[n.op.0 as usize].and_then(|p| graph_flops(t.op_name(p))) {
                add_replay(&mut nf, &mut by_type, f);
            }
            // Outermost ops with a formula in the node's subtree.
            let mut stack = vec![n.op];
            while let Some(o) = stack.pop() {
                let name = t.op_name(o);
                if let Some(f) = graph_flops(name) {
                    add_replay(&mut nf, &mut by_type, f);
                    continue;
                }
                let leaf = t.children(o).is_empty();
                let fam = family(name).or_else(|| if leaf { leaf_default(name) } else { None });
                if let Some(fam) = fam {
                    let args = cache.of(t, o);
                    if let Some(f) = op_flops_as(fam, name, args, et_of(o)) {
                        nf.matmul = nf.matmul.saturating_add(f.matmul);
                        nf.all = nf.all.saturating_add(f.all);
                        if f.all > heaviest.0 {
                            let conv = matches!(fam, Family::Conv | Family::ConvBackward);
                            heaviest = (
                                f.all,
                                args.iter()
                                    .find(|a| is_tensor(a))
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
            let conv_like = matches!(
                family(t.op_name(n.op)),
                Some(Family::Conv | Family::ConvBackward)
            ) || t.op_name(n.op).starts_with("aten::conv");
            nf.dtype = heaviest.1.or_else(|| {
                args.iter()
                    .find(|a| is_tensor(a))
                    .map(|a| dtype_for(&a.ty, conv_like))
            });
            let input_bytes: u64 = args
                .iter()
                .filter_map(|a| dtype_size_of(&a.ty).map(|s| s.saturating_mul(a.numel())))
                .fold(0, u64::saturating_add);
            match et_of(n.op) {
                Some(e) => {
                    let io = |v: &[crate::model::exec_trace::TensorRef]| -> u64 {
                        v.iter()
                            .map(|x| {
                                (x.numel.max(0) as u64).saturating_mul(x.itemsize.max(0) as u64)
                            })
                            .fold(0, u64::saturating_add)
                    };
                    nf.bytes = io(&e.inputs)
                        .max(input_bytes)
                        .saturating_add(io(&e.outputs));
                    nf.exact_bytes = true;
                }
                None => nf.bytes = input_bytes.saturating_add(n.alloc_bytes.max(0) as u64),
            }
            (nf, by_type)
        })
        .collect();
    let mut by_type: FxHashMap<String, u64> = FxHashMap::default();
    let out = per_node
        .into_iter()
        .map(|(nf, types)| {
            for (name, f) in types {
                let e = by_type.entry(name).or_default();
                *e = e.saturating_add(f);
            }
            nf
        })
        .collect();
    (out, by_type)
}

#[cfg(test)]
mod graph_range_tests {
    use super::graph_flops;

    /// The range capture's shim opens around each CUDA graph replay: a count where the shim
    /// had one, and none (the replay then left out of the FLOPs, with a warning) where a FLOP
    /// formula failed while the graph was recorded (`flops=unknown`) or the range is another's.
    #[test]
    fn a_replays_range_gives_its_flops_or_none() {
        assert_eq!(
            graph_flops("steptrace::cuda_graph#2 flops=4527323480064"),
            Some(4527323480064)
        );
        assert_eq!(graph_flops("steptrace::cuda_graph#0 flops=0"), Some(0));
        assert_eq!(graph_flops("steptrace::cuda_graph#1 flops=unknown"), None);
        assert_eq!(graph_flops("## Call CompiledFxGraph abc ##"), None);
    }
}
