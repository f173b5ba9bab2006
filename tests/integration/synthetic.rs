//! Hand-built traces with known structure: iteration detection without ProfilerStep markers,
//! phases, attribution and memory per node.

use std::fmt::Write;

use steptrace::analysis::Phase;

/// Builds a Kineto-like trace of `iters` training iterations: an input copy, two forward ops,
/// two backward nodes on an autograd thread, one optimizer op. `markers` adds ProfilerStep#N.
pub fn training_trace(iters: usize, markers: bool) -> String {
    training_trace_at(iters, markers, 1000.0)
}

/// [`training_trace`] starting at `t0` µs.
pub fn training_trace_at(iters: usize, markers: bool, t0: f64) -> String {
    let mut ev: Vec<String> = Vec::new();
    let mut corr = 0;
    let mut launch = |ev: &mut Vec<String>,
                      tid: i64,
                      ts: f64,
                      kind: &str,
                      name: &str,
                      gts: f64,
                      gdur: f64| {
        corr += 1;
        ev.push(format!(r#"{{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":{tid},"ts":{ts},"dur":1,"args":{{"correlation":{corr}}}}}"#));
        ev.push(format!(r#"{{"ph":"X","cat":"{kind}","name":"{name}","pid":0,"tid":7,"ts":{gts},"dur":{gdur},"args":{{"device":0,"stream":7,"correlation":{corr}}}}}"#));
    };
    let op = |ev: &mut Vec<String>, tid: i64, name: &str, ts: f64, dur: f64, seq: Option<i64>| {
        let seq = seq
            .map(|s| format!(r#","Sequence number":{s}"#))
            .unwrap_or_default();
        ev.push(format!(r#"{{"ph":"X","cat":"cpu_op","name":"{name}","pid":1,"tid":{tid},"ts":{ts},"dur":{dur},"args":{{"External id":1{seq}}}}}"#));
    };
    let mut total = 1000i64;
    let mem = |ev: &mut Vec<String>, tid: i64, ts: f64, addr: u64, bytes: i64, total: &mut i64| {
        *total += bytes;
        ev.push(format!(r#"{{"ph":"i","cat":"cpu_instant_event","s":"t","name":"[memory]","pid":1,"tid":{tid},"ts":{ts},"args":{{"Addr":{addr},"Bytes":{bytes},"Total Allocated":{t},"Total Reserved":1000000,"Device Type":1,"Device Id":0}}}}"#, t = *total));
    };
    for i in 0..iters {
        let t = t0 + i as f64 * 1000.0;
        let seq = 100 + i as i64 * 10;
        if markers {
            ev.push(format!(r#"{{"ph":"X","cat":"user_annotation","name":"ProfilerStep#{i}","pid":1,"tid":1,"ts":{},"dur":999}}"#, t - 0.5));
        }
        op(&mut ev, 1, "aten::to", t, 10.0, Some(seq));
        launch(
            &mut ev,
            1,
            t + 2.0,
            "gpu_memcpy",
            "Memcpy HtoD (Pageable -> Device)",
            t + 5.0,
            3.0,
        );
        mem(&mut ev, 1, t + 1.0, 64, 512, &mut total);
        op(&mut ev, 1, "aten::linear", t + 20.0, 30.0, Some(seq + 1));
        mem(&mut ev, 1, t + 22.0, 4096, 2048, &mut total);
        launch(&mut ev, 1, t + 25.0, "kernel", "gemm", t + 30.0, 20.0);
        op(&mut ev, 1, "aten::relu", t + 60.0, 10.0, Some(seq + 2));
        launch(&mut ev, 1, t + 62.0, "kernel", "relu_kernel", t + 65.0, 4.0);
        // Backward on the autograd thread.
        op(
            &mut ev,
            2,
            "autograd::engine::evaluate_function: ReluBackward0",
            t + 100.0,
            30.0,
            Some(seq + 2),
        );
        op(&mut ev, 2, "ReluBackward0", t + 101.0, 28.0, Some(seq + 2));
        op(
            &mut ev,
            2,
            "aten::threshold_backward",
            t + 102.0,
            20.0,
            None,
        );
        launch(
            &mut ev,
            2,
            t + 104.0,
            "kernel",
            "threshold_kernel",
            t + 110.0,
            5.0,
        );
        mem(&mut ev, 2, t + 115.0, 4096, -2048, &mut total);
        op(
            &mut ev,
            2,
            "autograd::engine::evaluate_function: AddmmBackward0",
            t + 140.0,
            60.0,
            Some(seq + 1),
        );
        op(&mut ev, 2, "AddmmBackward0", t + 141.0, 58.0, Some(seq + 1));
        op(&mut ev, 2, "aten::mm", t + 142.0, 40.0, None);
        launch(&mut ev, 2, t + 145.0, "kernel", "gemm_bw", t + 150.0, 30.0);
        // Optimizer on the main thread, no sequence number (no_grad).
        op(&mut ev, 1, "aten::add_", t + 300.0, 20.0, None);
        launch(
            &mut ev,
            1,
            t + 305.0,
            "kernel",
            "add_kernel",
            t + 310.0,
            6.0,
        );
        mem(&mut ev, 1, t + 400.0, 64, -512, &mut total);
    }
    let mut s = String::from(
        r#"{"schemaVersion":1,"deviceProperties":[{"id":0,"name":"Test GPU","totalGlobalMem":1000000}],"baseTimeNanoseconds":1700000000000000000,"traceEvents":["#,
    );
    for (i, e) in ev.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        let _ = write!(s, "\n{e}");
    }
    s.push_str("]}");
    s
}

fn run(text: &str) -> steptrace::Outcome {
    crate::common::analyze_text(text).1
}

#[test]
fn iterations_found_from_backward_passes_without_markers() {
    let out = run(&training_trace(4, false));
    let a = &out.analysis;
    assert_eq!(a.summary.iterations, 4);
    assert_eq!(
        serde_json::to_value(a.summary.iteration_detection).unwrap(),
        "backward_cycle"
    );
    check_structure(&out);
}

#[test]
fn profiler_step_markers_give_the_same_structure() {
    let out = run(&training_trace(3, true));
    assert_eq!(out.analysis.summary.iterations, 3);
    assert_eq!(
        serde_json::to_value(out.analysis.summary.iteration_detection).unwrap(),
        "profiler_step"
    );
    check_structure(&out);
}

fn check_structure(out: &steptrace::Outcome) {
    let a = &out.analysis;
    let phases: Vec<(&str, Phase)> = a
        .node_stats
        .iter()
        .map(|n| (n.node_name.as_str(), n.gtype))
        .collect();
    assert_eq!(
        phases,
        vec![
            ("data_loading:aten::to#0", Phase::DataLoading),
            ("forward:aten::linear#0", Phase::Forward),
            ("forward:aten::relu#0", Phase::Forward),
            ("backward:aten::threshold_backward#0", Phase::Backward),
            ("backward:aten::mm#0", Phase::Backward),
            ("optimizer:aten::add_#0", Phase::Optimizer),
        ]
    );
    let gpu: Vec<f64> = a
        .node_stats
        .iter()
        .map(|n| n.median_run_time_s * 1e6)
        .collect();
    let want = [3.0, 20.0, 4.0, 5.0, 30.0, 6.0];
    for (g, w) in gpu.iter().zip(want) {
        assert!((g - w).abs() < 1e-6, "{gpu:?}");
    }
    let linear = &a.node_stats[1];
    assert_eq!(linear.median_alloc_bytes, 2048);
    assert_eq!(
        linear.node_type.as_str(),
        "ACT",
        "made in forward, freed in backward"
    );
    assert_eq!(a.node_stats[0].node_type.as_str(), "INPUT");
    let thr = &a.node_stats[3];
    assert_eq!(thr.median_free_bytes, 2048);
    assert!(a
        .node_stats
        .iter()
        .all(|n| n.iterations_present as usize == a.summary.iterations));
    // Peak: 1000 + 512 + 2048 in every iteration.
    assert_eq!(a.summary.peak_allocated_bytes, Some(3560));
    assert_eq!(
        a.summary.peak_node.as_deref(),
        Some("forward:aten::linear#0")
    );
    assert_eq!(a.summary.device.as_deref(), Some("Test GPU"));
}

#[test]
fn whole_trace_when_there_is_no_backward() {
    let text = r#"{"traceEvents":[
        {"ph":"X","cat":"cpu_op","name":"aten::mm","pid":1,"tid":1,"ts":1,"dur":2},
        {"ph":"X","cat":"cpu_op","name":"aten::add","pid":1,"tid":1,"ts":4,"dur":2}]}"#;
    let out = run(text);
    assert_eq!(out.analysis.summary.iterations, 1);
    assert_eq!(
        serde_json::to_value(out.analysis.summary.iteration_detection).unwrap(),
        "whole_trace"
    );
    assert_eq!(out.analysis.node_stats.len(), 2);
}

#[test]
fn absolute_epoch_timestamps_without_base_time() {
    // Older PyTorch: no baseTimeNanoseconds, ts in absolute epoch µs (~1.7e15).
    let text = training_trace_at(2, true, 1.7e15)
        .replace(r#""baseTimeNanoseconds":1700000000000000000,"#, "");
    let out = run(&text);
    assert_eq!(out.analysis.summary.iterations, 2);
    assert_eq!(
        serde_json::to_value(out.analysis.summary.time_convention).unwrap(),
        "absolute_epoch"
    );
    check_structure(&out);
}

#[test]
fn run_directory_read_through_its_manifest() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("rank0")).unwrap();
    std::fs::write(dir.path().join("rank0/t.json"), training_trace(2, true)).unwrap();
    // A second trace that discovery by name alone would find ambiguous.
    std::fs::write(dir.path().join("other_trace.json"), "{}").unwrap();
    std::fs::write(
        dir.path().join("manifest.json"),
        r#"{"files": {"trace": "rank0/t.json"}}"#,
    )
    .unwrap();
    let props = steptrace::AnalyzeProps {
        input: dir.path().to_path_buf(),
        out: Some(dir.path().join("out")),
        top: 5,
        ..Default::default()
    };
    let out = steptrace::analyze(&props).unwrap();
    assert_eq!(out.analysis.summary.iterations, 2);
    assert_eq!(out.analysis.summary.trace, "t.json");
}

#[test]
fn absurd_timestamps_are_counted_not_fatal() {
    let text = training_trace(2, true).replacen(r#""ts":1000,"#, r#""ts":1e300,"#, 1);
    let out = run(&text);
    assert!(out.diagnostics.count("timestamp_out_of_range") >= 1);
}

/// [`training_trace`] with one more main-thread op after the update (with its kernel) in the
/// given iterations: work some steps do and others do not.
fn with_extra_op(iters: usize, extra_in: &[usize]) -> String {
    let mut s = training_trace(iters, true);
    assert!(s.ends_with("]}"));
    s.truncate(s.len() - 2);
    for (k, &i) in extra_in.iter().enumerate() {
        let t = 1000.0 + i as f64 * 1000.0 + 500.0;
        let c = 9000 + k;
        let _ = write!(
            s,
            r#",
{{"ph":"X","cat":"cpu_op","name":"aten::mean","pid":1,"tid":1,"ts":{t},"dur":20,"args":{{"External id":1}}}},
{{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":{},"dur":1,"args":{{"correlation":{c}}}}},
{{"ph":"X","cat":"kernel","name":"mean_kernel","pid":0,"tid":7,"ts":{},"dur":3,"args":{{"device":0,"stream":7,"correlation":{c}}}}}"#,
            t + 2.0,
            t + 10.0
        );
    }
    s.push_str("]}");
    s
}

/// The HF Trainer computes the mean loss for its log one step in ten: with that step in the
/// window, its nodes are extra work of that iteration (`extra_work_in_some_iterations`, naming
/// it), not nodes the steady iterations miss; a node in most iterations but not all is still
/// missing from the others.
#[test]
fn work_in_a_minority_of_iterations_is_extra_work_not_missing_nodes() {
    let out = run(&with_extra_op(3, &[1]));
    assert_eq!(out.diagnostics.count("extra_work_in_some_iterations"), 1);
    assert_eq!(out.diagnostics.count("nodes_missing_in_some_iterations"), 0);
    let text = format!("{:?}", out.diagnostics);
    assert!(
        text.contains("runs only in ProfilerStep#1 (1 of the 3 iterations)"),
        "{text}"
    );

    let out = run(&with_extra_op(3, &[0, 1]));
    assert_eq!(out.diagnostics.count("extra_work_in_some_iterations"), 0);
    assert_eq!(out.diagnostics.count("nodes_missing_in_some_iterations"), 1);
}
