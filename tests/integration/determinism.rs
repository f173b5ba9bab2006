//! Output is byte-identical whatever the number of threads.

use crate::common::samples;

fn run_with(threads: usize, sample: &std::path::Path, out: &std::path::Path) {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap();
    let mut props = steptrace::AnalyzeProps {
        input: sample.to_path_buf(),
        out: Some(out.to_path_buf()),
        top: 10,
        ..Default::default()
    };
    props.report.annotated_trace = true;
    let outcome = pool.install(|| steptrace::analyze(&props)).unwrap();
    std::fs::write(out.join("console.txt"), outcome.console).unwrap();
}

#[test]
fn one_and_four_threads_write_identical_files() {
    for s in samples() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("t1"), dir.path().join("t4"));
        run_with(1, &s, &a);
        run_with(4, &s, &b);
        // Every file the run wrote (its list), the plots and the annotated trace among them.
        let list = |d: &std::path::Path| {
            std::fs::read_to_string(d.join(steptrace::report::out_dir::LIST)).unwrap()
        };
        assert_eq!(list(&a), list(&b), "{s:?}");
        let mut names: Vec<String> = list(&a).lines().map(str::to_owned).collect();
        assert!(
            names.iter().any(|n| n.starts_with("annotated.")),
            "{names:?}"
        );
        assert!(names.iter().any(|n| n.ends_with(".png")), "{names:?}");
        names.push("console.txt".into());
        for f in names {
            let x = std::fs::read(a.join(&f)).unwrap();
            let y = std::fs::read(b.join(&f)).unwrap();
            assert!(x == y, "{s:?}: {f} differs between 1 and 4 threads");
        }
    }
}

/// A memory snapshot analysed alone: every file the same at 1 and 4 threads.
#[test]
fn a_snapshot_alone_writes_identical_files_at_one_and_four_threads() {
    let snap = crate::common::root().join("sample_traces/gpt_bf16/snapshot.pickle.gz");
    let dir = tempfile::tempdir().unwrap();
    let run = |threads: usize, out: std::path::PathBuf| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        let props = steptrace::AnalyzeProps {
            input: snap.clone(),
            out: Some(out.clone()),
            top: 10,
            ..Default::default()
        };
        let o = pool
            .install(|| steptrace::analyze_snapshot(&props))
            .unwrap();
        std::fs::write(out.join("console.txt"), o.console).unwrap();
        out
    };
    let (a, b) = (run(1, dir.path().join("t1")), run(4, dir.path().join("t4")));
    let parquet: &[&str] = if cfg!(feature = "parquet") {
        &steptrace::report::snapshot::PARQUET_FILES
    } else {
        &[]
    };
    for f in steptrace::report::snapshot::FILES
        .iter()
        .chain(&["report.html", "console.txt"])
        .chain(parquet)
    {
        let x = std::fs::read(a.join(f)).unwrap();
        let y = std::fs::read(b.join(f)).unwrap();
        assert!(x == y, "{f} differs between 1 and 4 threads");
    }
}
