//! The pickle machine: opcodes in, the tables of a [`Pickle`] out. Only opcodes that build
//! data are run; see the module above for what is refused. This file holds the machine's state
//! and the operations on it; `opcodes` reads the opcodes that drive them.

pub(super) mod ahead;
mod entry;
mod input;
mod memo;
mod opcodes;

pub(super) use input::Input;

use std::collections::VecDeque;
use std::hash::{Hash, Hasher};

use rustc_hash::{FxHashMap, FxHasher};

use super::store::{Slot, Store, Text, Texts};
use super::{
    Kind, Pickle, PickleError, RecordShape, RecordSink, ValueId, PAYLOAD_BITS, RECORD_MAX_KEYS,
    TAKEN,
};

/// The pickle machine: the tables it builds, and its stack, marks and memo.
pub(super) struct Reader<'a> {
    /// Whether lists with equal items share them (off only in tests, to compare).
    share: bool,
    pub(super) pk: Pickle,
    pub(super) input: Input<'a>,
    /// Where records go as they complete, if the caller gave one.
    pub(super) sink: Option<&'a mut dyn RecordSink>,
    /// Whether the slots of records the sink took, and of their frame lists, are given back
    /// (`sink_record`; off only in tests, to compare).
    pub(super) release: bool,
    /// Whether history entries of the usual form are read by their grammar (`entry`; off
    /// only in tests, to compare; on only with `release`).
    pub(super) direct: bool,
    /// What that path keeps from one entry to the next, and the entry it reads.
    grammar: entry::Grammar,
    /// How many entries that path read.
    pub(super) direct_records: usize,
    /// How many of those had the new frame list of the one before it, or an empty one
    /// (`entry::Grammar::last_items`).
    pub(super) list_runs: usize,
    stack: Vec<ValueId>,
    /// Stack heights at each MARK, innermost last.
    marks: Vec<usize>,
    memo: memo::Memo,
    /// What recent dict keys name.
    keys: Keys,
    /// Where in `seqs.flat` each distinct short list filled in one go is, by a hash of its
    /// items: every allocation's stack is a list of its own, mostly of the same frames as
    /// others, and sharing their items saves a tenth of a GB snapshot's memory.
    shared: FxHashMap<u64, usize>,
    /// Short strings met so far, by their bytes: a snapshot writes each history entry's
    /// action afresh (millions of `'alloc'`), and one id for each distinct one keeps their
    /// bytes and words out of the tables.
    short_strs: FxHashMap<ShortKey, ValueId>,
    /// The last empty dict and list made while a sink reads records, followed until a
    /// record takes them (`sink_record`).
    fresh_dict: Fresh,
    fresh_list: Fresh,
    /// (record number, memo index) of sunk records not yet put in a list, oldest first.
    sunk_puts: VecDeque<(u64, usize)>,
    /// The [`Kind::Frozen`] number of each place frozen so far.
    frozen_at: FxHashMap<u64, u64>,
    /// Whether the sink was told of a generic dict (`RecordSink::generic`), which its
    /// `appended` may then take: no history entry's new list is then read by the grammar.
    generic_given: bool,
}

/// A container followed from its making (`}` or `]`) while a sink reads records: where the
/// memo stored it, and whether anything else may name it. The pickle machine copies a value
/// only by GET and DUP, and moves it off the stack into a container for good (it comes back
/// only by GET), so a container at its place on the stack that was stored in the memo once
/// and never copied is named by those two places alone, and both can be rewritten.
#[derive(Debug, Clone, Copy)]
struct Fresh {
    id: ValueId,
    /// Its memo index, [`NO_PUT`] before it is stored.
    put: usize,
    /// False once it was copied or stored twice.
    clean: bool,
}

const NO_PUT: usize = usize::MAX;

impl Fresh {
    const NONE: Fresh = Fresh {
        id: NONE,
        put: NO_PUT,
        clean: false,
    };

    fn new(id: ValueId) -> Fresh {
        Fresh {
            id,
            put: NO_PUT,
            clean: true,
        }
    }

    /// `v` was stored at memo index `idx` (another value stored over its slot leaves it
    /// named by its stack place alone, which `alone` does not tell apart: followed no more).
    #[inline]
    fn stored(&mut self, v: ValueId, idx: usize) {
        if v == self.id {
            if self.put == NO_PUT {
                self.put = idx;
            } else {
                self.clean = false;
            }
        } else if idx == self.put {
            self.clean = false;
        }
    }

