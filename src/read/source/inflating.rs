//! The usual gzip trace (one member, as torch writes `.json.gz`) inflated on a thread of its
//! own into a buffer of the size its trailer states, while the parse reads what has arrived:
//! the parse no longer waits for the whole text (docs/performance.md). zlib's block-at-a-time
//! inflate (`Z_BLOCK`) also says where each deflate block starts, so the annotated trace can
//! keep the input's compressed stream up to the block where its events go in and compress
//! only the rest (as zlib's `gzappend` does), instead of compressing the whole text again.
//!
//! Anything this path does not expect (several members, a stated size that is wrong, a cut or
//! corrupt stream) ends it with [`Ended::Elsewhere`]: the caller reads the file the usual way,
//! which says what is wrong or yields what a cut stream holds.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};

use libz_rs_sys as z;

/// Text published to the parse at least this often (it waits for whole pieces anyway).
const PUBLISH_BYTES: usize = 1 << 20;
/// Output asked of one inflate call: inflate stops earlier at each block's end.
const STEP: usize = 1 << 20;

/// Block starts are recorded in this much text at the end (and the first, at text 0): the
/// annotated trace's events go in just before the end (Kineto writes a few short members
/// after `traceEvents`).
const BLOCKS_IN_LAST: usize = 8 << 20;

/// Where a deflate block starts in a gzip member, and the text before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockStart {
    /// Bit offset in the file (bits counted from each byte's least significant bit).
    pub bit: u64,
    /// Bytes of text before the block.
    pub text_at: usize,
    /// CRC-32 of those bytes.
    pub crc: u32,
}

/// How the inflate ended.
#[derive(Debug)]
pub enum Ended {
    /// The whole member inflated to its stated size, CRC and size checked, nothing but zero
    /// bytes after it: the text, and where each block starts (in order, the first at text 0).
    Whole(super::Bytes, Vec<BlockStart>),
    /// Not a file this path reads (or stopped early): read it the usual way.
    Elsewhere,
}

/// The mapping being filled, shared by the inflating thread (which writes only past `filled`)
/// and the readers (which read only before it).
struct Shared {
    ptr: NonNull<u8>,
    len: usize,
    /// Bytes filled so far, and whether the writer is done.
    state: Mutex<(usize, bool)>,
    arrived: Condvar,
    /// Set by the owner to make the writer stop (an error elsewhere, the owner dropped).
    stop: AtomicBool,
}

// SAFETY: `ptr` points into a mapping of `len` bytes held by the `Inflating` that owns this;
// the writer thread writes only bytes at or past the published `filled` and publishes them
// under the mutex before any reader is given a view that includes them; readers only read
// below `filled`. No byte is written while it can be read, and the mapping is unmapped or
// handed out only after the writer has been joined.
unsafe impl Send for Shared {}
// SAFETY: as for `Send`: shared access is reads of the published prefix and the mutex.
unsafe impl Sync for Shared {}

/// Marks the inflate ended when dropped, waking every reader.
struct Done<'a>(&'a Shared);

impl Drop for Done<'_> {
    fn drop(&mut self) {
        let mut st = self.0.state.lock().unwrap_or_else(|e| e.into_inner());
        st.1 = true;
        self.0.arrived.notify_all();
    }
}

/// A gzip member being inflated on its own thread.
pub struct Inflating {
    shared: std::sync::Arc<Shared>,
    thread: Option<std::thread::JoinHandle<Option<Vec<BlockStart>>>>,
    /// The thread faulting the buffer's pages in ahead of the inflate ([`populate_ahead`]).
    populator: Option<std::thread::JoinHandle<()>>,
    /// The mapping `shared.ptr` points into, not touched through this handle until the writer
    /// is joined; handed out by [`Inflating::finish`].
    map: Option<memmap2::MmapMut>,
}

impl std::fmt::Debug for Inflating {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inflating")
            .field("len", &self.shared.len)
            .finish()
    }
}

