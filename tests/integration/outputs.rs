//! Output safety (issue 19): files appear under their final names only when complete,
//! `summary.json` last; a rerun removes the files of the run before that it does not write
//! again; the annotated trace takes the input's form.

use std::path::Path;

use crate::common::{json, root, trace_path};

fn analyze(input: &Path, out: &Path, plots: bool, annotated: bool) -> steptrace::Outcome {
    let mut props = steptrace::AnalyzeProps {
        input: input.to_path_buf(),
        out: Some(out.to_path_buf()),
        top: 3,
        ..Default::default()
    };
    props.report.no_plots = !plots;
    props.report.annotated_trace = annotated;
    steptrace::analyze(&props).unwrap()
}

fn parts(dir: &Path) -> Vec<String> {
    let mut v = Vec::new();
    for d in [dir.to_path_buf(), dir.join("plots")] {
        for e in std::fs::read_dir(d).into_iter().flatten().flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            if n.ends_with(".steptrace-part") {
                v.push(n);
            }
        }
    }
    v
}

#[test]
fn issue19_rerun_removes_what_it_does_not_write_again() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o");
    let sample = root().join("sample_traces/resnet18");
    analyze(&sample, &out, true, true);
    assert!(out.join("plots/memory_over_time.png").is_file());
    assert!(out.join("annotated.pt.trace.json.gz").is_file());
    std::fs::write(out.join("my_notes.txt"), "kept").unwrap();
    analyze(&sample, &out, false, false);
    assert!(!out.join("plots/memory_over_time.png").exists());
    assert!(!out.join("annotated.pt.trace.json.gz").exists());
    assert!(out.join("summary.json").is_file());
    assert!(out.join("node_stats.csv").is_file());
    assert_eq!(
        std::fs::read_to_string(out.join("my_notes.txt")).unwrap(),
        "kept"
    );
    let list = std::fs::read_to_string(out.join(steptrace::report::out_dir::LIST)).unwrap();
    assert!(list.lines().any(|l| l == "summary.json"), "{list}");
    assert!(!list.contains("plots/"), "{list}");
    assert!(parts(&out).is_empty());
}

#[test]
fn issue19_a_failed_run_leaves_no_part_and_no_new_summary() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o");
    std::fs::create_dir_all(&out).unwrap();
    // A directory where one file's part goes makes that write fail.
    std::fs::create_dir(out.join("flops.csv.steptrace-part")).unwrap();
    let props = steptrace::AnalyzeProps {
        input: root().join("sample_traces/resnet18"),
        out: Some(out.clone()),
        top: 3,
        ..Default::default()
    };
    let err = steptrace::analyze(&props).unwrap_err();
    assert!(err.to_string().contains("flops.csv"), "{err}");
    assert!(!out.join("summary.json").exists());
    assert!(!out.join("node_stats.csv").exists());
    assert_eq!(parts(&out), vec!["flops.csv.steptrace-part".to_owned()]);
}

