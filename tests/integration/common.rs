//! Helpers shared by the integration tests.

use std::path::{Path, PathBuf};

use serde_json::Value;

/// The repository root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every sample capture directory, sorted.
pub fn samples() -> Vec<PathBuf> {
    run_dirs("sample_traces", 5)
}

/// The run directories (those with a `manifest.json`) directly under `rel`, sorted; at least
/// `min` of them.
pub fn run_dirs(rel: &str, min: usize) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(root().join(rel))
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.join("manifest.json").is_file())
        .collect();
    v.sort();
    assert!(
        v.len() >= min,
        "expected at least {min} captures in {rel}, found {v:?}"
    );
    v
}

/// A sample's manifest.
pub fn manifest(sample: &Path) -> Value {
    json(&sample.join("manifest.json"))
}

/// The reference the program measured beside the capture, for the rank analyze reads.
pub fn reference(sample: &Path) -> Value {
    let m = manifest(sample);
    let rank = m["rank"].as_i64().unwrap_or(0);
    let name = if m["world_size"].as_i64().unwrap_or(1) > 1 {
        format!("reference_rank{rank}.json")
    } else {
        "reference.json".to_owned()
    };
    json(&sample.join(name))
}

/// The trace file analyze reads for a sample (through its manifest).
pub fn trace_path(sample: &Path) -> PathBuf {
    sample.join(manifest(sample)["files"]["trace"].as_str().unwrap())
}

/// Index of the first active step: skip_first + wait + warmup of the capture's schedule.
pub fn first_active(sample: &Path) -> u64 {
    let s = &manifest(sample)["schedule"];
    s["skip_first"].as_u64().unwrap() + s["wait"].as_u64().unwrap() + s["warmup"].as_u64().unwrap()
}

/// Reads a JSON file (plain or gzip, one member or many as capture writes it) into a `Value`,
/// independently of steptrace's reader.
pub fn json(path: &Path) -> Value {
    let bytes = std::fs::read(path).unwrap();
    let text = if bytes.starts_with(&[0x1f, 0x8b]) {
        use std::io::Read;
        let mut s = Vec::new();
        flate2::read::MultiGzDecoder::new(&bytes[..])
            .read_to_end(&mut s)
            .unwrap();
        s
    } else {
        bytes
    };
    serde_json::from_slice(&text).unwrap()
}

/// Runs the binary's `analyze --out OUT INPUT`, which must succeed; returns its console.
pub fn console_of(input: &Path, out: &Path) -> String {
    let o = assert_cmd::Command::cargo_bin("steptrace")
        .unwrap()
        .args(["analyze", "--out"])
        .arg(out)
        .arg(input)
        .assert()
        .success();
    String::from_utf8_lossy(&o.get_output().stdout).into_owned()
}

/// A Parquet file steptrace wrote, read back whole by polars.
#[cfg(feature = "parquet")]
pub fn read_parquet(path: &Path) -> polars::prelude::DataFrame {
    use polars::prelude::SerReader;
    let f = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    polars::prelude::ParquetReader::new(f).finish().unwrap()
}

