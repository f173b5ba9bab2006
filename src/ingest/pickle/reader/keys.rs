//! Small values made without the store (short strings, small integers) and the cache of dict keys.

use super::*;

/// The id of the short string `b` (whose [`short_key`] is `key`): the one its text was given
/// before, else a new one, its bytes checked as UTF-8 (a text met before was checked then);
/// `None` where they are not UTF-8.
#[inline]
pub(super) fn short_text(
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
pub(super) fn inline_int(v: i64) -> Option<ValueId> {
    let half = 1i64 << (PAYLOAD_BITS - 1);
    (-half..half)
        .contains(&v)
        .then(|| ValueId::new(Kind::Int, v as u64))
}

/// What a dict key names in a record.
#[derive(Debug, Clone, Copy)]
pub(super) enum KeySlot {
    /// The shape's `keys[i]`.
    Kept(usize),
    /// The shape's `ignored[i]`.
    Ignored(usize),
}

/// What recent dict keys name in a record, by string id.
pub(super) struct Keys {
    /// (string index + 1, what it names) of recent dict keys, by string index modulo size.
    pub(super) cache: [(u64, Option<KeySlot>); KEY_CACHE],
    /// The string id of the record shape's first member, once met: one id for every such
    /// key, as every short string is read once (`short_str`).
    pub(super) first: Option<ValueId>,
}

impl Keys {
    /// Which record member the string `k` names, if any. Pickles share each key string through
    /// the memo, so a small cache by string index answers nearly every lookup without
    /// comparing text (`add_to_dict`, where the comparisons ran, was a tenth of the unpickle's
    /// profile; the cache's own gain was not measured apart from the session's other steps).
    #[inline(always)]
    pub(super) fn slot(&mut self, pk: &Pickle, k: ValueId) -> Option<KeySlot> {
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
pub(super) const KEY_CACHE: usize = 256;

/// Lists filled in one go with at most this many items share equal items (stacks); longer
/// ones (the history itself) are not worth hashing.
pub(super) const SHARE_MAX: usize = 4096;

pub(super) const NONE: ValueId = ValueId::new(Kind::None, 0);

pub(super) const ABSENT: ValueId = ValueId::ABSENT;
