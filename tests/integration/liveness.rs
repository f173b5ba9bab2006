//! Tensor categories against torch's own classifier, activation liveness against the
//! Execution Trace, memory conservation, and the seed's CSV schema test.

use std::collections::HashMap;

use serde_json::Value;

use crate::common::{analyze, col, csv, json, manifest, run_dirs, samples, trace_path};

/// Every committed capture: the samples, the corpus of public programs, the planner's bases.
fn every_capture() -> Vec<std::path::PathBuf> {
    let mut v = samples();
    v.extend(run_dirs("sample_traces/corpus", 5));
    v.extend(run_dirs("sample_traces/plan", 2));
    v
}

const TORCH_CATEGORIES: [&str; 8] = [
    "PARAMETER",
    "OPTIMIZER_STATE",
    "INPUT",
    "TEMPORARY",
    "ACTIVATION",
    "GRADIENT",
    "AUTOGRAD_DETAIL",
    "UNKNOWN",
];

#[test]
fn categories_match_torch_memory_profiler_at_its_peak() {
    let mut checked = 0;
    // The corpus and the planner's bases too (issue 21): capture's paused history left their
    // parameters and optimizer state unnamed until the snapshot's blocks were read.
    for s in every_capture() {
        let m = manifest(&s);
        let Some(tl) = m["files"]["memory_timeline_torch"].as_str() else {
            continue;
        };
        // export_memory_timeline: [times (epoch µs), sizes per time: [_, one per category...]].
        let v = json(&s.join(tl));
        let (times, sizes) = (v[0].as_array().unwrap(), v[1].as_array().unwrap());
        let totals: Vec<i64> = sizes
            .iter()
            .map(|x| {
                x.as_array()
                    .unwrap()
                    .iter()
                    .map(|b| b.as_i64().unwrap())
                    .sum()
            })
            .collect();
        // Inside a compiled region torch's classifier counts the region's saved tensors as
        // PARAMETER and INPUT (nanoGPT: PARAMETER 472 MiB before the region, 669 MiB at its
        // peak, with no parameter made): there only its first point, before any region ran,
        // names parameters and optimizer state reliably.
        let compiled = std::fs::read(trace_path(&s)).is_ok_and(|_| {
            json(&trace_path(&s))["traceEvents"]
                .as_array()
                .unwrap()
                .iter()
                .any(|e| {
                    e["name"]
                        .as_str()
                        .is_some_and(|n| n.starts_with("Torch-Compiled Region"))
                })
        });
        let i = if compiled {
            0
        } else {
            (0..totals.len())
                .max_by_key(|&k| (totals[k], std::cmp::Reverse(k)))
                .unwrap()
        };
        let at = times[i].as_f64().unwrap();
        let torch: HashMap<&str, i64> = TORCH_CATEGORIES
            .iter()
            .enumerate()
            .map(|(k, c)| (*c, sizes[i][k + 1].as_i64().unwrap()))
            .collect();
        let (_d, out) = analyze(&s);
        let (h, rows) = csv(&out.out_dir.join("memory_timeline.csv"));
        let row = rows
            .iter()
            .take_while(|r| r[col(&h, "epoch_us")].parse::<f64>().unwrap() <= at)
            .last()
            .or(if compiled { rows.first() } else { None })
            .expect("a timeline row before torch's peak");
        let ours = |k: &str| row[col(&h, k)].parse::<i64>().unwrap();
        let close = |a: i64, b: i64| (a - b).abs() as f64 <= (0.05 * b as f64).max(64.0 * 1024.0);
        let pairs: &[(&str, &str)] = if compiled {
            &[("param", "PARAMETER"), ("opt_state", "OPTIMIZER_STATE")]
        } else {
            &[
                ("param", "PARAMETER"),
                ("opt_state", "OPTIMIZER_STATE"),
                ("grad", "GRADIENT"),
                ("input", "INPUT"),
            ]
        };
        for &(o, t) in pairs {
            // FSDP2's example, run a second time by capture (it ended before the window), loads
            // the checkpoint its first run saved: its sharded parameters and Adam state come
            // from the program's own `load_model`/`load_optim` through `distribute_tensor`, and
            // no frame says which are which (torch's classifier knows from the optimizer).
            // They are counted OTHER; the rest is checked.
            if s.to_string_lossy().contains("fsdp2") && matches!(o, "param" | "opt_state") {
                continue;
            }
            // word_language_model keeps its whole dataset on the device from before the window
            // (`batchify`): ours names those 7.1 MiB INPUT by their stack; torch's timeline
            // counts 2.7 MiB more as INPUT, which no block of the snapshot accounts for. The
            // gap is documented (docs/analysis.md); ours must not exceed torch's.
            // The HF Trainer's planner base (GPT-2, 4 layers): ours names 1 MiB more INPUT than
            // torch at its peak (1,114,624 against 66,048 bytes of a 2.1 GB peak: one block
            // of 1 MiB + 512 bytes, GPT-2's 1024x1024 causal-mask size, kept from before the
            // window; torch leaves it UNKNOWN). Not yet explained; held to that one block.
            if o == "input" && s.ends_with("hf_trainer_small") {
                assert!(
                    ours(o) - torch[t] <= (1 << 20) + 512,
                    "{s:?}: {} vs {}",
                    ours(o),
                    torch[t]
                );
                continue;
            }
            // FSDP2 on four ranks (the same program on each): at its peak torch names 272 KiB
            // INPUT on rank 0 and 16 KiB on ranks 1-3, the totals equal, the 256 KiB more
            // UNKNOWN there. Ours (rank 0) is held to what torch says on rank 1.
            if o == "input" && s.ends_with("fsdp2_4_mp") {
                let v = json(&s.join("memory_timeline_torch_rank1.json.gz"));
                let sizes = v[1].as_array().unwrap();
                let at_peak = sizes
                    .iter()
                    .max_by_key(|x| {
                        x.as_array()
                            .unwrap()
                            .iter()
                            .map(|b| b.as_i64().unwrap())
                            .sum::<i64>()
                    })
                    .unwrap();
                let rank1 = at_peak[3].as_i64().unwrap();
                assert!(
                    close(ours(o), rank1),
                    "{s:?}: {} vs rank 1's {rank1}",
                    ours(o)
                );
                continue;
            }
            if o == "input" && s.ends_with("py_word_lm") {
                assert!(ours(o) <= torch[t] && ours(o) * 10 >= torch[t] * 7, "{s:?}");
                continue;
            }
            assert!(
                close(ours(o), torch[t]),
                "{s:?} {o}: ours {} vs torch {}",
                ours(o),
                torch[t]
            );
        }
        if compiled {
            checked += 1;
            continue;
        }
        // torch floods ACTIVATION over every forward value computed from the inputs, whether
        // the backward keeps it or not (`_set_activations` in torch/profiler/_memory_profiler.py);
        // ours is what the backward finds alive, and a forward value freed before the backward
        // begins is temporary. The two agree where torch's peak is at the backward's start (the
        // forward's temporaries gone); where it falls at the forward's end (FSDP2's example: the
        // logits' bf16 copy, cast to fp32 there), torch's ACTIVATION is ours plus the forward
        // temporaries alive at that moment. torch also leaves many activations and optimizer
        // temporaries UNKNOWN: ours must cover what torch named and never exceed what torch saw
        // as tensors (the sum below).
        let fwd_temporary = forward_temporaries_alive_at(&s, at);
        let act = ours("activation") + fwd_temporary;
        assert!(
            // (64 KiB of slack, as `close` allows: the DDP tutorial's activations are 1.5 KiB.)
            (act + 64 * 1024) as f64 >= 0.95 * torch["ACTIVATION"] as f64,
            "{s:?}: activation ours {} (+ {fwd_temporary} forward temporaries) torch {}, input ours {} torch {}",
            ours("activation"),
            torch["ACTIVATION"],
            ours("input"),
            torch["INPUT"]
        );
        let torch_rest =
            torch["ACTIVATION"] + torch["TEMPORARY"] + torch["AUTOGRAD_DETAIL"] + torch["UNKNOWN"];
        // Slack: 64 KiB or 0.5% (the row of ours is the last at or before torch's peak by the
        // two clocks, which agree to about 0.1 ms: FSDP2's slowed four-rank run, 27.2 MB, came
        // 75 KiB over with 64 KiB).
        let slack = (64 * 1024).max(torch_rest / 200);
        assert!(
            ours("activation") + ours("temporary") <= torch_rest + slack,
            "{s:?}: activation {} + temporary {} against torch's {torch_rest} (activation {}, temporary {}, autograd {}, unknown {}); ours param {} grad {} opt {} input {} other {}",
            ours("activation"),
            ours("temporary"),
            torch["ACTIVATION"],
            torch["TEMPORARY"],
            torch["AUTOGRAD_DETAIL"],
            torch["UNKNOWN"],
            ours("param"),
            ours("grad"),
            ours("opt_state"),
            ours("input"),
            ours("other")
        );
        checked += 1;
    }
    assert!(
        checked >= 9,
        "only {checked} captures carry torch's timeline"
    );
}

