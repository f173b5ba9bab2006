//! Path → bytes: plain files and gzip streams (sniffed by magic, not by extension), with
//! truncated gzip streams yielding what they hold.

use crate::file_error::FileError;
use std::io::{BufRead, Read, Seek};
use std::ops::Deref;
use std::path::Path;

use super::Error;

mod inflating;
mod members;
pub(crate) mod read_ahead;
pub use inflating::{BlockStart, Ended, KEEP_TAIL};
pub(crate) use inflating::{Inflating, StreamText};
pub use members::MemberText;

/// An input's bytes: the file mapped into memory, or a buffer (inflated gzip, tests).
#[derive(Debug)]
pub enum Bytes {
    /// Owned bytes.
    Owned(Vec<u8>),
    /// A read-only mapping of the whole file.
    Mapped(memmap2::Mmap),
    /// Text inflated into memory of its own (an anonymous mapping): never released piece by
    /// piece, which would read back as zeros.
    Inflated(memmap2::Mmap),
}

impl Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Bytes::Owned(v) => v,
            Bytes::Mapped(m) | Bytes::Inflated(m) => m,
        }
    }
}

impl Bytes {
    /// Done with `range` of a mapped file: its pages leave this process's page tables now, on
    /// the calling thread, rather than all at once when the mapping is dropped. The parse
    /// releases each piece it has read, so the page-table work runs on every parse thread and
    /// the mapping stops counting in the resident size as the parse goes: peak RSS on the
    /// 255 MB benchmark trace 304 → 163 MB, none on nanoGPT's 28 MB trace (its peak comes
    /// later, in the outputs). Unmapped in one call after the parse, the teardown ran beside
    /// the merge, and a perf timeline showed one core idle for some 10 ms there (the merge,
    /// timed by a timer put around it for the measurement: 0.053 s then, 0.031 s now, medians
    /// of 6 on a busy machine; the whole parse moved within the noise). Only whole pages inside
    /// `range` are released; reading them again faults them back in from the page cache, so
    /// no byte read changes. Owned bytes are left alone: released heap memory would read as
    /// zeros.
    pub(crate) fn release(&self, range: std::ops::Range<usize>) {
        #[cfg(target_os = "linux")]
        if let Bytes::Mapped(m) = self {
            let page = page_size();
            let start = range.start.div_ceil(page) * page;
            let end = range.end.min(m.len()) / page * page;
            if start < end {
                // SAFETY: the mapping is a read-only view of the file, never written through,
                // so dropping its pages discards nothing: the next read of them faults the
                // file's same bytes in again (Linux, `MADV_DONTNEED` on a file mapping), and a
                // slice into them reads what it read before. `start..end` lies inside the
                // mapping. What no mapping guards against, the file rewritten meanwhile, is
                // the caveat `open` already states.
                let _ = unsafe {
                    m.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, start, end - start)
                };
            }
        }
        #[cfg(not(target_os = "linux"))]
        let _ = range;
    }
}

/// The system's page size (4 KiB where it cannot be read).
#[cfg(target_os = "linux")]
fn page_size() -> usize {
    use std::sync::OnceLock;
    static PAGE: OnceLock<usize> = OnceLock::new();
    *PAGE.get_or_init(|| {
        // SAFETY: `sysconf` reads a configuration value and touches no memory of ours.
        let v = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        usize::try_from(v).ok().filter(|&p| p > 0).unwrap_or(4096)
    })
}

impl From<Vec<u8>> for Bytes {
    fn from(v: Vec<u8>) -> Self {
        Bytes::Owned(v)
    }
}

/// Files at least this large are mapped rather than read. Reading copies every byte out of the
/// page cache on one thread (a fifth of a whole `analyze` of a 222 MB trace) into freshly
/// zeroed pages; a mapping is filled by page faults on the parse threads themselves. Small
/// files are read: a mapping costs more to set up than it saves.
const MAP_AT_LEAST: u64 = 1 << 20;

/// Refuses what is not a regular file before opening it ([`crate::file_error::not_regular`]):
/// opening a FIFO waits for a writer (an `analyze` of one hung), and a pipe such as
/// `<(zcat …)` reads once, while the annotated trace reads its input a second time (it failed
/// after the whole analysis, "the trace changed").
fn regular_file(path: &Path) -> std::io::Result<()> {
    match crate::file_error::not_regular(&std::fs::metadata(path)?) {
        None => Ok(()),
        Some(why) => Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, why)),
    }
}

