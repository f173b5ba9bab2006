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
/// so pieces compressed apart concatenate into one deflate stream; with the piece's CRC-32,
/// by crc32fast: flate2's `Crc` is zlib-rs's here, 6 GB/s against crc32fast's 35-37 GB/s on
/// the 2-core machine (`benches/inflate_backends/examples/crc_speed.rs`).
fn deflate_piece(block: &[u8], level: u32) -> std::io::Result<(Vec<u8>, crc32fast::Hasher)> {
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
    let mut crc = crc32fast::Hasher::new();
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
    let mut crc = crc32fast::Hasher::new();
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
    // ISIZE: the text's length modulo 2^32 (RFC 1952).
    let len = crc.total_len() as u32;
    out.write_all(&crc.finalize().to_le_bytes())?;
    out.write_all(&len.to_le_bytes())?;
    out.flush()
}

/// zlib level of the input's own text compressed again after a resumed stream (a block or so,
/// up to where the added events go): zlib's default, as the input's was likely made.
const RESUME_LEVEL: i32 = 6;

/// Writes the gzip file `raw` (a single-stream input) with its text from `r.text_at` on
/// replaced by `first` and then the groups of `rest` (each group's parts one after another),
/// keeping its compressed bytes before the block start
/// `r.bit` as they are (as zlib's `gzappend` does): the deflate stream goes on from that bit
/// with `first` (the partial byte's bits primed into the new stream, zlib level 6, ended on a
/// byte by a sync flush), then each group of `rest` in pieces of [`GZ_BLOCK`] (cut as the
/// group's joined text would be, borrowed where a piece lies in one part) compressed on all
/// threads as [`gzip_parallel`] does (the added events: 27 MB on the benchmark trace, which at level 6 on
/// one thread had taken most of the run), then an empty final block; the trailer gets the
/// whole text's CRC-32 (resumed from the CRC before the block) and size. `None` where `raw`
/// is not the file `r` was taken from.
pub(crate) fn resume_stream(
    raw: &[u8],
    r: &crate::model::tables::kineto::GzipResume,
    first: &[u8],
    rest: &[&[&[u8]]],
    out: &mut impl Write,
) -> Option<std::io::Result<()>> {
    use rayon::prelude::*;
    let byte = usize::try_from(r.bit / 8).ok()?;
    let bits = (r.bit % 8) as i32;
    let same = raw.len() as u64 == r.file_len
        && raw.get(raw.len().checked_sub(8)?..) == Some(&r.trailer[..])
        && byte < raw.len();
    if !same {
        return None;
    }
    let mut crc = crc32fast::Hasher::new_with_initial_len(r.crc, r.text_at as u64);
    Some((|| {
        out.write_all(&raw[..byte])?;
        let mut d = Deflate::new(RESUME_LEVEL)?;
        if bits > 0 {
            d.prime(bits, i32::from(raw[byte]) & ((1 << bits) - 1))?;
        }
        crc.update(first);
        d.write(first, libz_rs_sys::Z_SYNC_FLUSH, out)?;
        let batch = 2 * rayon::current_num_threads().max(1);
        for group in rest {
            let mut pieces = steptrace_formats::gzip_members::Pieces::new(group, GZ_BLOCK);
            loop {
                let blocks: Vec<_> = pieces.by_ref().take(batch).collect();
                if blocks.is_empty() {
                    break;
                }
                let done = blocks
                    .par_iter()
                    .map(|b| deflate_piece(b, GZ_LEVEL))
                    .collect::<std::io::Result<Vec<_>>>()?;
                for (bytes, c) in done {
                    crc.combine(&c);
                    out.write_all(&bytes)?;
                }
            }
        }
        // The final block: empty, fixed Huffman (BFINAL=1, BTYPE=01, end of block).
        out.write_all(&[0x03, 0x00])?;
        let len = crc.total_len();
        out.write_all(&crc.finalize().to_le_bytes())?;
        out.write_all(&(len as u32).to_le_bytes())?;
        Ok(())
    })())
}

/// A raw deflate stream (zlib's interface to zlib-rs, for `deflatePrime`), ended on drop.
struct Deflate(Box<libz_rs_sys::z_stream>);

impl Deflate {
    fn new(level: i32) -> std::io::Result<Deflate> {
        use libz_rs_sys as z;
        let mut s = Box::new(z::z_stream::default());
        // SAFETY: `s` is a zeroed `z_stream` (null allocator fields: zlib-rs's own), the
        // version string is the library's and the size that of the struct passed.
        let r = unsafe {
            z::deflateInit2_(
                &mut *s,
                level,
                z::Z_DEFLATED,
                -15,
                8,
                z::Z_DEFAULT_STRATEGY,
                z::zlibVersion(),
                std::mem::size_of::<z::z_stream>() as i32,
            )
        };
        if r != z::Z_OK {
            return Err(std::io::Error::other(format!("deflateInit2 failed ({r})")));
        }
        Ok(Deflate(s))
    }

