//! Plots, the HTML report, the annotated trace, compare and sweep.

use std::collections::HashMap;

use serde_json::Value;

use crate::common::{
    analyze, analyze_text, col, csv, json, memory_event, root, samples, trace_path,
};

fn png_size(bytes: &[u8]) -> (u32, u32) {
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "not a PNG");
    let w = u32::from_be_bytes(bytes[16..20].try_into().unwrap());
    let h = u32::from_be_bytes(bytes[20..24].try_into().unwrap());
    (w, h)
}

#[test]
fn every_plot_is_drawn_from_the_tables() {
    for s in samples() {
        let (_d, out) = analyze(&s);
        let plots = out.out_dir.join("plots");
        for name in steptrace::report::plot::PLOTS {
            let png = std::fs::read(plots.join(format!("{name}.png"))).unwrap();
            assert_eq!(png_size(&png), (1200, 700), "{s:?} {name}");
            assert!(png.len() > 10_000, "{s:?} {name}: {} bytes", png.len());
            let svg = std::fs::read_to_string(plots.join(format!("{name}.svg"))).unwrap();
            assert!(
                svg.contains("<svg") && svg.contains("</svg>") && svg.contains("<text"),
                "{s:?} {name}"
            );
        }
        // The points drawn are the tables' values.
        let (nh, nodes) = csv(&out.out_dir.join("node_stats.csv"));
        let (ph, pts) = csv(&plots.join("memory_vs_rank.data.csv"));
        assert_eq!(pts.len(), nodes.len());
        for (p, n) in pts.iter().zip(&nodes) {
            assert_eq!(p[col(&ph, "rank")], n[col(&nh, "rank")]);
            let peak: f64 = n[col(&nh, "median_peak_mem_bytes")].parse().unwrap();
            assert!(
                (p[col(&ph, "peak_mib")].parse::<f64>().unwrap() - peak / 1048576.0).abs() < 1e-5
            );
        }
        let (rh, rt) = csv(&plots.join("node_runtime.data.csv"));
        for (p, n) in rt.iter().zip(&nodes) {
            let t: f64 = n[col(&nh, "median_run_time_s")].parse().unwrap();
            assert!((p[col(&rh, "gpu_ms")].parse::<f64>().unwrap() - t * 1e3).abs() < 1e-6);
        }
        let (bh, bars) = csv(&plots.join("peak_breakdown.data.csv"));
        for b in &bars {
            let want = out.analysis.summary.peak_breakdown_bytes
                [&steptrace::analysis::memory::Category::from_key(&b[col(&bh, "category")])
                    .unwrap()] as f64
                / 1048576.0;
            assert!((b[col(&bh, "mib")].parse::<f64>().unwrap() - want).abs() < 1e-5);
        }
        let (_, acts) = csv(&plots.join("activations.data.csv"));
        let (_, act_rows) = csv(&out.out_dir.join("activation_stats.csv"));
        assert_eq!(acts.len(), act_rows.len());
        // Each phase's bars are its GPU and wall time in the summary, in step order, then the
        // time between phases, and the last the iteration's span under the profiler less the
        // GPU's busy time.
        let s = &out.analysis.summary;
        let (th, tb) = csv(&plots.join("time_by_phase.data.csv"));
        let mut want = Vec::new();
        for k in [
            "data_loading",
            "forward",
            "backward",
            "zero_grad",
            "optimizer",
            "other",
        ] {
            let Some(t) = s
                .time_by_phase
                .get(&steptrace::analysis::Phase::from_name(k).unwrap())
            else {
                continue;
            };
            if t.gpu_s > 0.0 {
                want.push((format!("{k} GPU"), t.gpu_s * 1e3));
            }
            let host = if t.wall_s > 0.0 { t.wall_s } else { t.cpu_s };
            if host > 0.0 {
                want.push((format!("{k} wall"), host * 1e3));
            }
        }
        if s.between_phases_s >= 1e-6 {
            want.push(("between phases".to_owned(), s.between_phases_s * 1e3));
        }
        want.push((
            "GPU idle".to_owned(),
            (s.step_time_instrumented_s - s.gpu_busy_s).max(0.0) * 1e3,
        ));
        assert_eq!(tb.len(), want.len(), "{s:?}", s = tb);
        for (b, (label, ms)) in tb.iter().zip(&want) {
            assert_eq!(&b[col(&th, "bar")], label);
            assert!((b[col(&th, "ms")].parse::<f64>().unwrap() - ms).abs() < 1e-5);
        }
    }
}

#[test]
fn html_report_is_self_contained_and_renders() {
    let (_d, out) = analyze(&root().join("sample_traces/resnet18"));
    let html = std::fs::read_to_string(out.out_dir.join("report.html")).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert_eq!(
        html.matches("<svg").count(),
        steptrace::report::plot::PLOTS.len()
    );
    assert!(!html.contains("src=\"http"), "no external resources");
    assert!(html.contains("283.1 MiB"));
}

