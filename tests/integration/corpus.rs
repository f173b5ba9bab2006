//! Captures of public training programs that this project did not write, run unchanged on the
//! GPU machine (`sample_traces/corpus/`, provenance in `capture/corpus/README.md`): analyze
//! against what torch measured in the same run (issue 17).

use crate::common::{analyze, manifest, run_dirs};

#[test]
fn corpus_captures_match_torchs_own_peak_flops_and_the_timed_step() {
    for d in run_dirs("sample_traces/corpus", 3) {
        let m = manifest(&d);
        let r0 = &m["ranks"][0];
        // Captures without torch's references (a libtorch program stopped with Ctrl-C) and
        // multi-rank ones have tests of their own.
        if r0["reference"].is_null() || m["world_size"].as_i64() > Some(1) {
            continue;
        }
        let (_t, out) = analyze(&d);
        let s = &out.analysis.summary;
        // A window the program ended inside (nanoGPT's bench.py stops before the schedule
        // does) loses its last step: it is left out, with a warning, not counted as a 9 s
        // iteration of one node (issue 17).
        // pytorch-cpp's language model: capture's step boundary falls at its
        // `clip_grad_norm_`, so the window's last step ends before its optimizer (issue 74).
        let cut = m["completed"] == false || d.ends_with("cpp_lm");
        assert_eq!(
            s.iterations as u64,
            m["schedule"]["active"].as_u64().unwrap() - u64::from(cut),
            "{d:?}"
        );
        assert_eq!(
            out.diagnostics
                .lines()
                .iter()
                .any(|w| w.starts_with("last_iteration_cut_short")),
            cut,
            "{d:?}"
        );
        // torch.cuda.max_memory_allocated() of each window step, reset at its start.
        let peaks = r0["reference"]["window_step_peaks_bytes"]
            .as_array()
            .unwrap();
        let want = peaks.iter().filter_map(|p| p.as_i64()).max();
        assert_eq!(s.peak_allocated_bytes, want, "{d:?}");
        assert!(s.peak_node.is_some(), "{d:?}");
        // FlopCounterMode over one whole step (Python programs).
        if let Some(f) = r0["reference"]["flop_counter_total"].as_u64() {
            assert_eq!(s.matmul_flops_per_iteration, f, "{d:?}");
        }
        // The step time is the one capture timed with nothing recorded (the timing phase's
        // by CUDA events where it has them), the instrumented one beside it.
        // (Older manifests hold the phase's fields in `timing` itself, and no `source`.)
        let timing = &r0["timing"];
        let phase = match &timing["timing_phase"] {
            serde_json::Value::Null => timing,
            p => p,
        };
        let from_phase = timing["source"].as_str().unwrap_or("timing_phase") == "timing_phase";
        let timed = match phase["step_time_cuda_s"].as_f64() {
            Some(cuda) if from_phase => cuda,
            _ => m["step_time_s"].as_f64().unwrap(),
        };
        assert!(
            (s.step_time_s - timed).abs() < 1e-9,
            "{d:?}: {} vs {timed}",
            s.step_time_s
        );
        // The rest of the run when enough steps ran after the window (docs/capture.md).
        assert_eq!(
            s.step_time_source.as_str(),
            r0["timing"]["source"].as_str().unwrap_or("timing_phase"),
            "{d:?}"
        );
        assert!(s.step_time_instrumented_s > s.step_time_s, "{d:?}");
        assert!(
            (s.profiler_overhead.unwrap() - s.step_time_instrumented_s / s.step_time_s).abs()
                < 1e-9
        );
        // A timing phase that ended at a cap, not settled, is said to be a rough figure
        // (issue 17): exactly where the manifest says so.
        // (Newer manifests hold the stop in `timing_phase`; a figure from the steps after the
        // window is not the phase's.)
        let capped = matches!(phase["stop"].as_str(), Some("step_cap" | "time_cap")) && from_phase;
        assert_eq!(
            out.diagnostics.count("step_time_unsettled"),
            usize::from(capped) as u64,
            "{d:?}"
        );
    }
}

