//! The gzip files capture writes (`trace.json.gz`, `exec_trace.json.gz`, snapshots): ordinary
//! multi-member gzip (RFC 1952) that every tool reads (Python's `gzip`, Perfetto,
//! chrome://tracing, HolisticTraceAnalysis), cut into members of [`PIECE`] bytes of input so
//! that a reader can inflate them on every core. Each member's header carries, in an extra
//! field (FEXTRA, subfield `ST`, as BGZF's `BC` does for its blocks), the member's whole length
//! in bytes: a reader hops from member to member without inflating any, and a tool that knows
//! nothing of it skips the field, as RFC 1952 asks.
//!
//! Member layout: `1f 8b 08 04` (FEXTRA set), MTIME 0, XFL 0, OS 255, XLEN 8, then the subfield
//! `S T 04 00` and the member's length (u32 LE), the raw deflate stream, CRC-32 and ISIZE.

use std::io::{self, Read, Write};

/// Input bytes per member: big enough that a member's header and trailer (26 bytes) and the
/// deflate stream's restart cost little (the 255 MB benchmark trace at level 6: 18.58 MB in
/// 2 MiB members, 18.54 MB in 4 MiB ones, 18.65 MB in 1 MiB ones), small enough that a reader
/// parsing a member a task keeps many cores busy: `analyze` (lean) of that trace on 16 cores
/// took 0.152 s in 2 MiB members against 0.175 s in 4 MiB ones (plain 0.131 s), on 8 cores
/// 0.177 against 0.206 s, and the same on 2 (docs/performance.md, "Reading and parsing": capture's members).
pub const PIECE: usize = 2 << 20;

/// The subfield id in each member's extra field.
pub const SUBFIELD: [u8; 2] = *b"ST";

/// Header bytes before the deflate stream.
pub const HEADER_LEN: usize = 20;

/// Bytes after it (CRC-32 and ISIZE).
pub const TRAILER_LEN: usize = 8;

/// One member of a file: where it is, and how much it inflates to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Member {
    /// Offset of its header in the file.
    pub offset: usize,
    /// Its whole length (header, deflate stream, trailer).
    pub len: usize,
    /// Inflated bytes (ISIZE: exact for members under 4 GiB, which [`PIECE`] keeps them).
    pub inflated: usize,
}

impl Member {
    /// The raw deflate stream.
    pub fn deflate<'a>(&self, file: &'a [u8]) -> &'a [u8] {
        &file[self.offset + HEADER_LEN..self.offset + self.len - TRAILER_LEN]
    }

    /// The CRC-32 of the inflated bytes, from the trailer.
    pub fn crc32(&self, file: &[u8]) -> u32 {
        let t = self.offset + self.len - TRAILER_LEN;
        u32::from_le_bytes(file[t..t + 4].try_into().unwrap_or([0; 4]))
    }
}

/// A member's header for a member `len` bytes long in all.
pub fn header(len: u32) -> [u8; HEADER_LEN] {
    let l = len.to_le_bytes();
    [
        0x1f,
        0x8b,
        8,
        4,
        0,
        0,
        0,
        0,
        0,
        255,
        8,
        0,
        SUBFIELD[0],
        SUBFIELD[1],
        4,
        0,
        l[0],
        l[1],
        l[2],
        l[3],
    ]
}

/// The members of `file` when every one carries the `ST` length (a file capture wrote);
/// `None` for any other gzip file (one stream, or members without it), which is then read
/// serially. A file cut short ends at its last whole member: `Some` with those, and `true`.
pub fn members(file: &[u8]) -> Option<(Vec<Member>, bool)> {
    let mut v = Vec::new();
    let mut at = 0;
    while at < file.len() {
        // Zero bytes after whole members are padding (`gzip -d` ignores them; block devices
        // and some writers add them): the file ends there, whole.
        if !v.is_empty() && file[at..].iter().all(|&b| b == 0) {
            break;
        }
        let h = file.get(at..at + HEADER_LEN);
        let len = match h {
            Some(h)
                if h[..4] == [0x1f, 0x8b, 8, 4]
                    && h[10..12] == [8, 0]
                    && h[12..14] == SUBFIELD
                    && h[14..16] == [4, 0] =>
            {
                u32::from_le_bytes([h[16], h[17], h[18], h[19]]) as usize
            }
            // A cut header after whole members: the file ends early.
            None if !v.is_empty() => return Some((v, true)),
            _ => return None,
        };
        if len < HEADER_LEN + TRAILER_LEN {
            return None;
        }
        if at + len > file.len() {
            return (!v.is_empty()).then_some((v, true));
        }
        let t = at + len - 4;
        let inflated = u32::from_le_bytes(file[t..t + 4].try_into().ok()?) as usize;
        v.push(Member {
            offset: at,
            len,
            inflated,
        });
        at += len;
    }
    (!v.is_empty()).then_some((v, false))
}

