//! The usual gzip trace (one member, as torch writes `.json.gz`) inflated on a thread of its
//! own into windows of a few MiB, each handed to the parse as it fills
//! ([`crate::read::json_scan::InOrder`]): the parse no longer waits for the whole text, and the
//! text is never held whole. A few buffers serve every window, so the inflate writes into
//! memory already faulted in and in cache: into one buffer of the whole text's size, zlib-rs
//! took 0.27-0.29 s for the 255 MB benchmark trace's stream, into a reused one 0.15-0.16 s
//! (docs/performance.md, "Reading and parsing": one gzip stream). zlib's block-at-a-time inflate (`Z_BLOCK`)
//! also says where each deflate block starts, so the annotated trace can keep the input's
//! compressed stream up to the block where its events go in and compress only the rest (as
//! zlib's `gzappend` does), instead of compressing the whole text again; the text after
//! [`KEEP_TAIL`] from the end is kept for it and for what follows the events array.
//!
//! Anything this path does not expect (several members, a stated size that is wrong, a cut or
//! corrupt stream) ends it with [`Ended::Elsewhere`]: the caller reads the file the usual way,
//! which says what is wrong or yields what a cut stream holds.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Condvar, Mutex};

use libz_rs_sys as z;

use crate::read::json_scan::{InOrder, Msg, Producer, Window};

/// Each window's own text: the parse's piece, as for a plain trace (2 MiB). 4 MiB windows
/// held more (peak RSS on nanoGPT's 28 MB trace as torch wrote it 95 against 84 MB, on the
/// 255 MB trace 248 against 222 MB) and were no faster (9 interleaved runs each).
const WINDOW: usize = 2 << 20;
/// What a window carries of the next one's text, for a piece that reads past its own end.
const MARGIN: usize = crate::read::json_scan::WINDOW_MARGIN;
/// Output asked of one inflate call: inflate stops earlier at each block's end.
const STEP: usize = 1 << 20;

/// Block starts are recorded in this much text at the end (and the first, at text 0): the
/// annotated trace's events go in just before the end (Kineto writes a few short members
/// after `traceEvents`).
const BLOCKS_IN_LAST: usize = 8 << 20;

/// The text kept from this far before the end: every block start recorded there, the last
/// window's piece, and what follows the events array.
pub const KEEP_TAIL: usize = BLOCKS_IN_LAST + STEP + WINDOW + 2 * MARGIN;

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
    /// bytes after it: where each block starts (in order, the first at text 0), and the text
    /// from `tail_at` to the end.
    Whole {
        /// The block starts.
        blocks: Vec<BlockStart>,
        /// Where the kept text starts.
        tail_at: usize,
        /// A mapping of the whole text's length holding the text from `tail_at` to the end;
        /// never written before it (those pages take no memory and read as zeros).
        text: memmap2::MmapMut,
    },
    /// Not a file this path reads (or stopped early): read it the usual way.
    Elsewhere,
}

/// The single stream's text as the parse reads it, a window at a time.
pub(crate) type StreamText = InOrder<Inflating>;

/// The buffers between the inflating thread and the parse.
struct Ring {
    state: Mutex<RingState>,
    room: Condvar,
    /// Set by the owner to make the writer stop (an error elsewhere, the owner dropped).
    stop: AtomicBool,
    /// Windows out at once (being filled, parsed or held for a piece), unless more is needed.
    cap: usize,
}

struct RingState {
    /// Buffers handed back, to fill again.
    free: Vec<Vec<u8>>,
    /// Buffers taken by the writer and not handed back.
    out: usize,
    /// The text the parse waits for: the writer goes past its cap until it has sent this.
    need: usize,
}