/// The whole file at `path`: mapped when large, read otherwise.
fn open(path: &Path) -> std::io::Result<Bytes> {
    regular_file(path)?;
    bytes_of(&std::fs::File::open(path)?)
}

/// The whole of an open regular file from its start: mapped when large, read otherwise.
fn bytes_of(mut file: &std::fs::File) -> std::io::Result<Bytes> {
    let len = file.metadata()?.len();
    if len >= MAP_AT_LEAST {
        // SAFETY: the mapping is read-only and private to this process. What it cannot guard
        // against is another process truncating or rewriting the file while it is mapped:
        // that may show changed bytes (parsed like any other input) or raise SIGBUS for
        // pages past a new end. Traces and snapshots are written once, when a run ends, and
        // analysed afterwards; the speed-up is measured in docs/performance.md.
        if let Ok(m) = unsafe { memmap2::Mmap::map(file) } {
            return Ok(Bytes::Mapped(m));
        }
    }
    let mut v = Vec::with_capacity(usize::try_from(len).unwrap_or(0).saturating_add(1));
    file.seek(std::io::SeekFrom::Start(0))?;
    file.read_to_end(&mut v)?;
    Ok(Bytes::Owned(v))
}

/// What was read from one input file.
#[derive(Debug)]
pub struct Source {
    /// The decompressed bytes.
    pub bytes: Bytes,
    /// Size on disk.
    pub file_len: u64,
    /// Whether the file was a gzip stream.
    pub gzipped: bool,
    /// Set when a gzip stream ended early (a crashed writer): the bytes hold what came before.
    pub truncated_gzip: bool,
}

/// Whether `head` starts with the gzip magic bytes (RFC 1952).
fn is_gzip(head: &[u8]) -> bool {
    head.starts_with(&[0x1f, 0x8b])
}

/// What an input must start with: checked on its first bytes, before a gzip stream is
/// inflated any further (10 MB of gzip can hold 10 GiB of zeros; byte 0 already says they are
/// not a trace).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// A JSON object: `{` after any whitespace.
    JsonObject,
    /// A pickle: the PROTO opcode, or a protocol 0-1 opcode.
    Pickle,
    /// Anything.
    Any,
}

/// The error for a text whose first character (after white space) is not `{`, where a JSON
/// object is expected: one text, whichever reader finds it (the capture-form read checks the
/// first bytes, the whole read its header; a random search found the two worded apart).
pub const NOT_A_JSON_OBJECT: &str = "not a JSON object (its first character is not '{')";

impl Expect {
    /// Why `head` (the first bytes, or the whole input when shorter) cannot be this; `None`
    /// when it can, or when too little is known yet.
    fn refuse(self, head: &[u8], whole: bool) -> Option<&'static str> {
        match self {
            Expect::JsonObject => match head.iter().find(|c| !c.is_ascii_whitespace()) {
                Some(b'{') => None,
                Some(_) => Some(NOT_A_JSON_OBJECT),
                // A whole input of whitespace is the parser's to name (an empty file).
                None if !whole && head.len() >= INFLATE_CHECK_BYTES => {
                    Some("not a JSON object (64 KiB of whitespace first)")
                }
                None => None,
            },
            Expect::Pickle => match head.first() {
                Some(0x80 | b'(' | b'}' | b']' | b'l' | b'd') => None,
                Some(b'{') => Some(
                    "not a memory snapshot pickle: it starts with '{', as JSON does (a trace or a manifest?)",
                ),
                Some(_) => Some("not a pickle (its first byte is no pickle opcode)"),
                None => None,
            },
            Expect::Any => None,
        }
    }
}

/// How much inflated text is checked against [`Expect`] before inflating on.
const INFLATE_CHECK_BYTES: usize = 1 << 16;

/// Reads a whole file, inflating it when it starts with the gzip magic bytes.
pub fn read(path: &Path) -> Result<Source, Error> {
    read_expecting(path, Expect::Any)
}

/// [`read`], refusing at once an input whose first bytes cannot be `expect`, and a gzip stream
/// that inflates past the memory available.
pub fn read_expecting(path: &Path, expect: Expect) -> Result<Source, Error> {
    let raw = open(path).map_err(FileError::at(path))?;
    read_opened(path, raw, expect)
}

/// An input's text, whole or still inflating.
#[derive(Debug)]
pub(crate) enum Arrival {
    /// Read (and inflated) whole.
    Whole(Source),
    /// A single-stream gzip file being inflated on a thread of its own, a window at a time;
    /// the size on disk.
    Inflating(StreamText, u64),
    /// A file capture wrote, to be read a member at a time.
    Members(MemberText),
}

