//! Every bundled sample against the references torch measured beside it on the GPU
//! (sample_traces/*/reference.json) and against the raw trace read independently.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde_json::Value;

use crate::common::{analyze, col, csv, json, median, samples};

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

#[test]
fn iterations_step_time_and_peak_match_torch() {
    for s in samples() {
        let reference = json(&s.join("reference.json"));
        let (_d, out) = analyze(&s);
        let sum = &out.analysis.summary;
        if let Some(n) = reference["profiled_iterations"].as_u64() {
            // libtorch sample: no markers, iterations found from backward passes.
            assert_eq!(sum.iterations as u64, n, "{s:?}");
            assert_eq!(
                serde_json::to_value(sum.iteration_detection).unwrap(),
                "backward_cycle"
            );
            let peaks: Vec<i64> = reference["steps_max_memory_allocated"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_i64().unwrap())
                .collect();
            assert_eq!(
                sum.peak_allocated_bytes,
                peaks.iter().copied().max(),
                "{s:?}"
            );
            let walls: Vec<f64> = reference["steps_wall_s"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_f64().unwrap())
                .collect();
            // Markerless iterations run from input copy to input copy, so they include the
            // inter-step gap a wall clock around step() does not: compare loosely.
            let ratio = sum.step_time_s / median(walls);
            assert!(
                (0.9..1.3).contains(&ratio),
                "{s:?}: step time ratio {ratio}"
            );
            continue;
        }
        let sched = &reference["schedule"];
        let active = sched["active"].as_u64().unwrap() as usize;
        assert_eq!(sum.iterations, active, "{s:?}");
        assert_eq!(
            serde_json::to_value(sum.iteration_detection).unwrap(),
            "profiler_step"
        );

        // Step time: the median ProfilerStep span, and a wall clock read by the program.
        let trace = json(&s.join("trace.json.gz"));
        let steps = profiler_steps(&trace);
        let durs: Vec<f64> = steps.values().map(|(a, b)| (b - a) * 1e-6).collect();
        let med = median(durs);
        assert!(
            (sum.step_time_s - med).abs() <= 0.01 * med,
            "{s:?}: {} vs {med}",
            sum.step_time_s
        );
        let walls: Vec<f64> = steps
            .keys()
            .map(|k| {
                reference["steps"][k.trim_start_matches("ProfilerStep#")]["wall_s"]
                    .as_f64()
                    .unwrap()
            })
            .collect();
        let wall = median(walls);
        assert!(
            (sum.step_time_s - wall).abs() <= 0.01 * wall,
            "{s:?}: {} vs wall {wall}",
            sum.step_time_s
        );

        // Peak: torch.cuda.max_memory_allocated per step, exactly.
        let ref_peak = steps
            .keys()
            .map(|k| {
                reference["steps"][k.trim_start_matches("ProfilerStep#")]["max_memory_allocated"]
                    .as_i64()
                    .unwrap()
            })
            .max();
        assert_eq!(sum.peak_allocated_bytes, ref_peak, "{s:?}");
        let (h, rows) = csv(&out.out_dir.join("iterations.csv"));
        for r in &rows {
            let label = &r[col(&h, "iteration")];
            let want = reference["steps"][label.trim_start_matches("ProfilerStep#")]
                ["max_memory_allocated"]
                .as_i64();
            assert_eq!(
                r[col(&h, "peak_allocated_bytes")].parse::<i64>().ok(),
                want,
                "{s:?} {label}"
            );
        }
        assert!(sum.peak_node.is_some());
        assert_eq!(sum.device.as_deref(), reference["gpu"].as_str());
    }
}

#[test]
fn node_gpu_times_add_up_to_each_iterations_kernel_time() {
    for s in samples() {
        let trace = json(&s.join("trace.json.gz"));
        let events = trace["traceEvents"].as_array().unwrap();
        // Launch time by correlation id, then GPU activity time per launch window.
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
        let base = trace["baseTimeNanoseconds"].as_f64();
        let steps = profiler_steps(&trace);
        for it in &out.analysis.step.iterations {
            let nodes_us = per_iter[&it.label];
            // The iteration window in the trace's own µs: from ProfilerStep ranges when there
            // are markers, else from steptrace's window (ns since the trace's ts origin).
            let (a, b) = steps
                .get(&it.label)
                .copied()
                .unwrap_or((it.start as f64 * 1e-3, it.end as f64 * 1e-3));
            let _ = base;
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
        let complete = out
            .analysis
            .node_stats
            .iter()
            .filter(|n| n.iterations_present == n_iter)
            .count();
        let reference = json(&s.join("reference.json"));
        if reference["profiled_iterations"].is_null() {
            // Python samples: identical steps, so every node is in every iteration.
            assert_eq!(complete, out.analysis.node_stats.len(), "{s:?}");
            assert_eq!(out.diagnostics.count("nodes_missing_in_some_iterations"), 0);
        } else {
            // libtorch: the last iteration has no following zero_grad; all else aligns.
            assert!(complete * 10 >= out.analysis.node_stats.len() * 9, "{s:?}");
        }
        // Ranks are 0..n in order.
        for (i, n) in out.analysis.node_stats.iter().enumerate() {
            assert_eq!(n.rank as usize, i);
        }
    }
}

#[test]
fn parsed_op_counts_match_torch_key_averages() {
    for s in samples() {
        let reference = json(&s.join("reference.json"));
        let Some(counts) = reference["key_averages_count"].as_object() else {
            continue;
        };
        let mut d = steptrace::diagnostics::Diagnostics::default();
        let k = steptrace::ingest::kineto::load(&s.join("trace.json.gz"), &mut d).unwrap();
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
        for (name, n) in counts {
            if name.starts_with("aten::") {
                assert_eq!(
                    ours.get(name.as_str()).copied().unwrap_or(0),
                    n.as_u64().unwrap(),
                    "{s:?} {name}"
                );
                checked += 1;
            }
        }
        assert!(checked > 20, "{s:?}: only {checked} ops checked");
    }
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
        // Forward precedes backward precedes the optimizer in rank order.
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
            .expect("samples carry a snapshot");
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
    // Without checkpointing nothing is recomputed.
    let (_d2, plain) = analyze(&crate::common::root().join("sample_traces/gpt_bf16"));
    assert!(plain.analysis.node_stats.iter().all(|n| !n.recompute));
}