    /// `v` was copied (GET, DUP).
    #[inline]
    fn copied(&mut self, v: ValueId) {
        if v == self.id {
            self.clean = false;
        }
    }

    /// Whether `v` is this container, named by its stack place and its memo slot alone.
    #[inline]
    fn alone(&self, v: ValueId) -> bool {
        v == self.id && self.clean
    }
}

/// Strings up to this long share one id per distinct text (`Reader::short_strs`).
const SHORT_STR: usize = 24;

/// A short string's bytes in three words and its length in a fourth: the map of short
/// strings hashes and compares four words, where a key of bytes hashed them one by one and
/// compared them through `memcmp` (4.5% of a GB snapshot's read, with the hashing).
type ShortKey = [u64; 4];

/// The key of a string of at most [`SHORT_STR`] bytes.
#[inline]
fn short_key(b: &[u8]) -> ShortKey {
    let mut words = [0u8; 24];
    words[..b.len()].copy_from_slice(b);
    let w = |i: usize| u64::from_le_bytes(words[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
    [w(0), w(1), w(2), b.len() as u64]
}

/// The fields [`appended`] needs besides the stack.
pub(super) struct Appending<'s, 'a> {
    sink: &'s mut Option<&'a mut dyn RecordSink>,
    pk: &'s mut Pickle,
    memo: &'s mut memo::Memo,
    sunk_puts: &'s mut VecDeque<(u64, usize)>,
}

impl<'a> Reader<'a> {
    /// The fields [`appended`] needs, borrowed apart from the stack.
    pub(super) fn appending(&mut self) -> (Appending<'_, 'a>, &mut Vec<ValueId>) {
        (
            Appending {
                sink: &mut self.sink,
                pk: &mut self.pk,
                memo: &mut self.memo,
                sunk_puts: &mut self.sunk_puts,
            },
            &mut self.stack,
        )
    }
}

/// Tells the sink, if any, that `items` were just appended to `list` (a list: sets are not
/// histories), and drops them from the list again where the sink took them all. The sunk
/// records among them are in a list from here on: their memo slots say so ([`TAKEN`]), one
/// value for all, which the memo packs. A function of the fields, not a method, so that
/// callers can pass their stack.
#[inline]
pub(super) fn appended(a: Appending<'_, '_>, list: ValueId, items: &[ValueId]) {
    let (Kind::List, Some(sink)) = (list.kind(), a.sink.as_mut()) else {
        return;
    };
    if sink.appended(a.pk, list, items) {
        a.pk.seqs.drop_last(list.data(), items.len());
    }
    if a.sunk_puts.is_empty() {
        return;
    }
    for &v in items {
        if v.kind() != Kind::Sunk || v.data() == TAKEN {
            continue;
        }
        // Records are put in lists in the order they were made: those passed over were
        // put elsewhere or never, and keep their number in the memo.
        while let Some(&(r, idx)) = a.sunk_puts.front() {
            if r > v.data() {
                break;
            }
            a.sunk_puts.pop_front();
            // Unless the pickle stored something else there since.
            if r == v.data() {
                a.memo.replace(idx, v, ValueId::new(Kind::Sunk, TAKEN));
                break;
            }
        }
    }
}

/// The id of the short string `b` (whose [`short_key`] is `key`): the one its text was given
/// before, else a new one, its bytes checked as UTF-8 (a text met before was checked then);
/// `None` where they are not UTF-8.
#[inline]
fn short_text(
    strs: &mut FxHashMap<ShortKey, ValueId>,
    texts: &mut Texts,
    key: ShortKey,
    b: &[u8],
) -> Option<ValueId> {
    if let Some(&v) = strs.get(&key) {
        return Some(v);
    }
    std::str::from_utf8(b).ok()?;
    let v = ValueId::new(Kind::Str, texts.push_bytes(b));
    strs.insert(key, v);
    Some(v)
}

/// An integer as a value holds it inline (60 bits); `None` for a wider one, which goes to a
/// table ([`Reader::int`]).
#[inline(always)]
fn inline_int(v: i64) -> Option<ValueId> {
    let half = 1i64 << (PAYLOAD_BITS - 1);
    (-half..half)
        .contains(&v)
        .then(|| ValueId::new(Kind::Int, v as u64))
}

/// What a dict key names in a record.
#[derive(Debug, Clone, Copy)]
enum KeySlot {
    /// The shape's `keys[i]`.
    Kept(usize),
    /// The shape's `ignored[i]`.
    Ignored(usize),
}

/// What recent dict keys name in a record, by string id.
struct Keys {
    /// (string index + 1, what it names) of recent dict keys, by string index modulo size.
    cache: [(u64, Option<KeySlot>); KEY_CACHE],
    /// The string id of the record shape's first member, once met: one id for every such
    /// key, as every short string is read once (`short_str`).
    first: Option<ValueId>,
}

impl Keys {
    /// Which record member the string `k` names, if any. Pickles share each key string through
    /// the memo, so a small cache by string index answers nearly every lookup without
    /// comparing text (`add_to_dict`, where the comparisons ran, was a tenth of the unpickle's
    /// profile; the cache's own gain was not measured apart from the session's other steps).
    #[inline(always)]
    fn slot(&mut self, pk: &Pickle, k: ValueId) -> Option<KeySlot> {
        if k.kind() != Kind::Str {
            return None;
        }
        let t = k.data();
        let line = &mut self.cache[k.line(KEY_CACHE)];
        if line.0 == t + 1 {
            return line.1;
        }
        let shape = pk.shape?;
        let key = pk.texts.bytes(t);
        let slot = if let Some(i) = shape.keys.iter().position(|e| e.as_bytes() == key) {
            if i == 0 {
                self.first = Some(k);
            }
            Some(KeySlot::Kept(i))
        } else {
            shape
                .ignored
                .iter()
                .position(|e| e.as_bytes() == key)
                .map(KeySlot::Ignored)
        };
        self.cache[k.line(KEY_CACHE)] = (t + 1, slot);
        slot
    }
}

/// Lines of the key cache, a power of two (string ids are spans of the text arena, so a
/// line is chosen by [`ValueId::line`], which mixes their bits).
const KEY_CACHE: usize = 256;

/// Lists filled in one go with at most this many items share equal items (stacks); longer
/// ones (the history itself) are not worth hashing.
const SHARE_MAX: usize = 4096;

const NONE: ValueId = ValueId::new(Kind::None, 0);

const ABSENT: ValueId = ValueId::ABSENT;

impl<'a> Reader<'a> {
    pub(super) fn new(
        input: Input<'a>,
        share: bool,
        shape: Option<&'static RecordShape>,
    ) -> Reader<'a> {
        Reader {
            share,
            input,
            sink: None,
            release: false,
            direct: false,
            grammar: entry::Grammar::default(),
            direct_records: 0,
            list_runs: 0,
            pk: Pickle {
                texts: Texts::default(),
                wide: Vec::new(),
                floats: Vec::new(),
                seqs: Store::new(),
                maps: Store::new(),
                shape,
                records: Vec::new(),
                sunk: false,
                frozen: Vec::new(),
                root: NONE,
                lossy_texts: 0,
            },
            stack: Vec::new(),
            marks: Vec::new(),
            memo: memo::Memo::default(),
            keys: Keys {
                cache: [(0, None); KEY_CACHE],
                first: None,
            },
            shared: FxHashMap::default(),
            short_strs: FxHashMap::default(),
            fresh_dict: Fresh::NONE,
            fresh_list: Fresh::NONE,
            sunk_puts: VecDeque::new(),
            frozen_at: FxHashMap::default(),
            generic_given: false,
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
                Kind::List | Kind::Dict | Kind::Set | Kind::Tuple | Kind::Sunk | Kind::Frozen
            );
            let waiting = if dict_level {
                !(n - from).is_multiple_of(2) && item
            } else {
                matches!(top.kind(), Kind::List | Kind::Dict | Kind::Sunk)
            };
            if !(waiting
                && matches!(prev.kind(), Kind::List | Kind::Set)
                && self.pk.items(prev).is_empty())
            {
                return;
            }
            self.pk.seqs.extend(prev.data(), &[top]);
            self.stack.pop();
            appended(self.appending().0, prev, &[top]);
        }
    }

    /// After a cut at `offset`: closes the open containers from the innermost out (see
    /// [`parse_lenient`]) and returns the bottom of the stack, the root being built.
    pub(super) fn salvage(&mut self, offset: usize) -> Result<ValueId, PickleError> {
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
            let dict = matches!(container.kind(), Kind::Dict | Kind::Sunk);
            self.settle_single_appends(from, dict);
            match container.kind() {
                Kind::List | Kind::Set => {
                    self.add_to_list(container, from, offset)?;
                }
                Kind::Dict | Kind::Sunk => {
                    if !(self.stack.len() - from).is_multiple_of(2) {
                        self.stack.pop(); // a key whose value never came
                    }
                    self.add_to_dict(container, from, offset)?;
                    // As the stack now names it (a record the sink took is sunk there).
                    unfinished_dict = Some(self.stack[from - 1]);
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

    /// The offset of the next byte of the input.
    #[inline]
    fn pos(&self) -> usize {
        self.input.offset()
    }

    #[inline]
    fn u8(&mut self) -> Result<u8, PickleError> {
        self.input.u8()
    }

    fn u16(&mut self) -> Result<usize, PickleError> {
        let b = self.input.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]) as usize)
    }

    fn u32(&mut self) -> Result<usize, PickleError> {
        let b = self.input.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
    }

    fn u64(&mut self) -> Result<usize, PickleError> {
        let b = self.input.take(8)?;
        let v = u64::from_le_bytes(b.try_into().expect("8 bytes"));
        usize::try_from(v).map_err(|_| PickleError::Truncated {
            offset: self.input.offset(),
        })
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

    /// The next `n` bytes of the input as a string (UTF-8, checked), copied out of it; short
    /// ones share one id per distinct text.
    fn str_next(&mut self, n: usize) -> Result<ValueId, PickleError> {
        let b = self.input.take(n)?;
        if n <= SHORT_STR {
            if let Some(v) = short_text(&mut self.short_strs, &mut self.pk.texts, short_key(b), b) {
                return Ok(v);
            }
        } else if std::str::from_utf8(b).is_ok() {
            return Ok(ValueId::new(Kind::Str, self.pk.texts.push_bytes(b)));
        }
        // Not UTF-8: one lone surrogate (which Python pickles) is no reason to refuse a
        // snapshot; the text is kept with U+FFFD in place of the bytes, and counted.
        self.pk.lossy_texts += 1;
        let text = String::from_utf8_lossy(b).into_owned();
        Ok(ValueId::new(
            Kind::Str,
            self.pk.texts.push_bytes(text.as_bytes()),
        ))
    }

    /// The id of a short string, one per distinct text whatever opcode wrote it.
    fn short_str(&mut self, s: &str) -> ValueId {
        let key = short_key(s.as_bytes());
        if let Some(&v) = self.short_strs.get(&key) {
            return v;
        }
        let v = ValueId::new(Kind::Str, self.pk.texts.push(Text::Owned(s.into())));
        self.short_strs.insert(key, v);
        v
    }

    /// The next `n` bytes of the input as a bytes object, copied out of it.
    fn bytes_next(&mut self, n: usize) -> Result<ValueId, PickleError> {
        let b = self.input.take(n)?;
        Ok(ValueId::new(Kind::Bytes, self.pk.texts.push_bytes(b)))
    }

    fn owned_str(&mut self, s: String) -> ValueId {
        if s.len() <= SHORT_STR {
            return self.short_str(&s);
        }
        ValueId::new(Kind::Str, self.pk.texts.push(Text::Owned(s.into())))
    }

    #[inline(always)]
    fn memo_put(&mut self, idx: usize, offset: usize) -> Result<(), PickleError> {
        let v = self.top(offset)?;
        // No pickle stores more memo slots than it has bytes before them.
        if idx > self.pos() {
            return Err(self.malformed(format!("memo index {idx} out of range"), offset));
        }
        self.memo_store(idx, v, offset)
    }

    /// Stores `v` at memo index `idx` (in range: checked by the caller); the containers
    /// followed learn of it.
    #[inline(always)]
    fn memo_store(&mut self, idx: usize, v: ValueId, offset: usize) -> Result<(), PickleError> {
        if !self.memo.set(idx, v) {
            return Err(self.malformed("more than 2^31 wide values memoized", offset));
        }
        self.fresh_dict.stored(v, idx);
        self.fresh_list.stored(v, idx);
        Ok(())
    }

    /// `v` was copied onto the stack (GET, DUP): a container followed is no longer alone.
    #[inline(always)]
    pub(super) fn copied(&mut self, v: ValueId) {
        self.fresh_dict.copied(v);
        self.fresh_list.copied(v);
    }

    /// A new empty dict (`}`), followed while a sink reads records.
    pub(super) fn empty_dict(&mut self) -> ValueId {
        let id = ValueId::new(Kind::Dict, self.pk.maps.add_empty());
        if self.release {
            self.fresh_dict = Fresh::new(id);
        }
        id
    }

    /// A new empty list (`]`), followed while a sink reads records.
    pub(super) fn empty_list(&mut self) -> ValueId {
        let id = ValueId::new(Kind::List, self.pk.seqs.add_empty());
        if self.release {
            self.fresh_list = Fresh::new(id);
        }
        id
    }

    /// After the sink took the record `r` of `dict`, whose members are `stack[from..]`:
    /// where nothing but its stack place and its memo slot names the dict, both become
    /// [`Kind::Sunk`] and its slot is given back, and so is the slot of a list among the
    /// members that nothing else names either (a history entry's new frame list: the sink
    /// has read it), whose memo slot then names its items' place ([`Kind::Frozen`]). The
    /// tables then hold nothing for the history's millions of entries. False: `dict` is named
    /// elsewhere too, and keeps its slot as a record.
    fn sink_record(&mut self, dict: ValueId, from: usize, r: usize) -> bool {
        let f = self.fresh_dict;
        if from == 0 || self.stack[from - 1] != dict || !f.alone(dict) {
            return false;
        }
        let sunk = ValueId::new(Kind::Sunk, r as u64);
        self.stack[from - 1] = sunk;
        if f.put != NO_PUT {
            self.memo.set(f.put, sunk);
            self.sunk_puts.push_back((r as u64, f.put));
        }
        self.pk.maps.release(dict.data());
        self.fresh_dict = Fresh::NONE;
        let l = self.fresh_list;
        let member = (from + 1..self.stack.len())
            .step_by(2)
            .any(|i| self.stack[i] == l.id);
        if member {
            self.freeze_fresh_list();
        }
        true
    }

    /// The list last made, a member of a record the sink just took, given back where nothing
    /// else names it (see [`Reader::sink_record`]): its memo slot then names its items'
    /// place, frozen ([`Reader::freeze_place`]).
    fn freeze_fresh_list(&mut self) {
        let l = self.fresh_list;
        if !(l.alone(l.id) && matches!(self.pk.seqs.slot(l.id.data()), Slot::Flat(..))) {
            return;
        }
        let mut w = self.pk.seqs.release(l.id.data());
        if let Slot::Flat(_, 0) = Slot::unpack(w) {
            // Every empty list has one place.
            w = Slot::flat(0, 0).expect("fits");
        }
        let p = self.freeze_place(w);
        if l.put != NO_PUT {
            self.memo.set(l.put, ValueId::new(Kind::Frozen, p));
        }
        self.fresh_list = Fresh::NONE;
    }

    /// The [`Kind::Frozen`] number of the items' place whose slot word is `w`: one number a
    /// place, however many lists held it.
    pub(super) fn freeze_place(&mut self, w: u64) -> u64 {
        let frozen = &mut self.pk.frozen;
        *self.frozen_at.entry(w).or_insert_with(|| {
            frozen.push(w);
            frozen.len() as u64 - 1
        })
    }

    /// The list at `stack[at]` made a list of its own again where it is [`Kind::Frozen`]
    /// (a pickle that extends a history entry's frame list after the entry: none torch
    /// writes). Its memo slot keeps naming the items as they were.
    pub(super) fn thaw(&mut self, at: usize) -> ValueId {
        let v = self.stack[at];
        if v.kind() != Kind::Frozen {
            return v;
        }
        let items = self.pk.items(v).to_vec();
        let c = self.pk.seqs.add_empty();
        self.pk.seqs.set_own(c, items);
        let l = ValueId::new(Kind::List, c);
        self.stack[at] = l;
        l
    }

    #[inline(always)]
    fn memo_get(&mut self, idx: usize, offset: usize) -> Result<(), PickleError> {
        let v = self
            .memo
            .get_cached(idx)
            .ok_or_else(|| self.malformed(format!("memo index {idx} was never stored"), offset))?;
        self.copied(v);
        self.stack.push(v);
        Ok(())
    }

    /// Adds `stack[from..]` to the list or set `list`, and drops them from the stack. True
    /// where they went to a shared place, the one the same items will be given again
    /// (`share_items`).
    fn add_to_list(
        &mut self,
        mut list: ValueId,
        from: usize,
        offset: usize,
    ) -> Result<bool, PickleError> {
        if list.kind() == Kind::Frozen {
            list = self.thaw(from - 1);
        }
        if !matches!(list.kind(), Kind::List | Kind::Set) {
            return Err(self.malformed("APPEND to something that is not a list", offset));
        }
        let c = list.data();
        let fresh = matches!(self.pk.seqs.slot(c), Slot::Flat(_, 0));
        let start = self.pk.seqs.flat.len();
        self.pk.seqs.extend(c, &self.stack[from..]);
        let (a, stack) = self.appending();
        appended(a, list, &stack[from..]);
        self.stack.truncate(from);
        if fresh && self.share {
            if let Slot::Flat(s, len) = self.pk.seqs.slot(c) {
                if s == start && len <= SHARE_MAX {
                    let (at, shared) = self.share_items(start);
                    if let Some(w) = Slot::flat(at, len) {
                        self.pk.seqs.items[c as usize] = w;
                        return Ok(shared);
                    }
                }
            }
        }
        Ok(false)
    }

    /// Adds `stack[from..]` as key, value pairs to the dict `dict`, and drops them.
    fn add_to_dict(
        &mut self,
        mut dict: ValueId,
        from: usize,
        offset: usize,
    ) -> Result<(), PickleError> {
        if !(self.stack.len() - from).is_multiple_of(2) {
            return Err(self.malformed("SETITEMS with an odd number of items", offset));
        }
        if dict.kind() == Kind::Sunk {
            dict = self.unsink(dict, from);
        }
        if dict.kind() != Kind::Dict {
            return Err(self.malformed("SETITEM on something that is not a dict", offset));
        }
        let c = dict.data();
        match self.pk.maps.slot(c) {
            // A dict given a pair at a time (a protocol-0 pickle's SETITEMs) stays generic:
            // a sink takes a record's members for good, and a record of one member would be
            // voided by the next pair.
            Slot::Flat(_, 0) if self.stack.len() - from == 2 => {}
            Slot::Flat(_, 0) => {
                if let Some((rec, n)) = self.record(from) {
                    let r = if let Some(sink) = self.sink.as_mut() {
                        let members = rec.map(|v| (v != ABSENT).then_some(v));
                        sink.record(&self.pk, &members[..n])
                    } else {
                        self.pk.records.extend_from_slice(&rec[..n]);
                        self.pk.records.len() / n - 1
                    };
                    if !(self.release && self.sink_record(dict, from, r)) {
                        self.pk.maps.set_record(c, r);
                    }
                    self.stack.truncate(from);
                    return Ok(());
                }
            }
            Slot::Record(r) if self.pk.sunk => {
                // Its members went to the sink: a generic dict of the later ones from here.
                if let Some(sink) = self.sink.as_mut() {
                    sink.forget(r);
                }
                self.pk.maps.set_own(c, Vec::new());
            }
            Slot::Record(r) => {
                // Grown after all: back to a generic dict of the kept members.
                let names = self.pk.shape.map_or(&[][..], |s| s.keys);
                let n = names.len();
                let rec = self.pk.records[r * n..(r + 1) * n].to_vec();
                let keys: Vec<ValueId> = names
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
        if self.sink.is_some() && self.pk.shape.is_some() {
            // Each distinct key is one string id (short strings are read once, and pickles
            // memoize their keys), so the id of the first kept member, once met, answers
            // for the millions of generic dicts (every frame of every stack) without a
            // lookup of each key.
            let first = (from..self.stack.len()).step_by(2).any(|i| {
                let k = self.stack[i];
                match self.keys.first {
                    Some(f) => k == f,
                    None => matches!(self.key_slot(k), Some(KeySlot::Kept(0))),
                }
            });
            if let (true, Some(sink)) = (first, self.sink.as_mut()) {
                sink.generic(dict);
                self.generic_given = true;
            }
        }
        self.stack.truncate(from);
        Ok(())
    }

    /// A sunk record's dict (at `stack[from - 1]`) given more members: the sink forgets the
    /// record, and the dict is a generic one of the later members from here on, in a slot of
    /// its own, which its memo slot names too while the record was not yet in a list (after
    /// that, the memo and the list name the record the sink took).
    fn unsink(&mut self, sunk: ValueId, from: usize) -> ValueId {
        let r = sunk.data();
        if r != TAKEN {
            if let Some(sink) = self.sink.as_mut() {
                sink.forget(r as usize);
            }
        }
        let c = self.pk.maps.add_empty();
        self.pk.maps.set_own(c, Vec::new());
        let d = ValueId::new(Kind::Dict, c);
        if from > 0 && self.stack[from - 1] == sunk {
            self.stack[from - 1] = d;
        }
        if let Some(i) = self.sunk_puts.iter().position(|&(x, _)| x == r) {
            if let Some((_, idx)) = self.sunk_puts.remove(i) {
                if self.memo.get(idx) == Some(sunk) {
                    self.memo.set(idx, d);
                }
            }
        }
        d
    }

    /// The record (and its length) of `stack[from..]` (key, value, key, value, ...) when it is
    /// a dict of the caller's [`RecordShape`]: the first kept member, string keys, nothing
    /// beyond the shape's kept and ignored members, no key twice.
    fn record(&mut self, from: usize) -> Option<([ValueId; RECORD_MAX_KEYS], usize)> {
        let n = self.pk.shape?.keys.len();
        let mut rec = [ABSENT; RECORD_MAX_KEYS];
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
        (rec[0] != ABSENT).then_some((rec, n))
    }

    #[inline]
    fn key_slot(&mut self, k: ValueId) -> Option<KeySlot> {
        self.keys.slot(&self.pk, k)
    }

    fn int(&mut self, v: i64) -> ValueId {
        inline_int(v).unwrap_or_else(|| {
            self.pk.wide.push(v);
            ValueId::new(Kind::WideInt, self.pk.wide.len() as u64 - 1)
        })
    }

    fn float(&mut self, v: f64) -> ValueId {
        self.pk.floats.push(v);
        ValueId::new(Kind::Float, self.pk.floats.len() as u64 - 1)
    }

    /// A new container holding `stack[from..]`, which are dropped from the stack.
    fn seq_from_stack(&mut self, kind: Kind, from: usize) -> ValueId {
        let id = self.pk.seqs.add(&self.stack[from..]);
        let v = ValueId::new(kind, id);
        let (a, stack) = self.appending();
        appended(a, v, &stack[from..]);
        self.stack.truncate(from);
        v
    }

    /// LONG1 / LONG4: the next `n` bytes, little-endian two's complement.
    fn long_next(&mut self, n: usize) -> Result<ValueId, PickleError> {
        let b = self.input.take(n)?;
        if b.is_empty() {
            return Ok(self.int(0));
        }
        if b.len() <= 8 {
            let neg = b[b.len() - 1] & 0x80 != 0;
            let mut bytes = if neg { [0xffu8; 8] } else { [0u8; 8] };
            bytes[..b.len()].copy_from_slice(b);
            return Ok(self.int(i64::from_le_bytes(bytes)));
        }
        Ok(ValueId::new(Kind::BigInt, self.pk.texts.push_bytes(b)))
    }

    /// Where the items just read into `seqs.flat[start..]` are kept: an earlier list's equal
    /// items, the new ones then dropped, or `start` itself; and whether that place is the one
    /// the same items will be given again (false for no items, and for items kept apart
    /// because another list has their hash). Safe to share: a list that grows later moves
    /// its items to a vector of its own first ([`Store::extend_with`]).
    fn share_items(&mut self, start: usize) -> (usize, bool) {
        let items = &self.pk.seqs.flat[start..];
        if items.is_empty() {
            return (start, false);
        }
        let h = {
            let mut hasher = FxHasher::default();
            items.hash(&mut hasher);
            hasher.finish()
        };
        match self.shared.get(&h) {
            Some(&at) if self.pk.seqs.flat.get(at..at + items.len()) == Some(items) => {
                self.pk.seqs.flat.truncate(start);
                (at, true)
            }
            // Another list with this hash: kept apart.
            Some(_) => (start, false),
            None => {
                self.shared.insert(h, start);
                (start, true)
            }
        }
    }
}