/// The most text a member may state for the member-by-member read: capture writes 2 MiB
/// ([`steptrace_formats::gzip_members::PIECE`]); each parse thread holds a member's text, so a
/// stated size is not taken on trust (a few bytes of file could ask for 4 GiB a thread).
const MEMBER_MAX_TEXT: usize = 64 << 20;

/// [`read_expecting`], but a single-stream gzip file (torch's `.json.gz`) is inflated on a
/// thread of its own while the caller reads what has arrived; its first bytes are checked
/// against `expect` before this returns. Where that inflate ends in [`Ended::Elsewhere`], the
/// caller reads the file with [`read_expecting`], which says what is wrong with it.
pub(crate) fn read_arriving(path: &Path, expect: Expect) -> Result<Arrival, Error> {
    let raw = open(path).map_err(FileError::at(path))?;
    let file_len = raw.len() as u64;
    let members = if is_gzip(&raw) {
        steptrace_formats::gzip_members::members(&raw)
    } else {
        None
    };
    let single = is_gzip(&raw) && members.is_none();
    // A file capture wrote, whole: read a member at a time once its first bytes are what they
    // should be. A file cut inside a member is read whole, which yields what it holds; so is
    // one whose members state more than a member can hold, or more text than the memory
    // available (a piece redone over a long element may need all of it), where the whole
    // read says what is wrong before inflating.
    let members = members.filter(|(m, cut)| {
        let total: u64 = m.iter().map(|m| m.inflated as u64).sum();
        !cut && m.iter().all(|m| m.inflated <= MEMBER_MAX_TEXT)
            && memory_available().is_none_or(|a| total <= a)
    });
    let raw = match members {
        Some((members, _)) => match MemberText::new(raw, members) {
            Ok(mut text) => {
                let total = text.total();
                let Some(head) = text.prefix(INFLATE_CHECK_BYTES) else {
                    // A member that does not inflate: the usual reading says why.
                    return read_expecting(path, expect).map(Arrival::Whole);
                };
                let whole = head.len() >= total;
                if let Some(why) =
                    expect.refuse(&head[..head.len().min(INFLATE_CHECK_BYTES)], whole)
                {
                    return Err(Error::Format {
                        path: path.to_path_buf(),
                        what: why.to_owned(),
                    });
                }
                return Ok(Arrival::Members(text));
            }
            Err(raw) => raw,
        },
        _ => raw,
    };
    let len = stated_size(&raw).filter(|&l| {
        single && memory_available().is_none_or(|m| l as u64 <= m) && l >= INFLATE_CHECK_BYTES
    });
    let Some(len) = len.filter(|_| inflating::header_len(&raw).is_some()) else {
        return read_opened(path, raw, expect).map(Arrival::Whole);
    };
    let Some(mut text) = Inflating::start(raw, len) else {
        return read_expecting(path, expect).map(Arrival::Whole);
    };
    let head = super::json_scan::Prefix::prefix(&mut text, INFLATE_CHECK_BYTES);
    if head.len() < INFLATE_CHECK_BYTES {
        // It stopped early: the usual reading names what is wrong.
        drop(text);
        return read_expecting(path, expect).map(Arrival::Whole);
    }
    if let Some(why) = expect.refuse(&head[..INFLATE_CHECK_BYTES], false) {
        return Err(Error::Format {
            path: path.to_path_buf(),
            what: why.to_owned(),
        });
    }
    Ok(Arrival::Inflating(text, file_len))
}

/// [`read_expecting`] of a file already opened.
fn read_opened(path: &Path, raw: Bytes, expect: Expect) -> Result<Source, Error> {
    let format = |what: String| Error::Format {
        path: path.to_path_buf(),
        what,
    };
    let file_len = raw.len() as u64;
    if is_gzip(&raw) {
        let (bytes, truncated_gzip) =
            inflate(&raw, expect, memory_available()).map_err(|e| format(e.to_string()))?;
        if bytes.is_empty() && truncated_gzip {
            return Err(format("gzip stream ends before any data".into()));
        }
        Ok(Source {
            bytes: Bytes::Owned(bytes),
            file_len,
            gzipped: true,
            truncated_gzip,
        })
    } else {
        // A plain file costs nothing more to read whole: its parser names what is wrong;
        // a pickle's opcodes would name a JSON file's `{` badly, so that is said here.
        if expect == Expect::Pickle && raw.first() == Some(&b'{') {
            if let Some(why) = expect.refuse(&raw[..1], true) {
                return Err(format(why.to_owned()));
            }
        }
        Ok(Source {
            bytes: raw,
            file_len,
            gzipped: false,
            truncated_gzip: false,
        })
    }
}