/// nanoGPT's bench.py under `torch.compile` (issue 17, item 4): the compiled forward is one
/// node (`Torch-Compiled Region`) with its GPU time and memory, the compiled backward's
/// Triton kernels are nodes of their own, every GPU microsecond of a whole iteration lands on a
/// node, and the peak is attributed to the node that made it.
#[test]
fn issue17_compiled_regions_and_triton_kernels_are_nodes_with_their_gpu_time_and_the_peak() {
    let d = crate::common::root().join("sample_traces/corpus/nanogpt_compile");
    let props = steptrace::AnalyzeProps {
        input: d,
        ..Default::default()
    };
    let (t, a, _diag) = steptrace::run_analysis(&props).unwrap();
    let a = &a;
    let name = |n: &steptrace::analysis::step::Node| t.kineto.str(t.op(n.op).name).to_owned();
    let whole: Vec<_> = a
        .step
        .iterations
        .iter()
        .filter(|it| it.backward.is_some())
        .collect();
    assert_eq!(
        whole.len(),
        2,
        "two whole iterations before the program ended"
    );
    for it in &whole {
        let nodes = &a.step.nodes[it.nodes.clone()];
        let region: Vec<_> = nodes
            .iter()
            .filter(|n| name(n).starts_with("Torch-Compiled Region"))
            .collect();
        assert_eq!(region.len(), 1, "{}", it.label);
        let r = region[0];
        assert!(r.gpu_time > 0 && r.kernels > 10, "{r:?}");
        assert!(
            r.alloc_bytes > 0,
            "the compiled forward allocates its activations"
        );
        let triton_bw = nodes
            .iter()
            .filter(|n| {
                n.phase == steptrace::analysis::step::Phase::Backward
                    && name(n).starts_with("triton_")
                    && n.gpu_time > 0
            })
            .count();
        assert!(
            triton_bw > 20,
            "{triton_bw} Triton kernels as backward nodes"
        );
        assert_eq!(it.gpu_unattributed, 0, "{}", it.label);
        let on_nodes: i64 = nodes.iter().map(|n| n.gpu_time).sum();
        assert_eq!(on_nodes, it.gpu_time, "{}", it.label);
    }
    let s = &a.summary;
    assert!(
        s.peak_node
            .as_deref()
            .is_some_and(|p| p.contains("Torch-Compiled Region")),
        "{:?}",
        s.peak_node
    );
}

/// The frameworks issue: PyTorch Lightning runs `training_step` and `backward` inside
/// `optimizer.step(closure)`, so the whole forward sits inside `Optimizer.step#SGD.step`
/// (Lightning's own demo LightningTransformer under `Trainer.fit`, bf16-mixed, unchanged).
/// The forward is forward all the same: its FLOPs are FlopCounterMode's count around the
/// forward, the backward's around the backward, the optimizer's update has no matmul; the
/// activations are found; every node is in every iteration.
#[test]
fn lightning_closure_forward_is_forward_and_its_flops_are_flop_counter_modes() {
    let d = crate::common::root().join("sample_traces/corpus/fw_lightning");
    let r = manifest(&d)["ranks"][0]["reference"].clone();
    let (_t, out) = analyze(&d);
    let s = &out.analysis.summary;
    let f = &s.matmul_flops_by_phase;
    assert_eq!(
        f.get(&steptrace::analysis::Phase::Forward).copied(),
        r["flop_counter_forward"].as_u64()
    );
    assert_eq!(
        f.get(&steptrace::analysis::Phase::Backward).copied(),
        r["flop_counter_backward"].as_u64()
    );
    assert_eq!(
        f.get(&steptrace::analysis::Phase::Optimizer)
            .copied()
            .unwrap_or(0),
        0
    );
    assert!(s.activations > 100, "{}", s.activations);
    assert!(s.peak_breakdown_bytes[&steptrace::analysis::memory::Category::Activation] > 100 << 20);
    assert_eq!(
        s.peak_breakdown_bytes[&steptrace::analysis::memory::Category::OptState],
        0,
        "SGD without momentum keeps none"
    );
    assert_eq!(out.diagnostics.count("nodes_missing_in_some_iterations"), 0);
    // The update itself: SGD's foreach add, in every iteration, as optimizer work.
    let upd: Vec<_> = out
        .analysis
        .node_stats
        .iter()
        .filter(|n| n.node_name.starts_with("optimizer:"))
        .collect();
    assert!(upd
        .iter()
        .any(|n| n.node_name == "optimizer:aten::_foreach_add_#0"));
    assert!(
        upd.len() < 10,
        "{:?}",
        upd.iter().map(|n| &n.node_name).collect::<Vec<_>>()
    );
    assert!(out
        .analysis
        .node_stats
        .iter()
        .any(|n| n.node_name.starts_with("data_loading:")));
}

