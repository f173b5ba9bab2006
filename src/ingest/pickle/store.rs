//! The tables behind a [`Pickle`](super::Pickle): strings as 8-byte words over one byte
//! arena, and containers' items in shared flat tables behind 8-byte slot words.

/// A string or byte string that does not fit a packed span word (see [`Texts`]).
#[derive(Debug, Clone)]
pub(super) enum Text {
    /// `arena[start..start + len]`.
    Span(usize, usize),
    /// Decoded (protocol 0 and Python 2 strings).
    Owned(Box<str>),
}

/// Strings and byte strings, 8 bytes each: a GB snapshot holds tens of millions (every
/// history entry writes its action afresh), and as 24-byte enums their table alone was a
/// quarter of the file's size, all of it page faults. A word is `start | len << 40` of a span
/// of `arena` (the texts' bytes, copied out of the input as it streams past), or [`SIDE`]
/// and an index into `side` for the rest (decoded or long texts).
#[derive(Debug, Clone, Default)]
pub(super) struct Texts {
    words: Vec<u64>,
    arena: Vec<u8>,
    pub(super) side: Vec<Text>,
}

/// A [`Texts`] word that indexes the side table.
const SIDE: u64 = 1 << 63;
const TEXT_LEN_SHIFT: u32 = 40;
pub(super) const TEXT_MAX_LEN: usize = (1 << (63 - TEXT_LEN_SHIFT)) - 1;
const TEXT_MAX_START: usize = (1 << TEXT_LEN_SHIFT) - 1;

impl Texts {
    pub(super) fn push(&mut self, t: Text) -> u64 {
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

    /// A new text of `b`'s bytes, copied into the arena.
    pub(super) fn push_bytes(&mut self, b: &[u8]) -> u64 {
        let start = self.arena.len();
        self.arena.extend_from_slice(b);
        self.push(Text::Span(start, b.len()))
    }

    pub(super) fn bytes(&self, t: u64) -> &[u8] {
        let w = self.words[t as usize];
        if w & SIDE == 0 {
            let s = (w & TEXT_MAX_START as u64) as usize;
            return &self.arena[s..s + (w >> TEXT_LEN_SHIFT) as usize];
        }
        match &self.side[(w & !SIDE) as usize] {
            Text::Span(s, n) => &self.arena[*s..*s + *n],
            Text::Owned(o) => o.as_bytes(),
        }
    }

    pub(super) fn len(&self) -> usize {
        self.words.len()
    }
}

/// Where the items of one container are, packed in 8 bytes (see [`Store`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Slot {
    /// `flat[start..start + len]` of the container kind's shared table.
    Flat(usize, usize),
    /// `own[i]`: the container grew again after others had been filled.
    Own(usize),
    /// A dict read as a record of the caller's [`RecordShape`](super::RecordShape): the
    /// index of its record in [`Pickle`](super::Pickle)'s `records`.
    Record(usize),
}

/// Slot words: bit 63 clear is `Flat` (`start | len << 39`); set, bit 62 tells `Record` from
/// `Own` and the rest is the index.
const NOT_FLAT: u64 = 1 << 63;
const RECORD: u64 = 1 << 62;
const SLOT_LEN_SHIFT: u32 = 39;
pub(super) const SLOT_MAX_LEN: usize = (1 << (63 - SLOT_LEN_SHIFT)) - 1;
const SLOT_MAX_START: usize = (1 << SLOT_LEN_SHIFT) - 1;

impl Slot {
    pub(super) fn unpack(w: u64) -> Slot {
        if w & NOT_FLAT == 0 {
            Slot::Flat(
                (w & SLOT_MAX_START as u64) as usize,
                (w >> SLOT_LEN_SHIFT) as usize,
            )
        } else if w & RECORD != 0 {
            Slot::Record((w & !(NOT_FLAT | RECORD)) as usize)
        } else {
            Slot::Own((w & !NOT_FLAT) as usize)
        }
    }

