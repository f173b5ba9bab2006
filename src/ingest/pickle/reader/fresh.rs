//! The list being filled now (Fresh), how short strings are keyed for sharing, and appending to a list in place.

use super::*;

/// A container followed from its making (`}` or `]`) while a sink reads records: where the
/// memo stored it, and whether anything else may name it. The pickle machine copies a value
/// only by GET and DUP, and moves it off the stack into a container for good (it comes back
/// only by GET), so a container at its place on the stack that was stored in the memo once
/// and never copied is named by those two places alone, and both can be rewritten.
#[derive(Debug, Clone, Copy)]
pub(super) struct Fresh {
    pub(super) id: ValueId,
    /// Its memo index, [`NO_PUT`] before it is stored.
    pub(super) put: usize,
    /// False once it was copied or stored twice.
    pub(super) clean: bool,
}

pub(super) const NO_PUT: usize = usize::MAX;

impl Fresh {
    pub(super) const NONE: Fresh = Fresh {
        id: NONE,
        put: NO_PUT,
        clean: false,
    };

    pub(super) fn new(id: ValueId) -> Fresh {
        Fresh {
            id,
            put: NO_PUT,
            clean: true,
        }
    }

    /// `v` was stored at memo index `idx` (another value stored over its slot leaves it
    /// named by its stack place alone, which `alone` does not tell apart: followed no more).
    #[inline]
    pub(super) fn stored(&mut self, v: ValueId, idx: usize) {
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
    pub(super) fn copied(&mut self, v: ValueId) {
        if v == self.id {
            self.clean = false;
        }
    }

    /// Whether `v` is this container, named by its stack place and its memo slot alone.
    #[inline]
    pub(super) fn alone(&self, v: ValueId) -> bool {
        v == self.id && self.clean
    }
}

/// Strings up to this long share one id per distinct text (`Reader::short_strs`).
pub(super) const SHORT_STR: usize = 24;

/// A short string's bytes in three words and its length in a fourth: the map of short
/// strings hashes and compares four words, where a key of bytes hashed them one by one and
/// compared them through `memcmp` (4.5% of a GB snapshot's read, with the hashing).
pub(super) type ShortKey = [u64; 4];

/// The key of a string of at most [`SHORT_STR`] bytes.
#[inline]
pub(super) fn short_key(b: &[u8]) -> ShortKey {
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
