//! The CRC-32 the single-stream read computes on its inflating thread (issue #46): how fast
//! each library does it over a file's bytes in the read's 1 MiB steps, one thread, best of 7.
//!   cargo run --release --manifest-path benches/inflate_backends/Cargo.toml --example crc_speed -- FILE

use std::time::Instant;

fn main() {
    let path = std::env::args().nth(1).expect("FILE");
    let text = std::fs::read(path).expect("read");
    let step = 1 << 20;
    let run = |name: &str, f: &dyn Fn(&[u8]) -> u32| {
        let mut best = f64::MAX;
        let mut crc = 0;
        for _ in 0..7 {
            let t = Instant::now();
            crc = f(&text);
            best = best.min(t.elapsed().as_secs_f64());
        }
        println!(
            "{name:<22} {best:.4} s  {:.1} GB/s  crc {crc:08x}",
            text.len() as f64 / best / 1e9
        );
    };
    run("crc32fast", &|t| {
        let mut h = crc32fast::Hasher::new();
        t.chunks(step).for_each(|c| h.update(c));
        h.finalize()
    });
    run("libdeflate_crc32", &|t| {
        t.chunks(step).fold(0, |crc, c| {
            // SAFETY: `c` is a readable slice of `c.len()` bytes.
            unsafe { libdeflate_sys::libdeflate_crc32(crc, c.as_ptr().cast(), c.len()) }
        })
    });
    run("zlib-rs crc32", &|t| {
        t.chunks(step).fold(0, |crc, c| {
            // SAFETY: `c` is a readable slice of `c.len()` bytes.
            unsafe { libz_rs_sys::crc32(crc.into(), c.as_ptr(), c.len() as u32) as u32 }
        })
    });
}
