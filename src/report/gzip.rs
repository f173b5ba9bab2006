//! gzip written on all threads: the input cut into pieces compressed apart, joined into one
//! member that every gzip reader takes (as pigz does).

use std::io::{Read, Write};

/// Bytes of input compressed as one piece on one thread. The cut points depend only on the
/// size, so the file does not depend on the thread count. 2 MiB keeps the ratio within a few
/// per mille of one stream's.
const GZ_BLOCK: usize = 2 << 20;

/// zlib level of the annotated trace's gzip, chosen by measurement (`examples/gzip_levels.rs`,
/// docs/performance.md).
pub(super) const GZ_LEVEL: u32 = 1;

/// Reads up to `n` blocks of [`GZ_BLOCK`] bytes (fewer at the end of the input).
fn read_blocks(r: &mut impl Read, n: usize) -> std::io::Result<Vec<Vec<u8>>> {
    let mut blocks = Vec::with_capacity(n);
    for _ in 0..n {
        let mut b = Vec::with_capacity(GZ_BLOCK);
        (&mut *r).take(GZ_BLOCK as u64).read_to_end(&mut b)?;
        if b.is_empty() {
            break;
        }
        let short = b.len() < GZ_BLOCK;
        blocks.push(b);
        if short {
            break;
        }
    }
    Ok(blocks)
}

/// One piece as raw deflate ending on a byte boundary (a sync flush: an empty stored block),
/// so pieces compressed apart concatenate into one deflate stream; with the piece's CRC-32.
fn deflate_piece(block: &[u8], level: u32) -> std::io::Result<(Vec<u8>, flate2::Crc)> {
    let mut c = flate2::Compress::new(flate2::Compression::new(level), false);
    let mut out = Vec::with_capacity(block.len() / 4 + 1024);
    loop {
        let at = c.total_in() as usize;
        c.compress_vec(&block[at..], &mut out, flate2::FlushCompress::Sync)
            .map_err(std::io::Error::other)?;
        // Done once all input is taken and the flush fitted (room was left over).
        if c.total_in() as usize == block.len() && out.len() < out.capacity() {
            break;
        }
        out.reserve(out.capacity().max(1 << 16));
    }
    let mut crc = flate2::Crc::new();
    crc.update(block);
    Ok((out, crc))
}

/// Compresses everything `r` yields into `out` as one gzip member whose deflate stream is
/// made of pieces compressed on all threads (as pigz does), so every gzip reader takes it,
/// including those that stop after a first member. Reading the next pieces (from a file, or
/// inflating the input) overlaps compressing the ones before; at most two batches are in
/// memory.
pub(crate) fn gzip_parallel(r: impl Read + Send, out: &mut impl Write) -> std::io::Result<()> {
    gzip_parallel_level(r, out, GZ_LEVEL)
}

/// [`gzip_parallel`] at a chosen zlib level (the benchmark of the level choice calls it).
#[doc(hidden)]
pub fn gzip_parallel_level(
    mut r: impl Read + Send,
    out: &mut impl Write,
    level: u32,
) -> std::io::Result<()> {
    use rayon::prelude::*;
    // Header: deflate, no name, no time, OS unknown (RFC 1952).
    out.write_all(&[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff])?;
    let mut crc = flate2::Crc::new();
    let batch = 2 * rayon::current_num_threads().max(1);
    let mut cur = read_blocks(&mut r, batch)?;
    while !cur.is_empty() {
        let (pieces, next) = rayon::join(
            || {
                cur.par_iter()
                    .map(|b| deflate_piece(b, level))
                    .collect::<std::io::Result<Vec<_>>>()
            },
            || read_blocks(&mut r, batch),
        );
        for (bytes, c) in pieces? {
            out.write_all(&bytes)?;
            crc.combine(&c);
        }
        cur = next?;
    }
    // The final block: empty, fixed Huffman (BFINAL=1, BTYPE=01, end of block).
    out.write_all(&[0x03, 0x00])?;
    out.write_all(&crc.sum().to_le_bytes())?;
    out.write_all(&crc.amount().to_le_bytes())?;
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gz(data: &[u8], threads: usize) -> Vec<u8> {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        let mut out = Vec::new();
        pool.install(|| gzip_parallel(data, &mut out)).unwrap();
        out
    }

    /// The parallel gzip is one member that a reader stopping after the first
    /// member (flate2's `GzDecoder`, as some viewers' inflaters) reads whole, its CRC and size
    /// checked, and its bytes do not depend on the threads.
    #[test]
    fn parallel_gzip_is_one_member_and_thread_independent() {
        let mut x = 7u32;
        let data: Vec<u8> = (0..(GZ_BLOCK * 5 + 12345))
            .map(|_| {
                x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                let alphabet = b"{}\":,0123456789abcdef \n";
                alphabet[(x >> 16) as usize % alphabet.len()]
            })
            .collect();
        let one = gz(&data, 1);
        assert_eq!(one, gz(&data, 4));
        let mut back = Vec::new();
        flate2::read::GzDecoder::new(&one[..])
            .read_to_end(&mut back)
            .unwrap();
        assert!(back == data, "round trip differs");
        // Nothing after the member.
        let mut dec = flate2::bufread::GzDecoder::new(&one[..]);
        std::io::copy(&mut dec, &mut std::io::sink()).unwrap();
        assert!(std::io::BufRead::fill_buf(dec.get_mut())
            .unwrap()
            .is_empty());
        let mut empty = Vec::new();
        flate2::read::GzDecoder::new(&gz(b"", 2)[..])
            .read_to_end(&mut empty)
            .unwrap();
        assert!(empty.is_empty());
    }
}