/// One member for `piece`: header, raw deflate at `level` (0-9), CRC-32, ISIZE.
pub fn member(piece: &[u8], level: u32) -> Vec<u8> {
    let mut c = flate2::Compress::new(flate2::Compression::new(level), false);
    let mut out = Vec::with_capacity(HEADER_LEN + piece.len() / 3 + 64);
    out.extend_from_slice(&[0; HEADER_LEN]);
    loop {
        out.reserve((piece.len() / 4).max(1 << 16));
        let before = c.total_in() as usize;
        let status = c
            .compress_vec(&piece[before..], &mut out, flate2::FlushCompress::Finish)
            .expect("deflate of an in-memory buffer cannot fail");
        if status == flate2::Status::StreamEnd {
            break;
        }
    }
    // crc32fast, not flate2's `Crc` (zlib-rs's here): 35-37 against 6 GB/s on the 2-core
    // machine (benches/inflate_backends/examples/crc_speed.rs).
    out.extend_from_slice(&crc32fast::hash(piece).to_le_bytes());
    out.extend_from_slice(&(piece.len() as u32).to_le_bytes());
    let len = out.len() as u32;
    out[..HEADER_LEN].copy_from_slice(&header(len));
    out
}

/// Compresses `input` into `out` as members of [`PIECE`] bytes, `threads` pieces at a time.
pub fn write(
    input: &mut impl Read,
    out: &mut impl Write,
    level: u32,
    threads: usize,
) -> io::Result<()> {
    write_sized(input, out, level, threads, PIECE)
}

/// [`write()`] with members of `piece` bytes of input (at least 1, under 4 GiB): for measuring
/// what the member size does to readers (`examples/gzip_members.rs`).
pub fn write_sized(
    input: &mut impl Read,
    out: &mut impl Write,
    level: u32,
    threads: usize,
    piece: usize,
) -> io::Result<()> {
    let piece = piece.clamp(1, u32::MAX as usize);
    let threads = threads.max(1);
    let mut wrote_any = false;
    loop {
        // A batch of pieces, read here, compressed side by side, written in order.
        let mut pieces: Vec<Vec<u8>> = Vec::with_capacity(threads);
        for _ in 0..threads {
            let mut p = Vec::with_capacity(piece);
            input.by_ref().take(piece as u64).read_to_end(&mut p)?;
            if p.is_empty() {
                break;
            }
            pieces.push(p);
        }
        if pieces.is_empty() {
            break;
        }
        let done = pieces.len() < threads || pieces.last().is_some_and(|p| p.len() < piece);
        write_batch(&pieces, out, level)?;
        wrote_any = true;
        if done {
            break;
        }
    }
    if !wrote_any {
        // An empty input is one empty member, as gzip writes it.
        out.write_all(&member(&[], level))?;
    }
    Ok(())
}

/// Text in memory given as parts one after another, cut into pieces of a size (the last
/// shorter): each piece borrowed where it lies inside one part, gathered into a copy only
/// where it spans two. The cuts are those of the joined text, whatever the parts.
pub struct Pieces<'a, 'p> {
    parts: std::iter::Peekable<std::iter::Copied<std::slice::Iter<'p, &'a [u8]>>>,
    rest: &'a [u8],
    size: usize,
}

impl<'a, 'p> Pieces<'a, 'p> {
    /// `parts` in pieces of `size` bytes (at least one).
    pub fn new(parts: &'p [&'a [u8]], size: usize) -> Self {
        Pieces {
            parts: parts.iter().copied().peekable(),
            rest: &[],
            size: size.max(1),
        }
    }
}

