//! A memory snapshot on its own, against torch's `_memory_viz` on the same files: for every
//! snapshot committed under sample_traces, `sample_traces/memviz_reference.json.gz` holds what
//! `capture/corpus/memviz_reference.py` computed on the GPU machine with torch 2.11 (`stats`'s
//! totals, `memory`'s flame-graph lines at the end, and the peak replayed from the end state
//! back through the history, with the flame-graph lines of what is alive at it).

use std::collections::BTreeMap;

use serde_json::Value;

use crate::common::root;
use steptrace::analysis::snapshot;

fn reference() -> BTreeMap<String, Value> {
    let f = std::fs::File::open(root().join("sample_traces/memviz_reference.json.gz")).unwrap();
    serde_json::from_reader(flate2::read::GzDecoder::new(f)).unwrap()
}

/// `ours` (bytes by flame-graph line, all of them) against the reference's heaviest lines,
/// their count and their sum.
fn assert_stacks(ours: &[(String, i64)], want: &Value, what: &str) {
    let ours_map: BTreeMap<&str, i64> = ours.iter().map(|(l, b)| (l.as_str(), *b)).collect();
    assert_eq!(
        ours_map.len() as u64,
        want["stack_lines"].as_u64().unwrap(),
        "{what}: lines"
    );
    assert_eq!(
        ours.iter().map(|x| x.1).sum::<i64>(),
        want["stack_bytes"].as_i64().unwrap(),
        "{what}: bytes"
    );
    for (line, bytes) in want["stacks"].as_object().unwrap() {
        assert_eq!(
            ours_map.get(line.as_str()).copied(),
            bytes.as_i64(),
            "{what}: {line}"
        );
    }
}

#[test]
fn every_committed_snapshot_alone_agrees_with_torch_memory_viz() {
    let refs = reference();
    assert!(refs.len() >= 50, "{}", refs.len());
    for (path, want) in &refs {
        let mut diag = steptrace::diagnostics::Diagnostics::default();
        let s = steptrace::ingest::snapshot::load(&root().join(path), &mut diag).unwrap();
        let whole = snapshot::analyze(&s);
        // What `analyze SNAPSHOT` does: the history replayed on a thread as it is read,
        // never kept. It must agree with the replay of the history read whole.
        let (_, a) = steptrace::load_snapshot(&root().join(path), &mut diag).unwrap();
        assert_eq!(
            serde_json::to_value(&a).unwrap(),
            serde_json::to_value(&whole).unwrap(),
            "{path}: the streamed replay differs from the whole one"
        );
        for (x, y) in a.devices.iter().zip(&whole.devices) {
            assert_eq!(x.intervals, y.intervals, "{path}: intervals");
        }
        let seg = &want["segsum"];
        assert_eq!(
            (
                a.segments.segments as u64,
                a.segments.reserved_bytes,
                a.segments.allocated_bytes,
                a.segments.free_internal_bytes,
                a.segments.free_external_bytes
            ),
            (
                seg["segments"].as_u64().unwrap(),
                seg["total_reserved"].as_u64().unwrap(),
                seg["total_allocated"].as_u64().unwrap(),
                seg["free_internal"].as_u64().unwrap(),
                seg["free_external"].as_u64().unwrap()
            ),
            "{path}: segsum"
        );
        assert_stacks(
            &snapshot::end_stacks(&s),
            &want["end"],
            &format!("{path} end"),
        );
        let peaks = want["peak"].as_array().unwrap();
        assert_eq!(a.devices.len(), peaks.len(), "{path}: devices");
        for (d, p) in a.devices.iter().zip(peaks) {
            let what = format!("{path} device {}", d.device);
            assert_eq!(d.device, p["device"].as_i64().unwrap(), "{what}");
            assert_eq!(d.entries as u64, p["entries"].as_u64().unwrap(), "{what}");
            assert_eq!(
                d.peak.allocated_bytes,
                p["peak_allocated_bytes"].as_u64().unwrap(),
                "{what}: peak"
            );
            assert_eq!(
                d.peak.entry.map_or(-1, |e| e as i64),
                p["peak_entry"].as_i64().unwrap(),
                "{what}: peak entry"
            );
            assert_eq!(
                d.peak.alive.len() as u64,
                p["alive_at_peak"].as_u64().unwrap(),
                "{what}: alive"
            );
            let stacks: Vec<(String, i64)> = d
                .peak
                .stacks
                .iter()
                .map(|(l, b)| (l.clone(), *b as i64))
                .collect();
            assert_stacks(&stacks, p, &format!("{what} peak"));
        }
    }
}