/// Bytes of memory the system can still give (Linux's `MemAvailable`); `None` elsewhere.
fn memory_available() -> Option<u64> {
    let m = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = m.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb.saturating_mul(1024))
}

/// Why a gzip stream was not inflated.
#[derive(Debug)]
enum InflateError {
    /// Its first bytes cannot be what was expected.
    NotExpected(&'static str),
    /// It inflates past the limit.
    TooLarge(u64),
    /// Memory could not be had for the next piece.
    OutOfMemory(usize),
    /// Deflate data or a member's check (CRC, size) is wrong.
    Corrupt(String),
}

impl std::fmt::Display for InflateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InflateError::NotExpected(why) => write!(f, "{why}"),
            InflateError::TooLarge(limit) => write!(
                f,
                "gzip stream inflates past the {:.1} GiB of memory available",
                *limit as f64 / (1u64 << 30) as f64
            ),
            InflateError::OutOfMemory(at) => {
                write!(f, "out of memory while inflating (after {at} bytes)")
            }
            InflateError::Corrupt(e) => write!(f, "corrupt gzip stream: {e}"),
        }
    }
}

/// A file's bytes as they are on disk (mapped where it can be), not inflated.
pub fn read_raw(path: &Path) -> std::io::Result<Bytes> {
    open(path)
}

/// The decompressed text of `path` as a stream, for a second pass that should not hold the
/// whole text (the annotated trace): the file itself, or its gzip members inflated as read.
pub fn open_stream(path: &Path) -> std::io::Result<Box<dyn Read + Send>> {
    open_stream_gz(path).map(|(r, _)| r)
}

/// [`open_stream`], and whether the file is gzip.
fn open_stream_gz(path: &Path) -> std::io::Result<(Box<dyn Read + Send>, bool)> {
    regular_file(path)?;
    // One open file for the whole: a capture-form file is mapped from it, any other read.
    let file = std::fs::File::open(path)?;
    let mut head = [0u8; 2];
    let n = (&file).read(&mut head)?;
    let gz = is_gzip(&head[..n]);
    if gz {
        // A file capture wrote: its members inflated a batch at a time on all threads.
        let raw = bytes_of(&file)?;
        if let Some((members, _)) = steptrace_formats::gzip_members::members(&raw) {
            let r = MembersReader {
                raw,
                members,
                next: 0,
                ready: std::collections::VecDeque::new(),
                at: 0,
            };
            return Ok((Box::new(r), true));
        }
    }
    (&file).seek(std::io::SeekFrom::Start(0))?;
    let file = std::io::BufReader::with_capacity(1 << 16, file);
    Ok(if gz {
        (Box::new(PaddedGz::new(file)), true)
    } else {
        (Box::new(file), false)
    })
}

/// A pickle's stream (inflated when gzip), for a reader that never needs the whole text, and
/// whether the file is gzip. A JSON file's `{` is refused at once (a trace or a manifest given
/// for a snapshot); any other first byte is the pickle reader's to name (an opcode that would
/// run code: GLOBAL), and it reads no further than it goes.
pub fn open_pickle_stream(path: &Path) -> Result<(Box<dyn Read + Send>, bool), Error> {
    let format = |what: &str| Error::Format {
        path: path.to_path_buf(),
        what: what.to_owned(),
    };
    let (stream, gz) = open_stream_gz(path).map_err(FileError::at(path))?;
    let mut stream = std::io::BufReader::new(stream);
    let head = stream.fill_buf().map_err(|e| {
        if gz {
            format(&format!("corrupt gzip stream: {e}"))
        } else {
            Error::from(FileError::at(path)(e))
        }
    })?;
    if head.is_empty() && gz {
        return Err(format("gzip stream ends before any data"));
    }
    if head.first() == Some(&b'{') {
        if let Some(why) = Expect::Pickle.refuse(&head[..1], false) {
            return Err(format(why));
        }
    }
    if !gz {
        // The pickle's reader reads a plain file on a thread of its own already.
        return Ok((Box::new(stream), gz));
    }
    // Inflated beside the pickle's reader and the thread that decodes ahead of it.
    let ahead = read_ahead::ReadAhead::new(Box::new(stream)).map_err(FileError::at(path))?;
    Ok((Box::new(ahead), gz))
}