/// The frameworks issue: prabhuomkar/pytorch-cpp's libtorch ResNet on CIFAR-10 (unchanged),
/// whose DataLoader builds each batch on the main thread (per sample `select`, `slice`,
/// `constant_pad_nd`, `flip`, then `stack`) before copying it: each iteration begins with
/// that data loading, none of it is optimizer work, and the iterations line up (only the
/// random flips' ops vary, as a note).
#[test]
fn libtorch_dataloader_on_the_main_thread_is_data_loading_and_iterations_line_up() {
    let d = crate::common::root().join("sample_traces/corpus/cpp_drn");
    let (_t, out) = analyze(&d);
    let nodes = &out.analysis.node_stats;
    let phase = |p: &'static str| nodes.iter().filter(move |n| n.node_name.starts_with(p));
    let batch_ops = [
        "aten::select",
        "aten::slice",
        "aten::constant_pad_nd",
        "aten::flip",
        "aten::stack",
    ];
    for n in phase("optimizer:") {
        assert!(
            !batch_ops.iter().any(|op| n.node_name.contains(op)),
            "{}",
            n.node_name
        );
    }
    assert!(phase("data_loading:aten::constant_pad_nd").count() > 50);
    assert!(phase("data_loading:aten::stack").count() >= 1);
    assert_eq!(out.analysis.summary.iterations, 3);
    assert_eq!(out.diagnostics.count("nodes_missing_in_some_iterations"), 0);
    // The first node of every iteration is the batch's first op, before its copy.
    let first = &out.analysis.step.nodes[out.analysis.step.iterations[1].nodes.start];
    assert!(first.name.starts_with("data_loading:"), "{}", first.name);
}

/// The frameworks issue, item 1, in a loop with neither optimizer nor DataLoader ranges:
/// pytorch/examples' word_language_model (unchanged) updates its parameters by hand
/// (`p.data.add_`) and builds the next batch from tensors already on the GPU (`get_batch`'s
/// slices and view, `repackage_hidden`'s detaches: host-only ops) before the next forward,
/// where the step boundary falls. Those ops are the tail after the update's last GPU work:
/// data loading, not optimizer work (the rule `data_tail` in analysis/step/build.rs; without
/// it all five are `optimizer:`).
#[test]
fn hand_written_update_then_batch_slicing_is_data_loading_not_optimizer() {
    let d = crate::common::root().join("sample_traces/corpus/py_word_lm");
    let (_t, out) = analyze(&d);
    let nodes = &out.analysis.node_stats;
    let names = |p: &str| -> Vec<String> {
        nodes
            .iter()
            .filter(|n| n.node_name.starts_with(p))
            .map(|n| n.node_name.clone())
            .collect()
    };
    assert_eq!(
        names("data_loading:"),
        [
            "data_loading:aten::slice#0",
            "data_loading:aten::slice#1",
            "data_loading:aten::view#0",
            "data_loading:aten::detach#0",
            "data_loading:aten::detach#1",
        ]
    );
    let batch_ops = ["aten::slice", "aten::view", "aten::detach"];
    for n in names("optimizer:") {
        assert!(!batch_ops.iter().any(|op| n.contains(op)), "{n}");
    }
    // The update is still the optimizer's, and every node is in every iteration.
    assert!(names("optimizer:")
        .iter()
        .any(|n| n.starts_with("optimizer:aten::add_")));
    assert_eq!(out.diagnostics.count("nodes_missing_in_some_iterations"), 0);
}

