//! A pickle reader for plain data, and nothing else.
//!
//! Memory snapshots are Python pickles. `pickle.load` would run whatever callable the file
//! names, so this reader implements only the opcodes that build data (protocols 0 to 5: ints,
//! floats, strings, bytes, lists, tuples, dicts, sets, the memo). Every opcode that imports or
//! calls (GLOBAL, STACK_GLOBAL, REDUCE, BUILD, INST, OBJ, NEWOBJ, NEWOBJ_EX, PERSID, BINPERSID,
//! EXT*) is an error naming the opcode and its offset; it is never executed.
//!
//! Built for snapshots of a GB: scalars live inline in their 8-byte [`ValueId`], strings are
//! spans of the input (checked UTF-8, never copied) described by 8-byte words, and the items of
//! containers filled in one go (nearly all of them: each stack's frame list, the history's
//! batches) share two flat tables behind 8-byte slot words, so the reader allocates nothing per
//! container; history entries become fixed records. A container extended again after others
//! were filled gets a vector of its own, once, and short lists with equal items share them. The
//! memo stores `ValueId`s, so an object the pickle shares in thousands of places (stack frames)
//! is stored once and never copied.

use std::fmt;
use std::hash::{Hash, Hasher};

use rustc_hash::{FxHashMap, FxHasher};

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
    /// A dict member that is not there (in a history entry's record).
    Absent,
}

const KINDS: [Kind; 13] = [
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

/// Why a pickle was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PickleError {
    /// An opcode that would import or call code.
    Forbidden {
        /// Opcode name, e.g. `GLOBAL`.
        opcode: &'static str,
        /// Byte offset of the opcode.
        offset: usize,
    },
    /// An opcode this reader does not know.
    UnknownOpcode {
        /// The byte.
        byte: u8,
        /// Its offset.
        offset: usize,
    },
    /// The data ended inside an opcode or before STOP.
    Truncated {
        /// Offset where more bytes were needed.
        offset: usize,
    },
    /// Structurally wrong: stack underflow, missing mark, bad memo index, bad text.
    Malformed {
        /// What was wrong.
        what: String,
        /// Offset of the opcode.
        offset: usize,
    },
}

impl fmt::Display for PickleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PickleError::Forbidden { opcode, offset } => write!(
                f,
                "pickle opcode {opcode} at byte {offset} would import or call code; refused (steptrace reads data only)"
            ),
            PickleError::UnknownOpcode { byte, offset } => {
                write!(f, "unknown pickle opcode 0x{byte:02x} at byte {offset}")
            }
            PickleError::Truncated { offset } => write!(f, "pickle ends early at byte {offset}"),
            PickleError::Malformed { what, offset } => {
                write!(f, "malformed pickle at byte {offset}: {what}")
            }
        }
    }
}

impl std::error::Error for PickleError {}

/// A history entry's members (see [`Pickle::entry`]).
#[derive(Debug, Clone, Copy)]
pub struct EntryRecord<'p>(&'p [ValueId; ENTRY_KEYS.len()]);

impl EntryRecord<'_> {
    /// The member `key`, as `dict_get` would give it.
    #[inline]
    pub fn get(&self, key: &str) -> Option<ValueId> {
        let v = self.0[ENTRY_KEYS.iter().position(|k| *k == key)?];
        (v.kind() != Kind::Absent).then_some(v)
    }
}

/// A string or byte string that does not fit a packed span word (see [`Texts`]).
#[derive(Debug, Clone)]
enum Text {
    /// `buf[start..start + len]`.
    Span(usize, usize),
    /// Decoded (protocol 0 and Python 2 strings).
    Owned(Box<str>),
}

/// Strings and byte strings, 8 bytes each: a GB snapshot holds tens of millions (every
/// history entry writes its action afresh), and as 24-byte enums their table alone was a
/// quarter of the file's size, all of it page faults. A word is `start | len << 40` of a span
/// of the input, or [`SIDE`] and an index into `side` for the rest (decoded or long texts).
#[derive(Debug, Clone, Default)]
struct Texts {
    words: Vec<u64>,
    side: Vec<Text>,
}

/// A [`Texts`] word that indexes the side table.
const SIDE: u64 = 1 << 63;
const TEXT_LEN_SHIFT: u32 = 40;
const TEXT_MAX_LEN: usize = (1 << (63 - TEXT_LEN_SHIFT)) - 1;
const TEXT_MAX_START: usize = (1 << TEXT_LEN_SHIFT) - 1;

impl Texts {
    fn push(&mut self, t: Text) -> u64 {
        let word = match t {
            Text::Span(s, n) if s <= TEXT_MAX_START && n <= TEXT_MAX_LEN => {
                s as u64 | (n as u64) << TEXT_LEN_SHIFT
            }
            t => {
                self.side.push(t);
                SIDE | (self.side.len() as u64 - 1)
            }
        };
        self.words.push(word);
        self.words.len() as u64 - 1
    }

    fn bytes<'b>(&'b self, buf: &'b [u8], t: u64) -> &'b [u8] {
        let w = self.words[t as usize];
        if w & SIDE == 0 {
            let s = (w & TEXT_MAX_START as u64) as usize;
            return &buf[s..s + (w >> TEXT_LEN_SHIFT) as usize];
        }
        match &self.side[(w & !SIDE) as usize] {
            Text::Span(s, n) => &buf[*s..*s + *n],
            Text::Owned(o) => o.as_bytes(),
        }
    }

    fn len(&self) -> usize {
        self.words.len()
    }
}

/// Where the items of one container are, packed in 8 bytes (see [`Store`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    /// `flat[start..start + len]` of the container kind's shared table.
    Flat(usize, usize),
    /// `own[i]`: the container grew again after others had been filled.
    Own(usize),
    /// A dict that is a `device_traces` history entry, filled in one go: only the members in
    /// [`ENTRY_KEYS`], as a fixed record of [`Pickle`]'s `entries`. A GB snapshot holds
    /// millions of these; as generic dicts they took several times the file's size.
    Entry(usize),
}

/// Slot words: bit 63 clear is `Flat` (`start | len << 39`); set, bit 62 tells `Entry` from
/// `Own` and the rest is the index.
const NOT_FLAT: u64 = 1 << 63;
const ENTRY: u64 = 1 << 62;
const SLOT_LEN_SHIFT: u32 = 39;
const SLOT_MAX_LEN: usize = (1 << (63 - SLOT_LEN_SHIFT)) - 1;
const SLOT_MAX_START: usize = (1 << SLOT_LEN_SHIFT) - 1;

impl Slot {
    fn unpack(w: u64) -> Slot {
        if w & NOT_FLAT == 0 {
            Slot::Flat(
                (w & SLOT_MAX_START as u64) as usize,
                (w >> SLOT_LEN_SHIFT) as usize,
            )
        } else if w & ENTRY != 0 {
            Slot::Entry((w & !(NOT_FLAT | ENTRY)) as usize)
        } else {
            Slot::Own((w & !NOT_FLAT) as usize)
        }
    }

    /// The word of a flat slot, if its start and length fit.
    fn flat(start: usize, len: usize) -> Option<u64> {
        (start <= SLOT_MAX_START && len <= SLOT_MAX_LEN)
            .then_some(start as u64 | (len as u64) << SLOT_LEN_SHIFT)
    }
}

