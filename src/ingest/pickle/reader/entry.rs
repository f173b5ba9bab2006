//! History entries read by a path of their own. A GB snapshot is millions of dicts of one
//! form: `}`, a memo store, a MARK, then pairs whose keys are memo GETs of the shape's names
//! and whose values are GETs, small integers, short strings or a new frame list of GETs, then
//! SETITEMS. Through the opcode loop each of their ~20 opcodes is a dispatch, a stack push and
//! the record's assembly from the stack after (most of a GB snapshot's read). Here the entry's
//! bytes are scanned first, without changing anything but caches; only an entry the scan read
//! to its SETITEMS is applied, straight into its record, with every effect the loop would have
//! had (the same strings, memo slots, frame list, sink call and followed containers). Anything
//! else (a key outside the shape, a value of another form, a FRAME opcode, an entry longer than
//! the bytes at hand, a GET of a slot the entry itself stores) leaves the entry to the loop,
//! from its `}`. The tests hold this path to the loop alone on every committed snapshot, cut
//! and damaged, and on generated pickles (`ReadMode`).

use super::super::{Kind, PickleError, ValueId, RECORD_MAX_KEYS};
use rustc_hash::FxHashMap;

use super::memo::Memo;
use super::{short_key, Fresh, KeySlot, Keys, Reader, ShortKey, ABSENT, NO_PUT, SHORT_STR};
use crate::ingest::pickle::Pickle;

/// Bytes the scan looks at: an entry longer than this (a stack of hundreds of new frames) is
/// read by the loop.
const SCAN: usize = 4096;
/// Most pairs an entry has: a record's kept and ignored members.
const PAIRS: usize = 2 * RECORD_MAX_KEYS;

/// What the scan made of a value (`Scan::tags`).
const SCALAR: u8 = 0;
/// A memo GET's value.
const GOT: u8 = 1;
/// A short string not met before at `window[at..at + len]`, checked UTF-8 (`Scan::strs`).
const STR: u8 = 2;
/// The entry's new list, of `Scan::items`.
const LIST: u8 = 3;

/// A key's member in `Scan::slots`: a kept member's index, or this bit and an ignored one's.
const IGNORED: u8 = 0x80;

/// The entry the scan reads, kept in the reader from one entry to the next (its arrays are
/// set as they are filled, not cleared).
pub(super) struct Scan {
    /// Bytes the entry took after its `}`.
    len: usize,
    /// Its memo index, or [`NO_PUT`].
    put: usize,
    n: usize,
    keys: [ValueId; PAIRS],
    slots: [u8; PAIRS],
    tags: [u8; PAIRS],
    vals: [ValueId; PAIRS],
    /// (start, length) in the window of each [`STR`] value.
    strs: [(u32, u32); PAIRS],
    /// The memo index each value was stored at, or [`NO_PUT`].
    puts: [usize; PAIRS],
    /// The new list's memo index, or [`NO_PUT`].
    list_put: usize,
    /// The new list's items.
    items: Vec<ValueId>,
    /// The memo indices the entry stores, and the least of them: a GET of one leaves the
    /// entry to the loop (the scan reads the memo as it was before the entry).
    mine: [usize; PAIRS + 2],
    n_mine: usize,
    least_mine: usize,
    /// The memo's length as the entry's stores grow it.
    memo_len: usize,
    /// The input offset of the window's first byte: no pickle stores more slots than it has
    /// bytes before them.
    at: usize,
    /// The last short string not in the memo, and its id (each entry writes its
    /// `compile_context` afresh).
    last_str: (ShortKey, ValueId),
    /// (memo index, value, member) of keys met, by memo index modulo [`KEY_LINES`].
    key_lines: [(usize, ValueId, KeySlot); KEY_LINES],
}

/// Lines of `Scan::key_lines`, a power of two.
const KEY_LINES: usize = 64;

impl Default for Scan {
    fn default() -> Self {
        Scan {
            len: 0,
            put: NO_PUT,
            n: 0,
            keys: [ABSENT; PAIRS],
            slots: [0; PAIRS],
            tags: [0; PAIRS],
            vals: [ABSENT; PAIRS],
            strs: [(0, 0); PAIRS],
            puts: [NO_PUT; PAIRS],
            list_put: NO_PUT,
            items: Vec::new(),
            mine: [NO_PUT; PAIRS + 2],
            n_mine: 0,
            least_mine: NO_PUT,
            memo_len: 0,
            at: 0,
            last_str: ([u64::MAX; 4], ABSENT),
            key_lines: [(NO_PUT, ABSENT, KeySlot::Kept(0)); KEY_LINES],
        }
    }
}