    /// Puts `bits` bits of `value` first in the stream's output.
    fn prime(&mut self, bits: i32, value: i32) -> std::io::Result<()> {
        // SAFETY: the stream is initialised and nothing has been compressed yet.
        let r = unsafe { libz_rs_sys::deflatePrime(&mut *self.0, bits, value) };
        if r != libz_rs_sys::Z_OK {
            return Err(std::io::Error::other(format!("deflatePrime failed ({r})")));
        }
        Ok(())
    }

    /// Compresses `input` into `out` and flushes as `flush` says (`Z_SYNC_FLUSH`: ends on a
    /// byte, the stream open).
    fn write(&mut self, input: &[u8], flush: i32, out: &mut impl Write) -> std::io::Result<()> {
        use libz_rs_sys as z;
        let mut buf = vec![0u8; 1 << 16];
        let mut at = 0;
        loop {
            let s = &mut *self.0;
            let give = (input.len() - at).min(u32::MAX as usize);
            s.next_in = input[at..].as_ptr().cast_mut();
            s.avail_in = give as u32;
            s.next_out = buf.as_mut_ptr();
            s.avail_out = buf.len() as u32;
            // SAFETY: the stream is initialised; `next_in`/`avail_in` describe readable input
            // and `next_out`/`avail_out` writable output, as set just above.
            let r = unsafe { z::deflate(s, flush) };
            let took = give - s.avail_in as usize;
            let made = buf.len() - s.avail_out as usize;
            at += took;
            out.write_all(&buf[..made])?;
            if r != z::Z_OK && r != z::Z_BUF_ERROR {
                return Err(std::io::Error::other(format!("deflate failed ({r})")));
            }
            // All taken, and the flush fitted (room was left over).
            if at == input.len() && made < buf.len() {
                return Ok(());
            }
        }
    }
}

impl Drop for Deflate {
    fn drop(&mut self) {
        // SAFETY: the stream was initialised by `deflateInit2_` and is ended once, here.
        unsafe { libz_rs_sys::deflateEnd(&mut *self.0) };
    }
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

    /// The input's text as a gzip member of several blocks (zlib level 6), with a sync flush
    /// part way so that one block starts on a byte boundary.
    pub(super) fn member_with_blocks(text: &[u8]) -> Vec<u8> {
        let mut c = flate2::Compress::new(flate2::Compression::new(6), false);
        let mut deflate = Vec::with_capacity(text.len());
        let half = text.len() / 2;
        c.compress_vec(&text[..half], &mut deflate, flate2::FlushCompress::Sync)
            .unwrap();
        c.compress_vec(&text[half..], &mut deflate, flate2::FlushCompress::Finish)
            .unwrap();
        let mut out = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];
        out.extend_from_slice(&deflate);
        out.extend_from_slice(&crc32fast::hash(text).to_le_bytes());
        out.extend_from_slice(&(text.len() as u32).to_le_bytes());
        out
    }

    /// A single-stream input resumed at a block start (on a bit inside a byte and on a byte
    /// boundary) with text put in: every gzip reader, one that stops after the first member
    /// included, reads the whole new text, its CRC and size checked, and the bytes before
    /// the block are the input's own.
    #[test]
    fn a_stream_resumed_at_a_block_start_reads_as_the_new_text() {
        use crate::read::source::Inflating;
        let mut x = 5u32;
        let text: Vec<u8> = (0..3 << 20)
            .map(|_| {
                x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                b"{}\":, 0123456789abcdefph\n"[(x >> 16) as usize % 25]
            })
            .collect();
        let file = member_with_blocks(&text);
        let (back, blocks) = Inflating::whole_for_test(file.clone(), text.len()).unwrap();
        assert!(back == text);
        assert!(blocks.iter().any(|b| b.bit % 8 == 0 && b.text_at > 0));
        assert!(blocks.iter().any(|b| b.bit % 8 != 0));
        // Every block start, the last (before the final block's padding) included.
        for &b in blocks.iter().step_by(7).chain(blocks.last()) {
            let r = crate::model::tables::kineto::GzipResume {
                file_len: file.len() as u64,
                trailer: file[file.len() - 8..].try_into().unwrap(),
                bit: b.bit,
                text_at: b.text_at,
                crc: b.crc,
                tail: text[b.text_at..].to_vec(),
            };
            let at = (text.len() - b.text_at) / 2;
            let added: &[u8] = b"<the added events>";
            let mut out = Vec::new();
            resume_stream(
                &file,
                &r,
                &r.tail[..at],
                &[&[added, &r.tail[at..]]],
                &mut out,
            )
            .unwrap()
            .unwrap();
            let mut want = text[..b.text_at + at].to_vec();
            want.extend_from_slice(added);
            want.extend_from_slice(&text[b.text_at + at..]);
            let mut got = Vec::new();
            flate2::read::GzDecoder::new(&out[..])
                .read_to_end(&mut got)
                .unwrap();
            assert!(got == want, "block at bit {}", b.bit);
            let kept = (b.bit / 8) as usize;
            assert_eq!(out[..kept], file[..kept]);
            // Another file (or the same changed) is not spliced.
            let mut other = file.clone();
            other.push(0);
            assert!(resume_stream(&other, &r, added, &[], &mut Vec::new()).is_none());
        }
    }
}
