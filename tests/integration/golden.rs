//! Golden snapshots of analyze's outputs on every sample (insta). Bless changes with
//! `INSTA_UPDATE=always cargo test` and review the diff before committing.

use crate::common::{analyze_snapshot_alone, samples};

/// Per sample, one analysis: summary.json, node_stats.csv and iterations.csv held whole; every
/// file analyze writes by name, size and content hash (a gzip file's of its inflated text) (FNV-1a 64 over the bytes, with the run's
/// temporary folder, the checkout and the version written as placeholders in text files), so
/// any change to any output, plots, Parquet and report.html included, shows; and the text of
/// every other table or JSON file under 32 KiB held whole.
#[test]
fn sample_outputs_match_snapshots() {
    for s in samples() {
        let name = s.file_name().unwrap().to_string_lossy().into_owned();
        let (_d, out) = crate::common::analyze(&s);
        let summary = std::fs::read_to_string(out.out_dir.join("summary.json")).unwrap();
        assert_summary_round_trips(&summary, &name);
        let summary = summary.replace(env!("CARGO_PKG_VERSION"), "[version]");
        insta::assert_snapshot!(format!("{name}__summary"), summary);
        let stats = std::fs::read_to_string(out.out_dir.join("node_stats.csv")).unwrap();
        insta::assert_snapshot!(format!("{name}__node_stats"), stats);
        let iters = std::fs::read_to_string(out.out_dir.join("iterations.csv")).unwrap();
        insta::assert_snapshot!(format!("{name}__iterations"), iters);
        // The three held above are not held again.
        let held = ["summary.json", "node_stats.csv", "iterations.csv"];
        assert_outputs(&out.out_dir, &name, &held);
    }
}

/// summary.json read back by its one type ([`steptrace_formats::summary::Summary`]) and
/// written again holds the same fields, keys in the same order, and the same values (floats to
/// the last bit or one ulp: serde_json's reader rounds some of them, and steptrace keeps its
/// fast float parsing), and reads back to an equal summary.
fn assert_summary_round_trips(text: &str, name: &str) {
    use steptrace_formats::summary::Summary;
    let s = Summary::from_json(text)
        .unwrap_or_else(|e| panic!("{name}: summary.json does not read back: {e}"));
    let again = serde_json::to_string_pretty(&s).unwrap() + "\n";
    assert_eq!(Summary::from_json(&again).unwrap(), s, "{name}");
    let (a, b): (serde_json::Value, serde_json::Value) = (
        serde_json::from_str(text).unwrap(),
        serde_json::from_str(&again).unwrap(),
    );
    crate::common::assert_json_holds(&a, &b, name);
    assert_eq!(
        json_keys(text),
        json_keys(&again),
        "{name}: keys or their order changed"
    );
}

/// The keys of an indented JSON text, in order: what a type that drops or reorders a field
/// changes.
fn json_keys(t: &str) -> Vec<String> {
    t.lines()
        .filter_map(|l| l.trim_start().split_once("\": ").map(|(k, _)| k.to_owned()))
        .collect()
}

#[test]
fn summary_json_refuses_a_newer_format_and_reads_one_without_a_version() {
    let s = crate::common::samples().into_iter().next().unwrap();
    let (_d, out) = crate::common::analyze(&s);
    let text = std::fs::read_to_string(out.out_dir.join("summary.json")).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["format_version"] = 99.into();
    let err = steptrace_formats::summary::Summary::from_json(&v.to_string()).unwrap_err();
    assert!(err.to_string().contains("version 99 is newer"), "{err}");
    v.as_object_mut().unwrap().remove("format_version");
    let old = steptrace_formats::summary::Summary::from_json(&v.to_string()).unwrap();
    assert_eq!(old.format_version, 1);
    v["time_by_phase"]["warmup"] = serde_json::json!({"gpu_s": 0.0, "cpu_s": 0.0, "wall_s": 0.0});
    let err = steptrace_formats::summary::Summary::from_json(&v.to_string()).unwrap_err();
    assert!(err.to_string().contains("unknown key `warmup`"), "{err}");
}

/// Each sample's memory snapshot analysed alone (`analyze snapshot.pickle.gz`): every file by
/// name, size and hash, and the small text files whole.
#[test]
fn snapshot_alone_outputs_match_snapshots() {
    for s in samples() {
        let Some((_dir, out)) = analyze_snapshot_alone(&s) else {
            continue;
        };
        let name = s.file_name().unwrap().to_string_lossy().into_owned();
        // Its summary.json reads back through its one type, every value kept.
        let text = std::fs::read_to_string(out.out_dir.join("summary.json")).unwrap();
        let back = steptrace_formats::summary::SnapshotSummary::from_json(&text)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let again = serde_json::to_string_pretty(&back).unwrap();
        crate::common::assert_json_holds(
            &serde_json::from_str(&text).unwrap(),
            &serde_json::from_str(&again).unwrap(),
            &name,
        );
        assert_eq!(json_keys(&text), json_keys(&again), "{name}");
        assert_outputs(&out.out_dir, &format!("{name}__snapshot_alone"), &[]);
    }
}

/// Every file under `dir` by name, size and hash as `{prefix}__all_outputs`, and each text
/// file under 32 KiB not in `held` whole as `{prefix}__{its name}`.
fn assert_outputs(dir: &std::path::Path, prefix: &str, held: &[&str]) {
    let mut digests = Vec::new();
    for path in files_under(dir) {
        let rel = path.strip_prefix(dir).unwrap().display().to_string();
        let raw = std::fs::read(&path).unwrap();
        // A gzip file by its text: how it is compressed (which blocks are kept from the
        // input, the level) is the writer's choice, what it holds is the output.
        let (raw, what) = if rel.ends_with(".gz") {
            let mut text = Vec::new();
            std::io::Read::read_to_end(&mut flate2::read::MultiGzDecoder::new(&raw[..]), &mut text)
                .unwrap();
            (text, "bytes inflated")
        } else {
            (raw, "bytes")
        };
        let bytes = normalized(&raw, dir);
        digests.push(format!(
            "{rel}  {} {what}  {:016x}",
            bytes.len(),
            fnv1a(&bytes)
        ));
        let text_like = [".csv", ".json", ".txt", ".md"]
            .iter()
            .any(|e| rel.ends_with(e));
        if text_like && !held.contains(&rel.as_str()) && raw.len() <= 32 << 10 {
            let key = rel.replace(['/', '.'], "_");
            insta::assert_snapshot!(
                format!("{prefix}__{key}"),
                String::from_utf8(bytes).unwrap()
            );
        }
    }
    insta::assert_snapshot!(format!("{prefix}__all_outputs"), digests.join("\n"));
}

fn files_under(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The bytes with the output folder's path and the version replaced, where they are text.
fn normalized(bytes: &[u8], out_dir: &std::path::Path) -> Vec<u8> {
    match std::str::from_utf8(bytes) {
        Ok(t) => t
            .replace(&out_dir.display().to_string(), "[out]")
            .replace(env!("CARGO_MANIFEST_DIR"), "[repo]")
            .replace(env!("CARGO_PKG_VERSION"), "[version]")
            .into_bytes(),
        Err(_) => bytes.to_vec(),
    }
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}
