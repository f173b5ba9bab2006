//! Times zlib-rs (flate2's backend here) inflating one gzip stream into fresh memory of the
//! text's size, as the single-stream read does, against inflating it into one small buffer
//! used over and over, as a parse over a ring of buffers would:
//! `cargo run --release --example inflate_ring -- FILE.json.gz` (one member: torch's form).
//! The figures are in docs/performance.md ("What remains", `.gz`).

use flate2::{Decompress, FlushDecompress, Status};
use std::time::Instant;

/// The deflate data of a one-member gzip file and its stated length (ISIZE).
fn deflate_body(gz: &[u8]) -> (&[u8], usize) {
    assert!(
        gz.len() > 18 && gz[..3] == [0x1f, 0x8b, 8],
        "not a gzip file"
    );
    let (flags, mut at) = (gz[3], 10);
    if flags & 4 != 0 {
        at += 2 + u16::from_le_bytes([gz[at], gz[at + 1]]) as usize;
    }
    // FNAME, FCOMMENT: zero-terminated.
    for bit in [8, 16] {
        if flags & bit != 0 {
            at += gz[at..].iter().position(|&b| b == 0).expect("terminated") + 1;
        }
    }
    if flags & 2 != 0 {
        at += 2;
    }
    let isize = u32::from_le_bytes(gz[gz.len() - 4..].try_into().expect("4 bytes"));
    (&gz[at..gz.len() - 8], isize as usize)
}

fn main() {
    let path = std::env::args()
        .nth(1)
        .expect("usage: inflate_ring FILE.gz");
    let gz = std::fs::read(&path).expect("readable input");
    let (body, len) = deflate_body(&gz);
    println!("{path}: {:.1} MB of text", len as f64 / 1e6);
    for round in 1..=3 {
        let t = Instant::now();
        let mut out: Vec<u8> = Vec::with_capacity(len);
        let mut d = Decompress::new(false);
        d.decompress_vec(body, &mut out, FlushDecompress::Finish)
            .expect("one deflate stream");
        assert_eq!(out.len(), len, "the stated length (one member only)");
        let fresh = t.elapsed().as_secs_f64();
        drop(out);
        let mut line = format!("round {round}: into fresh memory {fresh:.3} s");
        for size in [256 << 10, 1 << 20, 4 << 20] {
            let t = Instant::now();
            let mut d = Decompress::new(false);
            let mut buf = vec![0u8; size];
            let (mut read, mut made) = (0, 0);
            loop {
                let (i, o) = (d.total_in(), d.total_out());
                let status = d
                    .decompress(&body[read..], &mut buf, FlushDecompress::None)
                    .expect("one deflate stream");
                read += (d.total_in() - i) as usize;
                made += (d.total_out() - o) as usize;
                if status == Status::StreamEnd {
                    break;
                }
            }
            assert_eq!(made, len);
            line += &format!(
                ", into {} KiB again and again {:.3} s",
                size >> 10,
                t.elapsed().as_secs_f64()
            );
        }
        println!("{line}");
    }
}