/// Containers of one item type: their items, mostly in one shared table, each described by
/// an 8-byte slot word (millions of containers; 24-byte enums were a quarter of the file).
#[derive(Debug, Clone)]
struct Store<T> {
    flat: Vec<T>,
    items: Vec<u64>,
    own: Vec<Vec<T>>,
}

impl<T: Copy> Store<T> {
    fn new() -> Self {
        Store {
            flat: Vec::new(),
            items: Vec::new(),
            own: Vec::new(),
        }
    }

    fn slot(&self, c: u64) -> Slot {
        Slot::unpack(self.items[c as usize])
    }

    /// Gives container `c` a vector of its own.
    fn set_own(&mut self, c: u64, v: Vec<T>) {
        self.own.push(v);
        self.items[c as usize] = NOT_FLAT | (self.own.len() as u64 - 1);
    }

    fn set_entry(&mut self, c: u64, r: usize) {
        self.items[c as usize] = NOT_FLAT | ENTRY | r as u64;
    }

    fn add(&mut self, items: &[T]) -> u64 {
        let start = self.flat.len();
        match Slot::flat(start, items.len()) {
            Some(w) => {
                self.flat.extend_from_slice(items);
                self.items.push(w);
            }
            None => {
                self.own.push(items.to_vec());
                self.items.push(NOT_FLAT | (self.own.len() as u64 - 1));
            }
        }
        self.items.len() as u64 - 1
    }

    fn extend(&mut self, c: u64, more: &[T]) {
        self.extend_with(c, more.iter().copied());
    }

    /// Adds items to container `c`: in place when its items end the flat table (or it has
    /// none yet), otherwise in a vector of its own, made once.
    fn extend_with(&mut self, c: u64, more: impl Iterator<Item = T>) {
        let end = self.flat.len();
        match self.slot(c) {
            Slot::Flat(start, len) if start + len == end || len == 0 => {
                let start = if len == 0 { end } else { start };
                self.flat.extend(more);
                match Slot::flat(start, self.flat.len() - start) {
                    Some(w) => self.items[c as usize] = w,
                    None => {
                        // Too long for a slot word: its items (the table's tail) move out.
                        let v = self.flat.split_off(start);
                        self.set_own(c, v);
                    }
                }
            }
            Slot::Flat(start, len) => {
                let mut v = self.flat[start..start + len].to_vec();
                v.extend(more);
                self.set_own(c, v);
            }
            Slot::Own(i) => self.own[i].extend(more),
            // Only dicts become entries, and `Reader::add_to_dict` turns a grown one back
            // into a generic dict first.
            Slot::Entry(_) => {
                let v: Vec<T> = more.collect();
                self.set_own(c, v);
            }
        }
    }

    fn get(&self, c: u64) -> &[T] {
        match self.slot(c) {
            Slot::Flat(start, len) => &self.flat[start..start + len],
            Slot::Own(i) => &self.own[i],
            Slot::Entry(_) => &[],
        }
    }
}

/// A parsed pickle: its values, over the input bytes.
#[derive(Debug, Clone)]
pub struct Pickle<'a> {
    buf: &'a [u8],
    texts: Texts,
    wide: Vec<i64>,
    floats: Vec<f64>,
    seqs: Store<ValueId>,
    maps: Store<(ValueId, ValueId)>,
    entries: Vec<[ValueId; ENTRY_KEYS.len()]>,
    /// The value STOP returned.
    pub root: ValueId,
}

impl<'a> Pickle<'a> {
    /// The value behind an id.
    pub fn get(&self, id: ValueId) -> Value<'_> {
        let d = id.data();
        match id.kind() {
            Kind::None | Kind::Absent => Value::None,
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
        self.texts.bytes(self.buf, t)
    }

    fn text(&self, t: u64) -> &str {
        // Checked when read: a Str span is UTF-8.
        std::str::from_utf8(self.bytes(t)).unwrap_or_default()
    }

    /// Number of strings and containers (scalars are not counted: they live in their ids).
    pub fn len(&self) -> usize {
        self.texts.len() + self.seqs.items.len() + self.maps.items.len()
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
        if let Some(r) = self.entry(id) {
            return r.get(key);
        }
        self.maps
            .get(id.data())
            .iter()
            .find(|(k, _)| k.kind() == Kind::Str && self.text_is(k.data(), key))
            .map(|(_, v)| *v)
    }

    /// The members of a `device_traces` history entry, when `id` is one read as a record.
    pub fn entry(&self, id: ValueId) -> Option<EntryRecord<'_>> {
        if id.kind() != Kind::Dict {
            return None;
        }
        match self.maps.slot(id.data()) {
            Slot::Entry(r) => Some(EntryRecord(&self.entries[r])),
            _ => None,
        }
    }

    /// The number of lists, tuples and sets: [`Pickle::seq_index`] is below it.
    pub fn seq_count(&self) -> usize {
        self.seqs.items.len()
    }

    /// How many dicts the pickle built.
    pub fn dict_count(&self) -> usize {
        self.maps.items.len()
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

    /// The items of a list, tuple or set (empty for anything else).
    pub fn items(&self, id: ValueId) -> &[ValueId] {
        match id.kind() {
            Kind::List | Kind::Tuple | Kind::Set => self.seqs.get(id.data()),
            _ => &[],
        }
    }

    /// An integer value (bools count as 0/1; floats that are whole numbers too).
    pub fn as_i64(&self, id: ValueId) -> Option<i64> {
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

/// The pickle machine: the tables it builds, and its stack, marks and memo.
struct Reader<'a> {
    /// Whether lists with equal items share them (off only in tests, to compare).
    share: bool,
    pk: Pickle<'a>,
    pos: usize,
    stack: Vec<ValueId>,
    /// Stack heights at each MARK, innermost last.
    marks: Vec<usize>,
    /// [`UNSET`] where nothing was stored.
    memo: Vec<ValueId>,
    /// (string index + 1, what it names) of recent dict keys, by string index modulo size.
    key_cache: [(u64, Option<KeySlot>); KEY_CACHE],
    /// Where in `seqs.flat` each distinct short list filled in one go is, by a hash of its
    /// items: every allocation's stack is a list of its own, mostly of the same frames as
    /// others, and sharing their items saves a tenth of a GB snapshot's memory.
    shared: FxHashMap<u64, usize>,
}

/// What a dict key names in a history entry.
#[derive(Debug, Clone, Copy)]
enum KeySlot {
    /// `ENTRY_KEYS[i]`.
    Kept(usize),
    /// `ENTRY_IGNORED[i]`.
    Ignored(usize),
}

const KEY_CACHE: usize = 16;

/// Lists filled in one go with at most this many items share equal items (stacks); longer
/// ones (the history itself) are not worth hashing.
const SHARE_MAX: usize = 4096;

/// A memo slot never stored to. Its kind bits are not a [`Kind`]: it never leaves the memo.
const UNSET: ValueId = ValueId(u64::MAX);

const NONE: ValueId = ValueId::new(Kind::None, 0);

/// The members of a `device_traces` history entry that are kept (see [`Slot::Entry`]).
const ENTRY_KEYS: [&str; 6] = ["action", "addr", "size", "stream", "time_us", "frames"];
/// Members an entry may also have, which nothing reads.
const ENTRY_IGNORED: [&str; 2] = ["compile_context", "user_metadata"];
const ABSENT: ValueId = ValueId::new(Kind::Absent, 0);

/// Parses a pickle holding plain data.
pub fn parse(buf: &[u8]) -> Result<Pickle<'_>, PickleError> {
    parse_with(buf, true)
}