/// The report renders in a real browser (issue 21: this check returned early, as a pass, where
/// Chromium was missing; it is run explicitly with `cargo test -- --ignored` where it is).
#[test]
#[ignore = "needs Chromium (apt-get install chromium)"]
fn html_report_renders_in_chromium() {
    let (_d, out) = analyze(&root().join("sample_traces/resnet18"));
    let chromium = ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .expect("Chromium at /usr/bin/chromium or /usr/bin/chromium-browser");
    let shot = out.out_dir.join("shot.png");
    let st = std::process::Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--no-first-run",
            "--window-size=1400,3000",
        ])
        .arg(format!(
            "--user-data-dir={}",
            out.out_dir.join("chrome").display()
        ))
        .arg(format!("--screenshot={}", shot.display()))
        .arg(format!(
            "file://{}",
            out.out_dir.join("report.html").display()
        ))
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let png = std::fs::read(&shot).unwrap();
    assert_eq!(png_size(&png), (1400, 3000));
    assert!(
        png.len() > 50_000,
        "a blank page compresses to almost nothing: {} bytes",
        png.len()
    );
}

#[test]
fn annotated_trace_keeps_every_event_and_its_counters_add_up() {
    for s in samples() {
        let (_d, out) = analyze(&s);
        let path = out.out_dir.join("annotated.pt.trace.json.gz");
        let mut d = steptrace::diagnostics::Diagnostics::default();
        let orig = steptrace::ingest::kineto::load(&trace_path(&s), &mut d).unwrap();
        let ann = steptrace::ingest::kineto::load(&path, &mut d).unwrap();
        assert!(
            d.is_empty() || d.count("truncated_trace") == 0,
            "{:?}",
            d.lines()
        );
        assert_eq!(ann.memory, orig.memory, "{s:?}");
        assert_eq!(ann.gpu, orig.gpu, "{s:?}");
        assert_eq!(ann.runtime.len(), orig.runtime.len());
        // Original ops are all there (the node track is its own category, not ops).
        assert_eq!(ann.ops, orig.ops, "{s:?}");
        assert!(ann.event_count > orig.event_count);
        // Counter track: one sample per allocator event, its parts summing to Total Allocated.
        let v = json(&path);
        let counters: Vec<i64> = v["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["ph"] == "C" && e["name"] == "memory by category")
            .map(|e| {
                e["args"]
                    .as_object()
                    .unwrap()
                    .values()
                    .map(|x| x.as_i64().unwrap())
                    .sum()
            })
            .collect();
        let totals: Vec<i64> = out.analysis.timeline.iter().map(|r| r.total).collect();
        assert_eq!(counters, totals, "{s:?}");
        // One sample per allocator event of the analysed device: the CUDA device with the
        // most events (issue 21: the filter compared the device with itself).
        let mut per_device = std::collections::BTreeMap::new();
        for m in orig.memory.iter().filter(|m| m.device_type == 1) {
            *per_device.entry(m.device_id).or_insert(0usize) += 1;
        }
        let device = per_device
            .iter()
            .max_by_key(|(d, n)| (**n, -**d))
            .map(|(d, _)| *d);
        let device_events = orig
            .memory
            .iter()
            .filter(|m| m.device_type == 1 && Some(m.device_id) == device)
            .count();
        assert_eq!(counters.len(), device_events, "{s:?}");
        assert!(counters.len() < orig.memory.len() || per_device.len() == 1);
        let nodes = v["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["cat"] == "steptrace_node")
            .count();
        assert_eq!(nodes, out.analysis.step.nodes.len(), "{s:?}");
        let asyncs = v["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["cat"] == "activation")
            .count();
        assert!(
            asyncs >= 2 * out.analysis.liveness.activations.len(),
            "{s:?}"
        );
    }
}

/// One table of a file's recorded Perfetto import (`perfetto_import.json`) as counts by key.
fn perfetto_counts(
    r: &Value,
    table: &str,
    key: impl Fn(&Value) -> String,
    count: &str,
) -> HashMap<String, u64> {
    r[table]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| (key(x), x[count].as_u64().unwrap()))
        .collect()
}

/// Issue 19: the annotated trace imports in Perfetto's trace processor. CI has none, so
/// `benches/perfetto_check.py` ran one (built from Perfetto's source by
/// `benches/build_trace_processor.sh`) on these samples' input and annotated traces and the
/// counts it queried are committed beside each (`perfetto_import.json`). This ties that record
/// to the annotated trace written today: it must hold the events Perfetto imported then, kind by
/// kind (if the added events change, this fails until the record is made again), and the record
/// must show every slice of the input imported again and no import error or loss the input
/// does not have.
#[test]
fn issue19_the_annotated_trace_imports_in_perfetto_as_recorded() {
    for name in ["resnet18", "gpt_bf16", "corpus/nanogpt_train_fp16_accum"] {
        let s = root().join("sample_traces").join(name);
        let rec = json(&s.join("perfetto_import.json"));
        let (input, annotated) = (&rec["input"], &rec["annotated"]);
        let (_d, out) = analyze(&s);
        let v = json(&out.out_dir.join("annotated.pt.trace.json.gz"));
        let evs = v["traceEvents"].as_array().unwrap();
        let count = |f: &dyn Fn(&Value) -> bool| evs.iter().filter(|e| f(e)).count() as u64;

        let slices = |r| perfetto_counts(r, "slices", |x| x["cat"].as_str().unwrap().into(), "n");
        let (s_in, s_out) = (slices(input), slices(annotated));
        assert!(!s_in.is_empty(), "{name}: {input}");
        for (cat, n) in &s_in {
            assert_eq!(s_out.get(cat), Some(n), "{name}: Perfetto's {cat:?} slices");
        }
        let nodes = count(&|e| e["cat"] == "steptrace_node" && e["ph"] == "X");
        assert!(nodes > 0, "{name}");
        assert_eq!(
            s_out.get("steptrace_node"),
            Some(&nodes),
            "{name}: node slices"
        );
        let acts = count(&|e| e["cat"] == "activation" && e["ph"] == "b");
        // Slices the analysis no longer writes since the recording (`retired`, with why).
        let retired = rec["retired"]["activation"].as_u64().unwrap_or(0);
        assert_eq!(
            s_out.get("activation").copied().unwrap_or(0),
            acts + retired,
            "{name}: activation slices"
        );
        // Perfetto names a counter event's tracks `<name> <arg>`: one per category, each with
        // one value per event.
        let mem = count(&|e| e["ph"] == "C" && e["name"] == "memory by category");
        let tracks = annotated["counters"].as_array().unwrap();
        assert_eq!(
            tracks.len(),
            steptrace::analysis::memory::CATEGORIES.len(),
            "{name}"
        );
        for t in tracks {
            assert_eq!(t["n"].as_u64(), Some(mem), "{name}: {t}");
        }
        assert_eq!(annotated["process"].as_array().unwrap().len(), 1, "{name}");
        let stats = |r| {
            perfetto_counts(
                r,
                "stats",
                |x| format!("{} {}", x["name"], x["idx"]),
                "value",
            )
        };
        let known = stats(input);
        for (st, n) in stats(annotated) {
            assert!(
                n <= known.get(&st).copied().unwrap_or(0),
                "{name}: Perfetto raised {st} {n} times on the annotated trace, {:?} on the input",
                known.get(&st)
            );
        }
    }
}

/// Issue 21: the analysed device is the CUDA device with the most allocator events; the
/// host's allocations and the other CUDA device's stay out of the timeline and the counter
/// track. (The samples hold one device's events only, so the check above cannot see the
/// filter: this trace has all three, the host's the most numerous.)
#[test]
fn issue21_only_the_busiest_cuda_devices_allocator_events_are_analysed() {
    // (device type, device id, address, bytes): host 6 events, cuda:1 2, cuda:0 4.
    let events = [
        (0, 0, 1, 100),
        (1, 0, 1, 512),
        (0, 0, 2, 100),
        (1, 1, 1, 4096),
        (0, 0, 3, 100),
        (1, 0, 2, 1024),
        (0, 0, 1, -100),
        (1, 1, 1, -4096),
        (1, 0, 1, -512),
        (0, 0, 2, -100),
        (1, 0, 2, -1024),
        (0, 0, 3, -100),
    ];
    let mut totals: HashMap<(i64, i64), i64> = HashMap::new();
    let mut s = String::from(
        r#"{"traceEvents":[{"ph":"X","cat":"cpu_op","name":"aten::mm","pid":1,"tid":1,"ts":0,"dur":100}"#,
    );
    let mut cuda0 = Vec::new();
    for (i, (ty, id, addr, bytes)) in events.iter().enumerate() {
        let t = totals.entry((*ty, *id)).or_default();
        *t += bytes;
        if (*ty, *id) == (1, 0) {
            cuda0.push(*t);
        }
        s += ",";
        s += &memory_event(
            i as u64 + 1,
            4096 * (addr + 16 * id + 64 * ty) as u64,
            *bytes,
            *t,
            (*ty, *id),
        );
    }
    s += "]}";
    let (_dir, out) = analyze_text(&s);
    let totals: Vec<i64> = out.analysis.timeline.iter().map(|r| r.total).collect();
    assert_eq!(totals, cuda0);
    // A plain trace in, a plain annotated trace out.
    let v = json(
        &out.out_dir
            .join(steptrace::report::annotated::file_name_for(false)),
    );
    let counters = v["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "C" && e["name"] == "memory by category")
        .count();
    assert_eq!(counters, cuda0.len());
}

#[test]
fn compact_annotated_trace_drops_python_events() {
    let s = root().join("sample_traces/resnet18");
    let dir = tempfile::tempdir().unwrap();
    let mut props = steptrace::AnalyzeProps {
        input: s.clone(),
        out: Some(dir.path().join("o")),
        top: 3,
        ..Default::default()
    };
    props.report.annotated_trace = true;
    props.report.compact = true;
    props.report.no_plots = true;
    steptrace::analyze(&props).unwrap();
    let v = json(&dir.path().join("o/annotated.pt.trace.json.gz"));
    let cats: HashMap<String, usize> =
        v["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .fold(HashMap::new(), |mut m, e| {
                *m.entry(e["cat"].as_str().unwrap_or("").to_owned())
                    .or_default() += 1;
                m
            });
    assert!(!cats.contains_key("python_function") && !cats.contains_key("cuda_runtime"));
    assert!(cats["kernel"] > 0 && cats["cpu_op"] > 0);
    assert!(!dir.path().join("o/plots").exists());
}

#[test]
fn compare_and_sweep_write_tables_and_plots() {
    let dir = tempfile::tempdir().unwrap();
    let st = root().join("sample_traces");
    let out = assert_cmd::Command::cargo_bin("steptrace")
        .unwrap()
        .args(["compare", "--labels", "baseline,checkpointing", "--out"])
        .arg(dir.path().join("cmp"))
        .arg(st.join("gpt_bf16"))
        .arg(st.join("gpt_bf16_ckpt"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("baseline") && text.contains("checkpointing") && text.contains("+0.0%"),
        "{text}"
    );
    let (h, rows) = csv(&dir.path().join("cmp/compare.csv"));
    assert_eq!(rows.len(), 2);
    let peak_ckpt: i64 = rows[1][col(&h, "peak_allocated_bytes")].parse().unwrap();
    let summary: Value = json(&st.join("gpt_bf16_ckpt/reference.json"));
    let want = (3..6)
        .map(|k| {
            summary["steps"][k.to_string()]["max_memory_allocated"]
                .as_i64()
                .unwrap()
        })
        .max()
        .unwrap();
    assert_eq!(peak_ckpt, want);
    for f in ["compare_memory_vs_rank.png", "compare_breakdown.svg"] {
        assert!(dir.path().join("cmp").join(f).is_file(), "{f}");
    }
    // The same runs read back from the folders `analyze` wrote (their summary.json and
    // node_stats.csv), not analysed again: the same table and the same CSV.
    let mut folders = Vec::new();
    for run in ["gpt_bf16", "gpt_bf16_ckpt"] {
        let o = dir.path().join(format!("a_{run}"));
        assert_cmd::Command::cargo_bin("steptrace")
            .unwrap()
            .args(["analyze", "-q", "--no-plots", "--out"])
            .arg(&o)
            .arg(st.join(run))
            .assert()
            .success();
        folders.push(o);
    }
    let again = assert_cmd::Command::cargo_bin("steptrace")
        .unwrap()
        .args(["compare", "--labels", "baseline,checkpointing", "--out"])
        .arg(dir.path().join("cmp2"))
        .args(&folders)
        .output()
        .unwrap();
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    let table = |o: &[u8]| {
        String::from_utf8_lossy(o)
            .lines()
            .filter(|l| !l.starts_with("wrote "))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(table(&again.stdout), table(&out.stdout));
    assert_eq!(
        std::fs::read(dir.path().join("cmp2/compare.csv")).unwrap(),
        std::fs::read(dir.path().join("cmp/compare.csv")).unwrap()
    );
    let out = assert_cmd::Command::cargo_bin("steptrace")
        .unwrap()
        .args(["sweep", "--values", "0,1", "--name", "ckpt", "--out"])
        .arg(dir.path().join("sw"))
        .arg("--runs")
        .arg(st.join("gpt_bf16"))
        .arg(st.join("gpt_bf16_ckpt"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (h, rows) = csv(&dir.path().join("sw/sweep.csv"));
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0][col(&h, "ckpt")], "0");
    for f in [
        "sweep_peak_memory.png",
        "sweep_step_time.svg",
        "sweep_memory_vs_rank.png",
        "sweep_breakdown.png",
    ] {
        assert!(dir.path().join("sw").join(f).is_file(), "{f}");
    }
}

#[cfg(feature = "parquet")]
#[test]
fn parquet_tables_hold_the_csv_values() {
    let read = |p: std::path::PathBuf| crate::common::read_parquet(&p);
    for s in samples().into_iter().take(2) {
        let (_d, out) = analyze(&s);
        let df = read(out.out_dir.join("node_stats.parquet"));
        let (h, rows) = csv(&out.out_dir.join("node_stats.csv"));
        assert_eq!(df.height(), rows.len());
        let peaks = df
            .column("median_peak_mem_bytes")
            .unwrap()
            .i64()
            .unwrap()
            .clone();
        for (i, r) in rows.iter().enumerate() {
            assert_eq!(
                peaks.get(i),
                Some(r[col(&h, "median_peak_mem_bytes")].parse::<i64>().unwrap())
            );
        }
        let tl = read(out.out_dir.join("memory_timeline.parquet"));
        let total = tl
            .column("total_allocated_bytes")
            .unwrap()
            .i64()
            .unwrap()
            .clone();
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
        for i in 0..tl.height() {
            let sum: i64 = cats
                .iter()
                .map(|c| tl.column(c).unwrap().i64().unwrap().get(i).unwrap())
                .sum();
            assert_eq!(Some(sum), total.get(i));
        }
        let acts = read(out.out_dir.join("activation_stats.parquet"));
        assert_eq!(acts.height(), out.analysis.liveness.activations.len());
        // Each Parquet copy has its CSV file's columns, in order, and its values cell by cell
        // (the Python module's DataFrames are these files).
        for table in steptrace::report::frames::TABLES {
            let t = table.name();
            holds_its_csv(
                &out.out_dir.join(table.file_name()),
                &out.out_dir.join(format!("{t}.csv")),
                t,
            );
        }
    }
}

/// A Parquet file has its CSV file's columns, in order, its rows, and its values cell by cell.
fn holds_its_csv(parquet: &std::path::Path, csv_path: &std::path::Path, label: &str) {
    let df = crate::common::read_parquet(parquet);
    let (h, rows) = csv(csv_path);
    let names: Vec<String> = df
        .get_column_names()
        .iter()
        .map(|n| n.to_string())
        .collect();
    assert_eq!(names, h, "{label}");
    assert_eq!(df.height(), rows.len(), "{label}");
    for (j, c) in df.columns().iter().enumerate() {
        for (i, row) in rows.iter().enumerate() {
            same_cell(
                &c.get(i).unwrap(),
                &row[j],
                &format!("{label}.{}[{i}]", h[j]),
            );
        }
    }
}

/// The cross-rank table's Parquet copy holds ranks.csv, column by column and cell by cell
/// (the Python module's `Ranks.ranks` is this file).
#[test]
fn ranks_parquet_holds_the_csv_values() {
    for run in ["sample_traces/ddp_mlp", "sample_traces/corpus/fsdp2_mp"] {
        let dir = tempfile::tempdir().unwrap();
        let props = steptrace::AnalyzeProps {
            input: crate::common::root().join(run),
            out: Some(dir.path().join("out")),
            top: 5,
            ..Default::default()
        };
        let layout = steptrace::distributed_run(&props).expect("a distributed run");
        steptrace::analyze_ranks(&props, &layout).unwrap();
        let out = dir.path().join("out");
        holds_its_csv(
            &out.join("ranks.parquet"),
            &out.join("ranks.csv"),
            &format!("{run} ranks"),
        );
    }
}

/// A Parquet value against its CSV cell: texts equal (or the CSV's formula-safe `'` before
/// it), numbers equal, floats within the CSV's rounding, a null an empty cell.
fn same_cell(v: &polars::prelude::AnyValue, cell: &str, at: &str) {
    use polars::prelude::AnyValue;
    match v {
        AnyValue::Null => assert_eq!(cell, "", "{at}"),
        AnyValue::String(s) => assert!(
            cell == *s || cell == format!("'{s}"),
            "{at}: {s:?} {cell:?}"
        ),
        AnyValue::Float64(f) => {
            let x: f64 = cell.parse().unwrap_or_else(|_| panic!("{at}: {cell:?}"));
            // Half a unit of the cell's last decimal.
            let decimals = cell.split_once('.').map_or(0, |(_, d)| d.len()) as i32;
            let tol = 0.5 * 10f64.powi(-decimals) + f.abs() * 1e-12;
            assert!((f - x).abs() <= tol, "{at}: {f} against {cell}");
        }
        AnyValue::Boolean(b) => assert_eq!(cell, b.to_string(), "{at}"),
        other => assert_eq!(other.to_string(), cell, "{at}"),
    }
}

/// A snapshot analysed alone writes Parquet copies of its timeline and top sites whose rows
/// are the CSV files' rows, column by column (times and shares as the CSV prints them).
#[cfg(feature = "parquet")]
#[test]
fn snapshot_parquet_tables_hold_the_csv_rows() {
    use polars::prelude::*;
    let mut checked = 0;
    for s in samples() {
        let Some((_dir, out)) = crate::common::analyze_snapshot_alone(&s) else {
            continue;
        };
        for f in steptrace::report::snapshot::PARQUET_FILES {
            let df = crate::common::read_parquet(&out.out_dir.join(f));
            let (h, rows) = csv(&out.out_dir.join(f.replace(".parquet", ".csv")));
            assert!(!rows.is_empty(), "{f}: no rows");
            assert_eq!(df.height(), rows.len(), "{f}");
            let names: Vec<String> = df
                .get_column_names()
                .iter()
                .map(|n| n.to_string())
                .collect();
            assert_eq!(names, h, "{f}: columns");
            for (i, r) in rows.iter().enumerate() {
                for (c, name) in h.iter().enumerate() {
                    let v = df.column(name).unwrap().get(i).unwrap();
                    let text = match v {
                        AnyValue::Null => String::new(),
                        AnyValue::Float64(x) if name == "time_ms" => format!("{x:.3}"),
                        AnyValue::Float64(x) => format!("{x:.2}"),
                        AnyValue::String(x) => x.to_owned(),
                        other => other.to_string(),
                    };
                    assert_eq!(text, r[c], "{f} row {i} column {name}");
                }
            }
        }
        checked += 1;
    }
    assert!(checked > 0, "no sample has a snapshot");
}

/// A trace recorded without `profile_memory` and `record_shapes` (as most traces people hand
/// over are): the console says what is missing in one line each, no plot or table of memory or
/// FLOPs is drawn empty, and compare says n/a, not "0 B" and "-100%".
#[test]
fn a_trace_without_memory_or_shapes_shows_no_empty_plot_table_or_zero() {
    let dir = tempfile::tempdir().unwrap();
    let f = std::fs::File::open(root().join("sample_traces/resnet18/trace.json.gz")).unwrap();
    let mut v: serde_json::Value =
        serde_json::from_reader(flate2::read::GzDecoder::new(f)).unwrap();
    let evs = v["traceEvents"].as_array_mut().unwrap();
    evs.retain(|e| e["name"] != "[memory]");
    for e in evs.iter_mut() {
        if let Some(a) = e.get_mut("args").and_then(|a| a.as_object_mut()) {
            for k in [
                "Input Dims",
                "Input type",
                "Input Strides",
                "Concrete Inputs",
            ] {
                a.remove(k);
            }
        }
    }
    let trace = dir.path().join("bare.json");
    std::fs::write(&trace, serde_json::to_vec(&v).unwrap()).unwrap();
    let out = dir.path().join("out");
    let console = crate::common::console_of(&trace, &out);
    assert!(console.contains("no memory data: the trace holds no allocator events"));
    assert!(console.contains("no FLOPs counted: the trace records no operator input shapes"));
    assert!(!console.contains("FLOPs per iteration 0") && !console.contains("0 activations"));
    let plots: Vec<String> = std::fs::read_dir(out.join("plots"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".svg"))
        .collect();
    let mut plots = plots;
    plots.sort();
    assert_eq!(
        plots,
        ["node_runtime.svg", "time_by_phase.svg"],
        "{plots:?}"
    );
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(!html.contains("Memory at the peak") && !html.contains("Largest activations"));
    // Said once at the top, one line each, as the console says it.
    assert!(html.contains("<p><b>no memory data</b>: the trace holds no allocator events"));
    assert!(html.contains("<p><b>no FLOPs counted</b>"));
    assert!(!html.contains("no module paths"), "it has its modules");
    // No blank or zero rows for what was not recorded.
    for absent in [
        "<td>peak at</td>",
        "<td>0 B</td>",
        "<td>FLOPs per iteration</td>",
        "<td>activations</td>",
    ] {
        assert!(!html.contains(absent), "{absent}");
    }
    let cmp = dir.path().join("cmp");
    let o = assert_cmd::Command::cargo_bin("steptrace")
        .unwrap()
        .args(["compare", "--out"])
        .arg(&cmp)
        .arg(root().join("sample_traces/resnet18"))
        .arg(&trace)
        .assert()
        .success();
    let table = String::from_utf8_lossy(&o.get_output().stdout).into_owned();
    let row = table.lines().find(|l| l.starts_with("bare")).unwrap();
    assert!(
        row.contains("n/a") && !row.contains("0 B") && !row.contains("-100"),
        "{row}"
    );
    // Without `with_modules` too: said in one line, in the console and the report.
    let evs = v["traceEvents"].as_array_mut().unwrap();
    evs.retain(|e| !e["name"].as_str().unwrap_or("").starts_with("nn.Module: "));
    std::fs::write(&trace, serde_json::to_vec(&v).unwrap()).unwrap();
    let console = crate::common::console_of(&trace, &out);
    let line =
        "no module paths: the trace records no nn.Module ranges (record with with_modules=True)";
    assert_eq!(console.matches(line).count(), 1, "{console}");
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains("<p><b>no module paths</b>: the trace records no nn.Module ranges"));
}

/// A step with no operator inside it (HolisticTraceAnalysis's `cpu_only` test trace: its four
/// `aten::empty` ops come after `ProfilerStep#551` ends): the console says where the operators
/// are instead of printing an empty table of nodes.
#[test]
fn a_step_with_no_operator_says_so_instead_of_an_empty_table() {
    let text = r#"{"schemaVersion":1,"deviceProperties":[],"traceEvents":[
{"ph":"X","cat":"user_annotation","name":"ProfilerStep#551","pid":1,"tid":1,"ts":1000,"dur":200},
{"ph":"X","cat":"cpu_op","name":"aten::empty","pid":1,"tid":1,"ts":1500,"dur":2},
{"ph":"X","cat":"cpu_op","name":"aten::empty","pid":1,"tid":1,"ts":1510,"dur":1}]}"#;
    let (_d, out) = crate::common::analyze_text(text);
    let c = &out.console;
    assert!(
        c.contains("1 iteration (ProfilerStep markers), 0 nodes"),
        "{c}"
    );
    assert!(
        c.contains("no operator runs inside the profiled iterations (ProfilerStep#551): the trace's 2 operator(s) all lie outside them"),
        "{c}"
    );
    assert!(!c.contains("Top 5 nodes by CPU time"), "{c}");
}

/// The same step in report.html: a sentence instead of an empty table, no chart of GPU time
/// where nothing ran on the GPU, and no plots heading over nothing; a CPU-only trace with
/// nodes gets them by CPU time.
#[test]
fn report_html_has_no_empty_table_or_plot_for_a_step_without_gpu_work() {
    let text = r#"{"schemaVersion":1,"deviceProperties":[],"traceEvents":[
{"ph":"X","cat":"user_annotation","name":"ProfilerStep#551","pid":1,"tid":1,"ts":1000,"dur":200},
{"ph":"X","cat":"cpu_op","name":"aten::empty","pid":1,"tid":1,"ts":1500,"dur":2}]}"#;
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("trace.json");
    std::fs::write(&p, text).unwrap();
    let out = dir.path().join("o");
    let props = steptrace::AnalyzeProps {
        input: p.clone(),
        out: Some(out.clone()),
        ..Default::default()
    };
    steptrace::analyze(&props).unwrap();
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains("No operator runs inside the profiled iterations (ProfilerStep#551)"));
    assert!(!html.contains("<tbody></tbody>") && !html.contains("<h2>Plots</h2>"));
    assert!(!out.join("plots/node_runtime.png").exists());
    assert!(!out.join("plots/time_by_phase.png").exists());
    // Inside the step now: a node by CPU time.
    std::fs::write(&p, text.replace("\"ts\":1500", "\"ts\":1100")).unwrap();
    steptrace::analyze(&props).unwrap();
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains("<h2>Top nodes by CPU time</h2>"), "{html}");
    assert!(!html.contains("Top nodes by GPU time"));
    // Its phase chart: wall time alone (and the time between phases), no GPU bars and no
    // GPU idle.
    let (h, bars) = crate::common::csv(&out.join("plots/time_by_phase.data.csv"));
    assert!(!bars.is_empty());
    assert!(
        bars.iter().all(|b| {
            let l = &b[col(&h, "bar")];
            l.ends_with(" wall") || l == "between phases"
        }),
        "{bars:?}"
    );
}