/// Reads a little-endian integer of `N` bytes at `w[*c..]`, moving past it.
#[inline(always)]
fn le<const N: usize>(w: &[u8], c: &mut usize) -> Option<u64> {
    let b = w.get(*c..*c + N)?;
    *c += N;
    let mut x = [0u8; 8];
    x[..N].copy_from_slice(b);
    Some(u64::from_le_bytes(x))
}

impl Scan {
    /// A memo store opcode at `w[*c]`, if there is one: its index.
    #[inline(always)]
    fn put(&mut self, w: &[u8], c: &mut usize) -> Option<Option<usize>> {
        let idx = match *w.get(*c)? {
            0x94 => {
                *c += 1;
                self.memo_len
            }
            b'q' => {
                *c += 1;
                le::<1>(w, c)? as usize
            }
            b'r' => {
                *c += 1;
                le::<4>(w, c)? as usize
            }
            _ => return Some(None),
        };
        let mine = &self.mine[..self.n_mine];
        if idx > self.at + *c || self.n_mine == self.mine.len() || mine.contains(&idx) {
            return None;
        }
        self.mine[self.n_mine] = idx;
        self.n_mine += 1;
        self.least_mine = self.least_mine.min(idx);
        self.memo_len = self.memo_len.max(idx + 1);
        Some(Some(idx))
    }

    /// A GET opcode at `w[*c]`, if it is one and names a slot stored before the entry.
    #[inline(always)]
    fn get(&self, w: &[u8], c: &mut usize, memo: &mut Memo) -> Option<ValueId> {
        let idx = match *w.get(*c)? {
            b'h' => {
                *c += 1;
                le::<1>(w, c)? as usize
            }
            b'j' => {
                *c += 1;
                le::<4>(w, c)? as usize
            }
            _ => return None,
        };
        if idx >= self.least_mine && self.mine[..self.n_mine].contains(&idx) {
            return None;
        }
        memo.get_cached(idx)
    }

    /// A key's GET at `w[*c]`: its value and what it names. Keys are a few memo slots
    /// named over and over, so the answer is kept by memo index (checked against the memo's
    /// value, which a store may have changed): the lookup by the string's id waited on the
    /// memo's answer first.
    #[inline(always)]
    fn key(
        &mut self,
        w: &[u8],
        c: &mut usize,
        memo: &mut Memo,
        keys: &mut Keys,
        pk: &Pickle,
    ) -> Option<(ValueId, KeySlot)> {
        let op = *w.get(*c)?;
        let idx = match op {
            b'h' => *w.get(*c + 1)? as usize,
            b'j' => le::<4>(w, &mut (*c + 1))? as usize,
            _ => return None,
        };
        let line = self.key_lines[idx % KEY_LINES];
        let k = self.get(w, c, memo)?;
        if line.0 == idx && line.1 == k {
            return Some((k, line.2));
        }
        let slot = keys.slot(pk, k)?;
        self.key_lines[idx % KEY_LINES] = (idx, k, slot);
        Some((k, slot))
    }