/// [`parse`], except that a pickle that ends early (a writer killed while it wrote) yields
/// what it holds: every container still open is closed over the items read so far, a dict
/// that was still being filled is left out of its parent (a record missing members would
/// read as wrong data), and the offset of the cut is returned beside it.
pub fn parse_lenient(buf: &[u8]) -> Result<(Pickle<'_>, Option<usize>), PickleError> {
    let mut r = Reader::new(buf, true);
    match r.run() {
        Ok(root) => {
            r.pk.root = root;
            Ok((r.pk, None))
        }
        Err(PickleError::Truncated { offset }) => {
            r.pk.root = r.salvage(offset)?;
            Ok((r.pk, Some(offset)))
        }
        Err(e) => Err(e),
    }
}

fn parse_with(buf: &[u8], share: bool) -> Result<Pickle<'_>, PickleError> {
    let mut r = Reader::new(buf, share);
    r.pk.root = r.run()?;
    Ok(r.pk)
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8], share: bool) -> Reader<'a> {
        Reader {
            share,
            pk: Pickle {
                buf,
                texts: Texts::default(),
                wide: Vec::new(),
                floats: Vec::new(),
                seqs: Store::new(),
                maps: Store::new(),
                entries: Vec::new(),
                root: NONE,
            },
            pos: 0,
            stack: Vec::new(),
            marks: Vec::new(),
            memo: Vec::new(),
            key_cache: [(0, None); KEY_CACHE],
            shared: FxHashMap::default(),
        }
    }

    /// Items above the mark at `from` that were waiting for a single APPEND (a list of one
    /// item is pickled as the empty list, the item, APPEND, with no mark) go into their list:
    /// a container after an empty list, where the level holds key-value pairs at an odd count
    /// (`dict_level`: its pending items alternate key, value, so a container in a key's place
    /// is such an item), or after an empty list in a list's pending items.
    fn settle_single_appends(&mut self, from: usize, dict_level: bool) {
        loop {
            let n = self.stack.len();
            if n < from + 2 {
                return;
            }
            let (prev, top) = (self.stack[n - 2], self.stack[n - 1]);
            let item = matches!(
                top.kind(),
                Kind::List | Kind::Dict | Kind::Set | Kind::Tuple
            );
            let waiting = if dict_level {
                !(n - from).is_multiple_of(2) && item
            } else {
                matches!(top.kind(), Kind::List | Kind::Dict)
            };
            if !(waiting
                && matches!(prev.kind(), Kind::List | Kind::Set)
                && self.pk.items(prev).is_empty())
            {
                return;
            }
            self.pk.seqs.extend(prev.data(), &[top]);
            self.stack.pop();
        }
    }

    /// After a cut at `offset`: closes the open containers from the innermost out (see
    /// [`parse_lenient`]) and returns the bottom of the stack, the root being built.
    fn salvage(&mut self, offset: usize) -> Result<ValueId, PickleError> {
        let mut unfinished_dict: Option<ValueId> = None;
        // The bottom of the stack is a level too: a root filled by single SETITEMs.
        let mut levels = std::mem::take(&mut self.marks);
        levels.insert(0, 1);
        while let Some(from) = levels.pop() {
            if from > self.stack.len() || from == 0 {
                break;
            }
            if let Some(d) = unfinished_dict.take() {
                if self.stack.len() > from && self.stack.last() == Some(&d) {
                    self.stack.pop();
                }
            }
            let container = self.stack[from - 1];
            self.settle_single_appends(from, container.kind() == Kind::Dict);
            match container.kind() {
                Kind::List | Kind::Set => self.add_to_list(container, from, offset)?,
                Kind::Dict => {
                    if !(self.stack.len() - from).is_multiple_of(2) {
                        self.stack.pop(); // a key whose value never came
                    }
                    self.add_to_dict(container, from, offset)?;
                    unfinished_dict = Some(container);
                }
                // A tuple or anything else in the making: its items are dropped.
                _ => self.stack.truncate(from),
            }
        }
        self.stack
            .first()
            .copied()
            .ok_or(PickleError::Truncated { offset })
    }

    #[inline]
    fn take(&mut self, n: usize) -> Result<&'a [u8], PickleError> {
        if self.pk.buf.len() - self.pos < n {
            return Err(PickleError::Truncated { offset: self.pos });
        }
        let s = &self.pk.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    #[inline]
    fn u8(&mut self) -> Result<u8, PickleError> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<usize, PickleError> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]) as usize)
    }

    fn u32(&mut self) -> Result<usize, PickleError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
    }

    fn u64(&mut self) -> Result<usize, PickleError> {
        let b = self.take(8)?;
        let v = u64::from_le_bytes(b.try_into().expect("8 bytes"));
        usize::try_from(v).map_err(|_| PickleError::Truncated { offset: self.pos })
    }

    fn line(&mut self) -> Result<&'a [u8], PickleError> {
        let rest = &self.pk.buf[self.pos..];
        let n = memchr::memchr(b'\n', rest).ok_or(PickleError::Truncated {
            offset: self.pk.buf.len(),
        })?;
        self.pos += n + 1;
        Ok(&rest[..n])
    }

    fn malformed(&self, what: impl Into<String>, offset: usize) -> PickleError {
        PickleError::Malformed {
            what: what.into(),
            offset,
        }
    }

    #[inline]
    fn pop(&mut self, offset: usize) -> Result<ValueId, PickleError> {
        if self.stack.len() <= self.marks.last().copied().unwrap_or(0) && !self.marks.is_empty() {
            return Err(self.malformed("unexpected MARK on the stack", offset));
        }
        self.stack
            .pop()
            .ok_or_else(|| self.malformed("stack underflow", offset))
    }

    #[inline]
    fn top(&self, offset: usize) -> Result<ValueId, PickleError> {
        match self.stack.last() {
            Some(v) if self.stack.len() > self.marks.last().copied().unwrap_or(0) => Ok(*v),
            _ => Err(self.malformed("expected a value on the stack", offset)),
        }
    }

    /// The value just below the items `stack[from..]` of a popped MARK.
    fn below(&self, from: usize, offset: usize) -> Result<ValueId, PickleError> {
        let floor = self.marks.last().copied().unwrap_or(0);
        match from.checked_sub(1) {
            Some(i) if i >= floor => Ok(self.stack[i]),
            _ => Err(self.malformed("expected a value on the stack", offset)),
        }
    }

    /// The stack height at the topmost MARK, which is removed; the items above it are
    /// `stack[height..]`.
    #[inline]
    fn pop_mark(&mut self, offset: usize) -> Result<usize, PickleError> {
        self.marks
            .pop()
            .ok_or_else(|| self.malformed("no MARK on the stack", offset))
    }

    fn str_span(&mut self, start: usize, n: usize, offset: usize) -> Result<ValueId, PickleError> {
        if std::str::from_utf8(&self.pk.buf[start..start + n]).is_err() {
            return Err(self.malformed("string is not UTF-8", offset));
        }
        Ok(ValueId::new(
            Kind::Str,
            self.pk.texts.push(Text::Span(start, n)),
        ))
    }

    fn owned_str(&mut self, s: String) -> ValueId {
        ValueId::new(Kind::Str, self.pk.texts.push(Text::Owned(s.into())))
    }

    fn memo_put(&mut self, idx: usize, offset: usize) -> Result<(), PickleError> {
        let v = self.top(offset)?;
        if idx > self.pk.buf.len() {
            return Err(self.malformed(format!("memo index {idx} out of range"), offset));
        }
        if self.memo.len() <= idx {
            self.memo.resize(idx + 1, UNSET);
        }
        self.memo[idx] = v;
        Ok(())
    }

    fn memo_get(&mut self, idx: usize, offset: usize) -> Result<(), PickleError> {
        let v = self
            .memo
            .get(idx)
            .copied()
            .filter(|&v| v != UNSET)
            .ok_or_else(|| self.malformed(format!("memo index {idx} was never stored"), offset))?;
        self.stack.push(v);
        Ok(())
    }

    /// Adds `stack[from..]` to the list or set `list`, and drops them from the stack.
    fn add_to_list(
        &mut self,
        list: ValueId,
        from: usize,
        offset: usize,
    ) -> Result<(), PickleError> {
        if !matches!(list.kind(), Kind::List | Kind::Set) {
            return Err(self.malformed("APPEND to something that is not a list", offset));
        }
        let c = list.data();
        let fresh = matches!(self.pk.seqs.slot(c), Slot::Flat(_, 0));
        let start = self.pk.seqs.flat.len();
        self.pk.seqs.extend(c, &self.stack[from..]);
        self.stack.truncate(from);
        if fresh && self.share {
            if let Slot::Flat(s, len) = self.pk.seqs.slot(c) {
                if s == start && len <= SHARE_MAX {
                    let at = self.share_items(start);
                    if let Some(w) = Slot::flat(at, len) {
                        self.pk.seqs.items[c as usize] = w;
                    }
                }
            }
        }
        Ok(())
    }

    /// Adds `stack[from..]` as key, value pairs to the dict `dict`, and drops them.
    fn add_to_dict(
        &mut self,
        dict: ValueId,
        from: usize,
        offset: usize,
    ) -> Result<(), PickleError> {
        if !(self.stack.len() - from).is_multiple_of(2) {
            return Err(self.malformed("SETITEMS with an odd number of items", offset));
        }
        if dict.kind() != Kind::Dict {
            return Err(self.malformed("SETITEM on something that is not a dict", offset));
        }
        let c = dict.data();
        match self.pk.maps.slot(c) {
            Slot::Flat(_, 0) => {
                if let Some(rec) = self.entry_record(from) {
                    self.pk.entries.push(rec);
                    self.pk.maps.set_entry(c, self.pk.entries.len() - 1);
                    self.stack.truncate(from);
                    return Ok(());
                }
            }
            Slot::Entry(r) => {
                // Grown after all: back to a generic dict of the kept members.
                let rec = self.pk.entries[r];
                let keys: Vec<ValueId> = ENTRY_KEYS
                    .iter()
                    .map(|k| self.owned_str(k.to_string()))
                    .collect();
                let pairs: Vec<(ValueId, ValueId)> = keys
                    .into_iter()
                    .zip(rec)
                    .filter(|(_, v)| v.kind() != Kind::Absent)
                    .collect();
                self.pk.maps.set_own(c, pairs);
            }
            _ => {}
        }
        let pairs = self.stack[from..].chunks_exact(2).map(|kv| (kv[0], kv[1]));
        self.pk.maps.extend_with(c, pairs);
        self.stack.truncate(from);
        Ok(())
    }

    /// The record of a history entry, if `stack[from..]` (key, value, key, value, ...) is
    /// one: an `action` member, string keys, nothing beyond [`ENTRY_KEYS`] and
    /// [`ENTRY_IGNORED`], no key twice.
    fn entry_record(&mut self, from: usize) -> Option<[ValueId; ENTRY_KEYS.len()]> {
        let mut rec = [ABSENT; ENTRY_KEYS.len()];
        let mut ignored = 0u8;
        for i in (from..self.stack.len()).step_by(2) {
            let (k, v) = (self.stack[i], self.stack[i + 1]);
            match self.key_slot(k)? {
                KeySlot::Kept(i) => {
                    if rec[i] != ABSENT {
                        return None;
                    }
                    rec[i] = v;
                }
                KeySlot::Ignored(i) => {
                    if ignored & (1 << i) != 0 {
                        return None;
                    }
                    ignored |= 1 << i;
                }
            }
        }
        (rec[0] != ABSENT).then_some(rec)
    }

    /// Which entry member the string `k` names, if any. Pickles share each key string through
    /// the memo, so a small cache by string index answers nearly every lookup without
    /// comparing text (`add_to_dict`, where the comparisons ran, was a tenth of the unpickle's
    /// profile; the cache's own gain was not measured apart from the session's other steps).
    #[inline]
    fn key_slot(&mut self, k: ValueId) -> Option<KeySlot> {
        if k.kind() != Kind::Str {
            return None;
        }
        let t = k.data();
        let line = &mut self.key_cache[(t % KEY_CACHE as u64) as usize];
        if line.0 == t + 1 {
            return line.1;
        }
        let key = self.pk.texts.bytes(self.pk.buf, t);
        let slot = if let Some(i) = ENTRY_KEYS.iter().position(|e| e.as_bytes() == key) {
            Some(KeySlot::Kept(i))
        } else {
            ENTRY_IGNORED
                .iter()
                .position(|e| e.as_bytes() == key)
                .map(KeySlot::Ignored)
        };
        self.key_cache[(t % KEY_CACHE as u64) as usize] = (t + 1, slot);
        slot
    }

    fn int(&mut self, v: i64) -> ValueId {
        if (-(1i64 << (PAYLOAD_BITS - 1))..1i64 << (PAYLOAD_BITS - 1)).contains(&v) {
            ValueId::new(Kind::Int, v as u64)
        } else {
            self.pk.wide.push(v);
            ValueId::new(Kind::WideInt, self.pk.wide.len() as u64 - 1)
        }
    }

    fn float(&mut self, v: f64) -> ValueId {
        self.pk.floats.push(v);
        ValueId::new(Kind::Float, self.pk.floats.len() as u64 - 1)
    }

    /// A new container holding `stack[from..]`, which are dropped from the stack.
    fn seq_from_stack(&mut self, kind: Kind, from: usize) -> ValueId {
        let id = self.pk.seqs.add(&self.stack[from..]);
        self.stack.truncate(from);
        ValueId::new(kind, id)
    }

    fn long(&mut self, b: &[u8], start: usize) -> ValueId {
        if b.is_empty() {
            return self.int(0);
        }
        if b.len() <= 8 {
            let neg = b[b.len() - 1] & 0x80 != 0;
            let mut bytes = if neg { [0xffu8; 8] } else { [0u8; 8] };
            bytes[..b.len()].copy_from_slice(b);
            self.int(i64::from_le_bytes(bytes))
        } else {
            ValueId::new(Kind::BigInt, self.pk.texts.push(Text::Span(start, b.len())))
        }
    }

    /// Where the items just read into `seqs.flat[start..]` are kept: an earlier list's equal
    /// items, the new ones then dropped, or `start` itself. Safe to share: a list that grows
    /// later moves its items to a vector of its own first ([`Store::extend_with`]).
    fn share_items(&mut self, start: usize) -> usize {
        let items = &self.pk.seqs.flat[start..];
        if items.is_empty() {
            return start;
        }
        let h = {
            let mut hasher = FxHasher::default();
            items.hash(&mut hasher);
            hasher.finish()
        };
        match self.shared.get(&h) {
            Some(&at) if self.pk.seqs.flat.get(at..at + items.len()) == Some(items) => {
                self.pk.seqs.flat.truncate(start);
                at
            }
            // Another list with this hash: kept apart.
            Some(_) => start,
            None => {
                self.shared.insert(h, start);
                start
            }
        }
    }

    fn run(&mut self) -> Result<ValueId, PickleError> {
        loop {
            let offset = self.pos;
            let op = self.u8()?;
            match op {
                0x80 => {
                    let proto = self.u8()?;
                    if proto > 5 {
                        return Err(self.malformed(format!("unsupported protocol {proto}"), offset));
                    }
                }
                0x95 => {
                    self.u64()?; // FRAME: a length hint only
                }
                b'.' => return self.pop(offset),
                b'(' => self.marks.push(self.stack.len()),
                b'}' => {
                    let id = self.pk.maps.add(&[]);
                    self.stack.push(ValueId::new(Kind::Dict, id));
                }
                b']' => {
                    let id = self.pk.seqs.add(&[]);
                    self.stack.push(ValueId::new(Kind::List, id));
                }
                b')' => {
                    let id = self.pk.seqs.add(&[]);
                    self.stack.push(ValueId::new(Kind::Tuple, id));
                }
                0x8f => {
                    let id = self.pk.seqs.add(&[]);
                    self.stack.push(ValueId::new(Kind::Set, id));
                }
                b'd' => {
                    let from = self.pop_mark(offset)?;
                    let id = ValueId::new(Kind::Dict, self.pk.maps.add(&[]));
                    self.add_to_dict(id, from, offset)?;
                    self.stack.push(id);
                }
                b'l' => {
                    let from = self.pop_mark(offset)?;
                    let v = self.seq_from_stack(Kind::List, from);
                    self.stack.push(v);
                }
                b't' => {
                    let from = self.pop_mark(offset)?;
                    let v = self.seq_from_stack(Kind::Tuple, from);
                    self.stack.push(v);
                }
                0x91 => {
                    let from = self.pop_mark(offset)?;
                    let v = self.seq_from_stack(Kind::Set, from);
                    self.stack.push(v);
                }
                0x85..=0x87 => {
                    let n = (op - 0x84) as usize;
                    let floor = self.marks.last().copied().unwrap_or(0);
                    if self.stack.len() < floor + n {
                        return Err(self.malformed("stack underflow", offset));
                    }
                    let from = self.stack.len() - n;
                    let v = self.seq_from_stack(Kind::Tuple, from);
                    self.stack.push(v);
                }
                b'a' => {
                    let v = self.pop(offset)?;
                    let list = self.top(offset)?;
                    if !matches!(list.kind(), Kind::List | Kind::Set) {
                        return Err(
                            self.malformed("APPEND to something that is not a list", offset)
                        );
                    }
                    self.pk.seqs.extend(list.data(), &[v]);
                }
                b'e' | 0x90 => {
                    let from = self.pop_mark(offset)?;
                    let list = self.below(from, offset)?;
                    self.add_to_list(list, from, offset)?;
                }
                b's' => {
                    // One key and value: the same path as SETITEMS, so a history entry read
                    // as a record keeps its members when it grows.
                    let floor = self.marks.last().copied().unwrap_or(0);
                    let from = self.stack.len().checked_sub(2).filter(|&f| f >= floor);
                    let from = from.ok_or_else(|| self.malformed("stack underflow", offset))?;
                    let d = self.below(from, offset)?;
                    self.add_to_dict(d, from, offset)?;
                }
                b'u' => {
                    let from = self.pop_mark(offset)?;
                    let d = self.below(from, offset)?;
                    self.add_to_dict(d, from, offset)?;
                }
                b'J' => {
                    let b = self.take(4)?;
                    let v = self.int(i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as i64);
                    self.stack.push(v);
                }
                b'K' => {
                    let v = self.u8()? as i64;
                    let v = self.int(v);
                    self.stack.push(v);
                }
                b'M' => {
                    let v = self.u16()? as i64;
                    let v = self.int(v);
                    self.stack.push(v);
                }
                0x8a | 0x8b => {
                    let n = if op == 0x8a {
                        self.u8()? as usize
                    } else {
                        self.u32()?
                    };
                    let start = self.pos;
                    let b = self.take(n)?;
                    let v = self.long(b, start);
                    self.stack.push(v);
                }
                b'I' | b'L' => {
                    let line = self.line()?;
                    let t = std::str::from_utf8(line)
                        .unwrap_or("")
                        .trim_end_matches('L');
                    let v = match t {
                        "00" => ValueId::new(Kind::Bool, 0),
                        "01" => ValueId::new(Kind::Bool, 1),
                        _ => {
                            let v = t
                                .parse()
                                .map_err(|_| self.malformed("bad integer text", offset))?;
                            self.int(v)
                        }
                    };
                    self.stack.push(v);
                }
                b'G' => {
                    let b = self.take(8)?;
                    let v = f64::from_be_bytes(b.try_into().expect("8 bytes"));
                    let v = self.float(v);
                    self.stack.push(v);
                }
                b'F' => {
                    let line = self.line()?;
                    let v: f64 = std::str::from_utf8(line)
                        .ok()
                        .and_then(|t| t.parse().ok())
                        .ok_or_else(|| self.malformed("bad float text", offset))?;
                    let v = self.float(v);
                    self.stack.push(v);
                }
                b'N' => self.stack.push(NONE),
                0x88 => self.stack.push(ValueId::new(Kind::Bool, 1)),
                0x89 => self.stack.push(ValueId::new(Kind::Bool, 0)),
                0x8c | b'X' | 0x8d => {
                    let n = match op {
                        0x8c => self.u8()? as usize,
                        b'X' => self.u32()?,
                        _ => self.u64()?,
                    };
                    let start = self.pos;
                    self.take(n)?;
                    let v = self.str_span(start, n, offset)?;
                    self.stack.push(v);
                }
                b'U' | b'T' => {
                    // Python 2 byte strings: decode as latin-1 would; snapshots use them only for ASCII.
                    let n = if op == b'U' {
                        self.u8()? as usize
                    } else {
                        self.u32()?
                    };
                    let b = self.take(n)?;
                    let s: String = b.iter().map(|&c| c as char).collect();
                    let v = self.owned_str(s);
                    self.stack.push(v);
                }
                b'V' => {
                    let start = self.pos;
                    let line = self.line()?;
                    let v = self.str_span(start, line.len(), offset)?;
                    self.stack.push(v);
                }
                b'S' => {
                    let line = self.line()?;
                    let t = std::str::from_utf8(line).unwrap_or("");
                    let t = t.trim_matches(|c| c == '\'' || c == '"');
                    let v = self.owned_str(t.to_string());
                    self.stack.push(v);
                }
                b'C' | b'B' | 0x8e | 0x96 => {
                    let n = match op {
                        b'C' => self.u8()? as usize,
                        b'B' => self.u32()?,
                        _ => self.u64()?,
                    };
                    let start = self.pos;
                    self.take(n)?;
                    let v = ValueId::new(Kind::Bytes, self.pk.texts.push(Text::Span(start, n)));
                    self.stack.push(v);
                }
                0x94 => {
                    let idx = self.memo.len();
                    self.memo_put(idx, offset)?;
                }
                b'q' => {
                    let idx = self.u8()? as usize;
                    self.memo_put(idx, offset)?;
                }
                b'r' => {
                    let idx = self.u32()?;
                    self.memo_put(idx, offset)?;
                }
                b'p' => {
                    let line = self.line()?;
                    let idx = std::str::from_utf8(line)
                        .ok()
                        .and_then(|t| t.parse().ok())
                        .ok_or_else(|| self.malformed("bad PUT index", offset))?;
                    self.memo_put(idx, offset)?;
                }
                b'h' => {
                    let idx = self.u8()? as usize;
                    self.memo_get(idx, offset)?;
                }
                b'j' => {
                    let idx = self.u32()?;
                    self.memo_get(idx, offset)?;
                }
                b'g' => {
                    let line = self.line()?;
                    let idx = std::str::from_utf8(line)
                        .ok()
                        .and_then(|t| t.parse().ok())
                        .ok_or_else(|| self.malformed("bad GET index", offset))?;
                    self.memo_get(idx, offset)?;
                }
                b'0' => {
                    // POP takes the topmost thing, a MARK included.
                    if self.marks.last() == Some(&self.stack.len()) {
                        self.marks.pop();
                    } else {
                        self.stack
                            .pop()
                            .ok_or_else(|| self.malformed("POP on an empty stack", offset))?;
                    }
                }
                b'1' => {
                    let from = self.pop_mark(offset)?;
                    self.stack.truncate(from);
                }
                b'2' => {
                    let v = self.top(offset)?;
                    self.stack.push(v);
                }
                _ => {
                    let forbidden = match op {
                        b'c' => Some("GLOBAL"),
                        0x93 => Some("STACK_GLOBAL"),
                        b'R' => Some("REDUCE"),
                        b'b' => Some("BUILD"),
                        b'i' => Some("INST"),
                        b'o' => Some("OBJ"),
                        0x81 => Some("NEWOBJ"),
                        0x92 => Some("NEWOBJ_EX"),
                        b'P' => Some("PERSID"),
                        b'Q' => Some("BINPERSID"),
                        0x82 => Some("EXT1"),
                        0x83 => Some("EXT2"),
                        0x84 => Some("EXT4"),
                        0x97 => Some("NEXT_BUFFER"),
                        0x98 => Some("READONLY_BUFFER"),
                        _ => None,
                    };
                    return Err(match forbidden {
                        Some(opcode) => PickleError::Forbidden { opcode, offset },
                        None => PickleError::UnknownOpcode { byte: op, offset },
                    });
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether two parses hold the same values: equal scalars and texts, containers with equal
    /// items in order, history records alike in both. Shared objects are compared once (by the
    /// pair of ids), so cyclic pickles terminate.
    fn same(a: &Pickle<'_>, b: &Pickle<'_>) -> bool {
        let mut seen = std::collections::HashSet::new();
        let mut todo = vec![(a.root, b.root)];
        while let Some((x, y)) = todo.pop() {
            if !seen.insert((x, y)) {
                continue;
            }
            match (a.entry(x), b.entry(y)) {
                (Some(rx), Some(ry)) => {
                    for k in ENTRY_KEYS {
                        match (rx.get(k), ry.get(k)) {
                            (Some(u), Some(v)) => todo.push((u, v)),
                            (None, None) => {}
                            _ => return false,
                        }
                    }
                    continue;
                }
                (None, None) => {}
                _ => return false,
            }
            let ok = match (a.get(x), b.get(y)) {
                (Value::List(u), Value::List(v))
                | (Value::Tuple(u), Value::Tuple(v))
                | (Value::Set(u), Value::Set(v)) => {
                    u.len() == v.len() && {
                        todo.extend(u.iter().copied().zip(v.iter().copied()));
                        true
                    }
                }
                (Value::Dict(u), Value::Dict(v)) => {
                    u.len() == v.len() && {
                        for (&(k1, v1), &(k2, v2)) in u.iter().zip(v) {
                            todo.push((k1, k2));
                            todo.push((v1, v2));
                        }
                        true
                    }
                }
                // NaN floats compare by bits.
                (Value::Float(u), Value::Float(v)) => u.to_bits() == v.to_bits(),
                (u, v) => u == v,
            };
            if !ok {
                return false;
            }
        }
        true
    }

    #[test]
    fn reads_protocol_2_dict_with_memo_sharing() {
        // pickle.dumps({'a': [1, -2, 3.5, 'x'], 'b': None, 'c': (True,)}, protocol=2), hand-built
        // with a shared list referenced twice through the memo.
        let mut p = vec![0x80, 2, b'}', b'q', 0, b'('];
        p.extend_from_slice(&[0x8c, 1, b'a', b']', b'q', 1, b'(', b'K', 1, 0x8a, 1, 0xfe]);
        p.push(b'G');
        p.extend_from_slice(&3.5f64.to_be_bytes());
        p.extend_from_slice(&[0x8c, 1, b'x', b'e']);
        p.extend_from_slice(&[0x8c, 1, b'b', b'h', 1]);
        p.extend_from_slice(&[0x8c, 1, b'c', 0x88, 0x85, b'u', b'.']);
        let pk = parse(&p).unwrap();
        let a = pk.dict_get(pk.root, "a").unwrap();
        let b = pk.dict_get(pk.root, "b").unwrap();
        assert_eq!(a, b, "memo GET shares the value");
        let items = pk.items(a);
        assert_eq!(pk.as_i64(items[0]), Some(1));
        assert_eq!(pk.as_i64(items[1]), Some(-2));
        assert_eq!(pk.as_f64(items[2]), Some(3.5));
        assert_eq!(pk.as_str(items[3]), Some("x"));
        let c = pk.dict_get(pk.root, "c").unwrap();
        assert_eq!(pk.get(pk.items(c)[0]), Value::Bool(true));
    }

    #[test]
    fn refuses_code_execution_opcodes() {
        // pickle.dumps(os.system) style: GLOBAL 'posix system', then REDUCE.
        let evil = b"cposix\nsystem\n(S'echo pwned'\ntR.";
        match parse(evil) {
            Err(PickleError::Forbidden { opcode, offset }) => {
                assert_eq!(opcode, "GLOBAL");
                assert_eq!(offset, 0);
            }
            other => panic!("{other:?}"),
        }
        let stack_global = [
            0x80, 4, 0x8c, 2, b'o', b's', 0x8c, 6, b's', b'y', b's', b't', b'e', b'm', 0x93,
        ];
        assert!(matches!(
            parse(&stack_global),
            Err(PickleError::Forbidden {
                opcode: "STACK_GLOBAL",
                offset: 14
            })
        ));
    }

    #[test]
    fn truncated_and_garbage_inputs_are_errors() {
        assert!(matches!(
            parse(&[0x80, 2, b'X', 9, 0, 0]),
            Err(PickleError::Truncated { .. })
        ));
        assert!(parse(&[0x80, 2, b']']).is_err());
        assert!(parse(&[0xff]).is_err());
        assert!(parse(&[b'h', 3]).is_err());
        assert!(parse(&[]).is_err());
        // A huge length field must not allocate.
        assert!(parse(&[0x80, 4, 0x8d, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f]).is_err());
    }

    #[test]
    fn long1_sign_extends() {
        // LONG1 of 2 bytes 00 80, of 2 bytes ff 00, of 9 zero bytes, in a tuple.
        let mut p = vec![
            0x80, 2, b'(', 0x8a, 2, 0x00, 0x80, 0x8a, 2, 0xff, 0x00, 0x8a, 9,
        ];
        p.extend_from_slice(&[0; 9]);
        p.extend_from_slice(b"t.");
        let pk = parse(&p).unwrap();
        let v = pk.items(pk.root);
        assert_eq!(pk.get(v[0]), Value::Int(-32768));
        assert_eq!(pk.get(v[1]), Value::Int(255));
        assert_eq!(pk.get(v[2]), Value::BigInt(&[0; 9]));
    }

    #[test]
    fn containers_grown_in_several_batches_keep_their_items() {
        // [ [1], then a second list filled, then 2 and 3 appended to the first ]: the first
        // list's items are no longer at the end of the shared table when it grows again.
        let p = [
            0x80, 2, b']', b'q', 0, b'(', b'K', 1, b'e', // a = [1]
            b']', b'(', b'K', 9, b'e', // b = [9]
            b'h', 0, b'(', b'K', 2, b'K', 3, b'e', b'0', // a += [2, 3]
            b'0', b'h', 0, b'.',
        ];
        let pk = parse(&p).unwrap();
        let items: Vec<i64> = pk
            .items(pk.root)
            .iter()
            .map(|&v| pk.as_i64(v).unwrap())
            .collect();
        assert_eq!(items, [1, 2, 3]);
    }

    #[test]
    fn history_entries_read_as_records_answer_like_dicts() {
        // [{'action': 'alloc', 'addr': 2**50, 'frames': [], 'user_metadata': ''},
        //  {'action': 'free', 'extra': 1}]: the first becomes a record, the second (a member
        //  no record keeps) stays a dict.
        let mut p = vec![0x80, 2, b']', b'(', b'}', b'('];
        p.extend_from_slice(&[0x8c, 6]);
        p.extend_from_slice(b"action");
        p.extend_from_slice(&[0x8c, 5]);
        p.extend_from_slice(b"alloc");
        p.extend_from_slice(&[0x8c, 4]);
        p.extend_from_slice(b"addr");
        p.extend_from_slice(&[0x8a, 8]);
        p.extend_from_slice(&(1i64 << 50).to_le_bytes());
        p.extend_from_slice(&[0x8c, 6]);
        p.extend_from_slice(b"frames");
        p.push(b']');
        p.extend_from_slice(&[0x8c, 13]);
        p.extend_from_slice(b"user_metadata");
        p.extend_from_slice(&[0x8c, 0, b'u', b'}', b'(', 0x8c, 6]);
        p.extend_from_slice(b"action");
        p.extend_from_slice(&[0x8c, 4]);
        p.extend_from_slice(b"free");
        p.extend_from_slice(&[0x8c, 5]);
        p.extend_from_slice(b"extra");
        p.extend_from_slice(&[b'K', 1, b'u', b'e', b'.']);
        let pk = parse(&p).unwrap();
        let v = pk.items(pk.root);
        assert!(pk.entry(v[0]).is_some());
        assert!(pk.entry(v[1]).is_none());
        let a = |i: usize, k: &str| pk.dict_get(v[i], k);
        assert_eq!(pk.as_str(a(0, "action").unwrap()), Some("alloc"));
        assert_eq!(pk.as_i64(a(0, "addr").unwrap()), Some(1 << 50));
        assert_eq!(pk.items(a(0, "frames").unwrap()), &[] as &[ValueId]);
        assert_eq!(a(0, "size"), None);
        assert_eq!(pk.as_str(a(1, "action").unwrap()), Some("free"));
        assert_eq!(pk.as_i64(a(1, "extra").unwrap()), Some(1));
    }

    #[test]
    fn setitem_after_a_history_record_keeps_its_members() {
        // d = {'action': 'alloc'} (read as a record), then d['size'] = 7 with SETITEM.
        let mut p = vec![0x80, 2, b'}', b'(', 0x8c, 6];
        p.extend_from_slice(b"action");
        p.extend_from_slice(&[0x8c, 5]);
        p.extend_from_slice(b"alloc");
        p.extend_from_slice(&[b'u', 0x8c, 4]);
        p.extend_from_slice(b"size");
        p.extend_from_slice(&[b'K', 7, b's', b'.']);
        let pk = parse(&p).unwrap();
        let get = |k: &str| pk.dict_get(pk.root, k);
        assert_eq!(pk.as_str(get("action").unwrap()), Some("alloc"));
        assert_eq!(pk.as_i64(get("size").unwrap()), Some(7));
    }

    #[test]
    fn wide_and_narrow_integers_round_trip() {
        for v in [
            0i64,
            -1,
            1 << 59,
            (1 << 59) - 1,
            -(1 << 59),
            i64::MIN,
            i64::MAX,
            1_795_308_187_017_576,
        ] {
            let mut p = vec![0x8a, 8];
            p.extend_from_slice(&v.to_le_bytes());
            p.push(b'.');
            let pk = parse(&p).unwrap();
            assert_eq!(pk.as_i64(pk.root), Some(v));
        }
    }

    /// Protocol 4 opcodes with the memo counted, for building pickles in tests.
    struct W {
        out: Vec<u8>,
        memo: usize,
        /// BINPUT / LONG_BINPUT with explicit indices (protocol 2) instead of MEMOIZE.
        explicit: bool,
    }

    impl W {
        fn new() -> W {
            W {
                out: vec![0x80, 4],
                memo: 0,
                explicit: false,
            }
        }
        fn op(&mut self, b: &[u8]) -> &mut W {
            self.out.extend_from_slice(b);
            self
        }
        /// MEMOIZE; returns the index.
        fn put(&mut self) -> usize {
            match (self.explicit, self.memo) {
                (false, _) => self.out.push(0x94),
                (true, i) if i < 256 => self.out.extend_from_slice(&[b'q', i as u8]),
                (true, i) => {
                    self.out.push(b'r');
                    self.out.extend_from_slice(&(i as u32).to_le_bytes());
                }
            }
            self.memo += 1;
            self.memo - 1
        }
        fn get(&mut self, i: usize) -> &mut W {
            if i < 256 {
                self.op(&[b'h', i as u8])
            } else {
                let mut b = vec![b'j'];
                b.extend_from_slice(&(i as u32).to_le_bytes());
                self.op(&b)
            }
        }
        fn str(&mut self, t: &str) -> &mut W {
            self.op(&[0x8c, t.len() as u8]);
            self.op(t.as_bytes())
        }
        fn long(&mut self, v: i64) -> &mut W {
            self.op(&[0x8a, 8]);
            self.op(&v.to_le_bytes())
        }
    }

    #[test]
    fn issue7_lists_with_equal_items_share_them_and_grow_apart() {
        // [[f, g], [g], [f, g], [f, g]] over two memoised dicts f, g; then the third list
        // grows by [g] (APPENDS on a memo reference).
        let mut w = W::new();
        w.op(b"]");
        w.put();
        w.op(b"(}");
        let f = w.put();
        w.op(b"}");
        let g = w.put();
        let mut lists = Vec::new();
        for items in [&[f, g][..], &[g], &[f, g], &[f, g]] {
            w.op(b"]");
            lists.push(w.put());
            w.op(b"(");
            for &i in items {
                w.get(i);
            }
            w.op(b"e");
        }
        w.op(b"e");
        w.get(lists[2]).op(b"(").get(g).op(b"e0.");
        let pk = parse(&w.out).unwrap();
        assert!(same(&pk, &parse_with(&w.out, false).unwrap()));
        let top = pk.items(pk.root);
        let (fv, gv) = (top[0], top[1]);
        assert_eq!(pk.items(top[2]), [fv, gv]);
        assert_eq!(pk.items(top[3]), [gv]);
        assert_eq!(pk.items(top[4]), [fv, gv, gv], "grew apart");
        assert_eq!(pk.items(top[5]), [fv, gv]);
        assert_eq!(
            pk.items(top[2]).as_ptr(),
            pk.items(top[5]).as_ptr(),
            "equal items stored once"
        );
    }

    #[test]
    fn issue7_long_containers_and_texts_leave_the_packed_words() {
        // A list of 2^24 items is past a flat slot's length; it moves to a vector of its own.
        let n = SLOT_MAX_LEN + 1;
        let mut p = vec![0x80, 2, b']', b'('];
        p.extend(std::iter::repeat_n([b'K', 7], n).flatten());
        p.extend_from_slice(b"e.");
        let pk = parse(&p).unwrap();
        assert_eq!(pk.items(pk.root).len(), n);
        assert!(matches!(pk.seqs.slot(0), Slot::Own(_)));
        assert!(pk.items(pk.root).iter().all(|&v| pk.as_i64(v) == Some(7)));
        // The same made at once (MARK ... LIST) goes to its own vector straight away.
        let mut p = vec![0x80, 2, b'('];
        p.extend(std::iter::repeat_n([b'K', 7], n).flatten());
        p.extend_from_slice(b"l.");
        let pk = parse(&p).unwrap();
        assert_eq!(pk.items(pk.root).len(), n);
        assert!(matches!(pk.seqs.slot(0), Slot::Own(_)));
        // A string past a text word's length goes to the side table.
        let n = TEXT_MAX_LEN + 1;
        let mut p = vec![0x80, 2, b'X'];
        p.extend_from_slice(&(n as u32).to_le_bytes());
        p.extend(std::iter::repeat_n(b'a', n));
        p.push(b'.');
        let pk = parse(&p).unwrap();
        assert_eq!(pk.as_str(pk.root).map(str::len), Some(n));
        assert_eq!(pk.texts.side.len(), 1);
    }

    /// A history of entries in many shapes, each drawn from one number: members present or
    /// not, keys written out or by the memo, frames lists new, shared, empty or holding a
    /// new frame dict, members no record keeps, duplicate keys, FRAME opcodes; and lists
    /// grown afterwards.
    fn history_pickle(choices: &[u32], explicit: bool) -> Vec<u8> {
        let mut w = W::new();
        if explicit {
            w.out[1] = 2;
            w.explicit = true;
        }
        w.op(b"]");
        w.put();
        w.op(b"(]");
        w.put();
        w.op(b"(");
        let mut frames = Vec::new();
        let mut name = None;
        for f in ["f", "g", "h"] {
            w.op(b"}");
            frames.push(w.put());
            match name {
                Some(n) => {
                    w.get(n);
                }
                None => {
                    w.str("name");
                    name = Some(w.put());
                }
            }
            w.str(f).put();
            w.op(b"s");
        }
        w.op(b"e]");
        w.put();
        w.op(b"(");
        let mut keys: std::collections::HashMap<&str, usize> = Default::default();
        let mut lists = Vec::new();
        let mut actions = Vec::new();
        for (n, &c) in choices.iter().enumerate() {
            let bit = |i: u32| c >> i & 1 == 1;
            w.op(b"}");
            w.put();
            w.op(b"(");
            let mut members = vec!["action", "addr", "size", "stream", "time_us", "frames"];
            members.retain(|m| *m == "action" && !bit(20) || !bit(members_bit(m)));
            if bit(11) {
                members.push("compile_context");
            }
            if bit(12) && bit(13) {
                members.push("unknown");
            }
            if bit(14) && bit(15) {
                members.push("addr");
            }
            for m in members {
                if bit(16) && bit(17) {
                    w.op(&[0x95, 0, 0, 0, 0, 0, 0, 0, 0]);
                }
                match keys.get(m) {
                    Some(&k) if !bit(18) => {
                        w.get(k);
                    }
                    _ => {
                        w.str(m);
                        let k = w.put();
                        keys.insert(m, k);
                    }
                }
                match m {
                    "action" => match actions.get(c as usize % 4) {
                        Some(&a) if bit(19) => {
                            w.get(a);
                        }
                        _ => {
                            w.str(["alloc", "free_requested", "free_completed", "oom"][n % 4]);
                            actions.push(w.put());
                        }
                    },
                    "addr" | "time_us" => {
                        w.long((n as i64) << 40 | c as i64);
                    }
                    "size" => {
                        w.op(&[b'M', c as u8, 1]);
                    }
                    "stream" => {
                        w.op(if bit(9) { b"N" } else { b"K\x07" });
                    }
                    "frames" => match (c >> 2) % 4 {
                        0 => {
                            w.op(b"]");
                            w.put();
                        }
                        1 if !lists.is_empty() => {
                            w.get(lists[c as usize % lists.len()]);
                        }
                        _ => {
                            w.op(b"]");
                            lists.push(w.put());
                            w.op(b"(");
                            for i in 0..(c >> 4) % 4 + 1 {
                                w.get(frames[(c >> (5 + i)) as usize % frames.len()]);
                            }
                            if (c >> 2) % 4 == 3 && bit(10) {
                                // A frame dict of its own, written inside the list.
                                w.op(b"}");
                                frames.push(w.put());
                                w.get(name.unwrap()).str("new").put();
                                w.op(b"s");
                            }
                            w.op(b"e");
                        }
                    },
                    _ => {
                        w.op(b"K\x01");
                    }
                }
            }
            w.op(b"u");
        }
        w.op(b"e");
        // Lists grown afterwards (APPENDS onto a memo reference, then POP).
        for &c in choices.iter().take(3) {
            if let Some(&l) = lists.get(c as usize % lists.len().max(1)) {
                w.get(l).op(b"(");
                w.get(frames[c as usize % frames.len()]);
                w.op(b"e0");
            }
        }
        w.op(b"e.");
        w.out
    }

    fn members_bit(m: &str) -> u32 {
        match m {
            "addr" => 21,
            "size" => 22,
            "stream" => 23,
            "time_us" => 24,
            "frames" => 25,
            _ => 26,
        }
    }

    proptest::proptest! {
        /// Sharing the items of equal lists changes no value.
        #[test]
        fn issue7_shared_and_separate_lists_read_alike(
            choices in proptest::collection::vec(proptest::prelude::any::<u32>(), 1..40),
            explicit in proptest::prelude::any::<bool>(),
        ) {
            let p = history_pickle(&choices, explicit);
            let shared = parse(&p).unwrap();
            let separate = parse_with(&p, false).unwrap();
            proptest::prop_assert!(same(&shared, &separate));
            proptest::prop_assert_eq!(shared.entries.len(), separate.entries.len());
        }
    }

    #[test]
    fn marks_cannot_be_popped_as_values() {
        assert!(parse(b"(.").is_err());
        assert!(
            parse(&[b'K', 1, b'(', b'0', b'.']).is_ok(),
            "POP takes the mark"
        );
        assert!(parse(b"(2").is_err(), "DUP of a mark");
        assert!(parse(b"](a.").is_err(), "APPEND of a mark");
    }
}