impl Ring {
    /// A buffer for the window from `start`, once fewer than the cap are out (or the parse
    /// waits for text from there); `None` once told to stop.
    fn take(&self, start: usize) -> Option<Vec<u8>> {
        let mut g = self.state.lock().unwrap_or_else(|e| e.into_inner());
        while g.out >= self.cap && g.need <= start && !self.stop.load(Ordering::Relaxed) {
            g = self.room.wait(g).unwrap_or_else(|e| e.into_inner());
        }
        if self.stop.load(Ordering::Relaxed) {
            return None;
        }
        g.out += 1;
        Some(
            g.free
                .pop()
                .unwrap_or_else(|| Vec::with_capacity(WINDOW + MARGIN)),
        )
    }

    fn wake(&self) {
        let _g = self.state.lock().unwrap_or_else(|e| e.into_inner());
        self.room.notify_all();
    }
}

/// Sends the end of the windows when dropped, however the writer ends (a panic included: a
/// parse waiting for a window that will not come would wait for ever).
struct EndGuard {
    tx: Sender<Msg>,
    ok: bool,
}

impl Drop for EndGuard {
    fn drop(&mut self) {
        let _ = self.tx.send(Msg::Ended(self.ok));
    }
}

/// What the writer hands back where the stream checks out: the block starts and the text's
/// last [`KEEP_TAIL`] bytes in a mapping of the whole text's length.
type Inflated = (Vec<BlockStart>, memmap2::MmapMut);

/// A gzip member being inflated on its own thread.
pub(crate) struct Inflating {
    ring: Arc<Ring>,
    len: usize,
    thread: Option<std::thread::JoinHandle<Option<Inflated>>>,
}

impl std::fmt::Debug for Inflating {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inflating").field("len", &self.len).finish()
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
    /// own, its windows read by the [`StreamText`] returned; `None` where no thread can be had.
    pub(super) fn start(raw: super::Bytes, len: usize) -> Option<StreamText> {
        // Enough windows for every parse thread to have one and the writer to fill the next.
        Self::start_capped(raw, len, 2 * rayon::current_num_threads().max(1) + 2)
    }

    /// [`Inflating::start`] with at most `cap` buffers out while the parse asks for no more.
    fn start_capped(raw: super::Bytes, len: usize, cap: usize) -> Option<StreamText> {
        let header = header_len(&raw)?;
        let (tx, rx) = std::sync::mpsc::channel();
        let ring = Arc::new(Ring {
            state: Mutex::new(RingState {
                free: Vec::new(),
                out: 0,
                need: 0,
            }),
            room: Condvar::new(),
            stop: AtomicBool::new(false),
            cap,
        });
        let writer = Arc::clone(&ring);
        let send = tx.clone();
        let thread = std::thread::Builder::new()
            .name("steptrace-inflate".into())
            .spawn(move || {
                let mut end = EndGuard {
                    tx: send,
                    ok: false,
                };
                let r = run(&writer, &raw, header, len, &end.tx);
                end.ok = r.is_some();
                super::drop_aside(raw);
                r
            })
            .ok()?;
        let inf = Inflating {
            ring,
            len,
            thread: Some(thread),
        };
        Some(InOrder::new(inf, tx, rx))
    }

    /// Waits for the inflate to end (every window received: [`InOrder::finish`]): the blocks
    /// and the text's tail, or [`Ended::Elsewhere`].
    pub(crate) fn finish(text: StreamText) -> Ended {
        let (mut inf, ok) = text.finish();
        let r = inf.thread.take().and_then(|t| t.join().ok()).flatten();
        match r {
            Some((blocks, text)) if ok => Ended::Whole {
                blocks,
                tail_at: inf.len.saturating_sub(KEEP_TAIL),
                text,
            },
            _ => Ended::Elsewhere,
        }
    }

    /// The whole text and its block starts, every window copied out in order (tests).
    #[cfg(test)]
    pub(crate) fn whole_for_test(raw: Vec<u8>, len: usize) -> Option<(Vec<u8>, Vec<BlockStart>)> {
        let mut text = Inflating::start(super::Bytes::Owned(raw), len)?;
        let whole = crate::read::json_scan::Prefix::prefix(&mut text, len).to_vec();
        match Inflating::finish(text) {
            Ended::Whole { blocks, .. } if whole.len() == len => Some((whole, blocks)),
            _ => None,
        }
    }
}