/// The first byte of a file, after inflating when gzip (the first deflate block only: a
/// file capture wrote in members is not mapped and its first member inflated whole, as
/// [`open_stream`] would); `None` for an empty one.
pub fn first_byte(path: &Path) -> std::io::Result<Option<u8>> {
    regular_file(path)?;
    let mut file = std::io::BufReader::new(std::fs::File::open(path)?);
    let gz = is_gzip(file.fill_buf()?);
    let mut b = [0u8; 1];
    let n = if gz {
        flate2::bufread::MultiGzDecoder::new(file).read(&mut b)?
    } else {
        file.read(&mut b)?
    };
    Ok((n == 1).then_some(b[0]))
}

/// The inflated text of a file of [`steptrace_formats::gzip_members`], read in order while
/// the members are inflated a batch at a time on all threads: at most a batch (two members a
/// thread; the first batch one member) is held, not the whole text. A member that does not inflate is an error to the
/// reader; a file cut inside a member ends after the whole ones.
struct MembersReader {
    raw: Bytes,
    members: Vec<steptrace_formats::gzip_members::Member>,
    next: usize,
    ready: std::collections::VecDeque<Vec<u8>>,
    at: usize,
}

impl Read for MembersReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        use rayon::prelude::*;
        while self.ready.front().is_none_or(|b| self.at >= b.len()) {
            if self.ready.pop_front().is_some() {
                self.at = 0;
                continue;
            }
            if self.next >= self.members.len() {
                return Ok(0);
            }
            // One member first (a reader after the header alone, as directory discovery
            // is, inflates 4 MiB, not a batch), then two a thread at a time.
            let batch = if self.next == 0 {
                1
            } else {
                (2 * rayon::current_num_threads()).max(1)
            };
            let end = (self.next + batch).min(self.members.len());
            let raw = &self.raw;
            let out: Vec<std::io::Result<Vec<u8>>> = self.members[self.next..end]
                .par_iter()
                .map(|m| {
                    let mut v = vec![0u8; m.inflated];
                    inflate_member(raw, m, &mut v).map_err(std::io::Error::other)?;
                    Ok(v)
                })
                .collect();
            for v in out {
                self.ready.push_back(v?);
            }
            self.next = end;
        }
        let b = &self.ready[0];
        let n = buf.len().min(b.len() - self.at);
        buf[..n].copy_from_slice(&b[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

/// A (possibly multi-member) gzip stream read as `inflate` and `gzip -d` read it: zero bytes
/// after a member are padding and end the stream (flate2's `MultiGzDecoder` took them for a
/// member and failed with "invalid gzip header"), anything else there is the next member.
pub struct PaddedGz<R: std::io::BufRead> {
    dec: Option<flate2::bufread::GzDecoder<R>>,
}

impl<R: std::io::BufRead> PaddedGz<R> {
    /// Reads the gzip stream `r` holds.
    pub fn new(r: R) -> Self {
        PaddedGz {
            dec: Some(flate2::bufread::GzDecoder::new(r)),
        }
    }
}

impl<R: std::io::BufRead> Read for PaddedGz<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            let Some(dec) = self.dec.as_mut() else {
                return Ok(0);
            };
            let n = dec.read(buf)?;
            if n > 0 || buf.is_empty() {
                return Ok(n);
            }
            // The member ended: padding, the end, or the next member.
            let Some(mut r) = self.dec.take().map(flate2::bufread::GzDecoder::into_inner) else {
                return Ok(0);
            };
            loop {
                let avail = r.fill_buf()?;
                if avail.is_empty() {
                    return Ok(0);
                }
                if avail[0] != 0 {
                    break;
                }
                let zeros = avail.iter().take_while(|&&b| b == 0).count();
                let all = zeros == avail.len();
                r.consume(zeros);
                if !all {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        "data after the zero padding that ends the gzip stream",
                    ));
                }
            }
            self.dec = Some(flate2::bufread::GzDecoder::new(r));
        }
    }
}

