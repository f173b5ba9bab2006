//! How the compressor's setting for capture's members changes the inflate that `analyze` then
//! pays: each setting's compress time (one thread), size, and libdeflate's inflate time of
//! every member, into one reused buffer (as `analyze` reads members).
//!   cargo run --release --example member_levels -- TRACE.json [ROUNDS [MEMBER_KIB]]
//! Results and what they decided: docs/performance.md, "Reading and parsing" (capture's members).
use libdeflate_sys as ld;
use std::time::Instant;

// Capture's member size, unless MEMBER_KIB says otherwise.
use steptrace_formats::gzip_members::PIECE;

/// A compressor setting: its name and what it makes of a member's text.
type Setting = (String, Box<dyn Fn(&[u8]) -> Vec<u8>>);

fn zlib(piece: &[u8], level: u32) -> Vec<u8> {
    let mut c = flate2::Compress::new(flate2::Compression::new(level), false);
    let mut out = Vec::with_capacity(piece.len() / 2 + 1024);
    c.compress_vec(piece, &mut out, flate2::FlushCompress::Finish)
        .unwrap();
    out
}

fn libdeflate(piece: &[u8], level: i32) -> Vec<u8> {
    // SAFETY: level in 1..=12; checked for null.
    let c = unsafe { ld::libdeflate_alloc_compressor(level) };
    assert!(!c.is_null());
    // SAFETY: `c` is live.
    let bound = unsafe { ld::libdeflate_deflate_compress_bound(c, piece.len()) };
    let mut out = vec![0u8; bound];
    // SAFETY: `c` is live; the buffers are valid for their lengths.
    let n = unsafe {
        ld::libdeflate_deflate_compress(
            c,
            piece.as_ptr().cast(),
            piece.len(),
            out.as_mut_ptr().cast(),
            out.len(),
        )
    };
    // SAFETY: freed once.
    unsafe { ld::libdeflate_free_compressor(c) };
    assert!(n > 0);
    out.truncate(n);
    out
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let text = std::fs::read(&args[0]).unwrap();
    let rounds: usize = args.get(1).map_or(3, |r| r.parse().unwrap());
    let piece = args
        .get(2)
        .map_or(PIECE, |k| k.parse::<usize>().unwrap() << 10);
    let pieces: Vec<&[u8]> = text.chunks(piece).collect();
    let mut settings: Vec<Setting> = Vec::new();
    for l in [1u32, 6, 9] {
        settings.push((format!("zlib-rs level {l}"), Box::new(move |p| zlib(p, l))));
    }
    for l in [1i32, 6, 9, 12] {
        settings.push((
            format!("libdeflate level {l}"),
            Box::new(move |p| libdeflate(p, l)),
        ));
    }
    // SAFETY: no arguments; checked for null.
    let d = unsafe { ld::libdeflate_alloc_decompressor() };
    assert!(!d.is_null());
    let mut buf = vec![0u8; piece];
    println!(
        "{}: {:.1} MB, {} members of {} KiB; compress on one thread; inflate median of {rounds}",
        args[0],
        text.len() as f64 / 1e6,
        pieces.len(),
        piece >> 10
    );
    for (name, f) in &settings {
        let t = Instant::now();
        let members: Vec<Vec<u8>> = pieces.iter().map(|p| f(p)).collect();
        let ct = t.elapsed().as_secs_f64();
        let size: usize = members.iter().map(Vec::len).sum();
        let mut times = Vec::new();
        for round in 0..=rounds {
            let t = Instant::now();
            let mut total = 0;
            for (m, p) in members.iter().zip(&pieces) {
                let mut w = 0usize;
                // SAFETY: `d` is live; the buffers are valid for their lengths.
                let r = unsafe {
                    ld::libdeflate_deflate_decompress(
                        d,
                        m.as_ptr().cast(),
                        m.len(),
                        buf.as_mut_ptr().cast(),
                        buf.len(),
                        &mut w,
                    )
                };
                assert_eq!(r, 0);
                // Checked in an untimed first round.
                if round == 0 {
                    assert_eq!(&buf[..w], *p);
                }
                total += w;
            }
            assert_eq!(total, text.len());
            if round > 0 {
                times.push(t.elapsed().as_secs_f64());
            }
        }
        times.sort_by(f64::total_cmp);
        println!(
            "  {name:<22} compress {ct:6.2} s  {:6.1} MB  inflate {:.3} s",
            size as f64 / 1e6,
            times[rounds / 2]
        );
    }
    // SAFETY: `d` came from libdeflate_alloc_decompressor and is freed once.
    unsafe { ld::libdeflate_free_decompressor(d) };
}