/// Bytes of the blocks our analysis calls temporary that a forward node made and that are
/// alive at `at_us` (epoch µs, torch's clock): the forward values the backward does not keep.
/// Rank 0 of a multi-rank capture, as the timeline torch wrote for it.
fn forward_temporaries_alive_at(dir: &std::path::Path, at_us: f64) -> i64 {
    let world = manifest(dir)["world_size"].as_i64().unwrap_or(1);
    let props = steptrace::AnalyzeProps {
        input: dir.to_path_buf(),
        rank: (world > 1).then_some(0),
        ..Default::default()
    };
    let (t, a, _d) = steptrace::run_analysis(&props).unwrap();
    let k = &t.kineto;
    a.memory
        .blocks
        .iter()
        .filter(|b| b.category == steptrace::analysis::memory::Category::Temporary)
        .filter(|b| {
            b.producer
                .is_some_and(|p| a.step.nodes[p].phase == steptrace::analysis::step::Phase::Forward)
        })
        .filter(|b| k.epoch_us(b.alloc) <= at_us && b.free.is_none_or(|f| k.epoch_us(f) > at_us))
        .map(|b| b.size)
        .sum()
}

/// Threads of a trace file that ran a matmul-family op (each fetches a cuBLAS handle and
/// its workspace), read with serde_json apart from steptrace's reader.
fn matmul_threads(trace: &std::path::Path) -> usize {
    let v = json(trace);
    let mut threads = std::collections::BTreeSet::new();
    for e in v["traceEvents"].as_array().unwrap() {
        let name = e["name"].as_str().unwrap_or("");
        let mm = [
            "aten::mm",
            "aten::addmm",
            "aten::bmm",
            "aten::baddbmm",
            "aten::_scaled_mm",
        ];
        if e["cat"] == "cpu_op" && mm.contains(&name) {
            threads.insert((e["pid"].to_string(), e["tid"].to_string()));
        }
    }
    threads.len()
}

