//! Kineto Chrome traces (`torch.profiler` `export_chrome_trace`, `tensorboard_trace_handler`,
//! libtorch `ProfilerResult::save`): the file is read once, `traceEvents` is cut into chunks at
//! event boundaries, and the chunks are parsed and converted on all threads into owned,
//! interned event tables. Chunks are merged in file order, so the tables do not depend on the
//! number of threads.

mod classify;
mod fast;
mod finish;
mod keys;
mod merge;
mod piece;
pub(crate) mod raw;
mod span;
mod stream;
mod time;
use self::finish::{finish, skippable};
use self::piece::parse_piece;
pub use self::piece::{container_skip_agrees, fast_event_end, fast_reader_agrees, serde_event_end};
use self::stream::{from_stream, gzip_resume};

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

#[cfg(test)]
mod tests;
