//! Every bundled capture against what torch and the program itself measured in the same run
//! (`reference*.json`, `torch_key_averages*.json.gz` beside each capture) and against the raw
//! trace read independently.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde_json::Value;

use crate::common::{
    analyze, col, csv, first_active, json, manifest, median, reference, samples, trace_path,
};

/// Per ProfilerStep#N window: (start µs, end µs) from the raw trace.
fn profiler_steps(trace: &Value) -> BTreeMap<String, (f64, f64)> {
    trace["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| {
            e["cat"] == "user_annotation"
                && e["name"]
                    .as_str()
                    .unwrap_or("")
                    .starts_with("ProfilerStep#")
        })
        .map(|e| {
            let ts = e["ts"].as_f64().unwrap();
            (
                e["name"].as_str().unwrap().to_owned(),
                (ts, ts + e["dur"].as_f64().unwrap()),
            )
        })
        .collect()
}

fn is_native(sample: &std::path::Path) -> bool {
    manifest(sample)["mode"] == "native"
}

/// The program's step number for analyze's iteration `i`.
fn step_of(sample: &std::path::Path, label: &str, i: usize) -> String {
    match label.strip_prefix("ProfilerStep#") {
        Some(n) => n.to_owned(),
        None => (first_active(sample) as usize + i).to_string(),
    }
}

#[test]
fn iterations_step_time_and_peak_match_torch() {
    for s in samples() {
        let reference = reference(&s);
        let active = manifest(&s)["schedule"]["active"].as_u64().unwrap() as usize;
        let (_d, out) = analyze(&s);
        let sum = &out.analysis.summary;
        assert_eq!(sum.iterations, active, "{s:?}");
        let want_detection = if is_native(&s) {
            "backward_cycle"
        } else {
            "profiler_step"
        };
        assert_eq!(
            serde_json::to_value(sum.iteration_detection).unwrap(),
            want_detection,
            "{s:?}"
        );

        // Peak per iteration: torch.cuda.max_memory_allocated() (the caching allocator's own
        // statistics for the C++ program) over the same step, exactly.
        let (h, rows) = csv(&out.out_dir.join("iterations.csv"));
        let mut peaks = Vec::new();
        for (i, r) in rows.iter().enumerate() {
            let step = step_of(&s, &r[col(&h, "iteration")], i);
            let want = reference["steps"][&step]["max_memory_allocated"]
                .as_i64()
                .unwrap();
            let got: i64 = r[col(&h, "peak_allocated_bytes")].parse().unwrap();
            assert_eq!(got, want, "{s:?} step {step}");
            peaks.push(want);
        }
        assert_eq!(
            sum.peak_allocated_bytes,
            peaks.iter().copied().max(),
            "{s:?}"
        );
        assert!(sum.peak_node.is_some());
        let gpu = manifest(&s)["gpu"].as_str().map(str::to_owned).or_else(|| {
            json(&trace_path(&s))["deviceProperties"][0]["name"]
                .as_str()
                .map(str::to_owned)
        });
        assert_eq!(sum.device, gpu, "{s:?}");

        // Step time: the median ProfilerStep span, and the program's own clock per step. The
        // last active step's clock also holds the trace export, so it is left out.
        let walls: Vec<f64> = (0..active - 1)
            .map(|i| {
                let step = step_of(&s, &out.analysis.step.iterations[i].label, i);
                reference["steps"][&step]["wall_s"].as_f64().unwrap()
            })
            .collect();
        if is_native(&s) {
            // Markerless iterations run from input copy to input copy, as the program's clock
            // does (it reads at the loop top): compare each.
            for (i, w) in walls.iter().enumerate() {
                let it = &out.analysis.step.iterations[i];
                let span = (it.end - it.start) as f64 * 1e-9;
                assert!(
                    (span - w).abs() <= 0.05 * w,
                    "{s:?} iteration {i}: {span} vs {w}"
                );
            }
            continue;
        }
        let trace = json(&trace_path(&s));
        let steps = profiler_steps(&trace);
        let durs: Vec<f64> = steps.values().map(|(a, b)| (b - a) * 1e-6).collect();
        let med = median(durs);
        assert!(
            (sum.step_time_s - med).abs() <= 0.01 * med,
            "{s:?}: {} vs {med}",
            sum.step_time_s
        );
        // The program's clock also covers the capture hooks between the optimizer's return
        // and the step boundary: within 2%.
        for (i, w) in walls.iter().enumerate() {
            let span = sum.step_times_s[i];
            assert!(
                (span - w).abs() <= 0.02 * w,
                "{s:?} iteration {i}: {span} vs wall {w}"
            );
        }
    }
}

