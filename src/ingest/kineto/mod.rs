//! Kineto Chrome traces (`torch.profiler` `export_chrome_trace`, `tensorboard_trace_handler`,
//! libtorch `ProfilerResult::save`): the file is read once, `traceEvents` is cut into chunks at
//! event boundaries, and the chunks are parsed and converted on all threads into owned,
//! interned event tables. Chunks are merged in file order, so the tables do not depend on the
//! number of threads.

mod classify;
mod fast;
mod keys;
mod merge;
pub(crate) mod raw;
mod span;
mod time;

use self::classify::Partial;
use self::merge::merge;

pub use crate::model::tables::kineto::*;

use std::path::Path;

use self::raw::{RawEvent, RawHeader};
use super::json_scan;
use super::source;
use super::Error;
use crate::diagnostics::Diagnostics;
use crate::intern::Interner;

/// Bytes of `traceEvents` per parse task. Small enough that a 10 MB trace still spreads over
/// several threads, large enough that per-task overhead is noise (see docs/performance.md).
const CHUNK_BYTES: usize = 2 << 20;

/// Reads and parses a Kineto trace file (`.json` or gzip). A single-stream gzip file is parsed
/// as it inflates, piece by piece behind the inflate.
pub fn load(path: &Path, diag: &mut Diagnostics) -> Result<KinetoTrace, Error> {
    let whole = |src: source::Source, diag: &mut Diagnostics| {
        let mut t = from_bytes(path, src.bytes, src.truncated_gzip, diag)?;
        t.gzipped = src.gzipped;
        Ok(t)
    };
    let (text, file_len) = match source::read_arriving(path, source::Expect::JsonObject)? {
        source::Arrival::Whole(src) => return whole(src, diag),
        source::Arrival::Inflating(text, file_len) => (text, file_len),
        source::Arrival::Members(text) => {
            return match from_members(path, text, diag)? {
                Some(t) => Ok(t),
                // A member that does not inflate: read whole, which says what is wrong.
                None => whole(
                    source::read_expecting(path, source::Expect::JsonObject)?,
                    diag,
                ),
            };
        }
    };
    match from_stream(path, text, file_len, diag)? {
        Some(t) => Ok(t),
        // Not what that path reads (several members, a cut or corrupt stream): read whole,
        // which yields what a cut stream holds or says what is wrong.
        None => whole(
            source::read_expecting(path, source::Expect::JsonObject)?,
            diag,
        ),
    }
}

/// A single-stream gzip file (torch's `.json.gz`) parsed a window at a time as it inflates
/// ([`source::StreamText`]), its text never held whole: its tables are those of the same text
/// read whole. `None` where the stream does not inflate whole and checked, or where what is
/// read after the events array lies outside the text kept of its end
/// ([`source::KEEP_TAIL`]): the caller reads the file whole.
fn from_stream(
    path: &Path,
    mut text: source::StreamText,
    file_len: u64,
    diag: &mut Diagnostics,
) -> Result<Option<KinetoTrace>, Error> {
    let total = json_scan::Prefix::total(&text);
    let found = find_events(path, &mut text);
    let walked = found.as_ref().ok().map(|&arr_start| {
        let _ = json_scan::Prefix::prefix(&mut text, arr_start + (64 << 10));
        text.walk(arr_start, parse_piece)
    });
    let head = text.take_head();
    // Whatever the walk found, the stream is read to its end and checked first: a stream
    // that is not whole is the whole reading's to say.
    let source::Ended::Whole {
        blocks,
        tail_at,
        text: mut kept_text,
    } = source::Inflating::finish(text)
    else {
        return Ok(None);
    };
    let arr_start = found?;
    let walked = walked.expect("walked where found");
    let Some((partials, array, last_from)) = walked.map_err(|off| bad_array(path, off))? else {
        return Ok(None);
    };
    // The text `finish` reads: the header before the array (in the head) and everything from
    // the last piece and the insertion point on (in the tail).
    let head_len = head.len();
    let kept = |from: usize| from >= tail_at || tail_at <= head_len;
    let back_from = match array.end {
        Some(e) => e.saturating_sub(1),
        None => array.cut_at.unwrap_or(total),
    };
    if head.len() < arr_start.min(total) || head.len() > total || !kept(last_from.min(back_from)) {
        return Ok(None);
    }
    // Reading back from `back_from` over white space to the insertion point must end inside
    // what is kept.
    let blank = |c: &u8| matches!(c, b' ' | b'\n' | b'\r' | b'\t');
    if tail_at > head.len() && kept_text[tail_at..back_from.max(tail_at)].iter().all(blank) {
        return Ok(None);
    }
    kept_text[..head.len()].copy_from_slice(&head);
    drop(head);
    let Ok(bytes) = kept_text.make_read_only() else {
        return Ok(None);
    };
    let bytes = source::Bytes::Inflated(bytes);
    let blocks: Vec<source::BlockStart> = blocks.into_iter().filter(|b| kept(b.text_at)).collect();
    let mut t = finish(
        path,
        bytes,
        (arr_start, partials, array),
        Some((&blocks, file_len)),
        false,
        diag,
    )?;
    t.gzipped = true;
    Ok(Some(t))
}

