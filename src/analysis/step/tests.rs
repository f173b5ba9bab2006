//! Unit tests of the step's passes, on synthetic traces small enough to read.

use super::*;

/// A CPU op on host thread `tid` over `[ts, ts + dur)` µs.
fn op(name: &str, tid: u32, ts: u32, dur: u32, args: &str) -> String {
    format!(
        r#"{{"ph":"X","cat":"cpu_op","name":"{name}","pid":1,"tid":{tid},"ts":{ts},"dur":{dur},"args":{{{args}}}}}"#
    )
}

fn annotation(name: &str, tid: u32, ts: u32, dur: u32) -> String {
    format!(
        r#"{{"ph":"X","cat":"user_annotation","name":"{name}","pid":1,"tid":{tid},"ts":{ts},"dur":{dur}}}"#
    )
}

/// A launch at `ts` on thread `tid` and the GPU activity it runs (`cat`: kernel or
/// gpu_memcpy), joined by correlation id `corr`.
fn launch(tid: u32, ts: u32, corr: u32, cat: &str, name: &str, dur: u32) -> String {
    format!(
        r#"{{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":{tid},"ts":{ts},"dur":1,"args":{{"correlation":{corr}}}}},
        {{"ph":"X","cat":"{cat}","name":"{name}","pid":0,"tid":7,"ts":{},"dur":{dur},"args":{{"device":0,"stream":7,"correlation":{corr}}}}}"#,
        ts + 2
    )
}

/// One ProfilerStep on main thread 1: an input copy, a linear (its addmm launches a
/// kernel), a loss read with `.item()`, the backward of the addmm on autograd thread 2,
/// and a parameter update; one more op after the step. `optimizer`: the update runs in an
/// `Optimizer.step#` range.
fn step_trace(optimizer: bool) -> Trace {
    let mut ev = vec![
        annotation("ProfilerStep#1", 1, 0, 100),
        op("aten::copy_", 1, 10, 3, ""),
        launch(
            1,
            11,
            1,
            "gpu_memcpy",
            "Memcpy HtoD (Pageable -> Device)",
            1,
        ),
        op("aten::linear", 1, 20, 10, ""),
        op("aten::addmm", 1, 21, 8, r#""Sequence number":5"#),
        launch(1, 22, 2, "kernel", "gemm", 3),
        op("aten::item", 1, 35, 2, ""),
        launch(
            1,
            35,
            3,
            "gpu_memcpy",
            "Memcpy DtoH (Device -> Pageable)",
            1,
        ),
        op(
            "autograd::engine::evaluate_function: AddmmBackward0",
            2,
            40,
            10,
            r#""Sequence number":5"#,
        ),
        op("aten::mm", 2, 41, 8, ""),
        launch(2, 42, 4, "kernel", "gemm_bw", 4),
        op("aten::add_", 1, 60, 2, ""),
        launch(1, 60, 5, "kernel", "add", 1),
        op("aten::zeros", 1, 200, 1, ""),
    ];
    if optimizer {
        ev.push(annotation("Optimizer.step#SGD.step", 1, 59, 4));
    }
    crate::model::from_events(&ev.join(","))
}

fn by_name<'a>(s: &'a Step, name: &str) -> &'a Node {
    s.nodes.iter().find(|n| n.name == name).unwrap_or_else(|| {
        panic!(
            "no {name} in {:?}",
            s.nodes.iter().map(|n| &n.name).collect::<Vec<_>>()
        )
    })
}

// The phase rule of one iteration, pass by pass on a trace small enough to read.
#[test]
fn each_node_gets_its_phase_its_gpu_work_and_its_iteration() {
    let mut t = step_trace(false);
    let mut d = Diagnostics::default();
    let s = compute(&mut t, None, &mut d);
    assert_eq!(s.detection, Detection::ProfilerStep);
    assert_eq!(s.iterations.len(), 1);
    let names: Vec<&str> = s.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(
        names,
        [
            // The batch's copy to the device is data loading, not forward work.
            "data_loading:aten::copy_#0",
            "forward:aten::linear#0",
            // A loss read for logging.
            "other:aten::item#0",
            "backward:aten::mm#0",
            // After the backward pass, with no optimizer ranges: the update.
            "optimizer:aten::add_#0",
        ]
    );
    let mm = by_name(&s, "backward:aten::mm#0");
    assert_eq!(
        mm.autograd_fn.map(|f| t.kineto.str(f)),
        Some("AddmmBackward0")
    );
    // Each node owns what it (or an op under it) launched: ns from µs.
    assert_eq!(by_name(&s, "forward:aten::linear#0").gpu_time, 3_000);
    assert_eq!(mm.gpu_time, 4_000);
    assert_eq!(mm.kernels, 1);
    // From the first backward node to the last (the autograd wrapper is opened).
    assert_eq!(s.iterations[0].backward, Some((41_000, 49_000)));
    // The op after the ProfilerStep range lies outside every iteration.
    assert_eq!(s.nodes_outside, 1);
}