// Issue 21: OTHER used to be the total minus the named parts (so a sum check could not fail)
// and held 49-100% of the samples' peaks. What stays unnamed must be under 5% of the peak on
// every capture, and the workspaces named must be the ones the program had: one 32 MiB cuBLAS
// workspace per thread that ran a matmul, and at most a few MiB of other libraries' state.
#[test]
fn issue21_unnamed_memory_is_under_5_percent_of_the_peak_and_workspaces_are_the_matmul_threads() {
    let mut checked = 0;
    for dir in every_capture() {
        let m = manifest(&dir);
        let world = m["world_size"].as_i64().unwrap_or(1);
        for rank in 0..world {
            let props = steptrace::AnalyzeProps {
                input: dir.clone(),
                rank: (world > 1).then_some(rank),
                ..Default::default()
            };
            let (_t, a, _d) = steptrace::run_analysis(&props).unwrap();
            let s = &a.summary;
            let peak = s.peak_allocated_bytes.unwrap();
            let part = |k: &str| {
                s.peak_breakdown_bytes[&steptrace::analysis::memory::Category::from_key(k).unwrap()]
            };
            assert_eq!(
                s.peak_breakdown_bytes.values().sum::<i64>(),
                peak,
                "{dir:?}"
            );
            // pytorch-cpp's LSTM language model: cuDNN keeps the LSTM's weights in one flat
            // buffer, so Adam's per-weight moments made before the window (their stacks do not
            // name the optimizer) match no parameter block's size and stay unnamed: 37.8 MB,
            // 8.6% of its peak (docs/analysis.md, "What stays OTHER").
            let bound = if dir.ends_with("cpp_lm") { 10 } else { 20 };
            assert!(
                part("other") * bound < peak,
                "{dir:?} rank {rank}: OTHER {} of a {peak}-byte peak",
                part("other")
            );
            let trace = if world > 1 {
                dir.join(format!("trace_rank{rank}.json.gz"))
            } else {
                trace_path(&dir)
            };
            let n = matmul_threads(&trace) as i64;
            let ws = part("workspace");
            // Beyond cuBLAS's: cuBLASLt's own 1 MiB each (libtorch), cuDNN's RNN state
            // (word_language_model's LSTM: 6.2 MiB).
            assert!(
                ws >= n * (32 << 20) && ws <= n * (32 << 20) + (8 << 20),
                "{dir:?} rank {rank}: {ws} workspace bytes for {n} matmul threads"
            );
            checked += 1;
        }
    }
    assert!(checked >= 15, "{checked}");
}

