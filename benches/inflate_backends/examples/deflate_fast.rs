//! The annotated trace's added events are compressed at level 1 into capture's members (issue
//! #46): how fast each library does that, on a text given as FILE, in members of
//! `gzip_members::PIECE` bytes, one thread. Prints seconds (best of 5) and the compressed size.
//!   cargo run --release --manifest-path benches/inflate_backends/Cargo.toml --example deflate_fast -- FILE

use std::time::Instant;

fn zlib_rs(piece: &[u8], level: u32) -> usize {
    steptrace_formats::gzip_members::member(piece, level).len()
}

fn libdeflate(piece: &[u8], level: i32, out: &mut Vec<u8>) -> usize {
    use libdeflate_sys::*;
    // SAFETY: the compressor is used by this thread alone and freed below; `out` holds the
    // bound libdeflate gives for `piece`.
    unsafe {
        let c = libdeflate_alloc_compressor(level);
        let bound = libdeflate_deflate_compress_bound(c, piece.len());
        out.resize(bound, 0);
        let n = libdeflate_deflate_compress(
            c,
            piece.as_ptr().cast(),
            piece.len(),
            out.as_mut_ptr().cast(),
            bound,
        );
        let _crc = libdeflate_crc32(0, piece.as_ptr().cast(), piece.len());
        libdeflate_free_compressor(c);
        n + 28
    }
}

fn main() {
    let path = std::env::args().nth(1).expect("FILE");
    let text = std::fs::read(path).expect("read");
    let piece = steptrace_formats::gzip_members::PIECE;
    let mut out = Vec::new();
    let run = |name: &str, f: &mut dyn FnMut(&[u8]) -> usize| {
        let mut best = f64::MAX;
        let mut size = 0;
        for _ in 0..5 {
            let t = Instant::now();
            size = text.chunks(piece).map(&mut *f).sum::<usize>();
            best = best.min(t.elapsed().as_secs_f64());
        }
        println!(
            "{name:<14} {best:.4} s  {:.0} MB/s  {size} bytes ({:.3} of the text)",
            text.len() as f64 / best / 1e6,
            size as f64 / text.len() as f64
        );
    };
    for level in [1u32, 2] {
        run(&format!("zlib-rs {level}"), &mut |p| zlib_rs(p, level));
    }
    for level in [1i32, 2, 3] {
        run(&format!("libdeflate {level}"), &mut |p| libdeflate(p, level, &mut out));
    }
}