/// Inflates a (possibly multi-member) gzip stream. An unexpected end of stream is not an error:
/// the bytes decoded so far are returned with `true`, so a trace written by a killed process
/// still yields its complete events. A stream that ends with input left over, or whose member
/// check fails, is corrupt; running out of memory is said as such (both used to
/// read as a cut stream). The first bytes are checked against `expect`, and inflating stops
/// past `limit` bytes.
fn inflate(
    raw: &[u8],
    expect: Expect,
    limit: Option<u64>,
) -> Result<(Vec<u8>, bool), InflateError> {
    const PIECE: usize = 1 << 20;
    // A file capture wrote: its members say where they are and what they inflate to.
    if let Some((members, cut)) = steptrace_formats::gzip_members::members(raw) {
        let mut out = inflate_members(raw, &members, expect, limit)?;
        if cut {
            // The member the file ends in: what of it inflates (a writer killed mid-file).
            let end = members.last().map_or(0, |m| m.offset + m.len);
            if let Ok((tail, _)) = inflate(&raw[end..], Expect::Any, limit) {
                out.extend_from_slice(&tail);
            }
        }
        return Ok((out, cut));
    }
    if let Some(out) = inflate_whole(raw, expect, limit)? {
        return Ok((out, false));
    }
    let hint = inflated_size_hint(raw).min(limit.map_or(usize::MAX, |l| l as usize));
    let mut out: Vec<u8> = Vec::new();
    out.try_reserve_exact(hint.max(PIECE))
        .map_err(|_| InflateError::OutOfMemory(0))?;
    let mut checked = expect == Expect::Any;
    let mut rest: &[u8] = raw;
    // One member at a time, so that what follows the last can be seen: zero bytes there are
    // padding (`gzip -d` ignores them; block devices and some writers add them), anything else
    // is the next member.
    loop {
        // Over a slice, the decoder's reader is what it has not consumed yet.
        let mut dec = flate2::bufread::GzDecoder::new(rest);
        let member_start = out.len();
        loop {
            if out.capacity() - out.len() < PIECE {
                out.try_reserve(PIECE.max(out.len() / 2))
                    .map_err(|_| InflateError::OutOfMemory(out.len()))?;
            }
            // read_to_end fills the spare capacity without zeroing it first and, on an error,
            // keeps what it appended: the readable prefix of a cut stream. The spare room is
            // at least a piece and `take` stops it there, so it never grows the buffer itself.
            let n = match (&mut dec).take(PIECE as u64).read_to_end(&mut out) {
                Ok(n) => n,
                Err(e) => {
                    let text = e.to_string();
                    // A member's trailer check failing, or deflate data that stops making
                    // sense with input left, is corruption; running out of input is a cut.
                    let check = text.contains("checksum") || text.contains("matching size");
                    return if e.kind() == std::io::ErrorKind::OutOfMemory {
                        Err(InflateError::OutOfMemory(out.len()))
                    } else if e.kind() == std::io::ErrorKind::UnexpectedEof
                        || (!check && dec.get_ref().is_empty())
                    {
                        Ok((out, true))
                    } else {
                        let consumed = rest.len() - dec.get_ref().len();
                        let trailer = consumed.checked_sub(8).map(|at| &rest[at..consumed]);
                        Err(InflateError::Corrupt(
                            trailer
                                .and_then(|t| trailer_fault(&out[member_start..], t))
                                .unwrap_or(text),
                        ))
                    };
                }
            };
            if !checked && out.len() >= INFLATE_CHECK_BYTES {
                if let Some(why) = expect.refuse(&out[..INFLATE_CHECK_BYTES], false) {
                    return Err(InflateError::NotExpected(why));
                }
                checked = true;
            }
            if n == 0 {
                break;
            }
            if let Some(l) = limit.filter(|&l| out.len() as u64 > l) {
                return Err(InflateError::TooLarge(l));
            }
        }
        rest = dec.into_inner();
        if rest.iter().all(|&b| b == 0) {
            if !checked {
                if let Some(why) = expect.refuse(&out, true) {
                    return Err(InflateError::NotExpected(why));
                }
            }
            return Ok((out, false));
        }
    }
}

/// Which check of a member's trailer (CRC-32, then ISIZE: the size mod 2^32) fails for the
/// text it inflated to, said as `gzip -t` says it; `None` where both hold. flate2 reports
/// either as "does not have a matching checksum".
fn trailer_fault(inflated: &[u8], trailer: &[u8]) -> Option<String> {
    let word = |b: &[u8]| u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    let (crc, size) = (word(&trailer[..4]), word(&trailer[4..8]));
    if crc32fast::hash(inflated) != crc {
        return Some("invalid checksum (CRC-32) in a member's trailer".into());
    }
    let len = inflated.len() as u64;
    (len as u32 != size).then(|| {
        format!(
            "length error: a member inflates to {len} bytes, its trailer states {size} (mod 2^32)"
        )
    })
}

