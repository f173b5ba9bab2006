//! Robustness: the fuzz corpus and crash regressions replayed, samples cut at many offsets,
//! older formats, hostile or inconsistent data, a closed stdout.

use std::io::Write;
use std::path::Path;

use crate::common::{manifest, root, samples, trace_path};
use crate::synthetic::training_trace;

fn files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| p.is_file())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

#[test]
fn fuzz_corpus_and_regressions_replay_without_panic() {
    let base = root().join("tests/fuzz");
    let mut n = 0;
    for (target, f) in [
        ("kineto", steptrace::fuzzing::kineto as fn(&[u8])),
        ("pickle", steptrace::fuzzing::pickle),
        ("exec_trace", steptrace::fuzzing::exec_trace),
        ("kineto_event", steptrace::fuzzing::kineto_event),
        ("arriving_walk", steptrace::fuzzing::arriving_walk),
        ("gzip_trace", steptrace::fuzzing::gzip_trace),
    ] {
        for dir in [
            base.join("corpus").join(target),
            base.join("regressions").join(target),
        ] {
            for p in files(&dir) {
                f(&std::fs::read(&p).unwrap());
                n += 1;
            }
        }
    }
    assert!(n >= 10, "only {n} corpus files");
}

#[test]
fn samples_cut_anywhere_yield_what_they_hold() {
    for s in samples() {
        let path = trace_path(&s);
        let text = steptrace::ingest::source::read(&path).unwrap().bytes;
        let gz = std::fs::read(&path).unwrap();
        let dir = tempfile::tempdir().unwrap();
        for k in 1..=12 {
            let frac = k as f64 / 13.0;
            for (name, bytes) in [
                ("cut.json", &text[..(text.len() as f64 * frac) as usize]),
                ("cut.json.gz", &gz[..(gz.len() as f64 * frac) as usize]),
            ] {
                let p = dir.path().join(name);
                std::fs::File::create(&p).unwrap().write_all(bytes).unwrap();
                let props = steptrace::AnalyzeProps {
                    input: p,
                    out: Some(dir.path().join("o")),
                    top: 2,
                    report: {
                        let mut r = steptrace::report::ReportOptions::default();
                        r.no_plots = true;
                        r
                    },
                    ..Default::default()
                };
                match steptrace::analyze(&props) {
                    Ok(out) => {
                        assert!(out.analysis.summary.truncated, "{s:?} {name} at {frac:.2}");
                        assert_eq!(out.diagnostics.count("truncated_trace"), 1);
                    }
                    // Too little left to hold an operator, or the header itself was cut.
                    Err(e) => assert!(
                        frac < 0.2 || e.to_string().contains("no CPU operators"),
                        "{s:?} {name} at {frac:.2}: {e}"
                    ),
                }
            }
        }
    }
}

#[test]
fn pytorch_1x_trace_with_old_names_and_absolute_times() {
    // `Operator` category, `Input dims`, absolute epoch µs, no Record function id, no
    // baseTimeNanoseconds, `Runtime`/`Kernel` categories.
    let text = r#"{"traceEvents":[
      {"ph":"X","cat":"Operator","name":"aten::mm","pid":1,"tid":1,"ts":1700000000000000.5,"dur":30,"args":{"Input dims":[[2,3],[3,4]],"Input type":["float","float"]}},
      {"ph":"X","cat":"Runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":1700000000000002,"dur":2,"args":{"correlation":5}},
      {"ph":"X","cat":"Kernel","name":"gemm","pid":0,"tid":7,"ts":1700000000000010,"dur":4,"args":{"device":0,"stream":7,"correlation":5}}]}"#;
    let (_dir, out) = crate::common::analyze_text(text);
    let s = &out.analysis.summary;
    assert_eq!(
        serde_json::to_value(s.time_convention).unwrap(),
        "absolute_epoch"
    );
    assert_eq!(s.matmul_flops_per_iteration, 2 * 2 * 3 * 4);
    assert!((out.analysis.node_stats[0].median_run_time_s - 4e-6).abs() < 1e-9);
}

fn pickle_bytes(py: &str) -> Option<Vec<u8>> {
    let out = std::process::Command::new("python3")
        .args(["-c", py])
        .output()
        .ok()?;
    out.status.success().then_some(out.stdout)
}

