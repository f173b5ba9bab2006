//! A pickle reader for plain data, and nothing else.
//!
//! Memory snapshots are Python pickles. `pickle.load` would run whatever callable the file
//! names, so this reader implements only the opcodes that build data (protocols 0 to 5: ints,
//! floats, strings, bytes, lists, tuples, dicts, sets, the memo). Every opcode that imports or
//! calls (GLOBAL, STACK_GLOBAL, REDUCE, BUILD, INST, OBJ, NEWOBJ, NEWOBJ_EX, PERSID, BINPERSID,
//! EXT*) is an error naming the opcode and its offset; it is never executed.
//!
//! Built for snapshots of a GB: scalars live inline in their 16-byte [`ValueId`], strings are
//! spans of the input (checked UTF-8, never copied), and the items of containers filled in one
//! go (nearly all of them: each history entry's dict, each stack's frame list) share two flat
//! tables, so the reader allocates nothing per container. A container extended again after
//! others were filled gets a vector of its own, once. The memo stores `ValueId`s, so an object
//! the pickle shares in thousands of places (stack frames) is stored once and never copied.

use std::fmt;

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

/// Where a string's or byte string's bytes are.
#[derive(Debug, Clone)]
enum Text {
    /// `buf[start..start + len]`.
    Span(usize, usize),
    /// Decoded (protocol 0 and Python 2 strings).
    Owned(Box<str>),
}

/// The items of one container.
#[derive(Debug, Clone)]
enum Items<T> {
    /// `flat[start..start + len]` of the container kind's shared table.
    Flat(usize, usize),
    /// Its own vector: the container grew again after others had been filled.
    Own(Vec<T>),
    /// A dict that is a `device_traces` history entry, filled in one go: only the members in
    /// [`ENTRY_KEYS`], as a fixed record of [`Pickle`]'s `entries`. A GB snapshot holds
    /// millions of these; as generic dicts they took several times the file's size.
    Entry(usize),
}

/// Containers of one item type: their items, mostly in one shared table.
#[derive(Debug, Clone)]
struct Store<T> {
    flat: Vec<T>,
    items: Vec<Items<T>>,
}

impl<T: Copy> Store<T> {
    fn new() -> Self {
        Store {
            flat: Vec::new(),
            items: Vec::new(),
        }
    }

    fn add(&mut self, items: &[T]) -> u64 {
        let start = self.flat.len();
        self.flat.extend_from_slice(items);
        self.items.push(Items::Flat(start, items.len()));
        self.items.len() as u64 - 1
    }

    fn extend(&mut self, c: u64, more: &[T]) {
        self.extend_with(c, more.iter().copied());
    }

    /// Adds items to container `c`: in place when its items end the flat table (or it has
    /// none yet), otherwise in a vector of its own, made once.
    fn extend_with(&mut self, c: u64, more: impl Iterator<Item = T>) {
        let end = self.flat.len();
        let slot = &mut self.items[c as usize];
        match slot {
            Items::Flat(start, len) if *start + *len == end || *len == 0 => {
                if *len == 0 {
                    *start = end;
                }
                self.flat.extend(more);
                *len = self.flat.len() - *start;
            }
            Items::Flat(start, len) => {
                let mut v = self.flat[*start..*start + *len].to_vec();
                v.extend(more);
                *slot = Items::Own(v);
            }
            Items::Own(v) => v.extend(more),
            // Only dicts become entries, and `Reader::add_to_dict` turns a grown one back
            // into a generic dict first.
            Items::Entry(_) => {
                let v: Vec<T> = more.collect();
                *slot = Items::Own(v);
            }
        }
    }

    fn get(&self, c: u64) -> &[T] {
        match &self.items[c as usize] {
            Items::Flat(start, len) => &self.flat[*start..*start + *len],
            Items::Own(v) => v,
            Items::Entry(_) => &[],
        }
    }
}

/// A parsed pickle: its values, over the input bytes.
#[derive(Debug, Clone)]
pub struct Pickle<'a> {
    buf: &'a [u8],
    texts: Vec<Text>,
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
        match &self.texts[t as usize] {
            Text::Span(s, n) => &self.buf[*s..*s + *n],
            Text::Owned(o) => o.as_bytes(),
        }
    }

    fn text(&self, t: u64) -> &str {
        match &self.texts[t as usize] {
            // Checked when read: a Str span is UTF-8.
            Text::Span(s, n) => std::str::from_utf8(&self.buf[*s..*s + *n]).unwrap_or_default(),
            Text::Owned(o) => o,
        }
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
        match self.maps.items[id.data() as usize] {
            Items::Entry(r) => Some(EntryRecord(&self.entries[r])),
            _ => None,
        }
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

    /// A float value (ints convert).
    pub fn as_f64(&self, id: ValueId) -> Option<f64> {
        match self.get(id) {
            Value::Int(i) => Some(i as f64),
            Value::Float(f) => Some(f),
            _ => None,
        }
    }

    /// A string value.
    pub fn as_str(&self, id: ValueId) -> Option<&str> {
        (id.kind() == Kind::Str).then(|| self.text(id.data()))
    }
}