/// `steptrace analyze snapshot.pickle.gz`, the snapshot alone: every output is written, the
/// peak in summary.json and the console is torch's (the reference's), the flame-graph lines at
/// the peak add up to it, and the top sites name the program's own frames.
#[test]
fn a_snapshot_given_alone_is_analysed_on_its_own() {
    let refs = reference();
    let rel = "sample_traces/resnet18/snapshot.pickle.gz";
    let want = refs[rel]["peak"][0]["peak_allocated_bytes"]
        .as_u64()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = assert_cmd::Command::cargo_bin("steptrace")
        .unwrap()
        .args(["analyze", "--out"])
        .arg(dir.path())
        .arg(root().join(rel))
        .assert()
        .success();
    let console = String::from_utf8_lossy(&out.get_output().stdout).into_owned();
    assert!(
        console.contains("memory snapshot, 1 device")
            && console.contains(&format!(
                "peak {} allocated",
                steptrace::report::human_bytes(want as i64)
            )),
        "{console}"
    );
    for f in steptrace::report::snapshot::FILES
        .iter()
        .chain(&["report.html"])
    {
        assert!(dir.path().join(f).is_file(), "{f} missing");
    }
    let summary: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["kind"], "memory_snapshot");
    assert_eq!(summary["peak_allocated_bytes"].as_u64(), Some(want));
    let stacks = std::fs::read_to_string(dir.path().join("stacks_at_peak.txt")).unwrap();
    let sum: u64 = stacks
        .lines()
        .map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
        .sum();
    assert_eq!(sum, want);
    let sites = std::fs::read_to_string(dir.path().join("top_sites.csv")).unwrap();
    assert!(sites.contains(",python_frame,train_cnn.py:"), "{sites}");
    // The view's data and script are in the page: it works offline, from disk.
    let html = std::fs::read_to_string(dir.path().join("report.html")).unwrap();
    assert!(html.contains("id=\"steptrace-memory\"") && !html.contains("http"));
}

/// The view in headless Chromium (tests/browser/run.sh): draws a 1.1 M-entry snapshot within
/// 2 s, shows an allocation's stack on hover, pins it on click.
#[test]
#[ignore = "needs node, npm and Chromium"]
fn the_memory_view_draws_a_million_entries_and_shows_stacks_on_hover() {
    let status = std::process::Command::new("bash")
        .arg(root().join("tests/browser/run.sh"))
        .env("STEPTRACE", env!("CARGO_BIN_EXE_steptrace"))
        .status()
        .unwrap();
    assert!(status.success());
}

/// `steptrace compare A.pickle B.pickle`: what grew at the peak. The rows by kind of code
/// partition each peak, as the rows by whole stack do: their changes add up to the change of
/// the peak.
#[test]
fn comparing_two_snapshots_says_what_grew_at_the_peak() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (
        "sample_traces/gpt_bf16/snapshot.pickle.gz",
        "sample_traces/gpt_bf16_ckpt/snapshot.pickle.gz",
    );
    let out = assert_cmd::Command::cargo_bin("steptrace")
        .unwrap()
        .args(["compare", "--labels", "plain,ckpt", "--out"])
        .arg(dir.path())
        .arg(root().join(a))
        .arg(root().join(b))
        .assert()
        .success();
    let console = String::from_utf8_lossy(&out.get_output().stdout).into_owned();
    assert!(
        console.contains("grew at the peak from plain to ckpt, by kind:"),
        "{console}"
    );
    let refs = reference();
    let peak = |p: &str| refs[p]["peak"][0]["peak_allocated_bytes"].as_i64().unwrap();
    let (h, rows) = crate::common::csv(&dir.path().join("compare_snapshots.csv"));
    let c = |n: &str| crate::common::col(&h, n);
    for by in ["kind", "stack"] {
        let sum: i64 = rows
            .iter()
            .filter(|r| r[c("by")] == by)
            .map(|r| r[c("delta_bytes")].parse::<i64>().unwrap())
            .sum();
        assert_eq!(sum, peak(b) - peak(a), "{by}");
    }
}

/// A snapshot pickled with protocol 5 (Python 3.14's default; memory_viz cannot read those,
/// pytorch#183842) reads to the same analysis as the protocol-2 original.
#[test]
fn a_protocol_5_snapshot_reads_as_its_protocol_2_original() {
    let analyze = |p: &str| {
        let mut diag = steptrace::diagnostics::Diagnostics::default();
        let s = steptrace::ingest::snapshot::load(&root().join(p), &mut diag).unwrap();
        assert!(diag.lines().is_empty(), "{:?}", diag.lines());
        let a = snapshot::analyze(&s);
        (
            a.segments,
            a.devices
                .iter()
                .map(|d| (d.peak.allocated_bytes, d.peak.entry, d.peak.stacks.clone()))
                .collect::<Vec<_>>(),
        )
    };
    assert_eq!(
        analyze("tests/data/gpt_bf16_snapshot_protocol5.pickle.gz"),
        analyze("sample_traces/gpt_bf16/snapshot.pickle.gz")
    );
}