/// The most text after a block start that the annotated trace's splice keeps (past it the
/// whole text is compressed again, as before).
const RESUME_TAIL_MAX: usize = 32 << 20;

/// What the annotated trace needs to splice into this single-stream gzip input (`blocks`
/// its deflate blocks' starts, `file_len` its size) given where its events go: the last block
/// start at or before that point, and the text after it.
fn gzip_resume(
    path: &Path,
    text: &[u8],
    (blocks, file_len): (&[source::BlockStart], u64),
    span: EventsSpan,
) -> Option<GzipResume> {
    let b = blocks.iter().rev().find(|b| b.text_at <= span.insert_at)?;
    let tail = text.get(b.text_at..)?;
    if !span.complete || tail.len() > RESUME_TAIL_MAX {
        return None;
    }
    // The trailer read now, so a file rewritten before the annotated trace is written is seen.
    let raw = source::read_raw(path).ok()?;
    let trailer: [u8; 8] = raw.get(raw.len().checked_sub(8)?..)?.try_into().ok()?;
    // A trailer followed by zero padding is not where the file ends: not spliced.
    if raw.len() as u64 != file_len || trailer[4..] != (text.len() as u32).to_le_bytes() {
        return None;
    }
    Some(GzipResume {
        file_len,
        trailer,
        bit: b.bit,
        text_at: b.text_at,
        crc: b.crc,
        tail: tail.to_vec(),
    })
}

/// Parses Kineto trace text already in memory.
pub fn from_bytes(
    path: &Path,
    buf: impl Into<source::Bytes>,
    gzip_cut: bool,
    diag: &mut Diagnostics,
) -> Result<KinetoTrace, Error> {
    from_bytes_chunked(path, buf.into(), gzip_cut, CHUNK_BYTES, diag)
}

/// [`from_bytes`] with a chosen parse-task size (tests and benchmarks vary it; the result must
/// not depend on it).
pub fn from_bytes_chunked(
    path: &Path,
    buf: impl Into<source::Bytes>,
    gzip_cut: bool,
    chunk_bytes: usize,
    diag: &mut Diagnostics,
) -> Result<KinetoTrace, Error> {
    let buf: source::Bytes = buf.into();
    // The piece's text is not read again, but by a piece redone after a wrong guess (rare)
    // and by the header's parse: their pages fault back in.
    let walked = walk_events(path, &buf[..], chunk_bytes, |range| buf.release(range))?;
    finish(path, buf, walked, None, gzip_cut, diag)
}