impl Producer for Inflating {
    fn total(&self) -> usize {
        self.len
    }
    fn window_len(&self) -> usize {
        WINDOW
    }
    fn release(&self, buf: Option<Vec<u8>>) {
        let mut g = self.ring.state.lock().unwrap_or_else(|e| e.into_inner());
        g.out = g.out.saturating_sub(1);
        if let Some(mut b) = buf {
            b.clear();
            g.free.push(b);
        }
        self.ring.room.notify_all();
    }
    fn need(&self, to: usize) {
        let mut g = self.ring.state.lock().unwrap_or_else(|e| e.into_inner());
        g.need = g.need.max(to);
        self.ring.room.notify_all();
    }
}

impl Drop for Inflating {
    fn drop(&mut self) {
        // The writer stops (woken where it waits for a buffer) and is joined.
        self.ring.stop.store(true, Ordering::Relaxed);
        self.ring.wake();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
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

/// Inflates the member whose deflate data starts at `raw[header]` (its stated size `len`)
/// into windows sent through `tx` in order, each buffer taken from the ring: the block starts
/// and the text's last [`KEEP_TAIL`] bytes where it all checks out, `None` where not (or told
/// to stop, or the parse gone).
fn run(ring: &Ring, raw: &[u8], header: usize, len: usize, tx: &Sender<Msg>) -> Option<Inflated> {
    let mut s = Stream::new()?;
    let input = &raw[header..];
    let mut crc = crc32fast::Hasher::new();
    // The first block starts right after the header (a raw inflate does not stop there).
    let mut blocks = vec![BlockStart {
        bit: header as u64 * 8,
        text_at: 0,
        crc: 0,
    }];
    let tail_at = len.saturating_sub(KEEP_TAIL);
    // No swap reserved: only the tail is ever written.
    let mut keep = memmap2::MmapOptions::new()
        .len(len.max(1))
        .no_reserve_swap()
        .map_anon()
        .ok()?;
    let (mut used, mut out) = (0usize, 0usize);
    // The window being filled starts at `start` and holds the text from there through `out`.
    let mut start = 0usize;
    let mut cur = ring.take(0)?;
    let mut margin = Vec::with_capacity(MARGIN);
    loop {
        if ring.stop.load(Ordering::Relaxed) {
            return None;
        }
        let own = WINDOW.min(len - start);
        let full = (own + MARGIN).min(len - start);
        if cur.len() == full && start + own < len {
            // Full with its margin: sent before a buffer is asked for the next window (the
            // parse may wait for this one, and hand buffers back only once it has it: asking
            // first, with every buffer out, hung), its margin kept aside as the next one's
            // start.
            margin.clear();
            margin.extend_from_slice(&cur[own..]);
            let w = Window {
                start,
                own,
                text: std::mem::take(&mut cur),
            };
            tx.send(Msg::Window(w)).ok()?;
            start += own;
            cur = ring.take(start)?;
            cur.extend_from_slice(&margin);
            continue;
        }
        let room = (full - cur.len()).min(STEP);
        cur.reserve(room);
        let give = (input.len() - used).min(u32::MAX as usize);
        let st = &mut *s.0;
        st.next_in = input[used..].as_ptr().cast_mut();
        st.avail_in = give as u32;
        // SAFETY: `room` bytes of spare capacity were reserved just above; the inflate writes
        // only there, and nothing else reads `cur` meanwhile.
        st.next_out = unsafe { cur.as_mut_ptr().add(cur.len()) };
        st.avail_out = room as u32;
        let (in0, out0) = (st.total_in, st.total_out);
        // Block by block only near the end, where added events go: stopping at every block
        // cost a tenth of the inflate's time (`--timings`, -j1, 5 alternating runs).
        let flush = if len - out > BLOCKS_IN_LAST {
            z::Z_NO_FLUSH
        } else {
            z::Z_BLOCK
        };
        // SAFETY: the stream is initialised; `next_in`/`avail_in` describe readable input and
        // `next_out`/`avail_out` writable output, as set just above.
        let r = unsafe { z::inflate(st, flush) };
        let took = (st.total_in - in0) as usize;
        let gave = (st.total_out - out0) as usize;
        let was = cur.len();
        // SAFETY: the inflate wrote these `gave` bytes (at most `room`) just past the length.
        unsafe { cur.set_len(was + gave) };
        let new = &cur[was..];
        crc.update(new);
        if out + gave > tail_at {
            let from = tail_at.max(out);
            keep[from..out + gave].copy_from_slice(&new[from - out..]);
        }
        used += took;
        out += gave;
        // Stopped before a block's header (a block-by-block call); not after the final block
        // (64: the block just ended was the last, and what follows is padding).
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
        if r == z::Z_STREAM_END {
            // The trailer: CRC-32 and size of the text, then nothing but zero padding.
            let trailer = input.get(used..used + 8)?;
            let ok = trailer[..4] == crc.finalize().to_le_bytes()
                && trailer[4..] == (out as u32).to_le_bytes()
                && out == len
                && input[used + 8..].iter().all(|&b| b == 0);
            if !ok {
                return None;
            }
            let own = cur.len();
            tx.send(Msg::Window(Window {
                start,
                own,
                text: cur,
            }))
            .ok()?;
            return Some((blocks, keep));
        }
        // Corrupt data, a cut stream, or more text than stated: the usual path's to say.
        if r != z::Z_OK || (took == 0 && gave == 0) {
            return None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{gzip_stream, Bytes};
    use super::*;

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
    /// text 0, none after the final block, and their CRCs are those of the text before them;
    /// the tail kept is the text's end.
    #[test]
    fn a_member_inflates_whole_with_block_starts_a_reader_can_resume_at() {
        // Longer than the stretch at the end where block starts are recorded, and than the
        // text kept of the end.
        let data = text(KEEP_TAIL + (3 << 20));
        let file = gzip_stream(&data, 6);
        let (out, blocks) = Inflating::whole_for_test(file.clone(), data.len()).unwrap();
        assert!(out == data);
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
        let text = Inflating::start(Bytes::Owned(file), data.len()).unwrap();
        let Ended::Whole { tail_at, text, .. } = Inflating::finish(text) else {
            panic!("the member did not inflate whole")
        };
        assert_eq!(tail_at, data.len() - KEEP_TAIL);
        assert!(text[tail_at..] == data[tail_at..]);
        assert!(text[..tail_at].iter().all(|&b| b == 0));
    }

    /// A trailer that states another CRC-32 than the text's is refused (a text longer than
    /// the tail kept, so the check covers windows long handed back).
    #[test]
    fn a_stream_whose_trailer_states_another_crc_is_left_to_the_usual_path() {
        let data = text(KEEP_TAIL + (3 << 20));
        let file = gzip_stream(&data, 1);
        let ended = |file: Vec<u8>| {
            let t = Inflating::start(Bytes::Owned(file), data.len()).unwrap();
            matches!(Inflating::finish(t), Ended::Elsewhere)
        };
        assert!(!ended(file.clone()), "the stream as written inflates whole");
        let crc_at = file.len() - 8;
        for bit in [0, 13, 31] {
            let mut bad = file.clone();
            bad[crc_at + bit / 8] ^= 1 << (bit % 8);
            assert!(ended(bad), "a CRC with bit {bit} flipped was taken");
        }
    }

    /// The windows sent are the text in order, each its own bytes then the next one's first
    /// [`MARGIN`] bytes, and the writer never has more than its cap out while the parse does
    /// not ask for more: the text is not held whole.
    #[test]
    fn windows_carry_the_next_ones_start_and_the_writer_waits_for_buffers_handed_back() {
        let data = text(5 * WINDOW + 12_345);
        let t = Inflating::start(Bytes::Owned(gzip_stream(&data, 1)), data.len()).unwrap();
        let cap = 2 * rayon::current_num_threads().max(1) + 2;
        let mut seen = 0;
        let mut at = 0;
        loop {
            // Nothing handed back yet: at most `cap` buffers may be out, the writer's own
            // included, and it stops there.
            std::thread::sleep(std::time::Duration::from_millis(20));
            let g = t.producer().ring.state.lock().unwrap().out;
            assert!(g <= cap, "{g} buffers out, cap {cap}");
            match t.recv_for_test() {
                Msg::Window(w) => {
                    assert_eq!(w.start, at);
                    let end = (w.start + w.own + MARGIN).min(data.len());
                    assert!(w.text == data[w.start..end], "window at {}", w.start);
                    at += w.own;
                    seen += 1;
                    t.producer().release(Some(w.text));
                }
                Msg::Ended(ok) => {
                    assert!(ok);
                    break;
                }
                Msg::Done => unreachable!(),
            }
        }
        assert_eq!((at, seen), (data.len(), 6));
    }

    /// The writer sends a window it has filled before it waits for a buffer for the next: a
    /// parse that hands each window back only once it has the next (as it does while a piece
    /// runs past a window's end) does not wait on a writer that waits on it, even with two
    /// buffers in all. (Asking for the buffer first hung so, with every buffer out.)
    #[test]
    fn a_parse_holding_each_window_until_the_next_arrives_does_not_wait_on_the_writer() {
        use std::sync::mpsc::RecvTimeoutError;
        let data = text(6 * WINDOW + 777);
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let file = Bytes::Owned(gzip_stream(&data, 1));
            let t = Inflating::start_capped(file, data.len(), 2).unwrap();
            let (mut held, mut at) = (None, 0);
            loop {
                match t.recv_for_test() {
                    Msg::Window(w) => {
                        assert_eq!(w.start, at);
                        at += w.own;
                        if let Some(before) = held.replace(w.text) {
                            t.producer().release(Some(before));
                        }
                    }
                    Msg::Ended(ok) => {
                        assert!(ok);
                        break;
                    }
                    Msg::Done => unreachable!(),
                }
            }
            done.send(at == data.len()).unwrap();
        });
        match finished.recv_timeout(std::time::Duration::from_secs(60)) {
            Ok(whole) => assert!(whole, "the windows stopped short of the text"),
            Err(RecvTimeoutError::Timeout) => panic!("the writer and the parse wait on each other"),
            Err(RecvTimeoutError::Disconnected) => panic!("the reading thread panicked"),
        }
    }

    /// What this path does not read ends it, for the usual path to read: two members, a
    /// wrong stated size, a cut stream, a bad byte.
    #[test]
    fn anything_but_one_whole_member_of_the_stated_size_is_left_to_the_usual_path() {
        let data = text(1 << 20);
        let one = gzip_stream(&data, 6);
        let ended = |file: Vec<u8>, len: usize| {
            let t = Inflating::start(Bytes::Owned(file), len).unwrap();
            matches!(Inflating::finish(t), Ended::Elsewhere)
        };
        let mut two = one.clone();
        two.extend_from_slice(&gzip_stream(b"more", 6));
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

    /// Dropped while inflating, the writer waiting for a buffer: it stops and is joined (no
    /// hang).
    #[test]
    fn dropping_an_inflate_midway_stops_it() {
        let data = text(8 * WINDOW);
        let mut t = Inflating::start(Bytes::Owned(gzip_stream(&data, 1)), data.len()).unwrap();
        let _ = crate::read::json_scan::Prefix::prefix(&mut t, 1);
        drop(t);
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
