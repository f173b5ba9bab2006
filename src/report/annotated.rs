//! The annotated trace: the original Chrome trace with steptrace's findings added as tracks, for
//! Perfetto UI, chrome://tracing and TensorBoard's profiler (`*.pt.trace.json.gz`).
//!
//! Original events are copied byte for byte (or, with `compact`, only the operator, kernel and
//! annotation events, to stay under chrome://tracing's 256 MB); added under process
//! `steptrace` (pid 999999): a counter track of memory by category after every allocator event
//! (its parts add up to `Total Allocated`), a track of nodes with rank, phase and category,
//! and each activation's lifetime as an async slice.

use crate::file_error::FileError;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use super::gzip::gzip_parallel;
use super::{io, Error};
use crate::analysis::memory::{Category, CATEGORIES};
use crate::analysis::Analysis;
use crate::model::kineto::EventsSpan;
use crate::model::Trace;
use crate::read::{json_scan, source};

/// Process id of the added tracks.
pub const PID: i64 = 999_999;

/// An event's `ph` and `cat` as their JSON text (a string's quotes included): all the compact
/// copy needs to choose, read without the trace reader's tables.
#[derive(serde::Deserialize)]
struct Kind<'a> {
    #[serde(default, borrow)]
    ph: Option<&'a serde_json::value::RawValue>,
    #[serde(default, borrow)]
    cat: Option<&'a serde_json::value::RawValue>,
}

fn keep_compact(ev: &[u8]) -> bool {
    let Ok(e) = serde_json::from_slice::<Kind<'_>>(ev) else {
        return false;
    };
    if e.ph.map(|p| p.get()) == Some("\"M\"") {
        return true;
    }
    matches!(
        e.cat.map(|c| c.get()),
        Some(
            "\"cpu_op\""
                | "\"user_annotation\""
                | "\"gpu_user_annotation\""
                | "\"kernel\""
                | "\"gpu_memcpy\""
                | "\"gpu_memset\""
                | "\"Trace\""
        )
    )
}

/// Events of one kind, formatted in blocks on all threads and joined in item order (the text
/// does not depend on the threads). Every event is followed by `,\n`; the caller trims the last.
fn events_par<T: Sync>(items: &[T], f: impl Fn(&mut Vec<u8>, &T) + Sync) -> Vec<Vec<u8>> {
    use rayon::prelude::*;
    items
        .par_chunks(4096)
        .map(|c| {
            let mut b = Vec::with_capacity(c.len() * 160);
            for x in c {
                f(&mut b, x);
                b.extend_from_slice(b",\n");
            }
            b
        })
        .collect()
}

fn num(b: &mut Vec<u8>, v: impl itoa::Integer) {
    b.extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
}

fn us_b(b: &mut Vec<u8>, ns: i64) {
    super::us_text(ns, b);
}

fn str_b(b: &mut Vec<u8>, s: &str) {
    // serde_json's escaping; writing into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *b, s);
}

/// The added events, as JSON text: events separated by `,\n` (none after the last).
pub fn extra_events(t: &Trace, a: &Analysis) -> Vec<u8> {
    extra_blocks(t, a).concat()
}

/// [`extra_events`] in the pieces they were formatted in, on all threads: the plain annotated
/// trace writes them as they are (27 MB of added text on the 255 MB benchmark trace, which
/// joining, growing and copying into one buffer went over four times).
fn extra_blocks(t: &Trace, a: &Analysis) -> Vec<Vec<u8>> {
    let mut v: Vec<u8> = Vec::new();
    let _ = writeln!(
        v,
        r#"{{"ph":"M","name":"process_name","pid":{PID},"tid":0,"args":{{"name":"steptrace"}}}},"#
    );
    for (tid, name) in [
        (1, "nodes (main thread)"),
        (2, "nodes (other threads)"),
        (3, "activations"),
    ] {
        let _ = writeln!(
            v,
            r#"{{"ph":"M","name":"thread_name","pid":{PID},"tid":{tid},"args":{{"name":"{name}"}}}},"#
        );
    }
    let pid = itoa::Buffer::new().format(PID).to_owned();
    let mut blocks = vec![v];
    blocks.extend(memory_counter_events(a, &pid));
    blocks.extend(node_events(t, a, &pid));
    blocks.extend(activation_events(a, &pid));
    // The last event's separator (the first block, the process's names, is never empty).
    if let Some(last) = blocks.iter_mut().rev().find(|b| !b.is_empty()) {
        last.truncate(last.len() - 2);
    }
    blocks
}