/// Issue 45: device activity steptrace does not analyse (MTIA's, the CUPTI range profiler's)
/// is named in one line, each category with its count, not dropped without a word ("GPU busy
/// 0.0 us"); a GPU-side annotation is not such activity.
#[test]
fn unanalysed_device_activity_is_named_in_one_line() {
    let text = r#"{"schemaVersion":1,"deviceProperties":[],"traceEvents":[
{"ph":"X","cat":"user_annotation","name":"ProfilerStep#1","pid":1,"tid":1,"ts":1000,"dur":200},
{"ph":"X","cat":"cpu_op","name":"aten::mm","pid":1,"tid":1,"ts":1010,"dur":20},
{"ph":"X","cat":"mtia_ccp_events","name":"k","pid":2,"tid":3,"ts":1020,"dur":5},
{"ph":"X","cat":"MTIA_ccp_events","name":"k","pid":2,"tid":3,"ts":1030,"dur":5},
{"ph":"X","cat":"mtia_ccp_events","name":"k","pid":2,"tid":3,"ts":1035,"dur":5},
{"ph":"X","cat":"cuda_profiler_range","name":"r","pid":2,"tid":4,"ts":1040,"dur":5},
{"ph":"X","cat":"gpu_user_annotation","name":"a","pid":2,"tid":4,"ts":1050,"dur":5}]}"#;
    let (_d, out) = analyze_text(text);
    let lines = out.diagnostics.lines().join("\n");
    assert_eq!(
        out.diagnostics.count("unanalysed_device_activity"),
        1,
        "{lines}"
    );
    assert!(
        lines.contains(
            "left out of every GPU figure: 1 `MTIA_ccp_events`, 1 `cuda_profiler_range`, 2 `mtia_ccp_events` event(s)"
        ),
        "{lines}"
    );
}