/// The pickle machine: the tables it builds, and its stack, marks and memo.
struct Reader<'a> {
    pk: Pickle<'a>,
    pos: usize,
    stack: Vec<ValueId>,
    /// Stack heights at each MARK, innermost last.
    marks: Vec<usize>,
    memo: Vec<Option<ValueId>>,
}

const NONE: ValueId = ValueId::new(Kind::None, 0);

/// The members of a `device_traces` history entry that are kept (see [`Items::Entry`]).
const ENTRY_KEYS: [&str; 6] = ["action", "addr", "size", "stream", "time_us", "frames"];
/// Members an entry may also have, which nothing reads.
const ENTRY_IGNORED: [&str; 2] = ["compile_context", "user_metadata"];
const ABSENT: ValueId = ValueId::new(Kind::Absent, 0);

/// Parses a pickle holding plain data.
pub fn parse(buf: &[u8]) -> Result<Pickle<'_>, PickleError> {
    let mut r = Reader {
        pk: Pickle {
            buf,
            texts: Vec::new(),
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
    };
    r.pk.root = r.run()?;
    Ok(r.pk)
}

impl<'a> Reader<'a> {
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
        self.pk.texts.push(Text::Span(start, n));
        Ok(ValueId::new(Kind::Str, self.pk.texts.len() as u64 - 1))
    }

    fn owned_str(&mut self, s: String) -> ValueId {
        self.pk.texts.push(Text::Owned(s.into()));
        ValueId::new(Kind::Str, self.pk.texts.len() as u64 - 1)
    }

    fn memo_put(&mut self, idx: usize, offset: usize) -> Result<(), PickleError> {
        let v = self.top(offset)?;
        if idx > self.pk.buf.len() {
            return Err(self.malformed(format!("memo index {idx} out of range"), offset));
        }
        if self.memo.len() <= idx {
            self.memo.resize(idx + 1, None);
        }
        self.memo[idx] = Some(v);
        Ok(())
    }

    fn memo_get(&mut self, idx: usize, offset: usize) -> Result<(), PickleError> {
        let v =
            self.memo.get(idx).copied().flatten().ok_or_else(|| {
                self.malformed(format!("memo index {idx} was never stored"), offset)
            })?;
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
        self.pk.seqs.extend(list.data(), &self.stack[from..]);
        self.stack.truncate(from);
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
        let c = dict.data() as usize;
        match self.pk.maps.items[c] {
            Items::Flat(_, 0) => {
                if let Some(rec) = self.entry_record(&self.stack[from..]) {
                    self.pk.entries.push(rec);
                    self.pk.maps.items[c] = Items::Entry(self.pk.entries.len() - 1);
                    self.stack.truncate(from);
                    return Ok(());
                }
            }
            Items::Entry(r) => {
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
                self.pk.maps.items[c] = Items::Own(pairs);
            }
            _ => {}
        }
        let pairs = self.stack[from..].chunks_exact(2).map(|kv| (kv[0], kv[1]));
        self.pk.maps.extend_with(dict.data(), pairs);
        self.stack.truncate(from);
        Ok(())
    }

    /// The record of a history entry, if `kv` (key, value, key, value, ...) is one: an
    /// `action` member, string keys, nothing beyond [`ENTRY_KEYS`] and [`ENTRY_IGNORED`], no
    /// key twice.
    fn entry_record(&self, kv: &[ValueId]) -> Option<[ValueId; ENTRY_KEYS.len()]> {
        let mut rec = [ABSENT; ENTRY_KEYS.len()];
        let mut ignored = 0u8;
        for pair in kv.chunks_exact(2) {
            let (k, v) = (pair[0], pair[1]);
            if k.kind() != Kind::Str {
                return None;
            }
            let key = match &self.pk.texts[k.data() as usize] {
                Text::Span(s, n) => &self.pk.buf[*s..*s + *n],
                Text::Owned(o) => o.as_bytes(),
            };
            if let Some(i) = ENTRY_KEYS.iter().position(|e| e.as_bytes() == key) {
                if rec[i] != ABSENT {
                    return None;
                }
                rec[i] = v;
            } else if let Some(i) = ENTRY_IGNORED.iter().position(|e| e.as_bytes() == key) {
                if ignored & (1 << i) != 0 {
                    return None;
                }
                ignored |= 1 << i;
            } else {
                return None;
            }
        }
        (rec[0] != ABSENT).then_some(rec)
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
            self.pk.texts.push(Text::Span(start, b.len()));
            ValueId::new(Kind::BigInt, self.pk.texts.len() as u64 - 1)
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
                    self.pk.texts.push(Text::Span(start, n));
                    let v = ValueId::new(Kind::Bytes, self.pk.texts.len() as u64 - 1);
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