/// The memory-by-category counter, one event per timeline row.
fn memory_counter_events(a: &Analysis, pid: &str) -> Vec<Vec<u8>> {
    events_par(&a.timeline, |b, r| {
        b.extend_from_slice(br#"{"ph":"C","name":"memory by category","pid":"#);
        b.extend_from_slice(pid.as_bytes());
        b.extend_from_slice(br#","tid":0,"ts":"#);
        us_b(b, r.ts);
        b.extend_from_slice(br#","args":{"#);
        for (i, c) in CATEGORIES.iter().enumerate() {
            if i > 0 {
                b.push(b',');
            }
            b.push(b'"');
            b.extend_from_slice(c.key().as_bytes());
            b.extend_from_slice(b"\":");
            num(b, r.breakdown[i]);
        }
        b.extend_from_slice(b"}}");
    })
}

/// One slice per node, on the main thread's track or the other threads'.
fn node_events(t: &Trace, a: &Analysis, pid: &str) -> Vec<Vec<u8>> {
    let rank_of: rustc_hash::FxHashMap<&str, &crate::analysis::NodeStat> = a
        .node_stats
        .iter()
        .map(|s| (s.node_name.as_str(), s))
        .collect();
    events_par(&a.step.nodes, |b, n| {
        let op = t.op(n.op);
        let tid = if Some(op.thread) == t.main_thread {
            1
        } else {
            2
        };
        let st = rank_of.get(n.name.as_str());
        b.extend_from_slice(br#"{"ph":"X","cat":"steptrace_node","name":"#);
        str_b(b, &n.name);
        b.extend_from_slice(br#","pid":"#);
        b.extend_from_slice(pid.as_bytes());
        b.extend_from_slice(br#","tid":"#);
        num(b, tid);
        b.extend_from_slice(br#","ts":"#);
        us_b(b, op.start);
        b.extend_from_slice(br#","dur":"#);
        us_b(b, op.dur);
        b.extend_from_slice(br#","args":{"rank":"#);
        num(b, st.map_or(n.rank, |s| s.rank));
        b.extend_from_slice(br#","phase":""#);
        b.extend_from_slice(n.phase.as_str().as_bytes());
        b.extend_from_slice(br#"","type":""#);
        b.extend_from_slice(st.map_or("OTHER", |s| s.node_type.as_str()).as_bytes());
        b.extend_from_slice(br#"","iteration":"#);
        num(b, n.iteration);
        b.extend_from_slice(br#","gpu_time_us":"#);
        us_b(b, n.gpu_time);
        b.extend_from_slice(br#","kernels":"#);
        num(b, n.kernels);
        b.extend_from_slice(b"}}");
    })
}

/// Activation slices: named after their producer, numbered per producer in block order; ids
/// count the slices from 1.
fn activation_events(a: &Analysis, pid: &str) -> Vec<Vec<u8>> {
    let mut per_producer: rustc_hash::FxHashMap<usize, u32> = rustc_hash::FxHashMap::default();
    let acts: Vec<(usize, &crate::analysis::memory::Block, u32, usize)> = a
        .memory
        .blocks
        .iter()
        .filter(|b| b.category == Category::Activation)
        .filter_map(|b| {
            let (Some(p), Some(_)) = (b.producer, b.free) else {
                return None;
            };
            let k = per_producer.entry(p).or_insert(0);
            *k += 1;
            Some((b, *k - 1, p))
        })
        .enumerate()
        .map(|(i, (b, k, p))| (i + 1, b, k, p))
        .collect();
    events_par(&acts, |b, &(id, blk, k, p)| {
        let mut name = Vec::new();
        str_b(&mut name, &format!("{}/act{}", a.step.nodes[p].name, k));
        for (ph, ts) in [("b", blk.alloc), ("e", blk.free.unwrap_or(blk.alloc))] {
            if ph == "e" {
                b.extend_from_slice(b",\n");
            }
            b.extend_from_slice(br#"{"ph":""#);
            b.extend_from_slice(ph.as_bytes());
            b.extend_from_slice(br#"","cat":"activation","name":"#);
            b.extend_from_slice(&name);
            b.extend_from_slice(br#","id":"#);
            num(b, id);
            b.extend_from_slice(br#","pid":"#);
            b.extend_from_slice(pid.as_bytes());
            b.extend_from_slice(br#","tid":3,"ts":"#);
            us_b(b, ts);
            if ph == "b" {
                b.extend_from_slice(br#","args":{"bytes":"#);
                num(b, blk.size);
                b.push(b'}');
            }
            b.push(b'}');
        }
    })
}

/// Name of the annotated trace for this input: it takes the input's form, gzip or plain.
pub fn file_name(t: &Trace) -> &'static str {
    file_name_for(t.kineto.gzipped)
}

/// [`file_name`] for an input that is (or is not) gzip.
pub fn file_name_for(gzipped: bool) -> &'static str {
    if gzipped {
        "annotated.pt.trace.json.gz"
    } else {
        "annotated.pt.trace.json"
    }
}

/// The original text before the added events, being copied into the output file (under its
/// part name, `super::create`) by a thread of its own. The copy is the kernel's (`copy_file_range` on Linux: the bytes never
/// pass through this process, so it adds nothing to its memory).
#[derive(Debug)]
pub struct HeadCopy {
    dest: PathBuf,
    handle: std::thread::JoinHandle<Result<std::fs::File, Error>>,
}

impl HeadCopy {
    /// Starts copying the first `len` bytes of `src` into the output file `dest`; `reuse`:
    /// its part file is already there (the previous run's output) and is written over.
    pub(crate) fn start(src: &Path, dest: PathBuf, len: usize, reuse: bool) -> Option<HeadCopy> {
        let (src, to) = (src.to_path_buf(), dest.clone());
        let handle = std::thread::Builder::new()
            .name("steptrace-copy".into())
            .spawn(move || copy_head(&src, &to, len, reuse))
            .ok()?;
        Some(HeadCopy { dest, handle })
    }

    /// Waits for the copy; the file is positioned at its end.
    fn finish(self) -> Result<std::fs::File, Error> {
        let dest = self.dest;
        self.handle.join().unwrap_or_else(|_| {
            Err(Error::from(FileError::new(
                dest,
                std::io::Error::other("the copying thread panicked"),
            )))
        })
    }

    /// Waits for the copy and drops its file (the run did not complete).
    pub(crate) fn abandon(self) {
        let _ = self.handle.join();
    }
}

/// Copies the first `len` bytes of `src` into the output file `dest` (its part file): a new
/// one, or with `reuse` the part file there, written over from its start ([`write`] cuts it
/// to the length written).
fn copy_head(src: &Path, dest: &Path, len: usize, reuse: bool) -> Result<std::fs::File, Error> {
    let in_err = |source| Error::from(FileError::new(src, source));
    let mut s = std::fs::File::open(src).map_err(in_err)?;
    let reused = reuse
        .then(|| {
            std::fs::OpenOptions::new()
                .write(true)
                .open(super::out_dir::part_path(dest))
                .ok()
        })
        .flatten();
    let mut f = match reused {
        Some(f) => f,
        None => {
            let f = super::create(dest)?;
            reserve(&f, len);
            f
        }
    };
    let n = std::io::copy(&mut (&mut s).take(len as u64), &mut f).map_err(io(dest))?;
    if n != len as u64 {
        return Err(in_err(changed()));
    }
    Ok(f)
}

/// Reserves the file's first `len` bytes before the copy: ext4 then allocates its blocks in
/// one extent instead of one delayed allocation per page, which took a quarter of the copy's
/// kernel time (255 MB: 0.044 s against 0.060 s, `copy_file_range` alone). Only a hint: a file
/// system without `fallocate` copies as before.
#[cfg(target_os = "linux")]
fn reserve(f: &std::fs::File, len: usize) {
    use std::os::fd::AsRawFd;
    let Ok(len) = libc::off_t::try_from(len) else {
        return;
    };
    // SAFETY: `f` is an open file that outlives the call; fallocate reads no memory of ours.
    let _ = unsafe { libc::fallocate(f.as_raw_fd(), 0, 0, len) };
}

#[cfg(not(target_os = "linux"))]
fn reserve(_f: &std::fs::File, _len: usize) {}

fn changed() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::UnexpectedEof,
        "the trace changed while it was analysed",
    )
}

/// The text between the original events and what follows them: the added events, with a comma
/// before them when original events precede.
fn middle(span: EventsSpan, extras: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(extras.len() + 8);
    let _ = write_middle(&mut m, span, &[extras]);
    m
}

/// [`middle`] written out from the extras' pieces, not joined first.
fn write_middle<B: AsRef<[u8]>>(
    w: &mut impl Write,
    span: EventsSpan,
    extras: &[B],
) -> std::io::Result<()> {
    let (sep, close) = middle_ends(span, extras.iter().any(|b| !b.as_ref().is_empty()));
    w.write_all(sep)?;
    for b in extras {
        w.write_all(b.as_ref())?;
    }
    w.write_all(close)
}

/// What [`middle`] puts before and after the added events (`any`: whether there are some).
fn middle_ends(span: EventsSpan, any: bool) -> (&'static [u8], &'static [u8]) {
    let sep: &[u8] = if any && span.has_elements {
        b",\n"
    } else {
        b""
    };
    // A truncated trace: what followed is gone; close the array and the object.
    let close: &[u8] = if span.complete { b"" } else { b"\n]}\n" };
    (sep, close)
}

/// The compact text: the header, the kept events, the added ones and the rest of the document.
fn compact_text(buf: &[u8], path: &Path, extras: &[u8]) -> Result<Vec<u8>, Error> {
    let bad = |what: &str| {
        Error::from(FileError::new(
            path,
            std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_owned()),
        ))
    };
    let start = json_scan::find_top_level_key(buf, b"traceEvents")
        .ok()
        .flatten()
        .ok_or_else(|| bad("no traceEvents"))?
        .value_start;
    // One chunk per element gives every element's boundaries.
    let arr =
        json_scan::chunk_array(buf, start, 1).map_err(|_| bad("traceEvents is not an array"))?;
    let mut out = Vec::with_capacity(buf.len() / 2 + extras.len());
    out.extend_from_slice(&buf[..=start]);
    let mut first = true;
    for &(s, e) in &arr.chunks {
        let ev = &buf[s..e];
        if !keep_compact(ev) {
            continue;
        }
        if !first {
            out.extend_from_slice(b",\n");
        }
        first = false;
        out.extend_from_slice(ev);
    }
    let span = EventsSpan {
        insert_at: out.len(),
        has_elements: !first,
        complete: true,
    };
    out.extend_from_slice(&middle(span, extras));
    out.push(b']');
    match arr.end {
        Some(end) => out.extend_from_slice(&buf[end..]),
        None => out.extend_from_slice(b"}\n"),
    }
    Ok(out)
}

/// The input's text with the middle put in: `head_left` bytes of `inner`, then `mid`, then
/// (when `rest`) the rest of `inner`.
struct Spliced<R> {
    inner: R,
    head_left: u64,
    mid: Vec<u8>,
    mid_at: usize,
    rest: bool,
}

impl<R: Read> Read for Spliced<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        if self.head_left > 0 {
            let want = buf
                .len()
                .min(usize::try_from(self.head_left).unwrap_or(usize::MAX));
            let n = self.inner.read(&mut buf[..want])?;
            if n == 0 {
                return Err(changed());
            }
            self.head_left -= n as u64;
            return Ok(n);
        }
        if self.mid_at < self.mid.len() {
            let n = buf.len().min(self.mid.len() - self.mid_at);
            buf[..n].copy_from_slice(&self.mid[self.mid_at..self.mid_at + n]);
            self.mid_at += n;
            return Ok(n);
        }
        if self.rest {
            self.inner.read(buf)
        } else {
            Ok(0)
        }
    }
}

/// A gzip input in the members capture writes ([`steptrace_formats::gzip_members`]): its
/// members before the one where the added events go are copied as they are (no inflating, no
/// compressing), and only that member and those after it (a few MB: the events go in after
/// the last one) are inflated, spliced and compressed again, as members of the same form.
/// `None` for any other input.
fn splice_members(
    src: &Path,
    out: &mut impl Write,
    span: EventsSpan,
    extras: &[Vec<u8>],
) -> Option<std::io::Result<()>> {
    let raw = source::read_raw(src).ok()?;
    let (members, cut) = steptrace_formats::gzip_members::members(&raw)?;
    if cut {
        return None;
    }
    // The member holding the insertion point (the last, when it is the very end).
    let mut k = members.len() - 1;
    let mut inflated = 0usize;
    for (i, m) in members.iter().enumerate() {
        if inflated + m.inflated > span.insert_at {
            k = i;
            break;
        }
        inflated += m.inflated;
    }
    let before: usize = members[..k].iter().map(|m| m.inflated).sum();
    let mut tail = Vec::new();
    let from = members[k].offset;
    if let Err(e) = source::PaddedGz::new(&raw[from..]).read_to_end(&mut tail) {
        return Some(Err(e));
    }
    let at = span.insert_at.checked_sub(before)?.min(tail.len());
    Some((|| {
        out.write_all(&raw[..from])?;
        // The text compressed where it lies, not joined into a copy first (the added events
        // are tens of MB on a large trace): what `middle` writes, around the extras.
        let (sep, close) = middle_ends(span, extras.iter().any(|b| !b.is_empty()));
        let text: Vec<&[u8]> = [&tail[..at], sep]
            .into_iter()
            .chain(extras.iter().map(Vec::as_slice))
            .chain([close, &tail[at..]])
            .collect();
        let threads = rayon::current_num_threads();
        steptrace_formats::gzip_members::write_parts(&text, out, super::gzip::GZ_LEVEL, threads)
    })())
}

/// A single-stream gzip input (torch's `.json.gz`) whose ingest kept where its compressed
/// stream can be resumed ([`GzipResume`](crate::model::tables::kineto::GzipResume)): its
/// bytes before that deflate block are copied as they are, and only the text after (a block
/// or so) and the added events are compressed. `None` for any other input, or one that changed.
fn splice_stream(
    src: &Path,
    out: &mut impl Write,
    span: EventsSpan,
    extras: &[Vec<u8>],
    t: &Trace,
) -> Option<std::io::Result<()>> {
    let r = t.kineto.gzip_resume.as_ref()?;
    let at = span.insert_at.checked_sub(r.text_at)?;
    let tail = &r.tail;
    if at > tail.len() {
        return None;
    }
    let raw = source::read_raw(src).ok()?;
    // What `middle` writes, around the extras where they lie (27 MB on the benchmark trace,
    // not joined into copies first), then the input's text after the insertion point.
    let (sep, close) = middle_ends(span, extras.iter().any(|b| !b.is_empty()));
    let mid: Vec<&[u8]> = std::iter::once(sep)
        .chain(extras.iter().map(Vec::as_slice))
        .chain(std::iter::once(close))
        .collect();
    super::gzip::resume_stream(&raw, r, &tail[..at], &[&mid, &[&tail[at..]]], out)
}

/// Writes the annotated trace to `path` (see [`file_name`]). A plain trace is copied by the
/// kernel (`copy_file_range`: no pass through this process's memory) with the added events put
/// in at one point; a gzip trace is inflated as a stream and compressed on all threads, so
/// neither holds the input in memory.
///
/// `head`: the copy [`OutDir::start_annotated`](super::OutDir::start_annotated) began, if any.
pub fn write(
    path: &Path,
    t: &Trace,
    a: &Analysis,
    compact: bool,
    head: Option<HeadCopy>,
) -> Result<(), Error> {
    let src_path = &t.kineto.path;
    let in_err = |e: std::io::Error| Error::from(FileError::new(src_path, e));
    let span = t.kineto.events_span;
    if !compact && !t.kineto.gzipped {
        // The head is copied by the kernel while the added events are formatted.
        let (copied, extras) = rayon::join(
            || match head {
                Some(h) => h.finish(),
                None => copy_head(src_path, path, span.insert_at, false),
            },
            || extra_blocks(t, a),
        );
        let mut f = std::io::BufWriter::with_capacity(1 << 16, copied?);
        write_middle(&mut f, span, &extras).map_err(io(path))?;
        drop(extras);
        let f = f
            .into_inner()
            .map_err(|e| Error::from(FileError::new(path, e.into_error())))?;
        if span.complete {
            let mut src = std::fs::File::open(src_path).map_err(in_err)?;
            std::io::Seek::seek(&mut src, std::io::SeekFrom::Start(span.insert_at as u64))
                .map_err(in_err)?;
            std::io::copy(&mut src, &mut &f).map_err(io(path))?;
        }
        // A reused file may be longer than what was written into it.
        let end = std::io::Seek::stream_position(&mut &f).map_err(io(path))?;
        f.set_len(end).map_err(io(path))?;
        return Ok(());
    }
    if let Some(h) = head {
        h.abandon();
    }
    let blocks = extra_blocks(t, a);
    let mut f = std::io::BufWriter::with_capacity(1 << 16, super::create(path)?);
    if !compact && span.complete {
        if let Some(done) = splice_members(src_path, &mut f, span, &blocks) {
            done.map_err(io(path))?;
            return f.flush().map_err(io(path));
        }
        if let Some(done) = splice_stream(src_path, &mut f, span, &blocks, t) {
            done.map_err(io(path))?;
            return f.flush().map_err(io(path));
        }
    }
    let extras = blocks.concat();
    drop(blocks);
    if compact {
        let src = source::read(src_path).map_err(|e| {
            Error::from(FileError::new(
                src_path,
                std::io::Error::other(e.to_string()),
            ))
        })?;
        let text = compact_text(&src.bytes, src_path, &extras)?;
        drop(src);
        if t.kineto.gzipped {
            gzip_parallel(&text[..], &mut f).map_err(io(path))?;
        } else {
            f.write_all(&text).map_err(io(path))?;
        }
    } else {
        let input = source::open_stream(src_path).map_err(in_err)?;
        let spliced = Spliced {
            inner: input,
            head_left: span.insert_at as u64,
            mid: middle(span, &extras),
            mid_at: 0,
            rest: span.complete,
        };
        drop(extras);
        gzip_parallel(spliced, &mut f).map_err(io(path))?;
    }
    f.flush().map_err(io(path))
}

#[cfg(test)]
mod tests;