#[test]
fn issue19_a_plain_trace_gets_a_plain_annotated_trace_with_its_text_kept() {
    let dir = tempfile::tempdir().unwrap();
    let s = root().join("sample_traces/resnet18");
    let text = {
        let v = std::fs::read(trace_path(&s)).unwrap();
        let mut t = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&v[..]), &mut t).unwrap();
        t
    };
    let plain = dir.path().join("trace.json");
    std::fs::write(&plain, &text).unwrap();
    let o = analyze(&plain, &dir.path().join("o"), false, true);
    let ann = dir.path().join("o/annotated.pt.trace.json");
    assert!(!dir.path().join("o/annotated.pt.trace.json.gz").exists());
    let bytes = std::fs::read(&ann).unwrap();
    assert!(!bytes.starts_with(&[0x1f, 0x8b]), "not plain");
    // The original text up to the last event, byte for byte, and its end after the added ones.
    let close = text.windows(4).rposition(|w| w == b"\n  ]").unwrap();
    let last = text[..close].iter().rposition(|&c| c == b'}').unwrap() + 1;
    assert_eq!(&bytes[..last], &text[..last]);
    assert!(bytes.ends_with(&text[close..]));
    let v = json(&ann);
    let orig = json(&plain);
    let n = v["traceEvents"].as_array().unwrap().len();
    let m = orig["traceEvents"].as_array().unwrap().len();
    assert!(n > m + o.analysis.step.nodes.len(), "{n} vs {m}");
    assert_eq!(v["traceEvents"][0], orig["traceEvents"][0]);

    // A truncated plain trace: its complete events, then steptrace's, closed properly.
    let cut = dir.path().join("cut.json");
    std::fs::write(&cut, &text[..text.len() * 2 / 3]).unwrap();
    analyze(&cut, &dir.path().join("c"), false, true);
    let v = json(&dir.path().join("c/annotated.pt.trace.json"));
    assert!(v["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["cat"] == "steptrace_node"));
}

/// Issue 46: torch's own `.json.gz` (one gzip stream) gets an annotated trace that keeps the
/// input's compressed bytes up to the deflate block where the added events go, as one gzip
/// member that a reader stopping after the first member reads whole: the input's text with
/// the added events in, the same text as a plain input's annotated trace.
#[test]
fn issue46_a_single_stream_gzip_trace_gets_its_compressed_bytes_kept_in_one_member() {
    let dir = tempfile::tempdir().unwrap();
    let s = root().join("sample_traces/gpt_bf16");
    let gz = std::fs::read(trace_path(&s)).unwrap();
    let mut text = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::MultiGzDecoder::new(&gz[..]), &mut text).unwrap();
    let input = dir.path().join("trace.json.gz");
    std::fs::write(&input, &gz).unwrap();
    analyze(&input, &dir.path().join("o"), false, true);
    let plain = dir.path().join("trace.json");
    std::fs::write(&plain, &text).unwrap();
    analyze(&plain, &dir.path().join("p"), false, true);
    let out = std::fs::read(dir.path().join("o/annotated.pt.trace.json.gz")).unwrap();
    let mut one = Vec::new();
    let mut dec = flate2::bufread::GzDecoder::new(&out[..]);
    std::io::Read::read_to_end(&mut dec, &mut one).unwrap();
    assert!(
        std::io::BufRead::fill_buf(dec.get_mut())
            .unwrap()
            .is_empty(),
        "one member"
    );
    let want = std::fs::read(dir.path().join("p/annotated.pt.trace.json")).unwrap();
    assert!(one == want, "the plain input's annotated text");
    // All but the last block or so of the input's compressed bytes, as they were.
    let kept = out.iter().zip(&gz).take_while(|(a, b)| a == b).count();
    assert!(
        kept + (64 << 10) > gz.len(),
        "{kept} of {} bytes kept",
        gz.len()
    );
}

fn plain_copy(sample: &str, to: &Path) {
    let v = std::fs::read(trace_path(&root().join(sample))).unwrap();
    let mut t = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&v[..]), &mut t).unwrap();
    std::fs::write(to, t).unwrap();
}