/// `Total Allocated` of the analysed device's allocator events in time order, read with
/// serde_json apart from steptrace's reader: the CUDA device with the most events.
fn allocator_totals(trace: &std::path::Path) -> Vec<i64> {
    let v = json(trace);
    let mut per_device: std::collections::BTreeMap<i64, Vec<(f64, i64)>> = Default::default();
    for e in v["traceEvents"].as_array().unwrap() {
        let a = &e["args"];
        if e["name"] == "[memory]" && a["Device Type"] == 1 {
            per_device
                .entry(a["Device Id"].as_i64().unwrap())
                .or_default()
                .push((
                    e["ts"].as_f64().unwrap(),
                    a["Total Allocated"].as_i64().unwrap(),
                ));
        }
    }
    let mut events = per_device
        .into_values()
        .max_by_key(|v| v.len())
        .unwrap_or_default();
    events.sort_by(|a, b| a.0.total_cmp(&b.0));
    events.into_iter().map(|(_, t)| t).collect()
}

// Issue 21: the rows' parts add up to the row's total by construction (OTHER is the rest), so
// the total itself is checked against the trace's own allocator events, one row per event.
#[test]
fn memory_timeline_rows_add_up_to_the_allocator_total() {
    for s in samples() {
        let (_d, out) = analyze(&s);
        let (h, rows) = csv(&out.out_dir.join("memory_timeline.csv"));
        let totals: Vec<i64> = rows
            .iter()
            .map(|r| r[col(&h, "total_allocated_bytes")].parse().unwrap())
            .collect();
        assert_eq!(totals, allocator_totals(&trace_path(&s)), "{s:?}");
        let cats = [
            "param",
            "grad",
            "opt_state",
            "activation",
            "input",
            "temporary",
            "workspace",
            "other",
        ];
        for r in &rows {
            let parts: i64 = cats
                .iter()
                .map(|c| r[col(&h, c)].parse::<i64>().unwrap())
                .sum();
            assert_eq!(
                parts,
                r[col(&h, "total_allocated_bytes")].parse::<i64>().unwrap(),
                "{s:?}"
            );
        }
        // Parameters and optimizer state are there from the first event to the last.
        let first = &rows[0];
        assert!(first[col(&h, "param")].parse::<i64>().unwrap() > 0, "{s:?}");
    }
}

#[test]
fn csv_schema_has_the_seed_columns_and_no_empty_cells() {
    let node_cols = [
        "rank",
        "node_name",
        "node_type",
        "gtype",
        "median_run_time_s",
        "median_peak_mem_bytes",
        "median_active_mem_bytes",
        "device",
    ];
    let act_cols = [
        "activation_name",
        "creation_rank",
        "last_fw_use_rank",
        "first_bw_use_rank",
        "last_bw_use_rank",
        "median_mem_size_bytes",
        "inactive_time_s",
        "recomp_time_s",
        "recomp_memory_bytes",
        "swap_time_s",
        "recompute_ratio",
        "producer_op",
    ];
    for s in samples() {
        let (_d, out) = analyze(&s);
        for (file, cols) in [
            ("node_stats.csv", &node_cols[..]),
            ("activation_stats.csv", &act_cols[..]),
        ] {
            let (h, rows) = csv(&out.out_dir.join(file));
            assert!(!rows.is_empty(), "{s:?} {file}");
            for c in cols {
                let k = col(&h, c);
                for r in &rows {
                    let v = &r[k];
                    assert!(
                        !v.is_empty() && !v.eq_ignore_ascii_case("nan") && !v.contains("inf"),
                        "{s:?} {file} {c}: '{v}'"
                    );
                }
            }
        }
    }
}