/// Issue 45 ("no silent zero"): a trace with shapes whose ops have no FLOP formula (copies,
/// views; HolisticTraceAnalysis's `trace_compare` traces) says so in the console and the
/// report instead of "FLOPs per iteration 0 (FlopCounterMode convention 0)"; it still
/// counts the bytes its ops move.
#[test]
fn shapes_without_a_flop_formula_say_so_instead_of_zero_flops() {
    let text = r#"{"schemaVersion":1,"deviceProperties":[],"traceEvents":[
{"ph":"X","cat":"user_annotation","name":"ProfilerStep#1","pid":1,"tid":1,"ts":1000,"dur":200},
{"ph":"X","cat":"cpu_op","name":"aten::copy_","pid":1,"tid":1,"ts":1010,"dur":20,
 "args":{"Input Dims":[[1024,1024],[1024,1024]],"Input type":["float","float"]}}]}"#;
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("t.json");
    std::fs::write(&p, text).unwrap();
    let out = dir.path().join("o");
    let console = crate::common::console_of(&p, &out);
    assert!(
        console.contains("FLOPs per iteration: none of its ops has a FLOP formula (8.0 MiB moved)"),
        "{console}"
    );
    assert!(!console.contains("FLOPs per iteration 0"), "{console}");
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains("<td>none of its ops has a FLOP formula</td>"));
    assert!(!html.contains("FlopCounterMode FLOPs per iteration"));
}

