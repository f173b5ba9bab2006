//! Every file format steptrace writes and reads back, round-tripped through its one type on
//! every committed copy (issue 77): manifest.json and shim.json here, summary.json in
//! `golden.rs`, plan.json in `plan.rs`.

use std::path::{Path, PathBuf};

use steptrace_formats::manifest::Manifest;
use steptrace_formats::shim::ShimStatus;

/// Files under `sample_traces/` named `name` (or starting with `prefix` and ending `.json`).
fn committed(pred: &dyn Fn(&str) -> bool) -> Vec<PathBuf> {
    fn walk(d: &Path, pred: &dyn Fn(&str) -> bool, out: &mut Vec<PathBuf>) {
        let mut entries: Vec<_> = std::fs::read_dir(d).unwrap().flatten().collect();
        entries.sort_by_key(|e| e.path());
        for e in entries {
            let p = e.path();
            if p.is_dir() {
                walk(&p, pred, out);
            } else if pred(&e.file_name().to_string_lossy()) {
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    walk(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("sample_traces"),
        pred,
        &mut out,
    );
    out
}

#[test]
fn issue77_every_committed_manifest_round_trips_through_its_type() {
    let files = committed(&|n| n == "manifest.json");
    assert!(files.len() > 50, "{}", files.len());
    for p in files {
        let text = std::fs::read(&p).unwrap();
        let m = Manifest::from_json(&text).unwrap_or_else(|e| panic!("{p:?}: {e}"));
        let again = serde_json::to_vec_pretty(&m).unwrap();
        let (a, b): (serde_json::Value, serde_json::Value) = (
            serde_json::from_slice(&text).unwrap(),
            serde_json::from_slice(&again).unwrap(),
        );
        crate::common::assert_json_holds(&a, &b, &p.display().to_string());
        let back = Manifest::from_json(&again).unwrap();
        assert_eq!(
            serde_json::to_vec_pretty(&back).unwrap(),
            again,
            "{p:?}: not stable"
        );
    }
}

#[test]
fn issue77_every_committed_shim_status_round_trips_through_its_type() {
    let files = committed(&|n| n.starts_with("shim") && n.ends_with(".json"));
    assert!(files.len() > 50, "{}", files.len());
    for p in files {
        let text = std::fs::read(&p).unwrap();
        let s = ShimStatus::from_json(&text).unwrap_or_else(|e| panic!("{p:?}: {e}"));
        let again = serde_json::to_vec_pretty(&s).unwrap();
        let back = ShimStatus::from_json(&again).unwrap();
        assert_eq!(
            serde_json::to_vec_pretty(&back).unwrap(),
            again,
            "{p:?}: not stable"
        );
        // What the manifest passes on from the shim comes through whole.
        let (a, b): (serde_json::Value, serde_json::Value) = (
            serde_json::from_slice(&text).unwrap(),
            serde_json::from_slice(&again).unwrap(),
        );
        for k in [
            "reference",
            "plan_probe",
            "timing_ns",
            "after_window_ns",
            "costs_ms",
        ] {
            if let Some(v) = a.get(k).filter(|v| !v.is_null()) {
                crate::common::assert_json_holds(v, &b[k], &format!("{}.{k}", p.display()));
            }
        }
    }
}

#[test]
fn issue77_newer_manifest_and_shim_formats_are_refused_in_one_line() {
    let newer = br#"{"format_version": 7, "ranks": []}"#;
    let e = Manifest::from_json(newer).unwrap_err().to_string();
    assert_eq!(
        e,
        "format version 7 is newer than this build reads (1): use a newer steptrace"
    );
    let e = ShimStatus::from_json(newer).unwrap_err().to_string();
    assert!(e.contains("format version 7 is newer"), "{e}");
    // Without a version: the first one.
    assert_eq!(Manifest::from_json(b"{}").unwrap().format_version, 1);
    assert_eq!(ShimStatus::from_json(b"{}").unwrap().format_version, 1);
    // A timing phase's stop this build does not know (a newer shim's) reads, as no cap.
    let s = ShimStatus::from_json(br#"{"timing_stop": "budget_spent"}"#).unwrap();
    assert_eq!(
        s.timing_stop,
        Some(steptrace_formats::manifest::PhaseStop::Other)
    );
    let s = ShimStatus::from_json(br#"{"timing_stop": "time_cap"}"#).unwrap();
    assert!(s.timing_stop.unwrap().capped());
    // A probe without every figure reads as none, and the rest of the manifest still reads.
    let m = Manifest::from_json(br#"{"ranks": [{"rank": 0, "plan_probe": {"swap_call_s": 1}}]}"#)
        .unwrap();
    assert_eq!(m.ranks[0].plan_probe, None);
    // Every figure: read, with the timings the shim made them from kept.
    let probe = r#"{"ranks": [{"plan_probe": {"recompute_call_s": 1e-3, "recompute_per_op_s": 2e-5,
        "swap_call_s": 1e-4, "swap_per_op_s": 4e-5, "dtoh_gbps": 50.0, "htod_gbps": 51.0,
        "medians_s": {"plain_1": 5e-4}, "reps": 8, "rounds": 6}}]}"#;
    let p = Manifest::from_json(probe.as_bytes()).unwrap().ranks[0]
        .plan_probe
        .clone()
        .unwrap();
    assert_eq!(
        (p.figures.htod_gbps, p.medians_s["plain_1"], p.rounds),
        (51.0, 5e-4, Some(6))
    );
    // A probe by an older shim has no forward part; a newer one's is read.
    assert_eq!(p.figures.recompute_forward_per_op_s, None);
    let newer = probe.replace(
        r#""recompute_per_op_s": 2e-5,"#,
        r#""recompute_per_op_s": 2e-5, "recompute_forward_call_s": 4e-4, "recompute_forward_per_op_s": 7e-6,"#,
    );
    let p = Manifest::from_json(newer.as_bytes()).unwrap().ranks[0]
        .plan_probe
        .clone()
        .unwrap();
    assert_eq!(
        (
            p.figures.recompute_forward_call_s,
            p.figures.recompute_forward_per_op_s
        ),
        (Some(4e-4), Some(7e-6))
    );
}