#[test]
fn node_gpu_times_add_up_to_each_iterations_kernel_time() {
    for s in samples() {
        let trace = json(&trace_path(&s));
        let events = trace["traceEvents"].as_array().unwrap();
        let mut launch: HashMap<i64, f64> = HashMap::new();
        for e in events {
            if matches!(e["cat"].as_str(), Some("cuda_runtime" | "cuda_driver")) {
                if let Some(c) = e["args"]["correlation"].as_i64() {
                    launch.insert(c, e["ts"].as_f64().unwrap());
                }
            }
        }
        let gpu: Vec<(f64, f64)> = events
            .iter()
            .filter(|e| {
                matches!(
                    e["cat"].as_str(),
                    Some("kernel" | "gpu_memcpy" | "gpu_memset")
                )
            })
            .filter_map(|e| {
                Some((
                    *launch.get(&e["args"]["correlation"].as_i64()?)?,
                    e["dur"].as_f64()?,
                ))
            })
            .collect();
        let (_d, out) = analyze(&s);
        let (h, rows) = csv(&out.out_dir.join("node_iterations.csv"));
        let mut per_iter: BTreeMap<String, f64> = BTreeMap::new();
        for r in &rows {
            *per_iter.entry(r[col(&h, "iteration")].clone()).or_default() +=
                r[col(&h, "gpu_time_ns")].parse::<f64>().unwrap() * 1e-3;
        }
        assert_eq!(per_iter.len(), out.analysis.step.iterations.len());
        let steps = profiler_steps(&trace);
        for it in &out.analysis.step.iterations {
            let nodes_us = per_iter[&it.label];
            // The window in the trace's own µs: the ProfilerStep range when there is one, else
            // steptrace's window (ns on the same ts origin).
            let (a, b) = steps
                .get(&it.label)
                .copied()
                .unwrap_or((it.start as f64 * 1e-3, it.end as f64 * 1e-3));
            let total: f64 = gpu
                .iter()
                .filter(|(ts, _)| *ts >= a && *ts < b)
                .map(|(_, d)| d)
                .sum();
            assert!(total > 0.0, "{s:?} {}", it.label);
            assert!(
                (nodes_us - total).abs() <= 0.02 * total,
                "{s:?} {}: nodes {nodes_us} µs vs kernels {total} µs",
                it.label
            );
        }
    }
}

#[test]
fn every_node_appears_once_in_every_iteration() {
    for s in samples() {
        let (_d, out) = analyze(&s);
        let (h, rows) = csv(&out.out_dir.join("node_iterations.csv"));
        let mut seen: HashSet<(String, String)> = HashSet::new();
        for r in &rows {
            let key = (
                r[col(&h, "iteration")].clone(),
                r[col(&h, "node_name")].clone(),
            );
            assert!(seen.insert(key.clone()), "{s:?}: {key:?} twice");
        }
        let n_iter = out.analysis.step.iterations.len() as u32;
        assert!(
            out.analysis
                .node_stats
                .iter()
                .all(|n| n.iterations_present == n_iter),
            "{s:?}: {:?}",
            out.diagnostics.lines()
        );
        for (i, n) in out.analysis.node_stats.iter().enumerate() {
            assert_eq!(n.rank as usize, i);
        }
    }
}

