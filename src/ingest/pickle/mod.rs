//! A pickle reader for plain data, and nothing else.
//!
//! `pickle.load` would run whatever callable the file names, so this reader implements only
//! the opcodes that build data (protocols 0 to 5: ints, floats, strings, bytes, lists, tuples,
//! dicts, sets, the memo). Every opcode that imports or calls (GLOBAL, STACK_GLOBAL, REDUCE,
//! BUILD, INST, OBJ, NEWOBJ, NEWOBJ_EX, PERSID, BINPERSID, EXT*) is an error naming the opcode
//! and its offset; it is never executed.
//!
//! Built for pickles of many GB (CUDA memory snapshots, [`super::snapshot`]), read as they
//! stream in (a window of a few MB, never the whole input): scalars live inline in their
//! 8-byte [`ValueId`], strings are copied into one arena (checked UTF-8; short ones once per
//! distinct text) and described by 8-byte words, and the items of containers filled in one go (nearly all of
//! them: each stack's frame list, the history's batches) share two flat tables behind 8-byte
//! slot words (`store`), so the reader allocates nothing per container. Dicts of one shape
//! that the caller names ([`RecordShape`]: a snapshot's millions of history entries) become
//! fixed records. A container extended again after others were filled gets a vector of its
//! own, once, and short lists with equal items share them. The memo stores ids (in 4 bytes a
//! slot, fewer where a page of slots repeats a few values: `reader::memo`), so an object the
//! pickle shares in thousands of places (stack frames) is stored once and never copied; a
//! list's batch of records that a [`RecordSink`] took leaves the list, and a record the sink
//! took leaves the tables (with the new frame list only it held), its slot given back for
//! the next one: what the tables hold is what the pickle can still name, not its history.
//!
//! `reader` is the pickle machine; this module is what a caller sees of its result.

mod error;
mod parsed;
mod reader;
mod record;
mod store;
mod value;
pub use self::parsed::Pickle;
pub use self::record::{Record, RecordShape, RecordSink, RECORD_MAX_KEYS};
use self::value::{Kind, PAYLOAD, PAYLOAD_BITS, TAKEN};
pub use self::value::{Value, ValueId};
#[cfg(test)]
mod tests;

pub use self::error::{CodeOpcode, PickleError};
use self::store::{Slot, Store, Texts};

/// Parses a pickle holding plain data.
pub fn parse(buf: &[u8]) -> Result<Pickle, PickleError> {
    parse_with(buf, true, None)
}

/// [`parse`], with the dicts of `shape` read as records.
pub fn parse_records(buf: &[u8], shape: &'static RecordShape) -> Result<Pickle, PickleError> {
    parse_with(buf, true, Some(shape))
}

/// What [`parse_stream`] read: the pickle, where it was cut (a pickle that ends early: see
/// below), and the read error that ended its input, if one did.
pub struct Streamed {
    /// The values read.
    pub pickle: Pickle,
    /// The offset of the cut, for a pickle that ended before STOP.
    pub cut: Option<usize>,
    /// The source's error that ended the input (a corrupt or cut gzip stream), if any.
    pub read_error: Option<std::io::Error>,
    /// How many of the records a sink took were read by their grammar (`reader::entry`)
    /// rather than opcode by opcode.
    pub direct_records: usize,
    /// How many of those had the new frame list of the entry before it, or an empty one
    /// (`reader::entry::Grammar`).
    pub list_runs: usize,
    /// Whether the input was read on a thread ahead of the reader (`reader::ahead`).
    pub read_ahead: bool,
}

/// Parses a pickle as it streams from `src` (with records of `shape`), except that a pickle
/// that ends early (a writer killed while it wrote, or a source that failed) yields what it
/// holds: every container still open is closed over the items read so far, a dict that was
/// still being filled is left out of its parent (a record missing members would read as
/// wrong data), and the offset of the cut is returned beside it.
pub fn parse_stream<'a>(
    src: Box<dyn std::io::Read + 'a>,
    shape: Option<&'static RecordShape>,
) -> Result<Streamed, PickleError> {
    run_stream(reader::Reader::new(reader::Input::new(src), true, shape))
}