/// A file capture wrote, parsed a member at a time ([`source::MemberText`]): its tables are
/// those of the same text read whole. `None` where a member does not inflate.
fn from_members(
    path: &Path,
    mut text: source::MemberText,
    diag: &mut Diagnostics,
) -> Result<Option<KinetoTrace>, Error> {
    let arr_start = match find_events(path, &mut text) {
        Ok(at) => at,
        // Said of the text before a member that does not inflate: the whole reading says why.
        Err(_) if text.failed() => return Ok(None),
        Err(e) => return Err(e),
    };
    if text.prefix(arr_start + (64 << 10)).is_none() {
        return Ok(None);
    }
    let head = text.head();
    let walked = json_scan::walk_array_windows(&text, head, arr_start, parse_piece)
        .map_err(|off| bad_array(path, off))?;
    let Some((partials, array, last_from)) = walked else {
        return Ok(None);
    };
    // The header after the array is read from the text at and after the last piece; the
    // insertion point of the annotated trace back from the array's end (or the cut) to the
    // last byte that is not white space, which may lie before the last piece (a text cut
    // inside the last piece's first event: the comma before it goes too).
    let back_from = match array.end {
        Some(e) => e.saturating_sub(1),
        None => array.cut_at.unwrap_or(text.total()),
    };
    if text.fill_from(last_from.min(back_from)).is_none()
        || text.fill_back_over_ws(back_from).is_none()
    {
        return Ok(None);
    }
    let Some(bytes) = text.into_bytes() else {
        return Ok(None);
    };
    let mut t = finish(path, bytes, (arr_start, partials, array), None, false, diag)?;
    t.gzipped = true;
    Ok(Some(t))
}

/// [`walk_events`]' result: where the events array starts, its pieces parsed, how it ends.
type Walked = (usize, Vec<Partial>, json_scan::ArrayEnd);

/// The error for a `traceEvents` that is not an array, at `off`.
fn bad_array(path: &Path, off: usize) -> Error {
    Error::Format {
        path: path.to_path_buf(),
        what: format!("\"traceEvents\" is not a well-formed array (byte {off})"),
    }
}

/// Finds `traceEvents` and parses its events on all threads, as the text arrives; `done`
/// is told of each stretch of text a piece has read.
fn walk_events(
    path: &Path,
    text: &(impl json_scan::Arriving + ?Sized),
    chunk_bytes: usize,
    done: impl Fn(std::ops::Range<usize>) + Sync,
) -> Result<Walked, Error> {
    let arr_start = find_events(path, &mut json_scan::Arrived(text))?;
    let (partials, array) =
        json_scan::walk_array_arriving(text, arr_start, chunk_bytes.max(1), |text, from, limit| {
            let (p, stop) = parse_piece(text, 0, from, limit);
            done(from..stop.at());
            (p, stop)
        })
        .map_err(|off| bad_array(path, off))?;
    Ok((arr_start, partials, array))
}

/// Where the `traceEvents` array starts (its `[`), found in the text's first bytes.
fn find_events(path: &Path, text: &mut impl json_scan::Prefix) -> Result<usize, Error> {
    let fmt_err = |what: String| Error::Format {
        path: path.to_path_buf(),
        what,
    };
    let total = text.total();
    // The header is small: the key is looked for in the text arrived so far, in longer
    // stretches until found or the text is whole.
    let mut want = 1 << 16;
    let (buf, found) = loop {
        let buf = text.prefix(want);
        let whole = buf.len() >= total || buf.len() < want.min(total);
        match json_scan::find_top_level_key(buf, b"traceEvents") {
            Ok(Some(f)) if f.value_start < buf.len() => break (buf, Ok(Some(f))),
            r if whole => break (buf, r),
            _ => want = want.saturating_mul(4),
        }
    };
    if json_scan::skip_ws(buf, 0) >= buf.len() {
        return Err(fmt_err("the file is empty".into()));
    }
    let found = found.map_err(|off| {
        if off == 0 || buf.get(json_scan::skip_ws(buf, 0)) != Some(&b'{') {
            fmt_err(source::NOT_A_JSON_OBJECT.into())
        } else {
            fmt_err(format!("malformed JSON near byte {off}"))
        }
    })?;
    let Some(found) = found else {
        return Err(fmt_err(
            "JSON without a \"traceEvents\" array: not a Chrome trace".into(),
        ));
    };
    Ok(found.value_start)
}