#[test]
fn parsed_op_counts_match_torch_key_averages() {
    let mut checked_samples = 0;
    for s in samples() {
        let m = manifest(&s);
        let Some(ka) = m["files"]["torch_key_averages"].as_str() else {
            continue;
        };
        let counts = json(&s.join(ka));
        let mut d = steptrace::diagnostics::Diagnostics::default();
        let k = steptrace::ingest::kineto::load(&trace_path(&s), &mut d).unwrap();
        // key_averages() drops an op nested alone in a parent of the same name (torch's
        // EventList._remove_dup_nodes: autocast re-dispatch records `aten::layer_norm` twice),
        // so count the same way.
        let loaded = steptrace::ingest::Loaded {
            kineto: k,
            snapshot: None,
            exec_trace: None,
            diagnostics: d,
        };
        let t = steptrace::model::Trace::build(
            loaded,
            &mut steptrace::diagnostics::Diagnostics::default(),
        );
        let mut n_children: HashMap<u32, usize> = HashMap::new();
        for p in t.parent.iter().flatten() {
            *n_children.entry(p.0).or_default() += 1;
        }
        let mut ours: HashMap<&str, u64> = HashMap::new();
        for (i, o) in t.kineto.ops.iter().enumerate() {
            let dup = t.parent[i].is_some_and(|p| t.op(p).name == o.name && n_children[&p.0] == 1);
            if !dup {
                *ours.entry(t.kineto.str(o.name)).or_default() += 1;
            }
        }
        let mut checked = 0;
        for (name, n) in counts.as_object().unwrap() {
            if name.starts_with("aten::") {
                assert_eq!(
                    ours.get(name.as_str()).copied().unwrap_or(0),
                    n.as_u64().unwrap(),
                    "{s:?} {name}"
                );
                checked += 1;
            }
        }
        assert!(checked > 10, "{s:?}: only {checked} ops checked");
        checked_samples += 1;
    }
    assert!(checked_samples >= 4);
}

#[test]
fn phases_and_snapshot_clock() {
    for s in samples() {
        let (_d, out) = analyze(&s);
        let phases: HashSet<&str> = out
            .analysis
            .node_stats
            .iter()
            .map(|n| n.gtype.as_str())
            .collect();
        for p in ["forward", "backward", "optimizer"] {
            assert!(phases.contains(p), "{s:?}: no {p} nodes");
        }
        let first = |p: &str| {
            out.analysis
                .node_stats
                .iter()
                .position(|n| n.gtype.as_str() == p)
                .unwrap()
        };
        assert!(
            first("forward") < first("backward") && first("backward") < first("optimizer"),
            "{s:?}"
        );
        let snap = out
            .analysis
            .summary
            .snapshot
            .as_ref()
            .expect("captures carry a snapshot");
        assert!(snap.alloc_matches > 0, "{s:?}");
        assert!(
            snap.alloc_offset_us.unwrap().abs() < 1000.0,
            "{s:?}: {:?}",
            snap.alloc_offset_us
        );
        assert!(
            snap.history_before_trace,
            "{s:?}: history should start at program start"
        );
        if let Some(et) = &out.analysis.summary.execution_trace {
            assert!(
                et.ops_matched * 100 >= et.ops_with_rf_id * 99,
                "{s:?}: {et:?}"
            );
        }
    }
}

#[test]
fn checkpointed_model_has_recompute_in_backward() {
    let s = crate::common::root().join("sample_traces/gpt_bf16_ckpt");
    let (_d, out) = analyze(&s);
    let rec: Vec<_> = out
        .analysis
        .node_stats
        .iter()
        .filter(|n| n.recompute)
        .collect();
    assert!(!rec.is_empty());
    assert!(rec.iter().all(|n| n.gtype.as_str() == "backward"));
    let (_d2, plain) = analyze(&crate::common::root().join("sample_traces/gpt_bf16"));
    assert!(plain.analysis.node_stats.iter().all(|n| !n.recompute));
}