/// A run with a trace and a snapshot: its report.html carries the snapshot's history as the
/// interactive view (one per device), after the plots.
#[test]
fn a_run_with_a_snapshot_has_the_memory_view_in_its_report() {
    let (_d, out) = crate::common::analyze(&root().join("sample_traces/resnet18"));
    let html = std::fs::read_to_string(out.out_dir.join("report.html")).unwrap();
    assert!(html.contains("id=\"memory-view-0\"") && html.contains("id=\"steptrace-memory\""));
    assert!(html.find("<h2>Plots</h2>") < html.find("memory-view-0"));
    let (named, checked) = ops_agree_with_the_allocators_stacks(&html, "resnet18");
    assert!(
        named > 500 && checked > 200,
        "{named} named, {checked} checked"
    );
    assert!(out.analysis.snapshot_history.is_some());
    // Without plots there is no view to draw: the whole history is not replayed (seconds on
    // a GB snapshot), and every other output is as it was.
    let dir = tempfile::tempdir().unwrap();
    let mut props = steptrace::AnalyzeProps {
        input: root().join("sample_traces/resnet18"),
        out: Some(dir.path().join("out")),
        top: 10,
        ..Default::default()
    };
    props.report.no_plots = true;
    let lean = steptrace::analyze(&props).unwrap();
    assert!(lean.analysis.snapshot_history.is_none());
    assert_eq!(
        std::fs::read(dir.path().join("out/summary.json")).unwrap(),
        std::fs::read(out.out_dir.join("summary.json")).unwrap()
    );
}

/// The view's data names the op that made each drawn allocation the trace saw made. The
/// allocator's own stack for it (the snapshot's frames, not the trace) says which module code
/// ran: a block made under torch's conv.py must be a convolution's, under linear.py a matmul's,
/// and so on. Returns how many were named and how many of those a stack could check.
fn ops_agree_with_the_allocators_stacks(html: &str, run: &str) -> (usize, usize) {
    let data = html
        .split("<script id=\"steptrace-memory\" type=\"application/json\">")
        .nth(1)
        .and_then(|r| r.split("</script>").next())
        .unwrap()
        .replace("<\\/", "</");
    let v: Value = serde_json::from_str(&data).unwrap();
    let ops = v["ops"].as_array().unwrap();
    let stacks = v["stacks"].as_array().unwrap();
    let a = &v["devices"][0]["allocs"];
    let module_ops: [(&str, &[&str]); 6] = [
        ("conv.py:", &["conv"]),
        ("batchnorm.py:", &["batch_norm"]),
        ("linear.py:", &["linear", "addmm", "matmul", "mm"]),
        ("sparse.py:", &["embedding"]),
        ("normalization.py:", &["layer_norm"]),
        ("rnn.py:", &["lstm", "rnn", "gru"]),
    ];
    let (mut named, mut checked) = (0, 0);
    for (i, op) in a["op"].as_array().unwrap().iter().enumerate() {
        let Some(op) = op.as_i64().filter(|&o| o >= 0) else {
            continue;
        };
        named += 1;
        let op = ops[op as usize].as_str().unwrap();
        let frames = stacks[a["stack"][i].as_u64().unwrap() as usize]
            .as_array()
            .unwrap();
        let under = |file: &str| frames.iter().any(|f| f.as_str().unwrap().starts_with(file));
        for (file, want) in module_ops {
            if under(file) {
                checked += 1;
                assert!(
                    want.iter().any(|w| op.contains(w)),
                    "{run}: a block made under {file} is given to {op}"
                );
            }
        }
    }
    (named, checked)
}

/// The same on programs this project did not write, from the corpus: a LightningModule under
/// the Trainer, nanoGPT's train.py, pytorch/examples' word_language_model and dcgan.
#[test]
fn ops_named_in_the_memory_view_agree_with_the_stacks_on_third_party_runs() {
    for run in [
        "fw_lightning",
        "nanogpt_train_fp16_accum",
        "py_word_lm",
        "py_dcgan",
    ] {
        let (_d, out) = crate::common::analyze(&root().join("sample_traces/corpus").join(run));
        let html = std::fs::read_to_string(out.out_dir.join("report.html")).unwrap();
        let (named, checked) = ops_agree_with_the_allocators_stacks(&html, run);
        assert!(
            named > 100 && checked > 20,
            "{run}: {named} named, {checked} checked"
        );
    }
}
