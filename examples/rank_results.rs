//! Writes N ranks' results as `analyze --rank-output DIR` writes them (`rank<N>.*.parquet`),
//! each rank a copy of one real analysis (the bundled ResNet-18 capture unless a run folder or
//! trace is given) under its own rank number, step times spread by up to ±2% per rank: the
//! input of the merge benchmark at thousands of ranks (docs/performance.md):
//! `cargo run --release --example rank_results -- OUT_DIR N [TRACE_OR_RUN_DIR]`

fn main() {
    let a: Vec<String> = std::env::args().skip(1).collect();
    if a.len() < 2 {
        eprintln!("usage: rank_results OUT_DIR N [TRACE_OR_RUN_DIR]");
        std::process::exit(2);
    }
    let out = std::path::PathBuf::from(&a[0]);
    let n: i64 = a[1].parse().expect("N is a count");
    let input = a
        .get(2)
        .map_or("sample_traces/resnet18".into(), std::path::PathBuf::from);
    let props = steptrace::AnalyzeProps {
        input,
        ..Default::default()
    };
    let (_, analysis, _) = steptrace::run_analysis(&props).expect("the input analyses");
    let one = steptrace::analysis::ranks::RankResult::from_analysis(0, &analysis);
    let folder = steptrace::report::out_dir::Writer::open(&out).expect("the folder opens");
    for rank in 0..n {
        let mut r = one.clone();
        r.rank = rank;
        // A deterministic spread of ±2% by rank, so that the merge has a slowest rank.
        let f = 1.0 + 0.02 * (((rank * 7919) % 201) as f64 / 100.0 - 1.0);
        r.step_time_s *= f;
        r.step_time_instrumented_s *= f;
        for t in &mut r.step_times_s {
            *t *= f;
        }
        steptrace::report::frames::write_rank(&out, &r).expect("the rank is written");
    }
    folder.finish().expect("the files get their names");
}