#[test]
fn each_rank_of_a_torchrun_capture_is_analysed() {
    let s = crate::common::root().join("sample_traces/ddp_mlp");
    for rank in [0, 1] {
        let dir = tempfile::tempdir().unwrap();
        let props = steptrace::AnalyzeProps {
            input: s.clone(),
            out: Some(dir.path().join("out")),
            top: 3,
            rank: Some(rank),
            ..Default::default()
        };
        let out = steptrace::analyze(&props).unwrap();
        assert_eq!(
            out.analysis.summary.trace,
            format!("trace_rank{rank}.json.gz")
        );
        let reference = json(&s.join(format!("reference_rank{rank}.json")));
        let want = (3..6)
            .map(|k| {
                reference["steps"][k.to_string()]["max_memory_allocated"]
                    .as_i64()
                    .unwrap()
            })
            .max();
        assert_eq!(out.analysis.summary.peak_allocated_bytes, want);
    }
    let dir = tempfile::tempdir().unwrap();
    let props = steptrace::AnalyzeProps {
        input: s,
        out: Some(dir.path().join("out")),
        rank: Some(5),
        ..Default::default()
    };
    assert!(steptrace::analyze(&props)
        .unwrap_err()
        .to_string()
        .contains("no rank 5"));
}

/// FlopCounterMode's per-op counts, named as steptrace reports them (`aten.addmm`).
fn flop_counter(s: &std::path::Path) -> Option<(u64, BTreeMap<String, u64>)> {
    let r = reference(s);
    let fc = r.get("flop_counter")?;
    let per: BTreeMap<String, u64> = fc["per_op"]
        .as_object()?
        .iter()
        .map(|(k, v)| (k.clone(), v.as_u64().unwrap()))
        .collect();
    Some((fc["total"].as_u64()?, per))
}

#[test]
fn matmul_flops_match_flop_counter_mode() {
    let mut checked = 0;
    for s in samples() {
        let Some((total, per_op)) = flop_counter(&s) else {
            continue;
        };
        let (_d, out) = analyze(&s);
        if out.analysis.node_stats.iter().any(|n| n.recompute) {
            continue; // checked below
        }
        let ours = out.analysis.summary.matmul_flops_per_iteration as f64;
        assert!(
            (ours - total as f64).abs() <= 0.02 * total as f64,
            "{s:?}: {ours} vs {total}"
        );
        for (op, want) in &per_op {
            let got = out
                .analysis
                .matmul_flops_by_op
                .get(op)
                .copied()
                .unwrap_or(0) as f64;
            assert!(
                (got - *want as f64).abs() <= 0.05 * *want as f64,
                "{s:?} {op}: {got} vs {want}"
            );
        }
        checked += 1;
    }
    assert!(checked >= 2);
}

#[test]
fn checkpointed_model_flops_are_the_plain_model_plus_what_was_recomputed() {
    // FlopCounterMode ran the same model un-profiled, where torch.utils.checkpoint stopped each
    // block's recomputation early (after the third linear); the profiled run recomputed every
    // block whole (16 linears under backward in the trace). So: everything but recomputation
    // equals the plain model's count, and the recomputation lies between the reference's and
    // the blocks' full forward.
    let root = crate::common::root().join("sample_traces");
    let (plain_total, _) = flop_counter(&root.join("gpt_bf16")).unwrap();
    let (ckpt_total, _) = flop_counter(&root.join("gpt_bf16_ckpt")).unwrap();
    let (_d, out) = analyze(&root.join("gpt_bf16_ckpt"));
    let rec: std::collections::HashSet<&str> = out
        .analysis
        .node_stats
        .iter()
        .filter(|n| n.recompute)
        .map(|n| n.node_name.as_str())
        .collect();
    let (mut plain, mut recomputed) = (0u64, 0u64);
    for r in &out.analysis.flops {
        if rec.contains(r.node_name.as_str()) {
            recomputed += r.matmul_flops;
        } else {
            plain += r.matmul_flops;
        }
    }
    assert!(
        (plain as f64 - plain_total as f64).abs() <= 0.02 * plain_total as f64,
        "{plain} vs {plain_total}"
    );
    let forward: u64 = out
        .analysis
        .flops
        .iter()
        .filter(|r| r.gtype == steptrace::analysis::Phase::Forward)
        .map(|r| r.matmul_flops)
        .sum();
    assert!(
        recomputed >= ckpt_total - plain_total,
        "{recomputed} < {}",
        ckpt_total - plain_total
    );
    assert!(recomputed <= forward, "{recomputed} > forward {forward}");
}