/// The frameworks issue, on the HuggingFace `Trainer` (GPT-2 from its config, 4 layers × 256
/// tokens, bf16, gradient accumulation 4; capture/corpus/programs/hf_trainer_gpt2.py): steps
/// are optimizer steps (the micro-batches before the first are said to be), the forward and
/// backward matmul FLOPs of a step are FlopCounterMode's around the forward and around the
/// backward of the same program on the GPU machine (capture/corpus/results/frameworks.jsonl,
/// `fw_hf_trainer_small`), the update has none, activations are found, and every node is in
/// every iteration.
#[test]
fn hf_trainer_with_accumulation_has_flop_counter_modes_forward_and_backward() {
    let d = crate::common::root().join("sample_traces/plan/hf_trainer_small");
    let m = manifest(&d);
    assert_eq!(m["ranks"][0]["boundary"], "optimizer_step");
    assert!(m["notes"][0]
        .as_str()
        .unwrap()
        .contains("boundaries before the first one were backward passes (gradient accumulation)"));
    let refs = std::fs::read_to_string(
        crate::common::root().join("capture/corpus/results/frameworks.jsonl"),
    )
    .unwrap();
    let r: serde_json::Value = refs
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|r| r["name"] == "fw_hf_trainer_small")
        .unwrap();
    let (_t, out) = analyze(&d);
    let s = &out.analysis.summary;
    let f = &s.matmul_flops_by_phase;
    assert_eq!(
        f.get(&steptrace::analysis::Phase::Forward).copied(),
        r["ref_flop_counter_forward"].as_u64()
    );
    assert_eq!(
        f.get(&steptrace::analysis::Phase::Backward).copied(),
        r["ref_flop_counter_backward"].as_u64()
    );
    assert_eq!(
        f.get(&steptrace::analysis::Phase::Optimizer)
            .copied()
            .unwrap_or(0),
        0
    );
    // Four micro-batches a step: four forward passes' worth of activations.
    assert!(s.activations > 100, "{}", s.activations);
    assert!(s.peak_breakdown_bytes[&steptrace::analysis::memory::Category::Activation] > 100 << 20);
    assert_eq!(out.diagnostics.count("nodes_missing_in_some_iterations"), 0);
}