    /// Scans the entry whose `}` was just read; `w` is the input from there. False: it is
    /// not of the form this path reads.
    #[inline(always)]
    fn scan(
        &mut self,
        w: &[u8],
        memo: &mut Memo,
        keys: &mut Keys,
        pk: &Pickle,
        short_strs: &FxHashMap<ShortKey, ValueId>,
    ) -> Option<()> {
        let mut c = 0;
        self.put = self.put(w, &mut c)?.unwrap_or(NO_PUT);
        if *w.get(c)? != b'(' {
            return None;
        }
        c += 1;
        let (mut kept, mut ignored) = (0u16, 0u16);
        let mut list = false;
        loop {
            if *w.get(c)? == b'u' {
                c += 1;
                break;
            }
            let i = self.n;
            if i == PAIRS {
                return None;
            }
            let (k, slot) = self.key(w, &mut c, memo, keys, pk)?;
            let slot = match slot {
                KeySlot::Kept(j) => {
                    if kept & 1 << j != 0 {
                        return None;
                    }
                    kept |= 1 << j;
                    j as u8
                }
                KeySlot::Ignored(j) => {
                    if ignored & 1 << j != 0 {
                        return None;
                    }
                    ignored |= 1 << j;
                    IGNORED | j as u8
                }
            };
            let op = *w.get(c)?;
            let (tag, v) = match op {
                b'h' | b'j' => (GOT, self.get(w, &mut c, memo)?),
                b'K' => {
                    c += 1;
                    (SCALAR, int(le::<1>(w, &mut c)? as i64)?)
                }
                b'M' => {
                    c += 1;
                    (SCALAR, int(le::<2>(w, &mut c)? as i64)?)
                }
                b'J' => {
                    c += 1;
                    (SCALAR, int(le::<4>(w, &mut c)? as u32 as i32 as i64)?)
                }
                0x8a => {
                    let n = *w.get(c + 1)? as usize;
                    if n > 8 {
                        return None;
                    }
                    let b = w.get(c + 2..c + 2 + n)?;
                    c += 2 + n;
                    let v = match b.last() {
                        None => 0,
                        Some(&top) => {
                            let mut x = if top & 0x80 != 0 { [0xff; 8] } else { [0; 8] };
                            x[..n].copy_from_slice(b);
                            i64::from_le_bytes(x)
                        }
                    };
                    (SCALAR, int(v)?)
                }
                b'N' => {
                    c += 1;
                    (SCALAR, super::NONE)
                }
                0x88 | 0x89 => {
                    c += 1;
                    (SCALAR, ValueId::new(Kind::Bool, (op == 0x88) as u64))
                }
                0x8c | b'X' => {
                    c += 1;
                    let n = if op == 0x8c {
                        le::<1>(w, &mut c)?
                    } else {
                        le::<4>(w, &mut c)?
                    } as usize;
                    if n > SHORT_STR {
                        return None;
                    }
                    let b = w.get(c..c + n)?;
                    // A text met before was checked then (as `Reader::str_next` does).
                    let key = match w.get(c..c + SHORT_STR) {
                        Some(ahead) => key_ahead(ahead, n),
                        None => short_key(b),
                    };
                    c += n;
                    // Word by word: compared as an array, the key went through the stack
                    // and its load stalled on the stores just made (a tenth of the scan).
                    let l = &self.last_str.0;
                    if (key[0] ^ l[0]) | (key[1] ^ l[1]) | (key[2] ^ l[2]) | (key[3] ^ l[3]) == 0 {
                        (SCALAR, self.last_str.1)
                    } else if let Some(&v) = short_strs.get(&key) {
                        self.last_str = (key, v);
                        (SCALAR, v)
                    } else {
                        std::str::from_utf8(b).ok()?;
                        self.strs[i] = ((c - n) as u32, n as u32);
                        (STR, ABSENT)
                    }
                }
                b']' => {
                    if list {
                        return None;
                    }
                    list = true;
                    c += 1;
                    self.list_put = self.put(w, &mut c)?.unwrap_or(NO_PUT);
                    match *w.get(c)? {
                        b'(' => {
                            c += 1;
                            while *w.get(c)? != b'e' {
                                let item = self.get(w, &mut c, memo)?;
                                self.items.push(item);
                            }
                            c += 1;
                        }
                        b'h' | b'j' => {
                            // One item and APPEND, or an empty list and the next key.
                            let mut after = c;
                            let item = self.get(w, &mut after, memo)?;
                            if *w.get(after)? == b'a' {
                                self.items.push(item);
                                c = after + 1;
                            }
                        }
                        _ => {}
                    }
                    (LIST, ABSENT)
                }
                _ => return None,
            };
            // Strings alone are stored after their opcode (a list's store came after `]`).
            let string = op == 0x8c || op == b'X';
            self.puts[i] = if string {
                self.put(w, &mut c)?.unwrap_or(NO_PUT)
            } else {
                NO_PUT
            };
            self.keys[i] = k;
            self.slots[i] = slot;
            self.tags[i] = tag;
            self.vals[i] = v;
            self.n = i + 1;
        }
        // What `Reader::record` asks: two pairs or more (a dict given one pair stays
        // generic), and the first kept member.
        if self.n < 2 || kept & 1 == 0 {
            return None;
        }
        self.len = c;
        Some(())
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

/// An integer as the loop makes it, if it fits a [`ValueId`] (a wider one goes to a table).
#[inline(always)]
fn int(v: i64) -> Option<ValueId> {
    let half = 1i64 << (super::super::PAYLOAD_BITS - 1);
    (-half..half)
        .contains(&v)
        .then(|| ValueId::new(Kind::Int, v as u64))
}

impl Reader<'_> {
    /// Reads the history entry whose `}` is at `offset` by the path of its own, where it is
    /// of that form; false (nothing read, nothing changed but caches) where it is not.
    pub(super) fn direct_entry(&mut self, offset: usize) -> Result<bool, PickleError> {
        let sc = &mut self.scan;
        sc.at = self.input.offset();
        sc.n = 0;
        sc.list_put = NO_PUT;
        sc.items.clear();
        sc.n_mine = 0;
        sc.least_mine = NO_PUT;
        sc.memo_len = self.memo.len();
        let w = self.input.ahead(SCAN);
        if sc
            .scan(
                w,
                &mut self.memo,
                &mut self.keys,
                &self.pk,
                &self.short_strs,
            )
            .is_none()
        {
            return Ok(false);
        }
        // The strings not met before, made as the loop makes them (short ones once per
        // distinct text), while the window still holds their bytes.
        for i in 0..sc.n {
            if sc.tags[i] == STR {
                let (at, len) = sc.strs[i];
                let b = &w[at as usize..(at + len) as usize];
                let key = short_key(b);
                let id = match self.short_strs.get(&key) {
                    Some(&id) => id,
                    None => {
                        let id = ValueId::new(Kind::Str, self.pk.texts.push_bytes(b));
                        self.short_strs.insert(key, id);
                        id
                    }
                };
                sc.tags[i] = SCALAR;
                sc.vals[i] = id;
            }
        }
        self.input.skip(sc.len);
        // The loop's steps, in its order: the dict made and stored, its pairs read (GETs
        // copy, stores store, the new list made, stored and filled), the record made.
        let dict = self.pk.maps.add_empty();
        let d = ValueId::new(Kind::Dict, dict);
        let put = self.scan.put;
        if put != NO_PUT {
            // The memo's slot is written once, below, with the record: what the loop stores
            // there first is stored over before anything reads it. Its mark on a list
            // followed (stored over) is made here, in the loop's order.
            self.fresh_list.stored(d, put);
        }
        let n = self.pk.shape.map_or(0, |sh| sh.keys.len());
        let mut rec = [ABSENT; RECORD_MAX_KEYS];
        let mut list = false;
        for i in 0..self.scan.n {
            self.copied(self.scan.keys[i]);
            let v = match self.scan.tags[i] {
                GOT => {
                    let v = self.scan.vals[i];
                    self.copied(v);
                    v
                }
                LIST => {
                    list = true;
                    let l = self.empty_list();
                    if self.scan.list_put != NO_PUT {
                        self.memo_store(self.scan.list_put, l, offset)?;
                    }
                    let from = self.stack.len();
                    self.stack.extend_from_slice(&self.scan.items);
                    self.add_to_list(l, from, offset)?;
                    l
                }
                _ => {
                    let v = self.scan.vals[i];
                    if self.scan.puts[i] != NO_PUT {
                        self.memo_store(self.scan.puts[i], v, offset)?;
                    }
                    v
                }
            };
            let slot = self.scan.slots[i];
            if slot & IGNORED == 0 {
                rec[slot as usize] = v;
            }
        }
        let members = rec.map(|v| (v != ABSENT).then_some(v));
        let r = match self.sink.as_mut() {
            Some(sink) => sink.record(&self.pk, &members[..n]),
            None => unreachable!("the direct path runs for a sink only"),
        };
        // As `sink_record` leaves it: nothing else names the dict.
        let sunk = ValueId::new(Kind::Sunk, r as u64);
        if put != NO_PUT {
            self.memo.set(put, sunk);
            self.sunk_puts.push_back((r as u64, put));
        }
        self.pk.maps.release(dict);
        self.fresh_dict = Fresh::NONE;
        if list {
            self.freeze_fresh_list();
        }
        self.stack.push(sunk);
        self.direct_records += 1;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
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
