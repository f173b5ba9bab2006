//! Times the annotated trace's parallel gzip at several zlib levels on one file:
//! `cargo run --release --example gzip_levels -- FILE [LEVEL...]` (default levels 1 3 6).
//! Decides `GZ_LEVEL` in `src/report/gzip.rs` (docs/performance.md has the figures).

use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let path = args.next().expect("usage: gzip_levels FILE [LEVEL...]");
    let mut levels: Vec<u32> = args.map(|l| l.parse().expect("a level is 0-9")).collect();
    if levels.is_empty() {
        levels = vec![1, 3, 6];
    }
    // Read once so every level compresses from memory: the figure is the compressor's alone.
    let text = std::fs::read(&path).expect("readable input");
    let mb = text.len() as f64 / 1e6;
    println!(
        "{path}: {mb:.1} MB, {} threads",
        rayon::current_num_threads()
    );
    println!("level  seconds  MB/s(in)  out MB  ratio");
    for level in levels {
        // Fastest of three, each into a fresh buffer sized like the output.
        let mut best = f64::INFINITY;
        let mut out_len = 0;
        for _ in 0..3 {
            let mut out = Vec::with_capacity(text.len() / 4);
            let t = Instant::now();
            steptrace::report::gzip::gzip_parallel_level(&text[..], &mut out, level)
                .expect("in-memory gzip");
            best = best.min(t.elapsed().as_secs_f64());
            out_len = out.len();
        }
        let out_mb = out_len as f64 / 1e6;
        println!(
            "{level:>5}  {best:>7.3}  {:>8.0}  {out_mb:>6.1}  {:>5.1}",
            mb / best,
            mb / out_mb
        );
    }
}