#[test]
fn roofline_places_nodes_by_machine_balance() {
    let (_d, out) = analyze(&crate::common::root().join("sample_traces/gpt_bf16"));
    let p = out
        .analysis
        .summary
        .peaks
        .as_ref()
        .expect("H200 is in the peak table");
    assert_eq!(p.device, "H200");
    for r in out
        .analysis
        .flops
        .iter()
        .filter(|r| r.flops > 0 && r.bytes > 0 && r.gpu_time_s > 0.0)
    {
        let balance =
            p.flops(steptrace::analysis::flops::Dtype::Bf16).unwrap() / (p.bandwidth_gbps * 1e9);
        if r.dtype == steptrace::analysis::flops::Dtype::Bf16 {
            let want = if r.arithmetic_intensity >= balance {
                steptrace::analysis::flops::Bound::Compute
            } else {
                steptrace::analysis::flops::Bound::Memory
            };
            assert_eq!(r.bound, Some(want), "{}", r.node_name);
        }
        let tf = r.flops as f64 / r.gpu_time_s / 1e12;
        assert!((r.achieved_tflops - tf).abs() < 1e-9);
    }
}

/// Issue 17, item 7: a trace with no CPU operators (GPU-only, as an inference server's or one
/// recorded with CUDA activity alone) gets kernel-level results, not an error; the figures are
/// checked against sums taken from the JSON here.
#[test]
fn issue17_gpu_only_trace_gets_kernel_level_results() {
    let s = crate::common::root().join("sample_traces/resnet18");
    let v = crate::common::json(&crate::common::trace_path(&s));
    let keep = |e: &serde_json::Value| {
        matches!(
            e["cat"].as_str(),
            Some("kernel" | "gpu_memcpy" | "gpu_memset" | "gpu_user_annotation")
        ) || e["ph"] == "M"
    };
    let mut gpu_only = v.clone();
    let mut events: Vec<serde_json::Value> = v["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| keep(e))
        .cloned()
        .collect();
    // A second copy of the first kernel, starting half-way through it on the same stream, so
    // that a stream's busy time differs from the sum of its activities.
    let mut twin = events
        .iter()
        .find(|e| e["cat"] == "kernel")
        .unwrap()
        .clone();
    let half = twin["dur"].as_f64().unwrap() / 2.0;
    twin["ts"] = serde_json::json!(twin["ts"].as_f64().unwrap() + half);
    events.push(twin);
    let kernels: Vec<&serde_json::Value> = events.iter().filter(|e| e["cat"] == "kernel").collect();
    let kernel_us: f64 = kernels.iter().map(|e| e["dur"].as_f64().unwrap()).sum();
    let activities = events
        .iter()
        .filter(|e| {
            matches!(
                e["cat"].as_str(),
                Some("kernel" | "gpu_memcpy" | "gpu_memset")
            )
        })
        .count();
    let n_kernels = kernels.len();
    gpu_only["traceEvents"] = serde_json::Value::Array(events.clone());
    let (_d, out) = crate::common::analyze_text(&gpu_only.to_string());
    let a = &out.analysis;
    assert!(
        (a.summary.gpu_time_s * 1e6 - kernel_us).abs() < 0.01,
        "{} vs {kernel_us}",
        a.summary.gpu_time_s
    );
    assert!(a.summary.gpu_busy_s > 0.0 && a.summary.gpu_busy_s <= a.summary.step_time_s);
    let (h, rows) = crate::common::csv(&out.out_dir.join("kernels.csv"));
    let count: usize = rows
        .iter()
        .map(|r| r[crate::common::col(&h, "count")].parse::<usize>().unwrap())
        .sum();
    assert_eq!(count, activities);
    let ns: i64 = rows
        .iter()
        .filter(|r| r[crate::common::col(&h, "kind")] == "kernel")
        .map(|r| {
            r[crate::common::col(&h, "total_ns")]
                .parse::<i64>()
                .unwrap()
        })
        .sum();
    assert!(
        (ns as f64 - kernel_us * 1e3).abs() <= n_kernels as f64,
        "{ns}"
    );
    assert_eq!(out.diagnostics.count("no_cpu_operators"), 1);
    assert_eq!(out.diagnostics.count("gpu_activity_without_launch"), 0);
    assert!(out.console.contains("GPU-only trace"), "{}", out.console);
    // The step is the GPU timeline's span: first activity start to last activity end.
    let acts: Vec<(f64, f64, i64, i64)> = events
        .iter()
        .filter(|e| {
            matches!(
                e["cat"].as_str(),
                Some("kernel" | "gpu_memcpy" | "gpu_memset")
            )
        })
        .map(|e| {
            let ts = e["ts"].as_f64().unwrap();
            let dur = e["dur"].as_f64().unwrap();
            let arg = |k: &str| e["args"][k].as_i64().unwrap();
            (ts, ts + dur, arg("device"), arg("stream"))
        })
        .collect();
    let first = acts.iter().map(|a| a.0).fold(f64::INFINITY, f64::min);
    let last = acts.iter().map(|a| a.1).fold(f64::NEG_INFINITY, f64::max);
    assert!(
        (a.summary.step_time_s * 1e6 - (last - first)).abs() < 0.01,
        "step {} s vs span {} us",
        a.summary.step_time_s,
        last - first
    );
    // Each stream's busy time is the union of its activities' intervals.
    let (sh, srows) = crate::common::csv(&out.out_dir.join("streams.csv"));
    let mut streams: Vec<(i64, i64)> = acts.iter().map(|a| (a.2, a.3)).collect();
    streams.sort_unstable();
    streams.dedup();
    assert_eq!(srows.len(), streams.len());
    for (dev, stream) in streams {
        let mut iv: Vec<(f64, f64)> = acts
            .iter()
            .filter(|a| (a.2, a.3) == (dev, stream))
            .map(|a| (a.0, a.1))
            .collect();
        iv.sort_by(|x, y| x.partial_cmp(y).unwrap());
        let (mut busy, mut cur) = (0.0, None::<(f64, f64)>);
        for (s, e) in iv.iter().copied() {
            cur = match cur {
                Some((cs, ce)) if s <= ce => Some((cs, ce.max(e))),
                Some((cs, ce)) => {
                    busy += ce - cs;
                    Some((s, e))
                }
                None => Some((s, e)),
            };
        }
        busy += cur.map_or(0.0, |(s, e)| e - s);
        let row = srows
            .iter()
            .find(|r| {
                r[crate::common::col(&sh, "device")] == dev.to_string()
                    && r[crate::common::col(&sh, "stream")] == stream.to_string()
            })
            .unwrap_or_else(|| panic!("no row for stream {dev}/{stream}"));
        let got: f64 = row[crate::common::col(&sh, "busy_ns")].parse().unwrap();
        assert!(
            (got - busy * 1e3).abs() <= iv.len() as f64,
            "stream {dev}/{stream}: {got} ns vs {} ns",
            busy * 1e3
        );
    }
    // The kernel with the most time: its count, total and longest run from the JSON.
    let top = &rows[0];
    let name = &top[crate::common::col(&h, "name")];
    let durs: Vec<f64> = kernels
        .iter()
        .filter(|e| e["name"].as_str() == Some(name.as_str()))
        .map(|e| e["dur"].as_f64().unwrap())
        .collect();
    let total_top: f64 = durs.iter().sum();
    let num = |c: &str| top[crate::common::col(&h, c)].parse::<f64>().unwrap();
    assert_eq!(num("count") as usize, durs.len(), "{name}");
    assert!((num("total_ns") - total_top * 1e3).abs() <= durs.len() as f64);
    assert!((num("max_ns") - durs.iter().fold(0.0, |m, d| d.max(m)) * 1e3).abs() <= 1.0);
    assert!(kernels.iter().all(|e| {
        let n = e["name"].as_str().unwrap();
        n == name.as_str()
            || kernels
                .iter()
                .filter(|k| k["name"].as_str() == Some(n))
                .map(|k| k["dur"].as_f64().unwrap())
                .sum::<f64>()
                <= total_top
    }));
}

/// The frameworks issue: a trace with no GPU activity (a CPU-only program; here ResNet-18's
/// capture with every GPU event, launch and device allocator event taken out) is read for its
/// host ops: the console names the CPU, not an "unknown GPU", gives no GPU-busy line, and
/// ranks the nodes by CPU time, which add up to what the ops took.
#[test]
fn a_cpu_only_trace_gets_cpu_nodes_ranked_by_cpu_time() {
    let mut v = crate::common::json(&crate::common::trace_path(
        &crate::common::root().join("sample_traces/resnet18"),
    ));
    let gpu_cats = [
        "kernel",
        "gpu_memcpy",
        "gpu_memset",
        "cuda_runtime",
        "cuda_driver",
        "ac2g",
        "gpu_user_annotation",
    ];
    let evs = v["traceEvents"].as_array_mut().unwrap();
    evs.retain(|e| {
        let cat = e["cat"].as_str().unwrap_or("");
        let device_memory = cat == "cpu_instant_event" && e["args"]["Device Type"] == 1;
        !(gpu_cats.contains(&cat) || device_memory)
    });
    v.as_object_mut().unwrap().remove("deviceProperties");
    let (_d, out) = crate::common::analyze_text(&v.to_string());
    let c = &out.console;
    assert!(
        c.contains("on the CPU (no GPU activity in the trace)"),
        "{c}"
    );
    assert!(!c.contains("GPU busy") && !c.contains("unknown GPU"), "{c}");
    assert!(c.contains("nodes by CPU time"), "{c}");
    let nodes = &out.analysis.node_stats;
    assert!(nodes.len() > 300, "{}", nodes.len());
    assert!(nodes
        .iter()
        .all(|n| n.median_run_time_s == 0.0 && n.device == "cpu"));
    // The table's first row is the node with the most CPU time.
    let most = nodes
        .iter()
        .max_by(|a, b| a.median_cpu_time_s.total_cmp(&b.median_cpu_time_s))
        .unwrap();
    let table = c.split("nodes by CPU time").nth(1).unwrap();
    let first_row = table.lines().nth(2).unwrap();
    assert!(
        first_row.trim_start().starts_with(&most.rank.to_string()),
        "{first_row}"
    );
}

/// The time by phase covers the iteration: its GPU times add up to the iteration's GPU time
/// (within 5%: medians of nodes against the median of sums, and GPU work no node launched),
/// and the phases a training step runs are there.
#[test]
fn time_by_phase_covers_the_iterations_gpu_time() {
    for s in crate::common::samples() {
        let (_d, out) = crate::common::analyze(&s);
        let sum = &out.analysis.summary;
        let gpu: f64 = sum.time_by_phase.values().map(|t| t.gpu_s).sum();
        assert!(
            (gpu - sum.gpu_time_s).abs() <= 0.05 * sum.gpu_time_s,
            "{s:?}: phases {gpu} s against {} s",
            sum.gpu_time_s
        );
        for p in ["forward", "backward", "optimizer"] {
            assert!(
                sum.time_by_phase
                    .get(&steptrace::analysis::Phase::from_name(p).unwrap())
                    .is_some_and(|t| t.cpu_s > 0.0),
                "{s:?}: no {p} in {:?}",
                sum.time_by_phase
            );
        }
    }
}
