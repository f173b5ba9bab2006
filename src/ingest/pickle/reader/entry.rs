//! History entries read by their grammar. A GB snapshot is millions of dicts of one form:
//! `}`, a memo store, a MARK, then pairs whose keys are memo GETs of the shape's names and
//! whose values are GETs, small integers, short strings or a new frame list of GETs, then
//! SETITEMS. Through the opcode loop each of their ~20 opcodes is a dispatch, a stack push
//! and the record's assembly from the stack after (most of a GB snapshot's read). Here an
//! entry is read at its `}` by that grammar, straight into its record, inside a window of
//! [`WIN`] bytes checked once: no value stack, and no table slot for the dict or its new
//! frame list. What the pickle can still name ends as the loop leaves it: the sink is given
//! the same members, the memo slots the entry stores hold what the loop leaves there (the
//! record sunk, the strings, the new list frozen to its items' place, [`Kind::Frozen`]), and
//! the containers the loop follows (`Fresh`) learn of every copy and store. Anything else (a
//! key outside the shape, a value of another form, a FRAME opcode, an entry longer than the
//! window, a GET of a slot at or past the entry's first store, stores that do not rise)
//! leaves the entry to the loop, from its `}`. The tests hold this path to the loop alone on
//! every committed snapshot, cut and damaged, and on generated pickles (`ReadMode`).
//!
//! On 2 cores the reader's thread bounds a GB snapshot's read; the path this replaced
//! (entries decoded on the thread ahead, then resolved and applied here with every table
//! effect of the loop) cost that thread about 2,200 instructions an entry
//! (docs/performance.md, "Snapshot reader").

use std::cell::Cell;

use rustc_hash::FxHashMap;

use super::super::{Kind, PickleError, ValueId, RECORD_MAX_KEYS};
use super::memo::Memo;
use super::{
    inline_int, short_text, Fresh, KeySlot, Keys, Reader, ShortKey, ABSENT, NO_PUT, SHORT_STR,
};
use crate::ingest::pickle::store::Slot;
use crate::ingest::pickle::Pickle;

/// The window an entry is read in, a power of two (reads index it masked, so that no read
/// can leave it); an entry longer than this (a stack of hundreds of new frames) is read by
/// the loop.
const WIN: usize = 4096;
/// An opcode starts below this: what it reads (at most a SHORT_BINUNICODE's 1 + 1 + 24
/// bytes, or a LONG1's 10, and a store's 5 after) then lies inside the window.
const END: usize = WIN - 64;
/// Most pairs an entry has: a record's kept and ignored members.
const PAIRS: usize = 2 * RECORD_MAX_KEYS;
/// Most memo stores an entry's strings make: one a pair (its dict's and its new list's are
/// kept apart).
const STORES: usize = PAIRS;

/// A key's member in `Grammar::keys`: a kept member's index, or this bit and an ignored
/// one's.
const IGNORED: u8 = 0x80;

/// [`Grammar::last_frozen`] where there is no last list.
const NO_FROZEN: u64 = u64::MAX;

/// What the grammar keeps from one entry to the next, and the entry it reads.
pub(super) struct Grammar {
    /// The key met at each place of the last entry and what it names: every entry of a
    /// history names the same keys in the same order, so a key GET whose value is the one
    /// at its place last time names the same member without a lookup. (By value, not by
    /// memo index: a slot stored over holds another id.)
    keys: [(ValueId, u8); PAIRS],
    /// The items of the last new frame list whose place was shared, and that place's frozen
    /// number: most entries' new lists name the same frames as the last one (77-81% of the
    /// committed samples' entries).
    last_items: Vec<ValueId>,
    last_frozen: u64,
    /// The frozen number of the empty place (every empty list's), once met.
    empty_frozen: u64,
    /// The last short string not in the memo, and its id (each entry writes its
    /// `compile_context` afresh).
    last_str: (ShortKey, ValueId),
    /// The entry read: its record's members...
    rec: [ValueId; RECORD_MAX_KEYS],
    /// ...whether it copied the list the loop follows by GET (as a key or a value: items
    /// come only with a new list, which the loop would follow instead)...
    copied_fresh: bool,
    /// ...its dict's memo index, or [`NO_PUT`]...
    dict_put: usize,
    /// ...the memo stores of its strings...
    stores: [(usize, ValueId); STORES],
    n_stores: usize,
    /// ...whether it made a new list, the list's memo index (or [`NO_PUT`]), the member it
    /// is (or [`NO_MEMBER`]) and its items.
    list: bool,
    list_put: usize,
    list_member: usize,
    items: Vec<ValueId>,
    /// The bytes it took after its `}`.
    len: usize,
}