/// Issue 45: on every bundled sample (ranks of a job included), report.html has no empty
/// table, no blank cell or heading, and every plot it draws has points (its `.data.csv` rows).
#[test]
fn every_samples_report_has_no_empty_table_cell_or_plot() {
    fn files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                files(&p, out);
            } else {
                out.push(p);
            }
        }
    }
    for d in crate::common::samples() {
        let (_t, out) = analyze(&d);
        let mut all = Vec::new();
        files(&out.out_dir, &mut all);
        let reports: Vec<_> = all
            .iter()
            .filter(|p| p.file_name().is_some_and(|n| n == "report.html"))
            .collect();
        assert!(!reports.is_empty(), "{d:?}");
        for r in reports {
            let html = std::fs::read_to_string(r).unwrap();
            for bad in [
                "<tbody></tbody>",
                "<td></td>",
                "<th></th>",
                "<table></table>",
            ] {
                assert!(!html.contains(bad), "{r:?} holds {bad}");
            }
        }
        for p in all
            .iter()
            .filter(|p| p.to_string_lossy().ends_with(".data.csv"))
        {
            let (_, rows) = crate::common::csv(p);
            assert!(!rows.is_empty(), "{p:?} draws nothing");
        }
    }
}

/// Issue 76: the report explains itself. The warnings come right after the summary table
/// they qualify (they sat at the bottom of the page, under every plot), and where the page
/// draws the snapshot's memory view it says why that view's peak differs from the summary's.
#[test]
fn issue76_warnings_sit_under_the_summary_they_qualify() {
    let (_d, out) = analyze(&root().join("sample_traces/corpus/vit_cudagraphs"));
    let html = std::fs::read_to_string(out.out_dir.join("report.html")).unwrap();
    let at = |needle: &str| html.find(needle).unwrap_or_else(|| panic!("no {needle}"));
    let warnings = at("<h2>Warnings</h2>");
    assert!(at("<h2>Summary</h2>") < warnings);
    assert!(warnings < at("<h2>Memory at the peak</h2>"));
    assert!(warnings < at("<h2>Plots</h2>"));
    assert!(html[warnings..].contains("peak_leaves_out_graph_pools"));
    assert!(html.contains("its peak is over all of it, where the summary"));
    // The GPU-time table lists nodes with GPU time only (it was padded with 0.0 µs rows), and
    // the activation table's columns say they are places in the execution order.
    let top = at("<h2>Top nodes by GPU time</h2>");
    let section = &html[top..top + html[top + 4..].find("<h2>").unwrap() + 4];
    assert!(!section.contains("<td>0.0 us</td>"), "{section}");
    assert!(html.contains("created (order)"));
}

