//! A parsed pickle: its values by id, and reading them (items, dict members, records).

use super::*;

/// A parsed pickle: its values (none borrows the input).
#[derive(Debug, Clone)]
pub struct Pickle {
    pub(super) texts: Texts,
    pub(super) wide: Vec<i64>,
    pub(super) floats: Vec<f64>,
    pub(super) seqs: Store<ValueId>,
    pub(super) maps: Store<(ValueId, ValueId)>,
    /// The shape of dicts read as records, if the caller named one.
    pub(super) shape: Option<&'static RecordShape>,
    /// Every record's kept members, `shape.keys.len()` values per record (none where a
    /// [`RecordSink`] took them: `sunk`).
    pub(super) records: Vec<ValueId>,
    pub(super) sunk: bool,
    /// The places (`store` slot words of `seqs`) of [`Kind::Frozen`] lists, one per place.
    pub(super) frozen: Vec<u64>,
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
        // The last pair with the key: a key set twice keeps its later value, as Python's
        // dict does when it unpickles the same bytes.
        self.maps
            .get(id.data())
            .iter()
            .rev()
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