#[test]
fn with_optimizer_ranges_only_what_they_hold_is_the_optimizer() {
    let mut t = step_trace(true);
    let s = compute(&mut t, None, &mut Diagnostics::default());
    assert!(s.nodes.iter().any(|n| n.name == "optimizer:aten::add_#0"));
    // The same trace without the range, and an op after backward outside it: other.
    let mut ev = vec![
        annotation("ProfilerStep#1", 1, 0, 100),
        op("aten::linear", 1, 20, 10, ""),
        op(
            "autograd::engine::evaluate_function: AddmmBackward0",
            2,
            40,
            10,
            "",
        ),
        op("aten::mm", 2, 41, 8, ""),
        annotation("Optimizer.step#SGD.step", 1, 59, 4),
        op("aten::add_", 1, 60, 2, ""),
        op("aten::clone", 1, 70, 2, ""),
    ];
    ev.push(launch(1, 21, 1, "kernel", "gemm", 3));
    let mut t = crate::model::from_events(&ev.join(","));
    let s = compute(&mut t, None, &mut Diagnostics::default());
    assert_eq!(
        by_name(&s, "optimizer:aten::add_#0").phase,
        Phase::Optimizer
    );
    assert_eq!(by_name(&s, "other:aten::clone#0").phase, Phase::Other);
}

#[test]
fn gpu_work_launched_under_no_node_is_counted_apart() {
    // An annotation is opened, not a node: a launch directly under it has no node.
    let ev = [
        annotation("ProfilerStep#1", 1, 0, 100),
        annotation("my_range", 1, 10, 20),
        launch(1, 12, 1, "kernel", "k", 2),
        op("aten::relu", 1, 40, 5, ""),
        launch(1, 41, 2, "kernel", "relu", 1),
    ];
    let t = crate::model::from_events(&ev.join(","));
    let nodes = node_ops(&t);
    assert_eq!(nodes.len(), 1, "the op under the annotations");
    let g = gpu_owners(&t, &nodes, &node_index(&t, &nodes));
    assert_eq!(g.of_node[0].len(), 1);
    assert_eq!(g.unattributed.len(), 1);
    assert_eq!(g.unattributed[0].1, 12_000, "with its launch time");
}

#[test]
fn backward_spans_leave_out_the_gaps_between_passes() {
    let ev = [
        op("autograd::engine::evaluate_function: A", 2, 10, 10, ""),
        op("autograd::engine::evaluate_function: B", 2, 15, 10, ""),
        op("autograd::engine::evaluate_function: C", 2, 50, 10, ""),
    ];
    let t = crate::model::from_events(&ev.join(","));
    let bw: Vec<OpId> = (0..3).map(OpId).collect();
    let spans = BackwardSpans::new(&t, &bw);
    assert_eq!(spans.extent, Some((10_000, 60_000)));
    assert_eq!(spans.spans, [(10_000, 25_000), (50_000, 60_000)]);
    assert!(spans.contains(24_999));
    assert!(!spans.contains(25_000));
    assert!(!spans.contains(40_000), "a gap between passes");
    assert!(spans.contains(50_000));
}

#[test]
fn merge_spans_joins_overlapping_and_touching_spans_only() {
    assert_eq!(
        merge_spans(vec![(0, 5), (3, 8), (8, 9), (12, 15), (13, 14)]),
        [(0, 9), (12, 15)]
    );
    assert!(merge_spans(vec![]).is_empty());
}

#[test]
fn autograd_wrappers_are_recognised() {
    assert!(is_autograd_wrapper(
        "autograd::engine::evaluate_function: MmBackward0"
    ));
    assert!(is_autograd_wrapper("MmBackward0"));
    assert!(is_autograd_wrapper("CheckpointFunctionBackward"));
    assert!(is_autograd_wrapper("torch::autograd::AccumulateGrad"));
    assert!(!is_autograd_wrapper("aten::convolution_backward"));
    assert!(!is_autograd_wrapper("c10d::allreduce_"));
}

/// Issue 74: with `k` backward passes a step (capture's count), every `k` passes are one
/// iteration, starting at the pass an input copy precedes; passes before the first such pass
/// end a step the window did not see begin, and are left out (the `first_step_cut` warning).
#[test]
fn passes_are_grouped_into_steps_from_the_one_a_copy_precedes() {
    // Cuts before 7 passes, then the trace's end.
    let bounds = [0, 10, 20, 30, 40, 50, 60, 70];
    // One pass a step: each pass its own iteration.
    assert_eq!(
        super::iterations::step_bounds(&bounds, &[false; 7], 1),
        (0, bounds.to_vec())
    );
    // Three a step, the copy before passes 1 and 4: pass 0 ends a step begun before the window.
    let copies = [false, true, false, false, true, false, false];
    assert_eq!(
        super::iterations::step_bounds(&bounds, &copies, 3),
        (1, vec![10, 40, 70])
    );
    // No copy at all (a batch made on the device): from the first pass.
    assert_eq!(
        super::iterations::step_bounds(&bounds, &[false; 7], 3),
        (0, vec![0, 30, 60, 70])
    );
}