/// Issue 19: a rerun writes over the previous run's annotated trace in place (no unlink, no
/// new allocation); what it writes must be the fresh run's bytes exactly, cut to length when
/// the old file was longer, and a run whose input is that very file must not write over it.
#[test]
fn issue19_a_rerun_over_a_longer_annotated_trace_writes_the_fresh_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let (big, small) = (dir.path().join("big.json"), dir.path().join("small.json"));
    plain_copy("sample_traces/resnet18", &big);
    plain_copy("sample_traces/gpt_bf16", &small);
    let name = "annotated.pt.trace.json";
    let fresh = dir.path().join("fresh");
    analyze(&small, &fresh, false, true);
    let want = std::fs::read(fresh.join(name)).unwrap();

    let out = dir.path().join("o");
    analyze(&big, &out, false, true);
    let old_len = std::fs::metadata(out.join(name)).unwrap().len();
    assert!(
        old_len > want.len() as u64,
        "the first run's file must be the longer one"
    );
    analyze(&small, &out, false, true);
    assert!(std::fs::read(out.join(name)).unwrap() == want);
    assert!(parts(&out).is_empty());

    // The previous output as this run's input, into the same directory: its annotated trace
    // would replace the input, which was done without a word; it is refused now (issue 80),
    // before anything is written, and the input stays as it was. A copy analyses as usual.
    let again = std::fs::read(out.join(name)).unwrap();
    let copy = dir.path().join("copy.json");
    std::fs::write(&copy, &again).unwrap();
    let from_copy = dir.path().join("from_copy");
    analyze(&copy, &from_copy, false, true);
    let mut props = steptrace::AnalyzeProps {
        input: out.join(name),
        out: Some(out.clone()),
        top: 3,
        ..Default::default()
    };
    props.report.no_plots = true;
    props.report.annotated_trace = true;
    let e = steptrace::analyze(&props).unwrap_err().to_string();
    assert!(e.contains("the input itself"), "{e}");
    assert!(std::fs::read(out.join(name)).unwrap() == again);

    // The same, writing no annotated trace: nothing replaces the input, and it is the user's
    // trace, so the clearing of the previous run's files must leave it alone; also when it is
    // reached through another link.
    let before = std::fs::read(out.join(name)).unwrap();
    let link = dir.path().join("link.json");
    std::fs::hard_link(out.join(name), &link).unwrap();
    analyze(&link, &out, false, false);
    assert!(std::fs::read(out.join(name)).unwrap() == before);
}

/// A received bundle can hold an earlier result folder whose list of outputs names a path
/// through a link out of it (`v/precious.txt`, `v` a link to elsewhere): the next analysis into
/// that folder removes only regular files directly in it or in its plots folder, so the file
/// elsewhere stays. (It was deleted, exit 0.)
#[cfg(unix)]
#[test]
fn an_output_list_naming_a_path_through_a_link_removes_nothing_outside() {
    let dir = tempfile::tempdir().unwrap();
    let outside = dir.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("precious.txt"), "keep").unwrap();
    std::fs::write(outside.join("iterations.csv"), "keep").unwrap();
    let out = dir.path().join("bundle/out");
    std::fs::create_dir_all(&out).unwrap();
    std::os::unix::fs::symlink(&outside, out.join("v")).unwrap();
    std::os::unix::fs::symlink(outside.join("iterations.csv"), out.join("old.csv")).unwrap();
    std::fs::write(
        out.join(".steptrace-outputs"),
        "v/precious.txt\nold.csv\n../outside/precious.txt\nv\n",
    )
    .unwrap();
    analyze(
        &trace_path(&root().join("sample_traces/libtorch_cnn")),
        &out,
        false,
        false,
    );
    assert_eq!(
        std::fs::read_to_string(outside.join("precious.txt")).unwrap(),
        "keep"
    );
    assert_eq!(
        std::fs::read_to_string(outside.join("iterations.csv")).unwrap(),
        "keep"
    );
    assert!(out.join("summary.json").is_file());
}

/// An output folder whose `plots` is a link elsewhere is refused with one line before anything
/// is written (every plot was written through it, over same-named files).
#[cfg(unix)]
#[test]
fn a_plots_folder_that_is_a_link_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let elsewhere = dir.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    std::os::unix::fs::symlink(&elsewhere, out.join("plots")).unwrap();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_steptrace"))
        .arg("analyze")
        .arg(trace_path(&root().join("sample_traces/libtorch_cnn")))
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains("plots") && err.contains("symbolic link"),
        "{err}"
    );
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
    assert!(!out.join("summary.json").exists());
}
