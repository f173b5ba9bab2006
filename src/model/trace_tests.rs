//! Tests of `trace.rs`.

use super::*;

/// A CPU range on thread 0 named by the test's own numbering (`name` is a `StrId` the test
/// gives meaning to through `is_step_mark`).
fn range(name: u32, kind: OpKind, start: i64, dur: i64) -> CpuOp {
    CpuOp {
        name: StrId(name),
        kind,
        thread: ThreadId(0),
        start,
        dur,
        ext_id: None,
        rf_id: None,
        seq: None,
        fwd_tid: None,
        inputs: Default::default(),
    }
}

/// A `ProfilerStep#` mark that a step hook opens inside `optimizer.step()`
/// overlaps it on every captured step; that is the profiler's doing, not the program's, and
/// is nested without a warning. Any other overlap is still counted.
#[test]
fn overlaps_with_profiler_step_marks_are_nested_but_not_counted() {
    const STEP_MARK: u32 = 1;
    let ops = vec![
        range(STEP_MARK, OpKind::Annotation, 0, 100), // ProfilerStep#3
        range(2, OpKind::Annotation, 90, 20),         // Optimizer.step, ends after #3
        range(STEP_MARK, OpKind::Annotation, 100, 50), // ProfilerStep#4, starts inside it
        range(3, OpKind::Op, 120, 10),                // the next step's first op
        range(4, OpKind::Op, 125, 10),                // overlaps it: counted
    ];
    let thread_ops = vec![(0..ops.len() as u32).map(OpId).collect::<Vec<_>>()];
    let is_mark = |op: &CpuOp| op.name == StrId(STEP_MARK);
    let mut diag = Diagnostics::default();
    let parent = build_forest(&ops, &thread_ops, &is_mark, &mut diag);
    assert_eq!(parent, [None, None, None, Some(OpId(2)), Some(OpId(2))]);
    assert_eq!(diag.count("overlapping_ops"), 1, "{:?}", diag.lines());
    assert!(
        // From the first op, in ms (not epoch nanoseconds).
        diag.lines()
            .iter()
            .any(|l| l.contains("a range at +0.000 ms starts inside") && !l.contains(" ns")),
        "{:?}",
        diag.lines()
    );
    // With no marks, all three overlaps count.
    let mut diag = Diagnostics::default();
    build_forest(&ops, &thread_ops, &|_: &CpuOp| false, &mut diag);
    assert_eq!(diag.count("overlapping_ops"), 3, "{:?}", diag.lines());
}

#[test]
fn children_follow_thread_then_time_order() {
    // Thread 0: 0 encloses 1 and 2; thread 1: 3 encloses 4. 5 stands alone.
    let thread_ops = vec![
        vec![OpId(0), OpId(1), OpId(2), OpId(5)],
        vec![OpId(3), OpId(4)],
    ];
    let parent = vec![
        None,
        Some(OpId(0)),
        Some(OpId(0)),
        None,
        Some(OpId(3)),
        None,
    ];
    let (children, roots) = children_and_roots(6, &thread_ops, &parent);
    assert_eq!(roots, [OpId(0), OpId(5), OpId(3)]);
    assert_eq!(children.of(OpId(0)), [OpId(1), OpId(2)]);
    assert_eq!(children.of(OpId(3)), [OpId(4)]);
    for leaf in [1, 2, 4, 5] {
        assert!(children.of(OpId(leaf)).is_empty());
    }
}

/// HF's BertForMaskedLM makes `CrossEntropyLoss()` in every forward call: torch numbers each
/// new instance, so each micro-batch's loss had its own module (`CrossEntropyLoss_0` … `_11`).
/// Its place (first of its class in the root's call) names it instead; modules that are the same
/// instance in every call keep torch's names, and two of one class in one call stay apart.
#[test]
fn a_module_made_in_every_call_is_named_by_its_place() {
    // Two calls of the root, each with two Linear children and a fresh loss module.
    let names = [
        "Model_0",
        "Linear_0",
        "Linear_1",
        "CrossEntropyLoss_0",
        "Model_0",
        "Linear_0",
        "Linear_1",
        "CrossEntropyLoss_1",
    ];
    let parent = [
        None,
        Some(0),
        Some(0),
        Some(0),
        None,
        Some(4),
        Some(4),
        Some(4),
    ];
    let mut per_call = Vec::new();
    let got = module_names(&names, &parent, &mut per_call);
    assert_eq!(
        got,
        [
            "Model_0",
            "Linear_0",
            "Linear_1",
            "CrossEntropyLoss_*",
            "Model_0",
            "Linear_0",
            "Linear_1",
            "CrossEntropyLoss_*"
        ]
    );
    assert_eq!(per_call, ["CrossEntropyLoss_*"]);
    // A steady program keeps torch's names exactly (the goldens' node names).
    let mut none = Vec::new();
    let steady = module_names(&names[..3], &parent[..3], &mut none);
    assert_eq!(steady, ["Model_0", "Linear_0", "Linear_1"]);
    assert!(none.is_empty());
}