impl<'a> Iterator for Pieces<'a, '_> {
    type Item = std::borrow::Cow<'a, [u8]>;

    fn next(&mut self) -> Option<Self::Item> {
        use std::borrow::Cow;
        while self.rest.is_empty() {
            self.rest = self.parts.next()?;
        }
        // Whole inside this part, or nothing after it but empty parts.
        while self.parts.peek().is_some_and(|p| p.is_empty()) {
            self.parts.next();
        }
        if self.rest.len() >= self.size || self.parts.peek().is_none() {
            let (piece, r) = self.rest.split_at(self.rest.len().min(self.size));
            self.rest = r;
            return Some(Cow::Borrowed(piece));
        }
        // A piece that spans parts: gathered into a copy.
        let mut p = Vec::with_capacity(self.size);
        while p.len() < self.size {
            if self.rest.is_empty() {
                match self.parts.next() {
                    Some(q) => self.rest = q,
                    None => break,
                }
            }
            let n = self.rest.len().min(self.size - p.len());
            p.extend_from_slice(&self.rest[..n]);
            self.rest = &self.rest[n..];
        }
        Some(Cow::Owned(p))
    }
}

/// [`write()`] of text in memory, given as `parts` one after another: the same bytes, but each
/// piece is compressed where it lies, copied only where it spans two parts (a batch of
/// `threads` pieces read into copies was most of the annotated trace's peak memory at 16
/// threads).
pub fn write_parts(
    parts: &[&[u8]],
    out: &mut impl Write,
    level: u32,
    threads: usize,
) -> io::Result<()> {
    let threads = threads.max(1);
    let mut pieces = Pieces::new(parts, PIECE);
    let mut wrote_any = false;
    loop {
        let batch: Vec<_> = pieces.by_ref().take(threads).collect();
        if batch.is_empty() {
            break;
        }
        write_batch(&batch, out, level)?;
        wrote_any = true;
    }
    if !wrote_any {
        out.write_all(&member(&[], level))?;
    }
    Ok(())
}