/// The usual gzip trace (torch's `.json.gz`: one member, nothing after it but zero padding)
/// inflated in one call of libdeflate into a buffer of the size its trailer states (ISIZE,
/// exact for a member under 4 GiB): 1.5-1.7x zlib-rs's streaming inflate on a 255 MB trace
/// (docs/performance.md). `None` for anything else (several members, a cut stream, a stated
/// size that is wrong or past `limit`), which the streaming inflate then reads as before; the
/// first bytes are checked against `expect` before the whole is inflated.
fn inflate_whole(
    raw: &[u8],
    expect: Expect,
    limit: Option<u64>,
) -> Result<Option<Vec<u8>>, InflateError> {
    let Some(stated) = stated_size(raw) else {
        return Ok(None);
    };
    if limit.is_some_and(|l| stated as u64 > l) {
        return Ok(None);
    }
    if expect != Expect::Any {
        let mut head = Vec::with_capacity(INFLATE_CHECK_BYTES);
        let _ = flate2::bufread::GzDecoder::new(raw)
            .take(INFLATE_CHECK_BYTES as u64)
            .read_to_end(&mut head);
        if let Some(why) = expect.refuse(&head, head.len() < INFLATE_CHECK_BYTES) {
            return Err(InflateError::NotExpected(why));
        }
    }
    let Some(mut out) = zeroed(stated) else {
        return Err(InflateError::OutOfMemory(0));
    };
    let Some(used) = libdeflate_gzip(raw, &mut out) else {
        return Ok(None);
    };
    // Only zero bytes may follow the member (padding, as `gzip -d` takes it); another member
    // is the streaming inflate's.
    Ok(raw[used..].iter().all(|&b| b == 0).then_some(out))
}

/// One gzip member at the start of `raw` inflated into `out`, which it must fill exactly:
/// the input bytes it used, or `None` where it does not inflate so (a bad or cut stream, a
/// different size), CRC-32 and size checked by libdeflate.
fn libdeflate_gzip(raw: &[u8], out: &mut [u8]) -> Option<usize> {
    use libdeflate_sys as ld;
    // SAFETY: libdeflate_alloc_decompressor takes no arguments and returns an owned
    // decompressor or null, checked here.
    let d = unsafe { ld::libdeflate_alloc_decompressor() };
    if d.is_null() {
        return None;
    }
    let (mut used, mut written) = (0usize, 0usize);
    // SAFETY: `d` is a live decompressor; `raw` is readable for `raw.len()` bytes and `out`
    // writable for `out.len()` bytes, and libdeflate reads and writes within those lengths;
    // `used` and `written` are valid for writes of a size_t each.
    let r = unsafe {
        ld::libdeflate_gzip_decompress_ex(
            d,
            raw.as_ptr().cast(),
            raw.len(),
            out.as_mut_ptr().cast(),
            out.len(),
            &mut used,
            &mut written,
        )
    };
    // SAFETY: `d` came from libdeflate_alloc_decompressor and is freed once, here.
    unsafe { ld::libdeflate_free_decompressor(d) };
    (r == ld::libdeflate_result_LIBDEFLATE_SUCCESS && written == out.len()).then_some(used)
}

/// Inflates the members of a file capture wrote ([`steptrace_formats::gzip_members`]) on every
/// core, each into its own part of one buffer sized from their ISIZE fields; each member's
/// CRC-32 and size are checked.
fn inflate_members(
    raw: &[u8],
    members: &[steptrace_formats::gzip_members::Member],
    expect: Expect,
    limit: Option<u64>,
) -> Result<Vec<u8>, InflateError> {
    use rayon::prelude::*;
    let total: usize = members.iter().map(|m| m.inflated).sum();
    if let Some(l) = limit.filter(|&l| total as u64 > l) {
        return Err(InflateError::TooLarge(l));
    }
    // The first member first: a file that is not what was expected is refused before the
    // rest is inflated.
    let mut out = zeroed(total).ok_or(InflateError::OutOfMemory(0))?;
    let mut parts: Vec<(&steptrace_formats::gzip_members::Member, &mut [u8])> =
        Vec::with_capacity(members.len());
    let mut rest = &mut out[..];
    for m in members {
        let (part, tail) = rest.split_at_mut(m.inflated);
        parts.push((m, part));
        rest = tail;
    }
    let one = |(m, part): &mut (&steptrace_formats::gzip_members::Member, &mut [u8])| {
        inflate_member(raw, m, part).map_err(InflateError::Corrupt)
    };
    let only = parts.len() == 1;
    if let Some(first) = parts.first_mut() {
        one(first)?;
        let head = &first.1[..first.1.len().min(INFLATE_CHECK_BYTES)];
        if let Some(why) = expect.refuse(head, only) {
            return Err(InflateError::NotExpected(why));
        }
    }
    parts.par_iter_mut().skip(1).try_for_each(one)?;
    Ok(out)
}

