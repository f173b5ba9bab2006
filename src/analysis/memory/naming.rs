//! What a block is: the rules that name blocks made before the window (by their allocation
//! stack, their size, what else is alive) and blocks made in it (by the phase of the node that
//! made them and how long they live).

use rustc_hash::FxHashMap;

use super::{Block, Category};
use crate::analysis::step::{Phase, Step};
use crate::model::snapshot::{FrameId, Snapshot};
use crate::model::Trace;

/// The sizes of cuBLAS's per-handle workspace PyTorch allocates unless
/// `CUBLAS_WORKSPACE_CONFIG` says otherwise: `:4096:8` (32 MiB) on Hopper and later,
/// `:4096:2:16:8` before (aten/src/ATen/cuda/CublasHandlePool.cpp). cuBLASLt shares it.
const CUBLAS_WORKSPACE_SIZES: [i64; 2] = [32 << 20, (8 << 20) + (128 << 10)];

/// Whether a block that lives through the whole window, and that nothing else names, has a
/// cuBLAS workspace's size. Python stacks stop at the matmul's caller and the autograd
/// threads record none, so the size is the evidence left (a gradient of that size is named
/// GRAD first, by its parameter's size).
pub(super) fn workspace_sized(size: i64) -> bool {
    CUBLAS_WORKSPACE_SIZES.contains(&size)
}

/// Matmul-family ops: the ones that fetch a cuBLAS/cuBLASLt handle and its workspace.
fn calls_cublas(op: &str) -> bool {
    let op = op.strip_prefix("aten::").unwrap_or(op);
    matches!(
        op,
        "mm" | "addmm"
            | "bmm"
            | "baddbmm"
            | "matmul"
            | "linear"
            | "addmv"
            | "mv"
            | "dot"
            | "_scaled_mm"
            | "addbmm"
            | "_addmm_activation"
            | "einsum"
            | "tensordot"
    ) || op.starts_with("Torch-Compiled Region")
        || op.starts_with("CompiledFunction")
}

/// What a block made before the window and alive through it is, when its stack says so and
/// no other rule named it: made inside an LSTM/GRU's forward and kept, cuDNN's RNN state
/// (its dropout state and weight buffer, cached for the process) → WORKSPACE; made by the
/// program's own code with no frame in torch (a dataset put on the device whole, fixed noise,
/// masks) → INPUT, as torch's classifier names such tensors when the forward reads them.
pub(super) fn kept_category(s: &Snapshot, frames: &[FrameId]) -> Option<Category> {
    let file = |f: &FrameId| s.str(s.frames[f.0 as usize].filename);
    let in_torch =
        |f: &str| f.contains("/torch/") || f.starts_with("torch/") || f.contains("site-packages");
    let innermost = frames.first().map(file)?;
    if innermost.ends_with("nn/modules/rnn.py") {
        return Some(Category::Workspace);
    }
    // Made inside a module's forward and kept across steps: a cache the forward builds once
    // and reads after (positional encodings, rotary tables, masks). torch's classifier names
    // what the forward reads and did not make in the step INPUT.
    // Only a forward of the program's own (or a library's) module: torch's own modules keep
    // other state (DistributedDataParallel's buckets).
    let call = frames.iter().position(|f| {
        let fr = &s.frames[f.0 as usize];
        is_module_call(s.str(fr.name), s.str(fr.filename))
    });
    if let Some(k) = call.filter(|&k| k > 0) {
        // torch's own files, by the package's folder (a virtual environment may itself live
        // under a folder named torch: /opt/torch/.venv/.../site-packages/lightning/...).
        let f = file(&frames[k - 1]);
        let torch_file = f.contains("-packages/torch/") || f.starts_with("torch/");
        if !torch_file {
            return Some(Category::Input);
        }
    }
    (!frames.iter().map(file).any(in_torch) && !innermost.is_empty() && !innermost.starts_with('?'))
        .then_some(Category::Input)
}

/// Whether a Python frame is `nn.Module.__call__` running a module's forward.
fn is_module_call(name: &str, file: &str) -> bool {
    file.ends_with("nn/modules/module.py")
        && matches!(name, "_call_impl" | "_wrapped_call_impl" | "inner")
}

/// Category of a block made before the window, from its allocation stack: the kind of code
/// that made it ([`crate::analysis::snapshot::sites::kind`], the one reading of frames), as
/// the tensor it most likely is. No frames: allocated off the Python thread, by the autograd
/// engine's device threads; what survives to the window from there is last step's gradients.
pub(super) fn category_from_frames(s: &Snapshot, frames: &[FrameId]) -> Category {
    use crate::analysis::snapshot::SiteKind as K;
    match crate::analysis::snapshot::sites::kind(s, frames) {
        K::Workspace => Category::Workspace,
        K::NoStack | K::Backward => Category::Grad,
        K::Optimizer => Category::OptState,
        K::ModelSetup => Category::Param,
        K::ModuleForward | K::DataLoading | K::Program | K::Other => Category::Other,
    }
}