/// The trace from its whole text and its events walked: the header, the warnings about the
/// text, the tables merged; with a single-stream gzip input's blocks, where the annotated
/// trace can resume its compressed stream.
fn finish(
    path: &Path,
    buf: source::Bytes,
    (arr_start, partials, array): Walked,
    blocks: Option<(&[source::BlockStart], u64)>,
    gzip_cut: bool,
    diag: &mut Diagnostics,
) -> Result<KinetoTrace, Error> {
    let fmt_err = |what: String| Error::Format {
        path: path.to_path_buf(),
        what,
    };
    let elements = partials.iter().map(|p| p.elements).sum();

    let header = parse_header(&buf, arr_start, array.end).map_err(fmt_err)?;
    warn_after_events(&buf, array.end, path, diag);
    let truncated = truncation(buf.len(), array.end, array.cut_at, gzip_cut);
    if let Some(t) = truncated {
        diag.warn(
            "truncated_trace",
            format!(
                "{}: the trace ends early (byte {} of the text{}); analysed the {} complete events before it",
                path.display(),
                t.at_byte,
                if t.gzip_stream_cut { ", gzip stream cut" } else { "" },
                elements
            ),
        );
    }

    let mut trace = KinetoTrace {
        path: path.to_path_buf(),
        header,
        strings: Interner::new(),
        threads: Vec::new(),
        ops: Vec::new(),
        runtime: Vec::new(),
        gpu: Vec::new(),
        memory: Vec::new(),
        modules: Vec::new(),
        flows: Vec::new(),
        process_names: Vec::new(),
        event_count: elements,
        truncated,
        text_bytes: buf.len(),
        gzipped: false,
        events_span: span::events_span(&buf, arr_start, array.end, array.cut_at),
        input_text: String::new(),
        gzip_resume: None,
    };
    let span = trace.events_span;
    trace.gzip_resume = blocks.and_then(|b| gzip_resume(path, &buf, b, span));
    // Unmapping a large file takes milliseconds of page-table work that nothing waits for.
    source::drop_aside(buf);
    merge(&mut trace, partials, diag);
    if trace.ops.is_empty() && trace.gpu.is_empty() && trace.memory.is_empty() {
        diag.warn(
            "empty_trace",
            format!("{}: no operator, kernel or memory events", path.display()),
        );
    }
    Ok(trace)
}

/// A second `traceEvents`, or text after the trace's object: warned, never silent.
fn warn_after_events(buf: &[u8], arr_end: Option<usize>, path: &Path, diag: &mut Diagnostics) {
    // Python's json keeps the last of two `traceEvents`, this reader the first; text after
    // the object is another writer's leftovers. Neither passes silently.
    if let Some((again, trailing)) =
        arr_end.and_then(|e| json_scan::rest_of_object(buf, e, b"traceEvents"))
    {
        if again {
            diag.warn(
                "duplicate_trace_events",
                format!(
                    "{}: the object has a second \"traceEvents\"; the first is analysed",
                    path.display()
                ),
            );
        }
        if let Some(at) = trailing {
            diag.warn(
                "trailing_data",
                format!(
                    "{}: text after the trace's object, from byte {at} of {}; ignored",
                    path.display(),
                    buf.len()
                ),
            );
        }
    }
}

/// Where a trace whose events array ended at `arr_end` (or was cut at `cut_at`) ends early, if
/// it does: the text `len` bytes long, its gzip stream `gzip_cut` or not.
fn truncation(
    len: usize,
    arr_end: Option<usize>,
    cut_at: Option<usize>,
    gzip_cut: bool,
) -> Option<Truncation> {
    match (arr_end, cut_at) {
        (None, cut) => {
            let at = cut.unwrap_or(len);
            Some(Truncation {
                at_byte: at,
                bytes_lost: len - at,
                gzip_stream_cut: gzip_cut,
            })
        }
        (Some(_), _) if gzip_cut => Some(Truncation {
            at_byte: len,
            bytes_lost: 0,
            gzip_stream_cut: true,
        }),
        _ => None,
    }
}

