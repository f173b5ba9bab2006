//! Output is byte-identical whatever the number of threads.

use crate::common::samples;

fn run_with(threads: usize, sample: &std::path::Path, out: &std::path::Path) {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap();
    let props = steptrace::AnalyzeProps {
        input: sample.to_path_buf(),
        out: Some(out.to_path_buf()),
        top: 10,
        ..Default::default()
    };
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
        let mut names: Vec<_> = steptrace::report::FILES
            .iter()
            .map(|f| f.to_string())
            .collect();
        names.push("console.txt".into());
        #[cfg(feature = "parquet")]
        names.extend(
            steptrace::report::frames::FILES
                .iter()
                .map(|f| f.to_string()),
        );
        for f in names {
            let x = std::fs::read(a.join(&f)).unwrap();
            let y = std::fs::read(b.join(&f)).unwrap();
            assert!(x == y, "{s:?}: {f} differs between 1 and 4 threads");
        }
    }
}