/// Names the blocks made before the window whose allocation recorded no stack, from the
/// parameters' sizes. Gradients mirror the parameters one for one (the autograd threads,
/// which record no Python stack, make them), so a block sized like a parameter without one is
/// a gradient. Blocks also come without a stack when the history was off as they were made
/// (capture pauses it while it times steps): optimizer moments made at the first step are
/// then stackless too, alive through the window, at most two per parameter (Adam's; SGD's
/// momentum is one), after those whose stack named the optimizer. The rest (the autograd threads' cuBLAS workspaces) stays
/// for the workspace rule.
pub(super) fn name_stackless(pre: &mut [Block], stackless: &[(bool, i64)]) {
    let request = |i: usize| stackless[i].1;
    let mut param_sizes: FxHashMap<i64, usize> = FxHashMap::default();
    for i in (0..pre.len()).filter(|&i| pre[i].category == Category::Param) {
        *param_sizes.entry(request(i)).or_default() += 1;
    }
    let mut moments: FxHashMap<i64, usize> =
        param_sizes.iter().map(|(&k, &n)| (k, 2 * n)).collect();
    for i in (0..pre.len()).filter(|&i| pre[i].category == Category::OptState) {
        if let Some(n) = moments.get_mut(&request(i)) {
            *n = n.saturating_sub(1);
        }
    }
    // Parameter-sized is not enough: buffers (BatchNorm's running statistics) are made with
    // the parameters and have no gradient. When the window frees gradients (`zero_grad` sets
    // them to None), every gradient dies in it and the blocks that live on are not gradients;
    // moments never die.
    let grads_die = pre
        .iter()
        .any(|b| b.category == Category::Grad && b.free.is_some());
    for (b, &(_, request)) in pre.iter_mut().zip(stackless) {
        if b.category != Category::Grad {
            continue;
        }
        if grads_die && b.free.is_none() {
            b.category = Category::Other;
            continue;
        }
        match param_sizes.get_mut(&request) {
            Some(n) if *n > 0 => *n -= 1,
            _ => b.category = Category::Other,
        }
    }
    for (b, &(none, request)) in pre.iter_mut().zip(stackless) {
        if !(none && b.category == Category::Other && b.free.is_none()) {
            continue;
        }
        if let Some(n) = moments.get_mut(&request).filter(|n| **n > 0) {
            *n -= 1;
            b.category = Category::OptState;
        }
    }
}

pub(super) fn in_window_category(t: &Trace, step: &Step, b: &Block) -> Category {
    let Some(it) = b.iteration.map(|i| &step.iterations[i as usize]) else {
        return Category::Other;
    };
    let freed_in = |end: i64| b.free.is_some_and(|f| f <= end);
    let producer = b.producer.map(|p| &step.nodes[p]);
    // A thread's first matmul on a stream makes its workspace, which is never freed. Outside
    // the backward nothing else a matmul makes outlives the window (activations are freed by
    // their iteration's backward); inside it, a never-freed block is a gradient.
    if b.free.is_none()
        && workspace_sized(b.size)
        && producer.is_some_and(|n| n.phase != Phase::Backward && calls_cublas(t.op_name(n.op)))
    {
        return Category::Workspace;
    }
    let phase = match producer {
        Some(n) => n.phase,
        // No node on the allocating thread: the autograd engine's threads between nodes (a
        // compiled backward writes its gradients there). The time says the phase.
        None if it
            .backward
            .is_some_and(|(bs, be)| b.alloc >= bs && b.alloc <= be) =>
        {
            Phase::Backward
        }
        None => {
            return if freed_in(it.end) {
                Category::Temporary
            } else {
                Category::Other
            };
        }
    };
    match phase {
        Phase::Forward => match it.backward {
            Some((bs, _)) if freed_in(bs) => Category::Temporary,
            None if freed_in(it.end) => Category::Temporary,
            _ => Category::Activation,
        },
        Phase::Backward => match it.backward {
            Some((_, be)) if freed_in(be) => Category::Temporary,
            _ => Category::Grad,
        },
        Phase::Optimizer => {
            if freed_in(it.end) {
                Category::Temporary
            } else {
                Category::OptState
            }
        }
        Phase::Other | Phase::DataLoading
            if it.backward.is_none_or(|(bs, _)| b.alloc < bs) && !freed_in(b.alloc) =>
        {
            if freed_in(it.end)
                && it
                    .backward
                    .is_some_and(|(bs, _)| b.free.is_some_and(|f| f < bs))
            {
                Category::Temporary
            } else {
                Category::Input
            }
        }
        _ => {
            if freed_in(it.end) {
                Category::Temporary
            } else {
                Category::Other
            }
        }
    }
}