#[test]
fn snapshots_from_older_pytorch_and_ring_buffers() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace.json");
    std::fs::write(&trace, training_trace(2, true)).unwrap();
    let corpus = root().join("tests/fuzz/corpus/pickle");
    // Pre-2.1: a bare segment list with `history` inside blocks.
    for (name, warn) in [
        ("legacy_pre21.pickle", "legacy_snapshot"),
        ("snapshot_p4.pickle", ""),
    ] {
        let props = steptrace::AnalyzeProps {
            input: trace.clone(),
            snapshot: Some(corpus.join(name)),
            out: Some(dir.path().join("o")),
            top: 2,
            ..Default::default()
        };
        let out = steptrace::analyze(&props).unwrap();
        if !warn.is_empty() {
            assert_eq!(out.diagnostics.count(warn), 1, "{name}");
        }
        // snapshot_p4 frees a block it never saw allocated (a ring buffer that wrapped) and
        // holds active_pending_free blocks: read, not fatal.
        assert!(out.analysis.summary.snapshot.is_some(), "{name}");
    }
    // The same data pickled by Python with protocols 2-5 reads the same.
    if let Some(b) = pickle_bytes("import pickle,sys; sys.stdout.buffer.write(pickle.dumps({'segments': [], 'device_traces': [[{'action': 'alloc', 'addr': 2**40, 'size': 513, 'stream': 0, 'time_us': 10**15, 'frames': []}]]}, protocol=5))") {
        let mut d = steptrace::diagnostics::Diagnostics::default();
        let s = steptrace::ingest::snapshot::from_bytes(Path::new("p5.pickle"), &b, &mut d).unwrap();
        assert_eq!(s.device_traces[0][0].addr, 1 << 40);
        assert_eq!(s.device_traces[0][0].size, 513);
    }
}

#[test]
fn inconsistent_data_is_counted_not_fatal() {
    let text = r#"{"traceEvents":[
      {"ph":"X","cat":"cpu_op","name":"aten::mm","pid":1,"tid":1,"ts":0,"dur":10},
      {"ph":"X","cat":"cpu_op","name":"aten::add","pid":1,"tid":1,"ts":5,"dur":10},
      {"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":1,"dur":1,"args":{"correlation":3}},
      {"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":6,"dur":1,"args":{"correlation":3}},
      {"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":20,"dur":-4,"args":{"correlation":3}},
      {"ph":"X","cat":"kernel","name":"orphan","pid":0,"tid":7,"ts":30,"dur":1,"args":{"correlation":99}}]}"#;
    let (dir, out) = crate::common::analyze_text(text);
    let d = &out.diagnostics;
    for kind in [
        "overlapping_ops",
        "duplicate_correlation_ids",
        "negative_duration",
        "gpu_activity_without_launch",
    ] {
        assert_eq!(d.count(kind), 1, "{kind}: {:?}", d.lines());
    }
    let summary = std::fs::read_to_string(dir.path().join("out/summary.json")).unwrap();
    assert!(summary.contains("duplicate_correlation_ids"));
}

#[test]
fn closed_stdout_exits_quietly() {
    // Two tables of every node (~130 KB) overflow the pipe buffer, so the write meets EPIPE.
    let s = root().join("sample_traces/gpt_bf16_ckpt");
    let dir = tempfile::tempdir().unwrap();
    let bin = assert_cmd::cargo::cargo_bin("steptrace");
    let script = format!(
        "set -o pipefail; {} analyze {} --out {} --no-plots --no-annotated-trace --top 100000 | head -c 10 >/dev/null",
        bin.display(),
        s.display(),
        dir.path().join("o").display()
    );
    let out = std::process::Command::new("bash")
        .args(["-c", &script])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!String::from_utf8_lossy(&out.stderr).contains("panicked"));
    let _ = manifest;
}

