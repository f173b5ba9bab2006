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
mod reader;
mod store;
#[cfg(test)]
mod tests;

pub use self::error::{CodeOpcode, PickleError};
use self::store::{Slot, Store, Texts};

/// What kind of value a [`ValueId`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    None,
    Bool,
    /// An integer of at most 60 bits, in the id itself.
    Int,
    /// A wider integer, in a side table.
    WideInt,
    Float,
    BigInt,
    Str,
    Bytes,
    List,
    Tuple,
    Dict,
    Set,
    /// A dict member that is not there (in a record).
    Absent,
    /// A dict read as a record that a [`RecordSink`] took, with nothing else naming it but
    /// the stack and the memo (`reader::Reader::sink_record`): no table keeps a slot for it.
    /// The payload is the record's number, or [`TAKEN`] once it was put in a list.
    Sunk,
    /// A list a sunk record held, with nothing else naming it but the memo: its items stay
    /// where they are in the shared table, and the payload indexes `Pickle::frozen`, their
    /// place (one per distinct place), so the list's own slot is free for the next one.
    Frozen,
}

/// The payload of a [`Kind::Sunk`] whose record was put in a list: the sink has seen it
/// there, and any later mention is a repeat. One value for all, so that the memo, where
/// millions of these end, holds them in a few bits (`reader::memo`).
const TAKEN: u64 = PAYLOAD;

const KINDS: [Kind; 15] = [
    Kind::None,
    Kind::Bool,
    Kind::Int,
    Kind::WideInt,
    Kind::Float,
    Kind::BigInt,
    Kind::Str,
    Kind::Bytes,
    Kind::List,
    Kind::Tuple,
    Kind::Dict,
    Kind::Set,
    Kind::Absent,
    Kind::Sunk,
    Kind::Frozen,
];

/// Bits of a [`ValueId`] below its kind.
const PAYLOAD_BITS: u32 = 60;
const PAYLOAD: u64 = (1 << PAYLOAD_BITS) - 1;

/// A value of a [`Pickle`] in 8 bytes: the kind in the top 4 bits, and below it a small
/// integer itself or the index of a string, container or wide scalar. Two ids are equal when
/// they are the same object (containers, strings) or the same small scalar.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ValueId(u64);

impl ValueId {
    const fn new(kind: Kind, data: u64) -> Self {
        ValueId(((kind as u64) << PAYLOAD_BITS) | (data & PAYLOAD))
    }

    fn kind(self) -> Kind {
        KINDS[(self.0 >> PAYLOAD_BITS) as usize]
    }

    /// An id that no member of a record holds (a member not there reads as `None`): the
    /// empty key of a cache of ids.
    pub const ABSENT: ValueId = ValueId::new(Kind::Absent, 0);