fn parse_header(buf: &[u8], arr_start: usize, arr_end: Option<usize>) -> Result<Header, String> {
    // The header is the document with the events array replaced by `[]`; for a truncated file
    // whatever followed the array is gone, so close the object instead.
    let mut text = Vec::with_capacity(arr_start + 64);
    text.extend_from_slice(&buf[..arr_start]);
    text.extend_from_slice(b"[]");
    match arr_end {
        Some(end) => text.extend_from_slice(&buf[end..]),
        None => text.push(b'}'),
    }
    // A header that does not parse (odd member types) is not worth refusing the events.
    let raw: RawHeader = serde_json::from_slice(&text).unwrap_or_default();
    let base = raw.base_time_ns.i64();
    let devices = raw
        .device_properties
        .unwrap_or_default()
        .into_iter()
        .map(|d| DeviceInfo {
            id: d.id.i64().unwrap_or(0),
            name: d.name.unwrap_or_default(),
            total_memory_bytes: d.total_global_mem.i64(),
            compute_capability: d.compute_major.i64().zip(d.compute_minor.i64()),
            num_sms: d.num_sms.i64(),
        })
        .collect();
    let flag = |l: raw::Lenient| l.i64().map(|v| v != 0);
    let (rank, world_size) = raw
        .distributed_info
        .map(|d| (d.rank.i64(), d.world_size.i64()))
        .unwrap_or((None, None));
    Ok(Header {
        schema_version: raw.schema_version.i64(),
        base_time_ns: base,
        time_convention: if base.is_some() {
            TimeConvention::RelativeToBase
        } else {
            TimeConvention::AbsoluteEpoch
        },
        devices,
        flags: [
            flag(raw.record_shapes),
            flag(raw.profile_memory),
            flag(raw.with_stack),
            flag(raw.with_modules),
            flag(raw.with_flops),
        ],
        cuda_runtime_version: raw.cuda_runtime_version.i64(),
        rank,
        world_size,
    })
}

/// Whether the event starting at `buf[0]` is one steptrace never uses, recognised from the
/// first bytes without parsing: Python function ranges other than `nn.Module` ones (half of a
/// `with_stack` trace) and `ac2g` flows (the correlation id is also on both ends' args).
/// Kineto writes `ph` and `cat` first; an event laid out otherwise is simply parsed.
fn skippable(buf: &[u8]) -> bool {
    use memchr::memmem::Finder;
    use std::sync::LazyLock;
    // Built once: constructing a searcher per event cost more than parsing the event.
    static CAT: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\"cat\""));
    static MODULE: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"nn.Module: "));
    // Kineto's layout of a complete event, checked first: searching for `"cat"` in every
    // event was a tenth of the parse. Kineto opens each event on a line of its own (`{`, a
    // newline and an indent before `"ph"`), so the members are matched after that space.
    const COMPLETE: &[u8] = b"\"ph\": \"X\", \"cat\": ";
    const PYTHON_NAME: &[u8] = b"\"python_function\", \"name\": \"";
    let members = match buf.first() {
        Some(b'{') => &buf[json_scan::skip_ws(buf, 1)..],
        _ => &[],
    };
    if let Some(rest) = members.strip_prefix(COMPLETE) {
        if let Some(name) = rest.strip_prefix(PYTHON_NAME) {
            return !name.starts_with(b"nn.Module: ");
        }
        if !rest.starts_with(b"\"python_function\"") && !rest.starts_with(b"\"ac2g\"") {
            return false;
        }
    }
    let head = &buf[..buf.len().min(96)];
    let Some(i) = CAT.find(head) else {
        return false;
    };
    // The value after `"cat"`, `:` and optional spaces.
    let rest = &head[i + 5..];
    let rest = rest.strip_prefix(b":").unwrap_or(rest);
    let start = rest.iter().position(|&c| c != b' ').unwrap_or(rest.len());
    let value = &rest[start..];
    if value.starts_with(b"\"ac2g\"") {
        return true;
    }
    if value.starts_with(b"\"python_function\"") {
        return MODULE.find(&buf[..buf.len().min(192)]).is_none();
    }
    false
}