/// The length of the gzip member header at the start of `raw` (RFC 1952), `None` where it is
/// not one this path takes.
pub(super) fn header_len(raw: &[u8]) -> Option<usize> {
    let flags = *raw.get(3)?;
    if raw.get(..3)? != [0x1f, 0x8b, 8] || flags & 0xe0 != 0 {
        return None;
    }
    let mut at = 10;
    if flags & 4 != 0 {
        let xlen = u16::from_le_bytes([*raw.get(at)?, *raw.get(at + 1)?]) as usize;
        at += 2 + xlen;
    }
    for flag in [8u8, 16] {
        if flags & flag != 0 {
            at += raw.get(at..)?.iter().position(|&b| b == 0)? + 1;
        }
    }
    if flags & 2 != 0 {
        at += 2;
    }
    (at < raw.len()).then_some(at)
}

impl Inflating {
    /// Starts inflating the member in `raw` (whose stated size is `len`) on a thread of its
    /// own; `None` where no thread or memory can be had.
    pub(super) fn start(raw: super::Bytes, len: usize) -> Option<Inflating> {
        let header = header_len(&raw)?;
        let mut map = memmap2::MmapMut::map_anon(len.max(1)).ok()?;
        let ptr = NonNull::new(map.as_mut_ptr())?;
        let shared = std::sync::Arc::new(Shared {
            ptr,
            len,
            state: Mutex::new((0, false)),
            arrived: Condvar::new(),
            stop: AtomicBool::new(false),
        });
        let writer = std::sync::Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("steptrace-inflate".into())
            .spawn(move || {
                // Readers are told the inflate ended however it ends, a panic included: one
                // waiting for text that will not come would wait for ever.
                let _done = Done(&writer);
                let blocks = run(&writer, &raw, header);
                super::drop_aside(raw);
                blocks
            })
            .ok()?;
        // Not started (no thread to be had): the inflate's writes fault the pages in.
        let ahead = std::sync::Arc::clone(&shared);
        let populator = std::thread::Builder::new()
            .name("steptrace-populate".into())
            .spawn(move || populate_ahead(&ahead))
            .ok();
        Some(Inflating {
            shared,
            thread: Some(thread),
            populator,
            map: Some(map),
        })
    }

    /// [`Inflating::start`] over bytes in memory (tests elsewhere in the crate).
    #[cfg(test)]
    pub(crate) fn start_for_test(raw: Vec<u8>, len: usize) -> Option<Inflating> {
        Inflating::start(super::Bytes::Owned(raw), len)
    }

    /// The text's whole length, as the member states it.
    pub fn len(&self) -> usize {
        self.shared.len
    }

    /// Whether the text is empty.
    pub fn is_empty(&self) -> bool {
        self.shared.len == 0
    }

    /// The text arrived so far, once at least `want` bytes of it have (fewer only where the
    /// inflate has ended first).
    pub fn wait_for(&self, want: usize) -> &[u8] {
        let want = want.min(self.shared.len);
        let mut st = self.shared.state.lock().unwrap_or_else(|e| e.into_inner());
        while st.0 < want && !st.1 {
            st = self
                .shared
                .arrived
                .wait(st)
                .unwrap_or_else(|e| e.into_inner());
        }
        let filled = st.0;
        drop(st);
        // SAFETY: the first `filled` bytes were written and published under the mutex (read
        // just now, which orders those writes before this read); the writer never writes
        // them again, and the buffer lives as long as `self`.
        unsafe { std::slice::from_raw_parts(self.shared.ptr.as_ptr(), filled) }
    }

    /// Waits for the inflate to end: the whole text and its blocks, or [`Ended::Elsewhere`].
    pub fn finish(mut self) -> Ended {
        let blocks = self.join();
        let filled = self
            .shared
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .0;
        match (blocks, self.map.take()) {
            (Some(blocks), Some(map)) if filled == self.shared.len => match map.make_read_only() {
                Ok(m) => Ended::Whole(super::Bytes::Inflated(m), blocks),
                Err(_) => Ended::Elsewhere,
            },
            _ => Ended::Elsewhere,
        }
    }