    /// The line of a direct-mapped cache of `lines` (a power of two) that this id takes:
    /// ids of one kind differ in their low bits only by their number, so they are mixed.
    #[inline]
    pub fn line(self, lines: usize) -> usize {
        (self.0.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize & (lines - 1)
    }

    fn data(self) -> u64 {
        self.0 & PAYLOAD
    }
}

/// A plain-data pickle value, as seen through [`Pickle::get`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value<'p> {
    /// `None`.
    None,
    /// `True` / `False`.
    Bool(bool),
    /// An integer that fits in 64 bits.
    Int(i64),
    /// An integer too large for 64 bits, as little-endian two's complement bytes.
    BigInt(&'p [u8]),
    /// A float.
    Float(f64),
    /// A text string.
    Str(&'p str),
    /// A bytes object.
    Bytes(&'p [u8]),
    /// A list.
    List(&'p [ValueId]),
    /// A tuple.
    Tuple(&'p [ValueId]),
    /// A dict, in insertion order.
    Dict(&'p [(ValueId, ValueId)]),
    /// A set or frozenset.
    Set(&'p [ValueId]),
}

/// Most members a [`RecordShape`] may name, kept or ignored (a record is built on the stack,
/// and ignored members are tracked in a byte).
pub const RECORD_MAX_KEYS: usize = 8;

/// A dict shape the caller reads by the million, stored as a fixed record of its kept
/// members instead of a generic dict (a GB snapshot's history entries: as generic dicts they
/// took several times the file's size). A dict is read as one when it is filled in one go
/// with two members or more, has the first kept member, string keys only, none twice, and
/// none outside `keys` and `ignored`; any other dict stays generic (a sink is told of one
/// with the first kept member: [`RecordSink::generic`]). [`Pickle::dict_get`] answers alike
/// for both.
#[derive(Debug)]
pub struct RecordShape {
    keys: &'static [&'static str],
    ignored: &'static [&'static str],
}

impl RecordShape {
    /// `keys`: the members kept, the first one required; `ignored`: members a record may
    /// also have, dropped. At most [`RECORD_MAX_KEYS`] of each.
    pub const fn new(keys: &'static [&'static str], ignored: &'static [&'static str]) -> Self {
        assert!(!keys.is_empty() && keys.len() <= RECORD_MAX_KEYS);
        assert!(ignored.len() <= RECORD_MAX_KEYS);
        RecordShape { keys, ignored }
    }

    /// The members kept, in the order a record holds them.
    pub fn keys(&self) -> &'static [&'static str] {
        self.keys
    }
}

/// Takes each dict of a [`RecordShape`] as it is completed, instead of the pickle keeping
/// its members: a GB snapshot's millions of history entries become the caller's own records
/// during the read, never held twice ([`parse_stream_into`]).
pub trait RecordSink {
    /// A record completed: its kept members in the shape's order (absent ones are `None`),
    /// with the pickle as read so far (a container they name that the pickle extends later,
    /// which no snapshot torch writes does, is seen as it is now). Returns the record's
    /// number, which [`Pickle::record_number`] gives for its dict.
    fn record(&mut self, pk: &Pickle, members: &[Option<ValueId>]) -> usize;
    /// The record `number` was extended after it was complete (no pickle torch writes does
    /// that): its dict is a generic one of the later members from here on, and the record
    /// is no longer what the dict holds.
    fn forget(&mut self, number: usize);
    /// `items` were just appended, in this order, to `list` (by APPEND, APPENDS or LIST):
    /// a record among them is in a list from here on, so a sink can hand it on and forget
    /// it instead of keeping every record to the end. True: every item was a record the
    /// sink handed on for good, so the list need not hold them (a GB snapshot's history
    /// lists held a word per entry): [`Pickle::items`] of the list then lacks them.
    /// Items none of which is a record ([`Pickle::record_number`]) or a dict the sink was
    /// told of by [`RecordSink::generic`] (a history entry's frame list) must change nothing
    /// and return false: the reader skips the call for a frame list like the last one.
    fn appended(&mut self, _pk: &Pickle, _list: ValueId, _items: &[ValueId]) -> bool {
        false
    }
    /// The generic dict `dict` (not read as a record: a member beyond the shape, a pair at a
    /// time) was given the shape's first member: the sink may read it by key once it is in a
    /// list.
    fn generic(&mut self, _dict: ValueId) {}
}

/// The kept members of a dict read as a record (see [`Pickle::record`]).
#[derive(Debug, Clone, Copy)]
pub struct Record<'p> {
    keys: &'static [&'static str],
    values: &'p [ValueId],
}

impl Record<'_> {
    /// The member `key`, as `dict_get` would give it.
    #[inline]
    pub fn get(&self, key: &str) -> Option<ValueId> {
        let v = self.values[self.keys.iter().position(|k| *k == key)?];
        (v.kind() != Kind::Absent).then_some(v)
    }
}