/// The issue on first contact: a step's time split by phase, against the framework's own
/// timers in the same run. Lightning's `profiler="simple"` times each hook it calls
/// (`capture/corpus/programs/lightning_phase_timers.py`: the demo LightningTransformer under
/// `Trainer.fit`, bf16-mixed, captured by `steptrace capture` on an H100); each profiled
/// iteration is matched to its batch by the batch's start on the trace's clock (read here
/// from the trace itself). The forward's wall time is Lightning's `training_step`, the
/// backward's its `backward`, within 5%; data loading with the input copies is its
/// `train_dataloader_next` + `batch_to_device` within 15%; the optimizer with `zero_grad` is at
/// most what Lightning times in `optimizer_step` outside the closure (that also holds its
/// hooks, which are "between phases" here) and at least half of it. Phases and the time
/// between them add up to the iteration, in iterations.csv as in the analysis.
#[test]
fn phase_wall_times_match_lightnings_own_timers() {
    let d = crate::common::root().join("sample_traces/corpus/fw_lightning_timers");
    let timers = crate::common::json(&d.join("lightning_timers.json"));
    let trace = crate::common::json(&d.join("trace.json.gz"));
    let base = trace["baseTimeNanoseconds"].as_i64().unwrap();
    let (t, out) = analyze(&d);
    let starts: Vec<i64> = timers["batch_start_ns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_i64().unwrap())
        .collect();
    let dur = |k: &str, i: usize| timers["durations_s"][k][i].as_f64().unwrap();
    let csv = std::fs::read_to_string(t.path().join("out/iterations.csv")).unwrap();
    let head: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    let col = |row: &str, name: &str| -> f64 {
        let i = head.iter().position(|h| *h == name).unwrap();
        row.split(',').nth(i).unwrap().parse().unwrap()
    };
    let mut checked = 0;
    for e in trace["traceEvents"].as_array().unwrap() {
        let name = e["name"].as_str().unwrap_or("");
        if !(name.starts_with("ProfilerStep#") && e["cat"] == "user_annotation") {
            continue;
        }
        let s = base + (e["ts"].as_f64().unwrap() * 1e3) as i64;
        let end = s + (e["dur"].as_f64().unwrap() * 1e3) as i64;
        let batch = starts.iter().position(|&b| b >= s && b < end).unwrap();
        let row = csv
            .lines()
            .find(|l| l.starts_with(&format!("{name},")))
            .unwrap();
        let it = out
            .analysis
            .step
            .iterations
            .iter()
            .find(|it| it.label == name)
            .unwrap();
        let near = |ours: f64, theirs: f64, tol: f64, what: &str| {
            assert!(
                (ours - theirs).abs() <= tol * theirs,
                "{name} {what}: {ours:.6} s here, {theirs:.6} s by Lightning's timer"
            );
        };
        let fw = dur("[Strategy]SingleDeviceStrategy.training_step", batch);
        let bw = dur("[Strategy]SingleDeviceStrategy.backward", batch);
        near(col(row, "wall_forward_s"), fw, 0.05, "forward");
        near(col(row, "wall_backward_s"), bw, 0.05, "backward");
        let data = dur("[_TrainingEpochLoop].train_dataloader_next", batch)
            + dur("[Strategy]SingleDeviceStrategy.batch_to_device", batch);
        near(
            col(row, "wall_data_loading_s") + col(row, "wall_other_s"),
            data,
            0.15,
            "data loading",
        );
        // The last profiled step's optimizer_step also holds the profiler's export (the
        // capture's own work at the step's end): only the others bound the optimizer.
        let outside = dur(
            "[LightningModule]LightningTransformer.optimizer_step",
            batch,
        ) - fw
            - bw;
        let opt = col(row, "wall_optimizer_s") + col(row, "wall_zero_grad_s");
        if outside < 0.1 {
            assert!(
                opt <= outside && opt >= 0.5 * outside,
                "{name} optimizer: {opt:.6} s here, {outside:.6} s in optimizer_step outside its closure"
            );
        }
        let parts: i64 = it.wall.by_phase.iter().sum::<i64>() + it.wall.between;
        assert_eq!(parts, it.end - it.start, "{name}");
        checked += 1;
    }
    assert_eq!(checked, 3);
    let tp = &out.analysis.summary.time_by_phase;
    assert!(
        tp[&steptrace::analysis::Phase::Forward].wall_s
            > tp[&steptrace::analysis::Phase::Forward].cpu_s
    );
}

/// Issue 79, its headline: the GPU's utilisation is against the program's own step (capture
/// timed it, nothing recorded), the profiled step's share beside it as the profiler's. On
/// pytorch-cpp's residual network the profiled step is 13.6x the program's: 2% of it is 29%
/// of the program's step.
#[test]
fn utilisation_is_against_the_programs_own_step_and_the_profiled_share_is_labelled() {
    let d = crate::common::root().join("sample_traces/corpus/cpp_drn");
    let (_t, out) = analyze(&d);
    let s = &out.analysis.summary;
    assert_eq!(
        s.step_time_source,
        steptrace_formats::StepTimeSource::AfterWindow
    );
    let u = s.gpu_utilization.expect("the program's own step is known");
    assert!((u - s.gpu_busy_s / s.step_time_s).abs() < 1e-12);
    assert!((s.gpu_utilization_profiled - s.gpu_busy_s / s.step_time_instrumented_s).abs() < 1e-12);
    assert!(u > 10.0 * s.gpu_utilization_profiled, "{u}");
    let line = out
        .console
        .lines()
        .find(|l| l.starts_with("GPU utilisation"))
        .expect("the headline");
    assert!(
        line.starts_with(&format!("GPU utilisation {:.0}%", 100.0 * u)),
        "{line}"
    );
    assert!(line.contains("under the profiler 2%"), "{line}");
    // A trace without the program's own step claims none.
    let (_t, plain) = analyze(&crate::common::root().join("sample_traces/resnet18"));
    assert_eq!(plain.analysis.summary.gpu_utilization, None);
    assert!(plain
        .console
        .contains("the program's own step is not known"));
    // The idle and launch lines say they are the profiled iterations', and the launch count is
    // the table's (checked against HTA event by event in idle.rs).
    let l = &plain.analysis.launches;
    let short = l.each.iter().filter(|x| x.short()).count();
    assert_eq!(short, l.short);
    assert!(
        plain.console.contains(&format!(
            "launches (under the profiler): {short} of {} GPU activities ran shorter",
            l.each.len()
        )),
        "{}",
        plain.console
    );
    assert!(plain
        .console
        .contains("GPU idle per profiled iteration on stream 7: host wait"));
}
