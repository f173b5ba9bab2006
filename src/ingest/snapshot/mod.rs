//! CUDA caching-allocator memory snapshots (`torch.cuda.memory._snapshot()` dumped with
//! pickle, or libtorch `_memory_snapshot_pickled()`), plain or gzip, read without executing
//! anything (see [`super::pickle`]).

mod extract;
mod sink;
mod stacks;
use self::extract::Extractor;
use self::sink::{EntrySink, ListCount};
use self::stacks::Stacks;

use std::path::Path;

use rustc_hash::FxHashMap;

use super::pickle::{self, Pickle, RecordShape, Value, ValueId};
use super::{source, Error};
use crate::diagnostics::Diagnostics;
use crate::intern::{Interner, StrId};

/// A `device_traces` history entry: the members read, `action` first (what makes a dict one),
/// and those torch may also write that nothing here reads. Read as fixed records, the
/// millions of entries of a GB snapshot take a fraction of what generic dicts did.
pub static HISTORY_ENTRY: RecordShape = RecordShape::new(
    &["action", "addr", "size", "stream", "time_us", "frames"],
    &["compile_context", "user_metadata"],
);

pub use crate::model::tables::snapshot::*;

/// An entry's `action` as the snapshot names it.
fn parse_action(s: &[u8]) -> Action {
    match s {
        b"alloc" => Action::Alloc,
        b"free_requested" => Action::FreeRequested,
        b"free_completed" | b"free" => Action::FreeCompleted,
        b"segment_alloc" => Action::SegmentAlloc,
        b"segment_free" => Action::SegmentFree,
        b"segment_map" => Action::SegmentMap,
        b"segment_unmap" => Action::SegmentUnmap,
        b"snapshot" => Action::Snapshot,
        b"oom" => Action::Oom,
        _ => Action::Other,
    }
}

/// Whether `path` is a file that starts as a pickle does (after inflating, when gzip): the
/// PROTO opcode of protocol 2 and later, which every snapshot torch writes starts with. A
/// trace starts with `{`; this tells the two apart without reading either whole.
pub fn looks_like_snapshot(path: &Path) -> bool {
    path.is_file() && matches!(source::first_byte(path), Ok(Some(0x80)))
}

/// Reads a snapshot pickle (plain or gzip) as it streams from the file, never holding the
/// whole: one cut short (a writer killed while it wrote) yields what it holds, with a
/// warning, as a cut trace does.
pub fn load(path: &Path, diag: &mut Diagnostics) -> Result<Snapshot, Error> {
    let (stream, gz) = source::open_pickle_stream(path)?;
    Ok(collected(from_stream(
        path,
        stream,
        gz,
        diag,
        None,
        pickle::ReadMode::Ahead,
    )?))
}

/// [`load`], handing each device's history to `sink` as it is read instead of keeping it:
/// the snapshot's `device_traces` are empty and [`Snapshot::streamed`] says which list of
/// the sink's is which device's. What the read holds is then the pickle's memo (4 bytes per
/// object it names, packed to a few bits where its slots repeat, as a history's do), the
/// objects outside the history (segments, frames, distinct stacks), and the sink's own state,
/// not the history: a 1.76 GB real snapshot is read in 58 MB.
pub fn load_streamed(
    path: &Path,
    diag: &mut Diagnostics,
    sink: &mut dyn HistorySink,
) -> Result<Snapshot, Error> {
    let (stream, gz) = source::open_pickle_stream(path)?;
    Ok(from_stream(path, stream, gz, diag, Some(sink), pickle::ReadMode::Ahead)?.0)
}

/// Parses snapshot pickle bytes.
pub fn from_bytes(path: &Path, bytes: &[u8], diag: &mut Diagnostics) -> Result<Snapshot, Error> {
    Ok(collected(from_stream(
        path,
        Box::new(bytes),
        false,
        diag,
        None,
        pickle::ReadMode::Direct,
    )?))
}

/// A streamed read's snapshot with the entries the built-in [`Collect`] sink kept put in
/// `device_traces`.
fn collected((mut s, c): (Snapshot, Collect)) -> Snapshot {
    let mut lists = c.0;
    s.device_traces = s
        .streamed
        .drain(..)
        .map(|l| l.and_then(|l| lists.remove(&l)).unwrap_or_default())
        .collect();
    s
}

/// The sink that keeps every list's entries, for readers that want the history whole.
#[derive(Default)]
struct Collect(FxHashMap<usize, Vec<TraceEntry>>);

impl HistorySink for Collect {
    fn entries(&mut self, list: usize, mut batch: Vec<TraceEntry>) {
        let v = self.0.entry(list).or_default();
        if v.is_empty() {
            *v = batch;
        } else {
            v.append(&mut batch);
        }
    }
}

fn from_stream<'a>(
    path: &Path,
    stream: Box<dyn std::io::Read + Send + 'a>,
    gz: bool,
    diag: &mut Diagnostics,
    out: Option<&mut dyn HistorySink>,
    mode: pickle::ReadMode,
) -> Result<(Snapshot, Collect), Error> {
    let format = |what: String| Error::Format {
        path: path.to_path_buf(),
        what,
    };
    let mut collect = Collect::default();
    let out: &mut dyn HistorySink = match out {
        Some(o) => o,
        None => &mut collect,
    };
    let mut sink = EntrySink::new(out);
    // The reference read (tests) takes every batch item by item.
    sink.in_order = mode != pickle::ReadMode::Kept;
    let read = pickle::parse_stream_into_with(stream, &HISTORY_ENTRY, &mut sink, mode)
        .map_err(|e| format(e.to_string()))?;
    sink.flush();
    if let Some(e) = &read.read_error {
        // A gzip stream cut short reads as an early end; anything else that broke the read
        // (corrupt deflate data, a failing disk) is not a snapshot to analyse.
        if !(gz && e.kind() == std::io::ErrorKind::UnexpectedEof) {
            return Err(format(if gz {
                format!("corrupt gzip stream: {e}")
            } else {
                format!("read failed: {e}")
            }));
        }
        diag.warn(
            "truncated_snapshot",
            format!("{}: gzip stream ends early", path.display()),
        );
    }
    if let Some(at) = read.cut {
        diag.warn(
            "truncated_snapshot",
            format!(
                "{}: the pickle ends early at byte {at}: the records before the cut are used",
                path.display(),
            ),
        );
    }
    let (stacks, lists, bad_sizes) = sink.finish();
    if bad_sizes > 0 {
        diag.warn_n(
            "snapshot_size_not_bytes",
            bad_sizes,
            format!(
                "{}: {bad_sizes} history entries give a size that is no whole number of bytes (NaN, negative, a string, past 2^63): counted as 0 bytes, so the figures built on them are low",
                path.display()
            ),
        );
    }
    let s = Extractor::new(path, &read.pickle, diag, stacks, lists).run()?;
    Ok((s, collect))
}

#[cfg(test)]
mod tests;