/// Issue 17: a corrupt Execution Trace or snapshot in a run directory is a warning naming the
/// file, and the trace is analysed; the same file named on the command line is an error.
#[test]
fn a_bad_side_file_in_a_run_directory_never_sinks_the_trace() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    std::fs::create_dir(&run).unwrap();
    let sample = crate::common::root().join("sample_traces/resnet18");
    for e in std::fs::read_dir(&sample).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, run.join(p.file_name().unwrap())).unwrap();
    }
    // What a writer killed twice leaves: JSON with trailing data, and a pickle cut short.
    std::fs::write(
        run.join("exec_trace.json.gz"),
        b"{\"nodes\": []}{\"nodes\": []}",
    )
    .unwrap();
    let snap = std::fs::read(run.join("snapshot.pickle.gz")).unwrap();
    std::fs::write(run.join("snapshot.pickle.gz"), &snap[..snap.len() / 3]).unwrap();
    let (_d, out) = crate::common::analyze(&run);
    let warnings = out.diagnostics.lines().join("\n");
    assert_eq!(
        out.diagnostics.count("side_file_unreadable"),
        1,
        "{warnings}"
    );
    // The cut pickle yields what it holds, with a warning (issue 22).
    assert!(
        out.diagnostics.count("truncated_snapshot") >= 1,
        "{warnings}"
    );
    assert!(warnings.contains("snapshot.pickle.gz"), "{warnings}");
    assert!(out.analysis.summary.iterations > 0);
    assert!(out.analysis.summary.snapshot.is_some());
    assert!(out.analysis.summary.execution_trace.is_none());

    let props = steptrace::AnalyzeProps {
        input: run.join("trace.json.gz"),
        exec_trace: Some(run.join("exec_trace.json.gz")),
        out: Some(dir.path().join("out2")),
        ..Default::default()
    };
    let err = steptrace::analyze(&props).unwrap_err();
    assert!(err.to_string().contains("exec_trace.json.gz"), "{err}");
}

/// Two analyses into one `--out` at once (issue: robustness round 3, case 4: one's
/// summary.json was left beside the other's tables in 3 of 20 runs, both exiting 0). The
/// folder is locked by each writer in turn: both succeed, and what is left is one run's
/// outputs whole: its list names every file there, and summary.json agrees with its tables.
#[test]
fn two_analyses_into_one_folder_leave_one_runs_outputs_whole() {
    let bin = env!("CARGO_BIN_EXE_steptrace");
    let inputs = [
        root().join("sample_traces/resnet18"),
        root().join("sample_traces/gpt_bf16"),
    ];
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o");
    for round in 0..3 {
        let kids: Vec<_> = inputs
            .iter()
            .map(|i| {
                std::process::Command::new(bin)
                    .args(["analyze", "-q", "--no-plots", "--out"])
                    .arg(&out)
                    .arg(i)
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for k in kids {
            let o = k.wait_with_output().unwrap();
            assert!(
                o.status.success(),
                "round {round}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
        let summary: serde_json::Value =
            serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
        let rows = |f: &str| {
            std::fs::read_to_string(out.join(f))
                .unwrap()
                .lines()
                .count()
                - 1
        };
        assert_eq!(
            rows("iterations.csv") as u64,
            summary["iterations"].as_u64().unwrap(),
            "round {round}"
        );
        assert_eq!(
            rows("node_stats.csv") as u64,
            summary["nodes_per_iteration"].as_u64().unwrap(),
            "round {round}"
        );
        let listed: std::collections::BTreeSet<String> =
            std::fs::read_to_string(out.join(".steptrace-outputs"))
                .unwrap()
                .lines()
                .map(str::to_owned)
                .collect();
        let present: std::collections::BTreeSet<String> = std::fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n != ".steptrace-outputs")
            .collect();
        assert_eq!(listed, present, "round {round}");
    }
}

/// Case 9 of robustness round 3: an event name of hundreds of MB (a 300 MB one took 4.4 GB and
/// wrote two 600 MB files) is cut to its first 64 KiB with one warning; the rest of the trace is
/// analysed as usual.
#[test]
fn a_huge_event_name_is_cut_with_a_warning() {
    let long = "a".repeat(1 << 20);
    let text = format!(
        r#"{{"schemaVersion":1,"deviceProperties":[],"traceEvents":[
{{"ph":"X","cat":"user_annotation","name":"ProfilerStep#1","pid":1,"tid":1,"ts":1000,"dur":500}},
{{"ph":"X","cat":"cpu_op","name":"{long}","pid":1,"tid":1,"ts":1100,"dur":10}},
{{"ph":"X","cat":"cpu_op","name":"aten::mm","pid":1,"tid":1,"ts":1200,"dur":10}}]}}"#
    );
    let (_d, out) = crate::common::analyze_text(&text);
    assert_eq!(out.diagnostics.count("long_name_cut"), 1);
    let names: Vec<&str> = out
        .analysis
        .node_stats
        .iter()
        .map(|n| n.node_name.as_str())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(
        names.iter().all(|n| n.len() < (64 << 10) + 64),
        "a name kept whole"
    );
    assert!(names.iter().any(|n| n.contains("aten::mm")));
}