/// [`Grammar::list_member`] of a list that is an ignored member.
const NO_MEMBER: usize = usize::MAX;

impl Default for Grammar {
    fn default() -> Self {
        Grammar {
            keys: [(ABSENT, 0); PAIRS],
            last_items: Vec::new(),
            last_frozen: NO_FROZEN,
            empty_frozen: NO_FROZEN,
            last_str: ([u64::MAX; 4], ABSENT),
            rec: [ABSENT; RECORD_MAX_KEYS],
            copied_fresh: false,
            dict_put: NO_PUT,
            stores: [(NO_PUT, ABSENT); STORES],
            n_stores: 0,
            list: false,
            list_put: NO_PUT,
            list_member: NO_MEMBER,
            items: Vec::new(),
            len: 0,
        }
    }
}

/// [`short_key`] of the first `n` bytes of `ahead` (which holds [`SHORT_STR`]), read
/// as three words and masked: the copy into a padded buffer that `short_key` makes was a
/// call to `memcpy` and a stalled load for every entry's `compile_context`.
#[inline(always)]
fn key_ahead(ahead: &[u8], n: usize) -> ShortKey {
    let word = |i: usize| {
        let w = u64::from_le_bytes(ahead[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
        let keep = n.saturating_sub(i * 8).min(8);
        if keep == 8 {
            w
        } else {
            w & ((1u64 << (keep * 8)) - 1)
        }
    };
    [word(0), word(1), word(2), n as u64]
}

/// The window's tables the grammar reads and grows: borrowed apart from the input, whose
/// bytes it reads in place.
struct Tables<'t> {
    memo: &'t mut Memo,
    keys: &'t mut Keys,
    pk: &'t mut Pickle,
    short_strs: &'t mut FxHashMap<ShortKey, ValueId>,
}

impl Grammar {
    /// Reads the entry whose bytes (after its `}`, at input offset `at`) start `w` into
    /// `self`, as the loop would read it: false where they are not of the entry's form (then
    /// nothing has changed but caches and the short strings met, which the loop meets
    /// again as the same ids). Only the first `real` bytes of `w` are input; `fresh` is the
    /// list the loop follows (`Reader::fresh_list`), if it still may be alone.
    #[inline(always)]
    fn read(
        &mut self,
        w: &[u8; WIN],
        real: usize,
        at: usize,
        fresh: ValueId,
        t: &mut Tables<'_>,
    ) -> Option<()> {
        // Masked, every read stays in the window; past `END` the loop below stops.
        let b = |i: usize| w[i & (WIN - 1)];
        // A word at `i` (past `END` only where a read ran on, which then fails).
        let u32at = |i: usize| -> Option<usize> {
            Some(u32::from_le_bytes(w.get(i..i + 4)?.try_into().ok()?) as usize)
        };
        // The memo as the entry's stores grow it (MEMOIZE stores at its length); GETs are
        // held below the entry's first store (`lo`), and its stores must rise, so that every
        // GET reads the memo as it was before the entry.
        let len = Cell::new(t.memo.len());
        let lo = Cell::new(usize::MAX);
        let last = Cell::new(None::<usize>);
        // A memo store at `*p`, if any: its index.
        let put = |p: &mut usize| -> Option<Option<usize>> {
            let i = match b(*p) {
                b'q' => {
                    *p += 2;
                    b(*p - 1) as usize
                }
                b'r' => {
                    *p += 5;
                    u32at(*p - 4)?
                }
                0x94 => {
                    *p += 1;
                    len.get()
                }
                _ => return Some(None),
            };
            // No pickle stores more slots than it has bytes before them (as `memo_put`
            // holds it: the loop refuses the entry).
            if i > at + *p {
                return None;
            }
            match last.get() {
                Some(l) if i <= l => return None,
                None => lo.set(i),
                _ => {}
            }
            last.set(Some(i));
            len.set(len.get().max(i + 1));
            Some(Some(i))
        };
        // A GET at `*p` (opcode `op`) of a slot stored before the entry: its value.
        let get = |p: &mut usize, op: u8, memo: &mut Memo| -> Option<ValueId> {
            let i = match op {
                b'h' => {
                    *p += 2;
                    b(*p - 1) as usize
                }
                b'j' => {
                    *p += 5;
                    u32at(*p - 4)?
                }
                _ => return None,
            };
            if i >= lo.get() {
                return None;
            }
            memo.get_cached(i)
        };
        let mut p = 0;
        self.dict_put = put(&mut p)?.unwrap_or(NO_PUT);
        if b(p) != b'(' {
            return None;
        }
        p += 1;
        self.rec = [ABSENT; RECORD_MAX_KEYS];
        self.copied_fresh = false;
        self.n_stores = 0;
        self.list = false;
        self.list_put = NO_PUT;
        self.list_member = NO_MEMBER;
        let (mut kept, mut ignored) = (0u16, 0u16);
        let mut n = 0;
        loop {
            if p >= END {
                return None;
            }
            let op = b(p);
            if op == b'u' {
                p += 1;
                break;
            }
            if n == PAIRS {
                return None;
            }
            let k = get(&mut p, op, t.memo)?;
            self.copied_fresh |= k == fresh;
            let slot = match self.keys[n] {
                (last, s) if last == k => s,
                _ => {
                    let s = match t.keys.slot(t.pk, k)? {
                        KeySlot::Kept(j) => j as u8,
                        KeySlot::Ignored(j) => IGNORED | j as u8,
                    };
                    self.keys[n] = (k, s);
                    s
                }
            };
            let bit = 1u16 << (slot & !IGNORED);
            if slot & IGNORED == 0 {
                if kept & bit != 0 {
                    return None;
                }
                kept |= bit;
            } else {
                if ignored & bit != 0 {
                    return None;
                }
                ignored |= bit;
            }
            let op = b(p);
            let v = match op {
                b'h' | b'j' => {
                    let v = get(&mut p, op, t.memo)?;
                    self.copied_fresh |= v == fresh;
                    v
                }
                b'K' => {
                    p += 2;
                    ValueId::new(Kind::Int, b(p - 1) as u64)
                }
                b'M' => {
                    p += 3;
                    ValueId::new(Kind::Int, b(p - 2) as u64 | (b(p - 1) as u64) << 8)
                }
                b'J' => {
                    p += 5;
                    inline_int(u32at(p - 4)? as u32 as i32 as i64)?
                }
                0x8a => {
                    let m = b(p + 1) as usize;
                    if m > 8 {
                        return None;
                    }
                    // Read as one word, its `m` bytes kept and sign-extended from the top
                    // one, as LONG1 is.
                    let x = u64::from_le_bytes(w.get(p + 2..p + 10)?.try_into().ok()?);
                    let v = match m {
                        0 => 0,
                        m => {
                            let sh = 64 - 8 * m as u32;
                            ((x << sh) as i64) >> sh
                        }
                    };
                    p += 2 + m;
                    inline_int(v)?
                }
                b'N' => {
                    p += 1;
                    super::NONE
                }
                0x88 | 0x89 => {
                    p += 1;
                    ValueId::new(Kind::Bool, (op == 0x88) as u64)
                }
                0x8c | b'X' => {
                    let (l, s) = if op == 0x8c {
                        (b(p + 1) as usize, p + 2)
                    } else {
                        (u32at(p + 1)?, p + 5)
                    };
                    if l > SHORT_STR {
                        return None;
                    }
                    p = s + l;
                    let key = key_ahead(&w[s..s + SHORT_STR], l);
                    let ls = &self.last_str.0;
                    // Word by word: compared as an array, the key went through the stack
                    // and its load stalled on the stores just made.
                    let id = if (key[0] ^ ls[0])
                        | (key[1] ^ ls[1])
                        | (key[2] ^ ls[2])
                        | (key[3] ^ ls[3])
                        == 0
                    {
                        self.last_str.1
                    } else {
                        // As the loop makes it (`Reader::str_next`).
                        let id = short_text(t.short_strs, &mut t.pk.texts, key, &w[s..s + l])?;
                        self.last_str = (key, id);
                        id
                    };
                    // Strings alone are stored after their opcode (a list's store comes
                    // after its `]`).
                    if let Some(i) = put(&mut p)? {
                        self.stores[self.n_stores] = (i, id);
                        self.n_stores += 1;
                    }
                    id
                }
                b']' => {
                    if self.list {
                        return None;
                    }
                    self.list = true;
                    p += 1;
                    self.list_put = put(&mut p)?.unwrap_or(NO_PUT);
                    self.items.clear();
                    match b(p) {
                        b'(' => {
                            p += 1;
                            loop {
                                if p >= END {
                                    return None;
                                }
                                let op = b(p);
                                if op == b'e' {
                                    p += 1;
                                    break;
                                }
                                let v = get(&mut p, op, t.memo)?;
                                self.items.push(v);
                            }
                        }
                        op @ (b'h' | b'j') => {
                            // One item and APPEND, or an empty list and the next key.
                            let mut q = p;
                            let v = get(&mut q, op, t.memo)?;
                            if b(q) == b'a' {
                                self.items.push(v);
                                p = q + 1;
                            }
                        }
                        _ => {}
                    }
                    if slot & IGNORED == 0 {
                        self.list_member = slot as usize;
                    }
                    ABSENT
                }
                _ => return None,
            };
            if slot & IGNORED == 0 {
                self.rec[slot as usize] = v;
            }
            n += 1;
        }
        // What `Reader::record` asks: two pairs or more (a dict given one pair stays
        // generic), the first kept member; and every byte read is input.
        if n < 2 || kept & 1 == 0 || p > real {
            return None;
        }
        self.len = p;
        Some(())
    }
}

impl Reader<'_> {
    /// Reads the history entry whose `}` is at `offset` by its grammar, where it is of that
    /// form; false (nothing read, nothing changed but caches) where it is not.
    pub(super) fn direct_entry(&mut self, offset: usize) -> Result<bool, PickleError> {
        // Lists share their items only where `share` is on (off in tests, to compare).
        if !self.share {
            return Ok(false);
        }
        let at = self.input.offset();
        let fresh = if self.fresh_list.clean {
            self.fresh_list.id
        } else {
            ABSENT
        };
        let Reader {
            input,
            memo,
            keys,
            pk,
            short_strs,
            grammar: g,
            ..
        } = self;
        let window = input.ahead(WIN);
        let real = window.len();
        // Near the input's end, the bytes left in a window of their own (the bytes past them
        // read as no opcode, and an entry must end inside the input).
        let padded;
        let w: &[u8; WIN] = match window.get(..WIN) {
            Some(w) => w.try_into().expect("WIN bytes"),
            None => {
                let mut b = [0u8; WIN];
                b[..real].copy_from_slice(window);
                padded = b;
                &padded
            }
        };
        let mut t = Tables {
            memo,
            keys,
            pk,
            short_strs,
        };
        if g.read(w, real, at, fresh, &mut t).is_none() {
            return Ok(false);
        }
        // The new list's place, as the loop would give it (`add_to_list`, `share_items`)
        // and freeze it (`freeze_fresh_list`).
        let frozen = if self.grammar.list {
            match self.freeze_items() {
                Some(p) => Some(p),
                None => return Ok(false),
            }
        } else {
            None
        };
        let g = &self.grammar;
        // The list the loop follows learns of a copy (as `copied`) where the entry made no
        // list (a new one would be followed instead); the dict it follows would be the
        // entry's own, given back below.
        if g.copied_fresh {
            self.fresh_list.clean = false;
        }
        let mut members = g.rec.map(|v| (v != ABSENT).then_some(v));
        if let (Some(p), true) = (frozen, g.list_member != NO_MEMBER) {
            members[g.list_member] = Some(ValueId::new(Kind::Frozen, p));
        }
        let n = self.pk.shape.map_or(0, |sh| sh.keys.len());
        let r = match self.sink.as_mut() {
            Some(sink) => sink.record(&self.pk, &members[..n]),
            None => unreachable!("the direct path runs for a sink only"),
        };
        // As `sink_record` leaves it: nothing else names the dict.
        let sunk = ValueId::new(Kind::Sunk, r as u64);
        let (dict_put, list_put, n_stores) = (g.dict_put, g.list_put, g.n_stores);
        if dict_put != NO_PUT {
            self.memo_store(dict_put, sunk, offset)?;
            self.sunk_puts.push_back((r as u64, dict_put));
        }
        for i in 0..n_stores {
            let (idx, v) = self.grammar.stores[i];
            self.memo_store(idx, v, offset)?;
        }
        if let (Some(p), true) = (frozen, list_put != NO_PUT) {
            self.memo_store(list_put, ValueId::new(Kind::Frozen, p), offset)?;
        }
        // The loop's dict (and new list) would be the containers followed, given back as
        // the sink took them.
        self.fresh_dict = Fresh::NONE;
        if frozen.is_some() {
            self.fresh_list = Fresh::NONE;
        }
        self.input.skip(self.grammar.len);
        self.stack.push(sunk);
        self.direct_records += 1;
        Ok(true)
    }

    /// The [`Kind::Frozen`] number of the place the loop would give the grammar's new list
    /// (`add_to_list` with `share_items`, then `freeze_fresh_list`): the items of an equal
    /// list read before, else new ones at the shared table's end. `None` where the loop is
    /// to read the entry: the sink's `appended` would see the list (an item that is a
    /// record, or any item once a dict that could be an entry was given to the sink as
    /// generic, `RecordSink::generic`), or its place does not fit a slot word.
    fn freeze_items(&mut self) -> Option<u64> {
        let g = &mut self.grammar;
        if g.items.is_empty() {
            if g.empty_frozen == NO_FROZEN {
                // Every empty list has one place.
                let p = self.freeze_place(Slot::flat(0, 0)?);
                self.grammar.empty_frozen = p;
            } else {
                self.list_runs += 1;
            }
            return Some(self.grammar.empty_frozen);
        }
        if self.generic_given {
            return None;
        }
        if g.last_frozen != NO_FROZEN && g.items == g.last_items {
            // Checked as the run began: these items are no records.
            self.list_runs += 1;
            return Some(g.last_frozen);
        }
        if g.items.iter().any(|&v| self.pk.record_number(v).is_some()) {
            return None;
        }
        let n = g.items.len();
        let start = self.pk.seqs.flat.len();
        self.pk.seqs.flat.extend_from_slice(&self.grammar.items);
        let (place, shared) = self.share_items(start);
        let Some(word) = Slot::flat(place, n) else {
            self.pk.seqs.flat.truncate(start);
            return None;
        };
        let p = self.freeze_place(word);
        let g = &mut self.grammar;
        if shared {
            g.last_items.clear();
            g.last_items.extend_from_slice(&g.items);
            g.last_frozen = p;
        }
        Some(p)
    }
}

#[cfg(test)]
mod tests {
    use super::super::short_key;
    use super::*;

    #[test]
    fn a_key_read_ahead_is_the_key_of_the_bytes_alone() {
        let text: Vec<u8> = (0..40u8).map(|i| b'a' + i % 26).collect();
        for n in 0..=SHORT_STR {
            assert_eq!(
                key_ahead(&text[..SHORT_STR], n),
                short_key(&text[..n]),
                "{n}"
            );
        }
    }
}
