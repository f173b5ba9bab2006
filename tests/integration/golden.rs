//! Golden snapshots of analyze's outputs on every sample (insta). Bless changes with
//! `INSTA_UPDATE=always cargo test` and review the diff before committing.

use crate::common::samples;

#[test]
fn sample_outputs_match_snapshots() {
    for s in samples() {
        let name = s.file_name().unwrap().to_string_lossy().into_owned();
        let (_d, out) = crate::common::analyze(&s);
        let summary = std::fs::read_to_string(out.out_dir.join("summary.json")).unwrap();
        let summary = summary.replace(env!("CARGO_PKG_VERSION"), "[version]");
        insta::assert_snapshot!(format!("{name}__summary"), summary);
        let stats = std::fs::read_to_string(out.out_dir.join("node_stats.csv")).unwrap();
        insta::assert_snapshot!(format!("{name}__node_stats"), stats);
        let iters = std::fs::read_to_string(out.out_dir.join("iterations.csv")).unwrap();
        insta::assert_snapshot!(format!("{name}__iterations"), iters);
    }
}