/// Issue 76: the phases' medians are each taken over the iterations on their own, so they need
/// not add up to the median step (ResNet-18: 44.85 ms against 42.0 ms); where they do not, the
/// summary says so beside them, in the report and on the console alike.
#[test]
fn issue76_phase_medians_that_do_not_add_up_to_the_step_say_so() {
    let (_d, out) = analyze(&root().join("sample_traces/resnet18"));
    let html = std::fs::read_to_string(out.out_dir.join("report.html")).unwrap();
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.out_dir.join("summary.json")).unwrap())
            .unwrap();
    let sum: f64 = s["time_by_phase"]
        .as_object()
        .unwrap()
        .values()
        .map(|t| t["wall_s"].as_f64().unwrap_or(0.0))
        .sum::<f64>()
        + s["between_phases_s"].as_f64().unwrap();
    let step = s["step_time_instrumented_s"].as_f64().unwrap();
    assert!((sum - step).abs() > 0.01 * step, "{sum} {step}");
    let said = format!(
        "add up to {} against the median iteration's {}",
        steptrace::report::human_time(sum),
        steptrace::report::human_time(step)
    );
    assert!(html.contains(&said), "{said}");
    assert!(out.console.contains(&said), "{}", out.console);
}

/// Issue 76: a step of several micro-batches says so in report.html as on the console (HF's
/// Trainer, gradient accumulation 4: the report's summary said nothing of it).
#[test]
fn issue76_the_report_says_how_many_backward_passes_a_step_holds() {
    let (_d, out) = analyze(&root().join("sample_traces/corpus/hf_bert_accum"));
    let html = std::fs::read_to_string(out.out_dir.join("report.html")).unwrap();
    let want = "4: gradient accumulation over 4 micro-batches";
    assert!(html.contains(want), "no {want}");
    assert!(out.console.contains("4 backward passes per iteration"));
}