    /// Waits for the inflate to end, then stops and waits for the populating thread: no
    /// thread touches the mapping once this returns.
    fn join(&mut self) -> Option<Vec<BlockStart>> {
        let blocks = self.thread.take().and_then(|t| t.join().ok()).flatten();
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(p) = self.populator.take() {
            let _ = p.join();
        }
        blocks
    }
}

impl Drop for Inflating {
    fn drop(&mut self) {
        // The writer stops and is joined before the mapping it writes into is unmapped.
        self.shared.stop.store(true, Ordering::Relaxed);
        let _ = self.join();
    }
}

impl crate::read::json_scan::Arriving for Inflating {
    fn total(&self) -> usize {
        self.shared.len
    }
    fn wait_for(&self, want: usize) -> &[u8] {
        Inflating::wait_for(self, want)
    }
}

/// A raw-deflate inflate stream (zlib's interface to zlib-rs), ended on drop.
struct Stream(Box<z::z_stream>);

impl Stream {
    fn new() -> Option<Stream> {
        let mut s = Box::new(z::z_stream::default());
        // SAFETY: `s` is a zeroed `z_stream` (null allocator fields: zlib-rs's own), the
        // version string is the library's, and the size is that of the struct passed.
        let r = unsafe {
            z::inflateInit2_(
                &mut *s,
                -15,
                z::zlibVersion(),
                std::mem::size_of::<z::z_stream>() as i32,
            )
        };
        (r == z::Z_OK).then_some(Stream(s))
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        // SAFETY: the stream was initialised by `inflateInit2_` and is ended once, here.
        unsafe { z::inflateEnd(&mut *self.0) };
    }
}

/// Bytes of the buffer faulted in at a time, ahead of the inflate's writes.
const POPULATE_BYTES: usize = 8 << 20;

/// Faults in the buffer's next pages from `from` in one call (`MADV_POPULATE_WRITE`), where
/// the system can, rather than one trap per 4 KiB page as the inflate writes: kernel time
/// 0.24-0.31 → 0.20-0.25 s on the 255 MB benchmark trace's `.gz` (lean command, 5 alternating
/// runs each; wall medians 0.58 → 0.55 s). Huge pages (`MADV_HUGEPAGE`) were slower at the
/// median: their faults compact memory first on this machine (0.14-0.82 s in the kernel).
/// Returns the new end of what is faulted in (the buffer's end where it cannot be done: the
/// writes then fault the pages in one by one).
///
/// Done on a thread of its own ahead of the inflate ([`populate_ahead`]), not by the
/// inflating thread between its steps: the single stream's inflate is the one serial part of
/// reading it, and the page faults were a fifth of that thread's time.
fn populate(sh: &Shared, from: usize) -> usize {
    let to = (from + POPULATE_BYTES).min(sh.len);
    #[cfg(target_os = "linux")]
    {
        // SAFETY: `from` is a multiple of POPULATE_BYTES (a multiple of the page size) inside
        // the mapping, `to - from` stays inside it, and the mapping outlives this thread
        // (`Inflating::join`). Populating maps zero pages where none is mapped yet and leaves
        // mapped ones as they are: it writes no byte, so bytes the inflate has written,
        // before or during the call, keep their value.
        let r = unsafe {
            libc::madvise(
                sh.ptr.as_ptr().add(from).cast(),
                to - from,
                libc::MADV_POPULATE_WRITE,
            )
        };
        if r != 0 {
            return sh.len;
        }
    }
    to
}

