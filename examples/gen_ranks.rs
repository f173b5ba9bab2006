//! Writes N synthetic ranks of a distributed run made from one real rank's trace, one of them a
//! straggler (the generator in `tests/integration/gen_ranks.rs`, shared with the tests):
//! `cargo run --release --example gen_ranks -- TRACE OUT_DIR N [STRAGGLER SLOW_OP ANCHOR_OP DELTA_US]`
//! (defaults for the bundled ResNet-18 capture: rank N/2, `aten::max_pool2d`,
//! `Optimizer.step#Adam.step`, 3000). The files are named as tensorboard_trace_handler names
//! them, so the ranks come from each trace's `distributedInfo`. For the issue 18 benchmark
//! (docs/performance.md).

#[path = "../tests/integration/gen_ranks.rs"]
mod gen_ranks;

fn main() {
    let a: Vec<String> = std::env::args().skip(1).collect();
    if a.len() < 3 {
        eprintln!("usage: gen_ranks TRACE OUT_DIR N [STRAGGLER SLOW_OP ANCHOR_OP DELTA_US]");
        std::process::exit(2);
    }
    let n: usize = a[2].parse().expect("N is a count");
    let straggler: usize = a.get(3).map_or(n / 2, |s| s.parse().expect("a rank"));
    let slow = a.get(4).map_or("aten::max_pool2d", String::as_str);
    let anchor = a.get(5).map_or("Optimizer.step#Adam.step", String::as_str);
    let delta: f64 = a.get(6).map_or(3000.0, |s| s.parse().expect("µs"));
    let src = steptrace::ingest::source::read(std::path::Path::new(&a[0])).expect("readable trace");
    let base: serde_json::Value = serde_json::from_slice(&src.bytes).expect("a JSON trace");
    let out = std::path::Path::new(&a[1]);
    std::fs::create_dir_all(out).expect("output directory");
    for (r, d) in gen_ranks::ranks(&base, n, straggler, slow, anchor, delta)
        .iter()
        .enumerate()
    {
        let p = out.join(format!(
            "worker{r}.{}.pt.trace.json",
            1_700_000_000_000u64 + r as u64
        ));
        gen_ranks::write(&p, d).expect("writable");
    }
    eprintln!("{n} ranks in {}, straggler {straggler}", out.display());
}