/// A parsed pickle: its values (none borrows the input).
#[derive(Debug, Clone)]
pub struct Pickle {
    texts: Texts,
    wide: Vec<i64>,
    floats: Vec<f64>,
    seqs: Store<ValueId>,
    maps: Store<(ValueId, ValueId)>,
    /// The shape of dicts read as records, if the caller named one.
    shape: Option<&'static RecordShape>,
    /// Every record's kept members, `shape.keys.len()` values per record (none where a
    /// [`RecordSink`] took them: `sunk`).
    records: Vec<ValueId>,
    sunk: bool,
    /// The places (`store` slot words of `seqs`) of [`Kind::Frozen`] lists, one per place.
    frozen: Vec<u64>,
    /// The value STOP returned.
    pub root: ValueId,
    /// Strings whose bytes were not UTF-8 (Python writes a lone surrogate so, with
    /// `surrogatepass`), read with U+FFFD in their place.
    pub lossy_texts: usize,
}

impl Pickle {
    /// The value behind an id.
    pub fn get(&self, id: ValueId) -> Value<'_> {
        let d = id.data();
        match id.kind() {
            Kind::None | Kind::Absent => Value::None,
            // A record the sink took: its members are the sink's now.
            Kind::Sunk => Value::Dict(&[]),
            Kind::Frozen => Value::List(self.seqs.get_word(self.frozen[d as usize])),
            Kind::Bool => Value::Bool(d != 0),
            // Sign-extend the 60-bit payload.
            Kind::Int => Value::Int(((d << (64 - PAYLOAD_BITS)) as i64) >> (64 - PAYLOAD_BITS)),
            Kind::WideInt => Value::Int(self.wide[d as usize]),
            Kind::Float => Value::Float(self.floats[d as usize]),
            Kind::BigInt => Value::BigInt(self.bytes(d)),
            Kind::Bytes => Value::Bytes(self.bytes(d)),
            Kind::Str => Value::Str(self.text(d)),
            Kind::List => Value::List(self.seqs.get(d)),
            Kind::Tuple => Value::Tuple(self.seqs.get(d)),
            Kind::Set => Value::Set(self.seqs.get(d)),
            Kind::Dict => Value::Dict(self.maps.get(d)),
        }
    }

    fn text_is(&self, t: u64, key: &str) -> bool {
        self.bytes(t) == key.as_bytes()
    }

    fn bytes(&self, t: u64) -> &[u8] {
        self.texts.bytes(t)
    }

    fn text(&self, t: u64) -> &str {
        // Checked when read: a Str span is UTF-8.
        std::str::from_utf8(self.bytes(t)).unwrap_or_default()
    }

    /// Number of strings and containers (scalars are not counted: they live in their ids).
    pub fn len(&self) -> usize {
        self.texts.len() + self.seqs.len() + self.maps.len()
    }

    /// Whether there are no strings or containers.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `dict[key]` for a string key, if `id` is a dict holding it.
    pub fn dict_get(&self, id: ValueId, key: &str) -> Option<ValueId> {
        if id.kind() != Kind::Dict {
            return None;
        }
        if let Some(r) = self.record(id) {
            return r.get(key);
        }
        self.maps
            .get(id.data())
            .iter()
            .find(|(k, _)| k.kind() == Kind::Str && self.text_is(k.data(), key))
            .map(|(_, v)| *v)
    }

    /// The number a [`RecordSink`] gave the dict `id`, when it was read into one; after
    /// the record was put in a list, `usize::MAX` (a number no record has: the sink has
    /// seen it, and any later mention is a repeat).
    pub fn record_number(&self, id: ValueId) -> Option<usize> {
        if id.kind() == Kind::Sunk {
            return Some(if id.data() == TAKEN {
                usize::MAX
            } else {
                id.data() as usize
            });
        }
        if id.kind() != Kind::Dict || !self.sunk {
            return None;
        }
        match self.maps.slot(id.data()) {
            Slot::Record(r) => Some(r),
            _ => None,
        }
    }

    /// The kept members of a dict of the caller's [`RecordShape`], when `id` is one read as a
    /// record (and kept here: not given to a [`RecordSink`]).
    pub fn record(&self, id: ValueId) -> Option<Record<'_>> {
        if self.sunk {
            return None;
        }
        if id.kind() != Kind::Dict {
            return None;
        }
        match self.maps.slot(id.data()) {
            Slot::Record(r) => {
                let keys = self.shape?.keys;
                let n = keys.len();
                Some(Record {
                    keys,
                    values: &self.records[r * n..(r + 1) * n],
                })
            }
            _ => None,
        }
    }

    /// The number of lists, tuples and sets: [`Pickle::seq_index`] is below it.
    pub fn seq_count(&self) -> usize {
        self.seqs.len()
    }

    /// How many dicts the pickle built.
    pub fn dict_count(&self) -> usize {
        self.maps.len()
    }

    /// A dense index of a dict (for tables by object).
    pub fn dict_index(&self, id: ValueId) -> Option<usize> {
        (id.kind() == Kind::Dict).then_some(id.data() as usize)
    }

    /// A dense index of a list, tuple or set (for tables by container, which beat hash maps
    /// when millions of entries each name one).
    pub fn seq_index(&self, id: ValueId) -> Option<usize> {
        matches!(id.kind(), Kind::List | Kind::Tuple | Kind::Set).then_some(id.data() as usize)
    }

    /// The number of a list a sunk record alone held (a frozen list): one for each
    /// place its items have in the shared table, numbered densely from 0, and the place of a
    /// number never changes.
    pub fn frozen_number(&self, id: ValueId) -> Option<usize> {
        (id.kind() == Kind::Frozen).then_some(id.data() as usize)
    }

    /// Where the items of a list, tuple or set are kept in the shared table, `(start, len)`,
    /// when they are there: lists with equal items mostly share them, so equal places mean
    /// equal items. A place, unlike the items' address, stays the same as the table grows
    /// (its buffer moves, and an address it had may later hold other items). `None` for a
    /// container with a vector of its own, or anything else.
    pub fn items_place(&self, id: ValueId) -> Option<(usize, usize)> {
        match id.kind() {
            Kind::Frozen => match store::Slot::unpack(self.frozen[id.data() as usize]) {
                Slot::Flat(start, len) => Some((start, len)),
                _ => None,
            },
            Kind::List | Kind::Tuple | Kind::Set => match self.seqs.slot(id.data()) {
                Slot::Flat(start, len) => Some((start, len)),
                _ => None,
            },
            _ => None,
        }
    }

    /// The items of a list, tuple or set (empty for anything else).
    pub fn items(&self, id: ValueId) -> &[ValueId] {
        match id.kind() {
            Kind::List | Kind::Tuple | Kind::Set => self.seqs.get(id.data()),
            Kind::Frozen => self.seqs.get_word(self.frozen[id.data() as usize]),
            _ => &[],
        }
    }

    /// An integer value (bools count as 0/1; floats that are whole numbers too).
    #[inline]
    pub fn as_i64(&self, id: ValueId) -> Option<i64> {
        // Every member of every history entry: the small integer without `get`'s match.
        if id.kind() == Kind::Int {
            let d = id.data();
            return Some(((d << (64 - PAYLOAD_BITS)) as i64) >> (64 - PAYLOAD_BITS));
        }
        match self.get(id) {
            Value::Int(i) => Some(i),
            Value::Bool(b) => Some(b as i64),
            Value::Float(f) if f.fract() == 0.0 && f.is_finite() => Some(f as i64),
            _ => None,
        }
    }

    /// A non-negative integer value (as [`Pickle::as_i64`] reads it).
    pub fn as_u64(&self, id: ValueId) -> Option<u64> {
        self.as_i64(id).and_then(|v| u64::try_from(v).ok())
    }

    /// A float value (ints convert).
    pub fn as_f64(&self, id: ValueId) -> Option<f64> {
        match self.get(id) {
            Value::Int(i) => Some(i as f64),
            Value::Float(f) => Some(f),
            _ => None,
        }
    }

    /// A string value's UTF-8 bytes, without checking them again (they were when read).
    pub fn str_bytes(&self, id: ValueId) -> Option<&[u8]> {
        (id.kind() == Kind::Str).then(|| self.bytes(id.data()))
    }

    /// A string value.
    pub fn as_str(&self, id: ValueId) -> Option<&str> {
        (id.kind() == Kind::Str).then(|| self.text(id.data()))
    }
}

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