/// Inflates the member whose deflate data starts at `raw[header]` into the shared buffer,
/// publishing the text as it goes: the block starts where it all checks out, `None` where not.
/// Faults in the whole buffer from its start, [`POPULATE_BYTES`] at a time, until done or
/// told to stop.
fn populate_ahead(sh: &Shared) {
    let mut at = 0;
    while at < sh.len && !sh.stop.load(Ordering::Relaxed) {
        at = populate(sh, at);
    }
}

fn run(sh: &Shared, raw: &[u8], header: usize) -> Option<Vec<BlockStart>> {
    let mut s = Stream::new()?;
    let input = &raw[header..];
    let mut crc = crc32fast::Hasher::new();
    // The first block starts right after the header (a raw inflate does not stop there).
    let mut blocks = vec![BlockStart {
        bit: header as u64 * 8,
        text_at: 0,
        crc: 0,
    }];
    let (mut used, mut out, mut published) = (0usize, 0usize, 0usize);
    loop {
        if sh.stop.load(Ordering::Relaxed) {
            return None;
        }
        let room = (sh.len - out).min(STEP);
        let give = (input.len() - used).min(u32::MAX as usize);
        let st = &mut *s.0;
        st.next_in = input[used..].as_ptr().cast_mut();
        st.avail_in = give as u32;
        // SAFETY: bytes at `out..out + room` lie inside the buffer and past what has been
        // published, so no reader sees them until the next publication below.
        st.next_out = unsafe { sh.ptr.as_ptr().add(out) };
        st.avail_out = room as u32;
        let (in0, out0) = (st.total_in, st.total_out);
        // SAFETY: the stream is initialised; `next_in`/`avail_in` describe readable input and
        // `next_out`/`avail_out` writable output, as set just above.
        // Block by block only near the end, where added events go: stopping at every block
        // cost a tenth of the inflate's time (`--timings`, -j1, 5 alternating runs).
        let flush = if sh.len - out > BLOCKS_IN_LAST {
            z::Z_NO_FLUSH
        } else {
            z::Z_BLOCK
        };
        let r = unsafe { z::inflate(st, flush) };
        let took = (st.total_in - in0) as usize;
        let gave = (st.total_out - out0) as usize;
        // SAFETY: the inflate wrote these `gave` bytes just now; nothing reads them yet.
        crc.update(unsafe { std::slice::from_raw_parts(sh.ptr.as_ptr().add(out), gave) });
        used += took;
        out += gave;
        // Stopped before a block's header (a block-by-block call); not after the final block (64: the block just
        // ended was the last, and what follows is padding).
        let at_block = st.data_type & 128 != 0 && st.data_type & 64 == 0;
        if r == z::Z_OK && at_block {
            // In the stream's state: bits read from the input but not yet used.
            let unused = (st.data_type & 63) as u64;
            blocks.push(BlockStart {
                bit: (header + used) as u64 * 8 - unused,
                text_at: out,
                crc: crc.clone().finalize(),
            });
        }
        let end = r == z::Z_STREAM_END;
        if end || out - published >= PUBLISH_BYTES {
            let mut g = sh.state.lock().unwrap_or_else(|e| e.into_inner());
            g.0 = out;
            sh.arrived.notify_all();
            published = out;
        }
        if end {
            // The trailer: CRC-32 and size of the text, then nothing but zero padding.
            let trailer = input.get(used..used + 8)?;
            let ok = trailer[..4] == crc.finalize().to_le_bytes()
                && trailer[4..] == (out as u32).to_le_bytes()
                && out == sh.len
                && input[used + 8..].iter().all(|&b| b == 0);
            return ok.then_some(blocks);
        }
        // Corrupt data, a cut stream, or more text than stated: the usual path's to say.
        if r != z::Z_OK || (took == 0 && gave == 0) {
            return None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn gz(data: &[u8], level: u32) -> Vec<u8> {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(level));
        enc.write_all(data).unwrap();
        enc.finish().unwrap()
    }

    fn text(n: usize) -> Vec<u8> {
        let mut x = 9u32;
        (0..n)
            .map(|_| {
                x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                b"{}\":, 0123456789abcdefph\n"[(x >> 16) as usize % 25]
            })
            .collect()
    }

    /// The text arrives whole and equal to the input, its blocks' starts are in order from
    /// text 0, none after the final block, and their CRCs are those of the text before them.
    #[test]
    fn a_member_inflates_whole_with_block_starts_a_reader_can_resume_at() {
        // Longer than the stretch at the end where block starts are recorded.
        let data = text(BLOCKS_IN_LAST + (3 << 20));
        let file = gz(&data, 6);
        let inf = Inflating::start(super::super::Bytes::Owned(file.clone()), data.len()).unwrap();
        assert!(inf.wait_for(1 << 20).len() >= 1 << 20);
        let Ended::Whole(out, blocks) = inf.finish() else {
            panic!("the member did not inflate whole")
        };
        assert!(*out == data[..]);
        assert!(blocks.len() > 10, "{} blocks", blocks.len());
        assert_eq!(blocks[0].text_at, 0);
        assert!(blocks
            .windows(2)
            .all(|w| w[0].text_at < w[1].text_at && w[0].bit < w[1].bit));
        assert!(blocks.last().unwrap().text_at < data.len());
        assert!(blocks[1..]
            .iter()
            .all(|b| b.text_at + BLOCKS_IN_LAST + STEP >= data.len()));
        for b in &blocks {
            assert_eq!(b.crc, crc32fast::hash(&data[..b.text_at]));
        }
        // That a stream resumes at each start is held by report::gzip's tests.
    }

    /// What this path does not read ends it, for the usual path to read: two members, a
    /// wrong stated size, a cut stream, a bad byte.
    #[test]
    fn anything_but_one_whole_member_of_the_stated_size_is_left_to_the_usual_path() {
        let data = text(1 << 20);
        let one = gz(&data, 6);
        let ended = |file: Vec<u8>, len: usize| {
            let inf = Inflating::start(super::super::Bytes::Owned(file), len).unwrap();
            matches!(inf.finish(), Ended::Elsewhere)
        };
        let mut two = one.clone();
        two.extend_from_slice(&gz(b"more", 6));
        assert!(ended(two, data.len()));
        assert!(ended(one.clone(), data.len() - 1));
        assert!(ended(one.clone(), data.len() + 1));
        assert!(ended(one[..one.len() / 2].to_vec(), data.len()));
        let mut bad = one.clone();
        bad[one.len() / 3] ^= 0x40;
        assert!(ended(bad, data.len()));
        let mut padded = one.clone();
        padded.extend_from_slice(&[0; 512]);
        assert!(!ended(padded, data.len()));
    }

    /// Dropped while inflating: the thread stops and the buffer is freed (no hang, no leak
    /// that Miri or a sanitizer would see).
    #[test]
    fn dropping_an_inflate_midway_stops_it() {
        let data = text(8 << 20);
        let inf = Inflating::start(super::super::Bytes::Owned(gz(&data, 1)), data.len()).unwrap();
        let _ = inf.wait_for(1);
        drop(inf);
    }

    #[test]
    fn gzip_headers_with_optional_fields_are_measured() {
        let mut h = vec![
            0x1f,
            0x8b,
            8,
            4 | 8 | 16 | 2,
            0,
            0,
            0,
            0,
            0,
            3,
            3,
            0,
            b'a',
            b'b',
            b'c',
        ];
        h.extend_from_slice(b"name\0comment\0");
        h.extend_from_slice(&[0xaa, 0xbb, 0x55]);
        assert_eq!(header_len(&h), Some(h.len() - 1));
        assert_eq!(
            header_len(&[0x1f, 0x8b, 8, 0x20, 0, 0, 0, 0, 0, 3, 0]),
            None
        );
        assert_eq!(
            header_len(&[0x1f, 0x8b, 8, 8, 0, 0, 0, 0, 0, 3, b'x']),
            None
        );
    }
}