/// The sample's memory snapshot analysed alone (`analyze snapshot.pickle.gz`) into a temporary
/// directory, if the sample has one.
pub fn analyze_snapshot_alone(
    sample: &Path,
) -> Option<(tempfile::TempDir, steptrace::SnapshotOutcome)> {
    let snap = sample.join("snapshot.pickle.gz");
    if !snap.is_file() {
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let outcome = steptrace::analyze_snapshot(&steptrace::AnalyzeProps {
        input: snap,
        out: Some(dir.path().join("out")),
        top: 10,
        ..Default::default()
    })
    .unwrap();
    Some((dir, outcome))
}

/// Runs `analyze` on a sample into a fresh directory; returns (tempdir, outcome).
pub fn analyze(sample: &Path) -> (tempfile::TempDir, steptrace::Outcome) {
    let dir = tempfile::tempdir().unwrap();
    let mut props = steptrace::AnalyzeProps {
        input: sample.to_path_buf(),
        out: Some(dir.path().join("out")),
        top: 10,
        ..Default::default()
    };
    props.report.annotated_trace = true;
    let outcome = steptrace::analyze(&props).unwrap();
    (dir, outcome)
}

/// Runs `analyze` on an in-memory trace (written to `trace.json` in a fresh directory), with
/// results (the annotated trace among them, as [`analyze`]) under `out/`; returns (tempdir,
/// outcome).
pub fn analyze_text(text: &str) -> (tempfile::TempDir, steptrace::Outcome) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("trace.json");
    std::fs::write(&p, text).unwrap();
    let mut props = steptrace::AnalyzeProps {
        input: p,
        out: Some(dir.path().join("out")),
        top: 5,
        ..Default::default()
    };
    props.report.annotated_trace = true;
    let outcome = steptrace::analyze(&props).unwrap();
    (dir, outcome)
}

/// One allocator event (`[memory]`) of device `(device type, device id)` as Kineto writes it,
/// for hand-built traces.
pub fn memory_event(ts: u64, addr: u64, bytes: i64, total: i64, device: (i64, i64)) -> String {
    format!(
        r#"{{"ph":"i","cat":"cpu_instant_event","name":"[memory]","pid":1,"tid":1,"ts":{ts},"args":{{"Addr":{addr},"Bytes":{bytes},"Total Allocated":{total},"Total Reserved":0,"Device Type":{},"Device Id":{}}}}}"#,
        device.0, device.1
    )
}

/// Reads a CSV file into (header, rows).
pub fn csv(path: &Path) -> (Vec<String>, Vec<Vec<String>>) {
    let mut r = csv::Reader::from_path(path).unwrap();
    let header = r.headers().unwrap().iter().map(str::to_owned).collect();
    let rows = r
        .records()
        .map(|rec| rec.unwrap().iter().map(str::to_owned).collect())
        .collect();
    (header, rows)
}

/// Column index by name.
pub fn col(header: &[String], name: &str) -> usize {
    header
        .iter()
        .position(|h| h == name)
        .unwrap_or_else(|| panic!("no column {name}"))
}

/// Median of f64s.
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// `b` (a file read back through its type and written again) holds every value of `a`: floats
/// to one ulp (serde_json's reader rounds some), `format_version` added where `a` predates it,
/// and a rank's timing in the flat layout of older manifests read into the nested one.
pub fn assert_json_holds(a: &serde_json::Value, b: &serde_json::Value, at: &str) {
    use serde_json::Value::*;
    match (a, b) {
        (Number(x), Number(y)) if x.is_f64() || y.is_f64() => {
            let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
            assert!(
                x == y || (x - y).abs() <= 2.0 * f64::EPSILON * x.abs().max(y.abs()),
                "{at}: {x} against {y}"
            );
        }
        (Array(x), Array(y)) => {
            assert_eq!(x.len(), y.len(), "{at}");
            for (i, (x, y)) in x.iter().zip(y).enumerate() {
                assert_json_holds(x, y, &format!("{at}[{i}]"));
            }
        }
        // A rank's timing as captures wrote it before the steps after the window were timed
        // (the phase's fields beside `step_time_s`) is read into today's nested form.
        (Object(x), Object(_)) if at.ends_with(".timing") && x.contains_key("intervals_s") => {
            assert_json_holds(&x["step_time_s"], &b["step_time_s"], at);
            assert_json_holds(&x["intervals_s"], &b["timing_phase"]["intervals_s"], at);
        }
        (Object(x), Object(y)) => {
            for (k, v) in x {
                let w = y
                    .get(k)
                    .unwrap_or_else(|| panic!("{at}.{k}: dropped by the type"));
                assert_json_holds(v, w, &format!("{at}.{k}"));
            }
        }
        _ => assert_eq!(a, b, "{at}"),
    }
}