/// Issue 80, item 2: a capture-form `.gz` whose members hold a few bytes each (each window
/// filled its margin from thousands of members: 20,000 took 1.8 s, 150,000 over 120 s) is
/// read as members of capture's own size are, with the same result as the plain text.
#[test]
fn tiny_gzip_members_read_as_the_plain_text() {
    use std::io::Read;
    let mut text = Vec::new();
    flate2::read::MultiGzDecoder::new(
        std::fs::File::open(root().join("sample_traces/resnet18/trace.json.gz")).unwrap(),
    )
    .read_to_end(&mut text)
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("plain.json");
    std::fs::write(&plain, &text).unwrap();
    let tiny = dir.path().join("tiny.json.gz");
    let mut f = std::fs::File::create(&tiny).unwrap();
    for piece in text.chunks(97) {
        f.write_all(&steptrace_formats::gzip_members::member(piece, 1))
            .unwrap();
    }
    drop(f);
    let run = |input: &Path, out: &str| {
        steptrace::analyze(&steptrace::AnalyzeProps {
            input: input.to_path_buf(),
            out: Some(dir.path().join(out)),
            ..Default::default()
        })
        .unwrap()
    };
    let (a, b) = (run(&plain, "a"), run(&tiny, "b"));
    let json = |o: &steptrace::Outcome| {
        let mut v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(o.out_dir.join("summary.json")).unwrap())
                .unwrap();
        v["trace"] = serde_json::Value::Null;
        v["name"] = serde_json::Value::Null;
        v
    };
    assert_eq!(json(&a), json(&b));
    assert!(text.len() / 97 > 5_000, "members: {}", text.len() / 97);
}

/// Issue 80, item 3: a `.gz` with zero padding after its last member (capture's members, and
/// torch's single stream) was read, and then the default command failed writing the annotated
/// trace ("invalid gzip header"): whatever the reader accepts, the writer now accepts, and the
/// annotated trace holds the input's events and steptrace's.
#[test]
fn zero_padded_gzip_gets_its_annotated_trace() {
    use std::io::Read;
    let src = root().join("sample_traces/resnet18/trace.json.gz");
    let raw = std::fs::read(&src).unwrap();
    let mut text = Vec::new();
    flate2::read::MultiGzDecoder::new(&raw[..])
        .read_to_end(&mut text)
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let members = dir.path().join("members.json.gz");
    std::fs::write(&members, [&raw[..], &[0u8; 700]].concat()).unwrap();
    let stream = dir.path().join("stream.json.gz");
    let mut one = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(6));
    one.write_all(&text).unwrap();
    std::fs::write(&stream, [one.finish().unwrap(), vec![0u8; 512]].concat()).unwrap();
    for input in [members, stream] {
        let mut report = steptrace::report::ReportOptions::default();
        report.annotated_trace = true;
        report.no_plots = true;
        let out = steptrace::analyze(&steptrace::AnalyzeProps {
            input: input.clone(),
            out: Some(dir.path().join(input.file_stem().unwrap())),
            report,
            ..Default::default()
        })
        .unwrap_or_else(|e| panic!("{input:?}: {e}"));
        let annotated = out.out_dir.join("annotated.pt.trace.json.gz");
        let mut back = Vec::new();
        flate2::read::MultiGzDecoder::new(std::fs::File::open(&annotated).unwrap())
            .read_to_end(&mut back)
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&back).unwrap();
        let events = v["traceEvents"].as_array().unwrap();
        let input_events = serde_json::from_slice::<serde_json::Value>(&text).unwrap()
            ["traceEvents"]
            .as_array()
            .unwrap()
            .len();
        assert!(events.len() > input_events, "{input:?}");
        assert!(
            events.iter().any(|e| e["cat"] == "steptrace_node"),
            "{input:?}"
        );
    }
}