/// One member of a file capture wrote inflated into `part` (its stated size), CRC-32 and size
/// checked: libdeflate first (1.5-1.7x zlib-rs here), and where it refuses, zlib-rs again to
/// say what is wrong. The one inflate of a member, for the whole read and the streamed one.
fn inflate_member(
    raw: &[u8],
    m: &steptrace_formats::gzip_members::Member,
    part: &mut [u8],
) -> Result<(), String> {
    if libdeflate_gzip(&raw[m.offset..m.offset + m.len], part) == Some(m.len) {
        return Ok(());
    }
    let mut d = flate2::Decompress::new(false);
    let status = d
        .decompress(m.deflate(raw), part, flate2::FlushDecompress::Finish)
        .map_err(|e| e.to_string())?;
    if status != flate2::Status::StreamEnd || d.total_out() as usize != m.inflated {
        return Err(format!(
            "gzip member at byte {} does not inflate to its stated size",
            m.offset
        ));
    }
    // The deflate data must end where the trailer begins: bytes between them (another member
    // hidden behind a forged trailer) are read by `gzip -d` and Python as more text, so taking
    // the member as what it inflates to would analyse other content than they see.
    if d.total_in() as usize != m.deflate(raw).len() {
        return Err(format!(
            "gzip member at byte {}: its deflate data ends {} bytes before its trailer",
            m.offset,
            m.deflate(raw).len() - d.total_in() as usize
        ));
    }
    if crc32fast::hash(part) != m.crc32(raw) {
        return Err(format!(
            "gzip member at byte {}: invalid checksum",
            m.offset
        ));
    }
    Ok(())
}

/// `len` zero bytes, or `None` where memory cannot be had. Asked of the allocator as zeroed
/// memory: a buffer this large is fresh pages from the kernel, zero already, so nothing is
/// written until the inflate threads fill it (their page faults spread over them). Filling a
/// reserved `Vec` with `resize` wrote every byte on one thread before the parallel inflate
/// began.
fn zeroed(len: usize) -> Option<Vec<u8>> {
    if len == 0 {
        return Some(Vec::new());
    }
    let layout = std::alloc::Layout::array::<u8>(len).ok()?;
    // SAFETY: `layout` has a non-zero size (checked above).
    let p = unsafe { std::alloc::alloc_zeroed(layout) };
    if p.is_null() {
        return None;
    }
    // SAFETY: `p` comes from the global allocator with the layout a `Vec<u8>` of capacity
    // `len` uses (size `len`, alignment 1), and all `len` bytes are initialised (zero).
    Some(unsafe { Vec::from_raw_parts(p, len, len) })
}

/// The buffer to reserve for the inflated bytes. A gzip member ends with its uncompressed size
/// mod 2^32 (ISIZE); for the usual single-member trace under 4 GiB that is exact, and it saves
/// regrowing (and copying) a buffer of hundreds of MB. A truncated or multi-member file can
/// make the field anything, so it is used only when plausible; otherwise traces compress about
/// 10:1.
fn inflated_size_hint(raw: &[u8]) -> usize {
    // One extra byte so read_to_end's final zero-length probe does not regrow the buffer.
    let want = stated_size(raw).map_or(raw.len().saturating_mul(8), |s| s + 1);
    want.min(1 << 34)
}

/// The inflated size the file's last four bytes state (a gzip member's ISIZE), where it is one
/// a trace can have (traces compress 5-30:1): otherwise they are some other layout's bytes.
fn stated_size(raw: &[u8]) -> Option<usize> {
    let tail = raw.get(raw.len().checked_sub(4)?..)?;
    let stated = u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]) as usize;
    (stated >= raw.len() / 2 && stated <= raw.len().saturating_mul(64)).then_some(stated)
}

/// Drops `v` on a helper thread: unmapping a large file or freeing the tables of a large trace
/// is kernel and allocator work that nothing downstream waits for. If no thread can be started,
/// `v` is dropped here.
pub fn drop_aside<T: Send + 'static>(v: T) {
    let _ = std::thread::Builder::new()
        .name("steptrace-drop".into())
        .spawn(move || drop(v));
}

/// `data` as one gzip stream at zlib `level`, as torch writes a `.json.gz` (tests of every
/// module that reads one).
#[cfg(test)]
pub(crate) fn gzip_stream(data: &[u8], level: u32) -> Vec<u8> {
    use std::io::Write;
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(level));
    enc.write_all(data).expect("in memory");
    enc.finish().expect("in memory")
}

#[cfg(test)]
mod tests;