    /// The word of a flat slot, if its start and length fit.
    pub(super) fn flat(start: usize, len: usize) -> Option<u64> {
        (start <= SLOT_MAX_START && len <= SLOT_MAX_LEN)
            .then_some(start as u64 | (len as u64) << SLOT_LEN_SHIFT)
    }
}

/// Containers of one item type: their items, mostly in one shared table, each described by
/// an 8-byte slot word (millions of containers; 24-byte enums were a quarter of the file).
#[derive(Debug, Clone)]
pub(super) struct Store<T> {
    pub(super) flat: Vec<T>,
    pub(super) items: Vec<u64>,
    pub(super) own: Vec<Vec<T>>,
    /// Slots given back ([`Store::release`]), for the next empty container: a GB snapshot's
    /// history entries and their frame lists leave their slots once a sink has read them,
    /// and the table stays the size of what is live instead of a word per entry.
    free: Vec<u64>,
}

impl<T: Copy> Store<T> {
    pub(super) fn new() -> Self {
        Store {
            flat: Vec::new(),
            items: Vec::new(),
            own: Vec::new(),
            free: Vec::new(),
        }
    }

    /// A new empty container, in a slot given back if there is one.
    pub(super) fn add_empty(&mut self) -> u64 {
        if let (Some(w), Some(&c)) = (Slot::flat(self.flat.len(), 0), self.free.last()) {
            self.free.pop();
            self.items[c as usize] = w;
            return c;
        }
        self.add(&[])
    }

    /// Gives container `c`'s slot back: nothing names it any more (its items, if any,
    /// stay where they are, for whatever else names their place). Returns its slot word.
    pub(super) fn release(&mut self, c: u64) -> u64 {
        let w = self.items[c as usize];
        self.items[c as usize] = 0;
        self.free.push(c);
        w
    }

    pub(super) fn slot(&self, c: u64) -> Slot {
        Slot::unpack(self.items[c as usize])
    }

    /// Gives container `c` a vector of its own.
    pub(super) fn set_own(&mut self, c: u64, v: Vec<T>) {
        self.own.push(v);
        self.items[c as usize] = NOT_FLAT | (self.own.len() as u64 - 1);
    }

    pub(super) fn set_record(&mut self, c: u64, r: usize) {
        self.items[c as usize] = NOT_FLAT | RECORD | r as u64;
    }

    /// Number of containers.
    pub(super) fn len(&self) -> usize {
        self.items.len()
    }

    pub(super) fn add(&mut self, items: &[T]) -> u64 {
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

    pub(super) fn extend(&mut self, c: u64, more: &[T]) {
        self.extend_with(c, more.iter().copied());
    }

    /// Adds items to container `c`: in place when its items end the flat table (or it has
    /// none yet), otherwise in a vector of its own, made once.
    pub(super) fn extend_with(&mut self, c: u64, more: impl Iterator<Item = T>) {
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
            // Only dicts become records, and `Reader::add_to_dict` turns a grown one back
            // into a generic dict first.
            Slot::Record(_) => {
                let v: Vec<T> = more.collect();
                self.set_own(c, v);
            }
        }
    }

    /// Drops the last `n` items of container `c`, which were just added to it (so they end
    /// its items: the flat table's tail, or its own vector's).
    pub(super) fn drop_last(&mut self, c: u64, n: usize) {
        match self.slot(c) {
            Slot::Flat(start, len) if len >= n && start + len == self.flat.len() => {
                self.flat.truncate(start + len - n);
                if let Some(w) = Slot::flat(start, len - n) {
                    self.items[c as usize] = w;
                }
            }
            Slot::Own(i) => {
                let v = &mut self.own[i];
                v.truncate(v.len().saturating_sub(n));
            }
            _ => debug_assert!(false, "items dropped that were not just added"),
        }
    }

    pub(super) fn get(&self, c: u64) -> &[T] {
        self.get_word(self.items[c as usize])
    }

    /// The items a slot word names.
    pub(super) fn get_word(&self, w: u64) -> &[T] {
        match Slot::unpack(w) {
            Slot::Flat(start, len) => &self.flat[start..start + len],
            Slot::Own(i) => &self.own[i],
            Slot::Record(_) => &[],
        }
    }
}