/// [`parse_stream`], each dict of `shape` given to `sink` as it completes instead of kept.
pub fn parse_stream_into<'a>(
    src: Box<dyn std::io::Read + Send + 'a>,
    shape: &'static RecordShape,
    sink: &'a mut dyn RecordSink,
) -> Result<Streamed, PickleError> {
    parse_stream_into_with(src, shape, sink, ReadMode::Ahead)
}

/// How [`parse_stream_into_with`] reads what a sink takes (anything but `Direct` only in
/// tests, to hold each way to the one before it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) enum ReadMode {
    /// Every record's dict and frame list keeps its slot in the tables, as before the
    /// tables gave them back; each opcode through the loop (and the snapshot's sink takes
    /// each batch item by item): the reference read.
    Kept,
    /// The slots of what the sink took are given back; each opcode through the loop.
    Released,
    /// As `Released`, and history entries of the usual form read by their grammar
    /// (`reader::entry`), the input read on the reader's thread.
    Direct,
    /// As `Direct`, the input read on a thread ahead of the reader (`reader::ahead`): the
    /// way files are read.
    Ahead,
}

/// [`parse_stream_into`], read the way `mode` says.
pub(crate) fn parse_stream_into_with<'a>(
    src: Box<dyn std::io::Read + Send + 'a>,
    shape: &'static RecordShape,
    sink: &'a mut dyn RecordSink,
    mode: ReadMode,
) -> Result<Streamed, PickleError> {
    parse_stream_into_threaded(src, shape, sink, mode, reader::ahead::builder())
}

/// [`parse_stream_into_with`], the thread ahead (`ReadMode::Ahead`) made by `builder`.
fn parse_stream_into_threaded<'a>(
    src: Box<dyn std::io::Read + Send + 'a>,
    shape: &'static RecordShape,
    sink: &'a mut dyn RecordSink,
    mode: ReadMode,
    builder: std::thread::Builder,
) -> Result<Streamed, PickleError> {
    let read = |input: reader::Input<'_>, sink: &mut dyn RecordSink| {
        let mut r = reader::Reader::new(input, true, Some(shape));
        r.sink = Some(sink);
        r.release = mode != ReadMode::Kept;
        r.direct = matches!(mode, ReadMode::Direct | ReadMode::Ahead);
        r.pk.sunk = true;
        run_stream(r)
    };
    if mode != ReadMode::Ahead {
        return read(reader::Input::new(src), sink);
    }
    std::thread::scope(|s| match reader::ahead::spawn(s, src, builder) {
        // The reader (and so the thread's channel) is gone when `read` returns, which ends
        // the thread the scope then waits for.
        Ok(chunks) => read(reader::Input::from_chunks(chunks), sink),
        // No thread to be had: read here.
        Err(src) => read(reader::Input::new(src), sink),
    })
}

fn run_stream(mut r: reader::Reader<'_>) -> Result<Streamed, PickleError> {
    let cut = match r.run() {
        Ok(root) => {
            r.pk.root = root;
            None
        }
        Err(PickleError::Truncated { offset }) => {
            r.pk.root = r.salvage(offset)?;
            Some(offset)
        }
        Err(e) => return Err(e),
    };
    let read_error = r.input.take_error();
    Ok(Streamed {
        direct_records: r.direct_records,
        list_runs: r.list_runs,
        read_ahead: r.input.is_ahead(),
        pickle: r.pk,
        cut,
        read_error,
    })
}

/// [`parse_stream`] over bytes in memory.
pub fn parse_lenient(
    buf: &[u8],
    shape: Option<&'static RecordShape>,
) -> Result<(Pickle, Option<usize>), PickleError> {
    let s = parse_stream(Box::new(buf), shape)?;
    Ok((s.pickle, s.cut))
}

fn parse_with(
    buf: &[u8],
    share: bool,
    shape: Option<&'static RecordShape>,
) -> Result<Pickle, PickleError> {
    let mut r = reader::Reader::new(reader::Input::new(Box::new(buf)), share, shape);
    r.pk.root = r.run()?;
    Ok(r.pk)
}