#[test]
fn activation_liveness_is_ordered_and_equals_the_execution_trace() {
    for s in samples() {
        let (_d, out) = analyze(&s);
        let acts = &out.analysis.liveness.activations;
        assert!(!acts.is_empty(), "{s:?}");
        for a in acts {
            assert!(
                a.creation_rank <= a.last_fw_use_rank
                    && a.last_fw_use_rank < a.first_bw_use_rank
                    && a.first_bw_use_rank <= a.last_bw_use_rank,
                "{s:?} {a:?}"
            );
        }
        let Some(et_file) = manifest(&s)["files"]["exec_trace"]
            .as_str()
            .map(str::to_owned)
        else {
            continue;
        };
        // Independently: which trace ops read each storage (ET inputs joined by rf_id).
        let et = json(&s.join(et_file));
        let trace = json(&trace_path(&s));
        let base_ops: HashMap<i64, (f64, String)> = trace["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["cat"] == "cpu_op")
            .filter_map(|e| {
                Some((
                    e["args"]["Record function id"].as_i64()?,
                    (e["ts"].as_f64()?, e["name"].as_str()?.to_owned()),
                ))
            })
            .collect();
        let mut readers: HashMap<i64, Vec<f64>> = HashMap::new();
        for n in et["nodes"].as_array().unwrap() {
            let rf = n["attrs"]
                .as_array()
                .unwrap()
                .iter()
                .find(|a| a["name"] == "rf_id")
                .and_then(|a| a["value"].as_i64());
            let Some((ts, _)) = rf.and_then(|r| base_ops.get(&r)) else {
                continue;
            };
            for (v, ty) in n["inputs"]["values"]
                .as_array()
                .unwrap()
                .iter()
                .zip(n["inputs"]["types"].as_array().unwrap())
            {
                let ty = ty.as_str().unwrap_or("");
                let mut push = |t: &Value| {
                    if let Some(sid) = t.get(1).and_then(Value::as_i64) {
                        readers.entry(sid).or_default().push(*ts);
                    }
                };
                if ty.starts_with("Tensor(") {
                    push(v);
                } else if ty.contains("Tensor") {
                    v.as_array().into_iter().flatten().for_each(&mut push);
                }
            }
        }
        // Node spans of the first iteration, by rank, from node_iterations.csv (µs, trace clock).
        let (h, rows) = csv(&out.out_dir.join("node_iterations.csv"));
        let it0 = &out.analysis.step.iterations[0];
        let spans: HashMap<u32, (f64, f64, String)> = rows
            .iter()
            .filter(|r| r[col(&h, "iteration")] == it0.label)
            .map(|r| {
                let s = (it0.start + r[col(&h, "start_ns")].parse::<i64>().unwrap()) as f64 * 1e-3;
                let d = r[col(&h, "cpu_time_ns")].parse::<f64>().unwrap() * 1e-3;
                (
                    r[col(&h, "rank")].parse().unwrap(),
                    (s, s + d, r[col(&h, "gtype")].clone()),
                )
            })
            .collect();
        // Storage ids name memory, which the allocator hands out again: an activation's
        // readers are those that read its id while its block was allocated (µs), each block of
        // the first iteration named as analyze names activations (`<producer>/act<k>`).
        let mem = &out.analysis.memory;
        let mut life: HashMap<String, (f64, f64)> = HashMap::new();
        let mut kth: HashMap<usize, u32> = HashMap::new();
        for b in &mem.blocks {
            let Some(p) = b.producer.filter(|p| it0.nodes.contains(p)) else {
                continue;
            };
            if b.category != steptrace::analysis::memory::Category::Activation {
                continue;
            }
            let k = kth.entry(p).or_insert(0);
            let name = format!("{}/act{}", out.analysis.step.nodes[p].name, k);
            *k += 1;
            let free = b.free.map_or(f64::MAX, |f| f as f64 * 1e-3);
            life.insert(name, (b.alloc as f64 * 1e-3, free));
        }
        let mut checked = 0;
        for a in acts.iter().filter(|a| a.storage_id >= 0) {
            let (Some(ts), Some(&(alloc, free))) =
                (readers.get(&a.storage_id), life.get(&a.activation_name))
            else {
                continue;
            };
            let eps = 2e-3;
            let ts: Vec<f64> = ts
                .iter()
                .copied()
                .filter(|t| *t >= alloc - eps && *t <= free + eps)
                .collect();
            let (Some(first), Some(last)) = (
                spans.get(&a.first_bw_use_rank),
                spans.get(&a.last_bw_use_rank),
            ) else {
                continue;
            };
            // The reported first and last backward readers do read it while it lives, and no
            // backward reader of this iteration lies before the first or after the last.
            // Spans come from integer ns, raw ts from f64 µs: allow the rounding.
            for (span, rank) in [(first, a.first_bw_use_rank), (last, a.last_bw_use_rank)] {
                assert!(
                    ts.iter().any(|t| *t >= span.0 - eps && *t <= span.1 + eps),
                    "{s:?} {}: rank {rank} reads nothing",
                    a.activation_name,
                );
            }
            let bw_start = spans
                .values()
                .filter(|x| x.2 == "backward")
                .map(|x| x.0)
                .fold(f64::MAX, f64::min);
            let bw_end = spans
                .values()
                .filter(|x| x.2 == "backward")
                .map(|x| x.1)
                .fold(f64::MIN, f64::max);
            for t in ts.iter().filter(|t| **t >= bw_start && **t <= bw_end) {
                assert!(
                    *t >= first.0 - eps && *t <= last.1 + eps,
                    "{s:?} {}: read at {t} outside [{}, {}]",
                    a.activation_name,
                    first.0,
                    last.1
                );
            }
            checked += 1;
        }
        assert!(
            checked > 0,
            "{s:?}: no activation was checked against the ET"
        );
    }
}

#[test]
fn without_an_execution_trace_liveness_comes_from_allocator_events() {
    let s = crate::common::root().join("sample_traces/resnet18");
    let dir = tempfile::tempdir().unwrap();
    let props = steptrace::AnalyzeProps {
        input: s.join("trace.json.gz"),
        snapshot: Some(s.join("snapshot.pickle.gz")),
        out: Some(dir.path().join("out")),
        top: 3,
        ..Default::default()
    };
    let out = steptrace::analyze(&props).unwrap();
    let sum = &out.analysis.summary;
    assert_eq!(
        serde_json::to_value(sum.liveness_source).unwrap(),
        "memory_events"
    );
    assert!(out.analysis.liveness.graph.is_none());
    assert!(!dir.path().join("out/graph.json").exists());
    let acts = &out.analysis.liveness.activations;
    assert!(acts.len() >= 20, "{}", acts.len());
    for a in acts {
        assert!(
            a.creation_rank <= a.last_fw_use_rank
                && a.last_fw_use_rank < a.first_bw_use_rank
                && a.first_bw_use_rank <= a.last_bw_use_rank
        );
        assert_eq!(a.storage_id, -1);
    }
    // The categories need no ET: same breakdown at the peak as with it.
    let (_d, with_et) = analyze(&s);
    assert_eq!(
        sum.peak_breakdown_bytes,
        with_et.analysis.summary.peak_breakdown_bytes
    );
}

#[test]
fn graph_has_edges_between_forward_and_backward() {
    let (_d, out) = analyze(&crate::common::root().join("sample_traces/gpt_bf16"));
    let g = out.analysis.liveness.graph.as_ref().unwrap();
    assert!(g.edges.len() > g.nodes.len() / 2);
    assert!(g
        .edges
        .iter()
        .any(|e| e.from.starts_with("forward:") && e.to.starts_with("backward:")));
    let text = std::fs::read_to_string(out.out_dir.join("graph.dot")).unwrap();
    assert!(text.starts_with("digraph") && text.contains("->"));
}