/// Whether the fast event reader and serde_json agree on the event at the start of `buf`:
/// where the fast reader accepts it, serde_json must read the same event, ending at the same
/// byte. The fuzz target `kineto_event` and a property test hold the fast reader to this.
#[doc(hidden)]
pub fn fast_reader_agrees(buf: &[u8]) -> bool {
    let mut fast = RawEvent::default();
    let Ok(end) = fast::event(buf, 0, &mut fast) else {
        return true;
    };
    matches!(serde_event(buf), Some(Ok((slow, e))) if slow == fast && e == end)
}

/// Whether the block-wise skip of a container ends where the plain structural skip does,
/// wherever it answers (fuzz target `kineto_event`, property test).
#[doc(hidden)]
pub fn container_skip_agrees(buf: &[u8]) -> bool {
    match json_scan::skip_container(buf, 0) {
        Some(end) => json_scan::skip_value(buf, 0) == Some(end),
        None => true,
    }
}

/// The event at the start of `buf` as serde_json reads it, with the index past it; `None` for
/// text holding no value.
fn serde_event(buf: &[u8]) -> Option<Result<(RawEvent<'_>, usize), serde_json::Error>> {
    let mut s = serde_json::Deserializer::from_slice(buf).into_iter::<RawEvent>();
    Some(s.next()?.map(|ev| (ev, s.byte_offset())))
}

/// Reads the event at the start of `buf` with the fast reader only (benches); the index past it,
/// or `None` where serde_json would have to read it.
#[doc(hidden)]
pub fn fast_event_end(buf: &[u8]) -> Option<usize> {
    fast::event(buf, 0, &mut RawEvent::default()).ok()
}

/// Reads the event at the start of `buf` with serde_json only (benches); the index past it.
#[doc(hidden)]
pub fn serde_event_end(buf: &[u8]) -> Option<usize> {
    serde_event(buf)?.ok().map(|(_, end)| end)
}

/// Parses the events of one piece of `traceEvents`: from `from` until an element starts at or
/// past `limit`, in `buf`, a stretch of the text starting at byte `base` (what messages say).
fn parse_piece(buf: &[u8], base: usize, from: usize, limit: usize) -> (Partial, json_scan::Stop) {
    let mut p = Partial::for_text(limit.min(buf.len()).saturating_sub(from));
    let stop = json_scan::walk_elements(buf, from, limit, |pos| {
        let end = parse_element(&mut p, buf, base, pos);
        p.elements += usize::from(end.is_some());
        end
    });
    p.shrink();
    (p, stop)
}

/// Parses the element at `pos` into `p`; returns the index past it, or `None` when the text
/// ends inside it. `buf` starts at byte `base` of the text.
fn parse_element(p: &mut Partial, buf: &[u8], base: usize, pos: usize) -> Option<usize> {
    if skippable(&buf[pos..]) {
        return json_scan::skip_container(buf, pos).or_else(|| json_scan::skip_value(buf, pos));
    }
    // Filled in place: an event is some 500 bytes, and moving it out of the reader and into
    // `add` showed in the profile.
    let mut ev = RawEvent::default();
    if let Ok(end) = fast::event(buf, pos, &mut ev) {
        p.add(&ev, base + pos);
        return Some(end);
    }
    match serde_event(&buf[pos..])? {
        Ok((ev, used)) => {
            p.add(&ev, base + pos);
            Some(pos + used)
        }
        Err(e) => {
            // One malformed event does not spoil the rest: skip it structurally. If even that
            // fails, the text ends inside it.
            let next = json_scan::skip_value(buf, pos)?;
            p.anomalies.push((
                "malformed_event",
                format!(
                    "event at byte {} could not be read ({e}); skipped",
                    base + pos
                ),
            ));
            Some(next)
        }
    }
}

#[cfg(test)]
mod tests;