/// Compresses `pieces` side by side, a thread each, and writes their members in order.
fn write_batch(
    pieces: &[impl AsRef<[u8]> + Sync],
    out: &mut impl Write,
    level: u32,
) -> io::Result<()> {
    let members: Vec<Vec<u8>> = std::thread::scope(|s| {
        let hs: Vec<_> = pieces
            .iter()
            .map(|p| s.spawn(move || member(p.as_ref(), level)))
            .collect();
        hs.into_iter()
            .map(|h| h.join().expect("a compression thread panicked"))
            .collect()
    });
    for m in members {
        out.write_all(&m)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    /// Text given in parts comes out in the pieces of the joined text, whatever the parts
    /// (empty ones included), each piece borrowed where it lies inside one part.
    #[test]
    fn pieces_of_parts_are_the_joined_texts_pieces_borrowed_where_whole_in_a_part() {
        use std::borrow::Cow;
        let text: Vec<u8> = (0..10_000u32).map(|i| (i * 7 % 251) as u8).collect();
        for cuts in [
            vec![],
            vec![0, 0, 5_000],
            vec![1, 999, 1_000, 1_001, 7_777],
            vec![3_000, 3_000, 9_999],
        ] {
            let mut parts = Vec::new();
            let mut at = 0;
            for &c in &cuts {
                parts.push(&text[at..c]);
                at = c;
            }
            parts.push(&text[at..]);
            for size in [1, 1_000, 3_333, 20_000] {
                let pieces: Vec<Cow<[u8]>> = Pieces::new(&parts, size).collect();
                let want: Vec<&[u8]> = text.chunks(size).collect();
                assert_eq!(pieces.len(), want.len(), "{cuts:?} {size}");
                let mut start = 0;
                for (p, w) in pieces.iter().zip(&want) {
                    assert_eq!(&p[..], *w);
                    let end = start + w.len();
                    // Inside one part: borrowed.
                    let mut bounds = cuts.iter().filter(|&&c| c > start && c < end);
                    if bounds.next().is_none() {
                        assert!(matches!(p, Cow::Borrowed(_)), "{cuts:?} {size} at {start}");
                    }
                    start = end;
                }
            }
        }
    }

    use super::*;

    fn text(n: usize) -> Vec<u8> {
        (0..n)
            .map(|i| b"{\"ph\": \"X\", \"name\": \"aten::mm\"}, "[i % 31])
            .collect()
    }

    #[test]
    fn members_inflate_with_an_ordinary_gzip_reader_and_are_found_without_inflating() {
        for n in [0, 10, PIECE, PIECE + 1, 2 * PIECE + 12345] {
            let input = text(n);
            let mut out = Vec::new();
            write(&mut &input[..], &mut out, 6, 3).unwrap();
            let mut back = Vec::new();
            flate2::read::MultiGzDecoder::new(&out[..])
                .read_to_end(&mut back)
                .unwrap();
            assert_eq!(back, input, "{n}");
            let (m, cut) = members(&out).expect("members");
            assert!(!cut);
            assert_eq!(m.len(), n.div_ceil(PIECE).max(1));
            assert_eq!(m.iter().map(|x| x.inflated).sum::<usize>(), n);
            assert_eq!(m.last().map(|x| x.offset + x.len), Some(out.len()));
        }
    }

    // The member size the measurements of `examples/gzip_members.rs` ask for is the size
    // written, batches of threads or not, and the file is the same text.
    #[test]
    fn members_written_at_a_size_asked_hold_that_much_text_each() {
        let input = text(10_000);
        for (piece, threads) in [(1, 1), (7, 3), (999, 2), (10_000, 4), (20_000, 1)] {
            let mut out = Vec::new();
            write_sized(&mut &input[..], &mut out, 1, threads, piece).unwrap();
            let (m, cut) = members(&out).expect("members");
            assert!(!cut);
            assert_eq!(m.len(), input.len().div_ceil(piece), "{piece}");
            let (last, whole) = m.split_last().expect("a member");
            assert!(whole.iter().all(|x| x.inflated == piece), "{piece}");
            assert_eq!(last.inflated, input.len() - whole.len() * piece);
            let mut back = Vec::new();
            flate2::read::MultiGzDecoder::new(&out[..])
                .read_to_end(&mut back)
                .unwrap();
            assert_eq!(back, input, "{piece}");
        }
    }

    // Text given in parts is written as the same bytes as when read as one stream, wherever
    // the parts cut the pieces (empty parts, parts shorter and longer than a piece, a part
    // ending on a piece's end), at 1 and 3 threads.
    #[test]
    fn text_in_parts_is_written_as_the_same_members_as_text_read_whole() {
        let input = text(3 * PIECE + 12_345);
        let cuts: [&[usize]; 5] = [
            &[],
            &[0, 10, 10, PIECE],
            &[PIECE - 1, PIECE + 1, 2 * PIECE],
            &[5, 3 * PIECE],
            &[1_000_000, 1_000_001, 3 * PIECE + 12_345],
        ];
        for cut in cuts {
            let mut parts = Vec::new();
            let mut at = 0;
            for &c in cut.iter().chain(std::iter::once(&input.len())) {
                parts.push(&input[at..c]);
                at = c;
            }
            for threads in [1, 3] {
                let mut whole = Vec::new();
                write(&mut &input[..], &mut whole, 1, threads).unwrap();
                let mut by_parts = Vec::new();
                write_parts(&parts, &mut by_parts, 1, threads).unwrap();
                assert!(by_parts == whole, "cuts {cut:?}, {threads} threads");
            }
        }
        let (mut empty, mut none) = (Vec::new(), Vec::new());
        write(&mut &[][..], &mut empty, 1, 2).unwrap();
        write_parts(&[&[], &[]], &mut none, 1, 2).unwrap();
        assert_eq!(none, empty);
    }

    #[test]
    fn zero_padding_after_the_members_is_the_end_of_a_whole_file() {
        let t = text(3 * 1000 + 17);
        let mut file = Vec::new();
        write_sized(&mut &t[..], &mut file, 6, 1, 1000).unwrap();
        let whole = members(&file).unwrap();
        file.extend_from_slice(&[0; 512]);
        assert_eq!(members(&file), Some(whole));
        // Anything but zeros after them is not padding.
        file.push(1);
        assert_eq!(members(&file), None);
    }

    #[test]
    fn a_file_cut_short_keeps_its_whole_members_and_other_gzip_is_not_taken_for_members() {
        let input = text(2 * PIECE + 7);
        let mut out = Vec::new();
        write(&mut &input[..], &mut out, 1, 2).unwrap();
        let (m, cut) = members(&out[..out.len() - 5]).unwrap();
        assert!(cut);
        assert_eq!(m.len(), 2);
        let mut plain = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(6));
        plain.write_all(&input).unwrap();
        assert_eq!(members(&plain.finish().unwrap()), None);
    }
}
