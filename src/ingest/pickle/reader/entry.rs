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

use super::memo::{Memo, Watch};
use super::{short_key, Fresh, KeySlot, Keys, Reader, ShortKey, ABSENT, NO_PUT, SHORT_STR};
use crate::ingest::pickle::store::Slot;
use crate::ingest::pickle::Pickle;

/// Bytes the scan looks at: an entry longer than this (a stack of hundreds of new frames) is
/// read by the loop.
const SCAN: usize = 4096;
/// What the thread ahead reads of a chunk, at most, in trying entries: this many times its
/// bytes (a chunk torch wrote takes its bytes and a little more).
const TRIES: usize = 4;
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
    /// The keys of the last entry resolved key by key: their memo indices, what those held
    /// and what they name (as `slots`), and the kept members' mask. Every entry of a
    /// history names the same key slots in the same order, and while the memo watches them
    /// ([`Memo::watch`]) an entry naming the same indices has the same keys.
    run_idx: [u32; PAIRS],
    run_keys: [ValueId; PAIRS],
    run_slots: [u8; PAIRS],
    run_n: usize,
    run_kept: u16,
    /// The items of the last new frame list resolved item by item: their memo indices and
    /// what those held, with the least index above them ([`Watch::Items`]). Most entries'
    /// new lists name the same frames as the last one, and while the memo watches their
    /// slots, the same indices hold the same frames.
    items_idx: Vec<u32>,
    items_vals: Vec<ValueId>,
    items_below: usize,
}

/// Lines of `Scan::key_lines`, a power of two.
const KEY_LINES: usize = 64;

/// The run of frame lists: most history entries name the same frame objects as the entry
/// before (77-81% of the committed samples' entries), and the loop reads each new list the
/// same way, its items shared with the last one's, its place frozen to the same number, the
/// sink shown the same items and making nothing of them. An entry whose new list has the
/// run's items takes the place and number without that work; the list is still made, stored
/// and given back, so that its table slot and memo slot end as the loop leaves them.
pub(super) struct ListRun {
    /// The run's items.
    items: Vec<ValueId>,
    /// The slot word of their shared place.
    word: u64,
    /// The place's [`Kind::Frozen`] number, or [`NO_FROZEN`]: no run.
    frozen: u64,
    /// The frozen number of the empty place (every empty list's), or [`NO_FROZEN`] until
    /// an empty list was read in full.
    empty: u64,
}

/// [`ListRun::frozen`] where there is no run.
const NO_FROZEN: u64 = u64::MAX;

impl Default for ListRun {
    fn default() -> Self {
        ListRun {
            items: Vec::new(),
            word: 0,
            frozen: NO_FROZEN,
            empty: NO_FROZEN,
        }
    }
}

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
            run_idx: [0; PAIRS],
            run_keys: [ABSENT; PAIRS],
            run_slots: [0; PAIRS],
            run_n: 0,
            run_kept: 0,
            items_idx: Vec::new(),
            items_vals: Vec::new(),
            items_below: 0,
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

/// A memo store as [`decode`] writes it: none, MEMOIZE (the memo's length, known only to the
/// reader), or BINPUT's index plus this.
const PUT_NONE: u64 = 0;
const PUT_MEMOIZE: u64 = 1;
const PUT_INDEX: u64 = 2;

/// Words before an entry's pairs in [`Decoded::words`]: its length after the `}` and its
/// pair count, its store, its list's store, and its list's items in [`Decoded::items`].
const HEAD: usize = 4;

/// History entries decoded from their bytes alone, without the memo: what the scan then
/// resolves against the memo. Decoding is a function of the bytes, so it can run on another
/// thread ahead of the reader (`ahead`), which uses an entry only where its own `}` is at the
/// offset the entry was decoded at; a `}` byte inside another opcode's argument decodes to an
/// entry no `}` of the reader's meets, and is passed over.
#[derive(Default)]
pub(super) struct Decoded {
    /// The input offset just past each entry's `}`, ascending.
    ats: Vec<u64>,
    /// Where each entry's words start.
    starts: Vec<u32>,
    /// Each entry: [`HEAD`] words, then two a pair: the key's memo index and the value's
    /// tag (`index | tag << 32`), and the value (a GET's index, a scalar's [`ValueId`], a
    /// string's place, length and store, or nothing for the list).
    words: Vec<u64>,
    /// The memo indices of the entries' new lists' items.
    items: Vec<u32>,
    /// The next entry the reader has not passed.
    next: usize,
}

impl Decoded {
    pub(super) fn clear(&mut self) {
        self.ats.clear();
        self.starts.clear();
        self.words.clear();
        self.items.clear();
        self.next = 0;
    }

    /// Decodes every entry whose `}` is in `chunk` and whose bytes are too, `chunk` being the
    /// input from offset `base`.
    ///
    /// Each try reads at most [`SCAN`] bytes, and a chunk's tries read at most [`TRIES`]
    /// times its bytes between them: a pickle whose arguments hold `}` after `}`, each
    /// followed by what looks like an entry for a while (a byte string of them, GETs whose
    /// indices hold them), costs this thread work in proportion to its size, and the reader
    /// reads the entries of a chunk given up on itself.
    /// Returns the bytes its tries read.
    pub(super) fn decode_chunk(&mut self, chunk: &[u8], base: u64) -> usize {
        let mut from = 0;
        let mut read = 0;
        while let Some(i) = memchr::memchr(b'}', &chunk[from..]) {
            let at = from + i + 1;
            let w = &chunk[at..chunk.len().min(at + SCAN)];
            let mut reach = 0;
            let entry = self.decode(w, base + at as u64, &mut reach);
            read += reach;
            if read > TRIES * chunk.len() {
                break;
            }
            from = match entry {
                // The bytes an entry took hold no other (a `}` in them is an argument's).
                Some(len) => at + len,
                None => at,
            };
        }
        read
    }

    /// Decodes the entry whose `}` ends just before `w`, at input offset `at`: its length
    /// after the `}`, or `None` (nothing kept) where it is not of the form.
    pub(super) fn decode(&mut self, w: &[u8], at: u64, reach: &mut usize) -> Option<usize> {
        let (words, items) = (self.words.len(), self.items.len());
        match decode_entry(w, at, &mut self.words, &mut self.items, reach) {
            Some(len) => {
                self.ats.push(at);
                self.starts.push(words as u32);
                Some(len)
            }
            None => {
                self.words.truncate(words);
                self.items.truncate(items);
                None
            }
        }
    }

    /// Whether an entry was decoded at `at`, having passed over those before it (the reader
    /// asks in ascending order): then it is [`Decoded::current`].
    pub(super) fn find(&mut self, at: u64) -> bool {
        while let Some(&a) = self.ats.get(self.next) {
            if a >= at {
                return a == at;
            }
            self.next += 1;
        }
        false
    }

    /// Whether every entry was passed over.
    pub(super) fn spent(&self) -> bool {
        self.next >= self.ats.len()
    }

    /// The entry [`Decoded::find`] found: its words and the items' indices.
    pub(super) fn current(&self) -> (&[u64], &[u32]) {
        let s = self.starts[self.next] as usize;
        (&self.words[s..], &self.items)
    }
}

/// A memo store opcode at `w[*c]`, if there is one, as a `PUT_` code. BINPUT's index is
/// held to the offset as [`Reader::memo_put`] holds it (no pickle stores more slots than it
/// has bytes before them).
#[inline(always)]
fn decode_put(w: &[u8], c: &mut usize, at: u64) -> Option<u64> {
    let idx = match *w.get(*c)? {
        0x94 => {
            *c += 1;
            return Some(PUT_MEMOIZE);
        }
        b'q' => {
            *c += 1;
            le::<1>(w, c)?
        }
        b'r' => {
            *c += 1;
            le::<4>(w, c)?
        }
        _ => return Some(PUT_NONE),
    };
    (idx <= at + *c as u64).then_some(idx + PUT_INDEX)
}

/// A GET opcode's memo index at `w[*c]`, if it is one.
#[inline(always)]
fn decode_get(w: &[u8], c: &mut usize) -> Option<u32> {
    match *w.get(*c)? {
        b'h' => {
            *c += 1;
            Some(le::<1>(w, c)? as u32)
        }
        b'j' => {
            *c += 1;
            Some(le::<4>(w, c)? as u32)
        }
        _ => None,
    }
}

/// Decodes the entry whose `}` ends just before `w` (at input offset `at`) into `words` and
/// `items`: its length after the `}`, or `None` where it is not of the form (a memo store,
/// a MARK, pairs of a key's GET and a value that is a GET, a small integer, None, a bool, a
/// short string and its store, or a new list of GETs; then SETITEMS). What needs the memo
/// (what the keys name, what GETs get, whether a string was met before) is the scan's.
#[inline(always)]
fn decode_entry(
    w: &[u8],
    at: u64,
    words: &mut Vec<u64>,
    items: &mut Vec<u32>,
    reach: &mut usize,
) -> Option<usize> {
    let mut c = 0;
    // How far it read, entry or not: the thread ahead's work is bounded by it.
    let entry = (|| {
        let put = decode_put(w, &mut c, at)?;
        if *w.get(c)? != b'(' {
            return None;
        }
        c += 1;
        let head = words.len();
        words.extend_from_slice(&[0, put, PUT_NONE, 0]);
        let mut n = 0u64;
        let mut list = false;
        loop {
            if *w.get(c)? == b'u' {
                c += 1;
                break;
            }
            if n as usize == PAIRS {
                return None;
            }
            let key = decode_get(w, &mut c)?;
            let op = *w.get(c)?;
            let (tag, v) = match op {
                b'h' | b'j' => (GOT, decode_get(w, &mut c)? as u64),
                b'K' => {
                    c += 1;
                    (SCALAR, int(le::<1>(w, &mut c)? as i64)?.0)
                }
                b'M' => {
                    c += 1;
                    (SCALAR, int(le::<2>(w, &mut c)? as i64)?.0)
                }
                b'J' => {
                    c += 1;
                    (SCALAR, int(le::<4>(w, &mut c)? as u32 as i32 as i64)?.0)
                }
                0x8a => {
                    let len = *w.get(c + 1)? as usize;
                    if len > 8 {
                        return None;
                    }
                    let b = w.get(c + 2..c + 2 + len)?;
                    c += 2 + len;
                    let v = match b.last() {
                        None => 0,
                        Some(&top) => {
                            let mut x = if top & 0x80 != 0 { [0xff; 8] } else { [0; 8] };
                            x[..len].copy_from_slice(b);
                            i64::from_le_bytes(x)
                        }
                    };
                    (SCALAR, int(v)?.0)
                }
                b'N' => {
                    c += 1;
                    (SCALAR, super::NONE.0)
                }
                0x88 | 0x89 => {
                    c += 1;
                    (SCALAR, ValueId::new(Kind::Bool, (op == 0x88) as u64).0)
                }
                0x8c | b'X' => {
                    c += 1;
                    let len = if op == 0x8c {
                        le::<1>(w, &mut c)?
                    } else {
                        le::<4>(w, &mut c)?
                    } as usize;
                    if len > SHORT_STR {
                        return None;
                    }
                    w.get(c..c + len)?;
                    let place = c as u64;
                    c += len;
                    // Strings alone are stored after their opcode (a list's store comes
                    // after its `]`).
                    let put = decode_put(w, &mut c, at)?;
                    (STR, place | (len as u64) << 16 | put << 24)
                }
                b']' => {
                    if list {
                        return None;
                    }
                    list = true;
                    c += 1;
                    words[head + 2] = decode_put(w, &mut c, at)?;
                    let first = items.len();
                    match *w.get(c)? {
                        b'(' => {
                            c += 1;
                            while *w.get(c)? != b'e' {
                                items.push(decode_get(w, &mut c)?);
                            }
                            c += 1;
                        }
                        b'h' | b'j' => {
                            // One item and APPEND, or an empty list and the next key.
                            let mut after = c;
                            let item = decode_get(w, &mut after)?;
                            if *w.get(after)? == b'a' {
                                items.push(item);
                                c = after + 1;
                            }
                        }
                        _ => {}
                    }
                    words[head + 3] = first as u64 | ((items.len() - first) as u64) << 32;
                    (LIST, 0)
                }
                _ => return None,
            };
            words.extend_from_slice(&[key as u64 | (tag as u64) << 32, v]);
            n += 1;
        }
        // What `Reader::record` asks of the pairs' count (a dict given one pair stays generic).
        if n < 2 {
            return None;
        }
        words[head] = c as u64 | n << 32;
        Some(c)
    })();
    *reach = c;
    entry
}

impl Scan {
    /// The memo index of a `PUT_` code, as the store makes it, recorded as the entry's.
    #[inline(always)]
    fn put(&mut self, code: u64) -> Option<usize> {
        let idx = match code {
            PUT_NONE => return Some(NO_PUT),
            PUT_MEMOIZE => {
                // Held to the offset of the entry's `}`, short of the store's own: an entry
                // this refuses goes to the loop, which holds it exactly.
                if self.memo_len > self.at {
                    return None;
                }
                self.memo_len
            }
            i => (i - PUT_INDEX) as usize,
        };
        if self.n_mine == self.mine.len() || self.mine[..self.n_mine].contains(&idx) {
            return None;
        }
        self.mine[self.n_mine] = idx;
        self.n_mine += 1;
        self.least_mine = self.least_mine.min(idx);
        self.memo_len = self.memo_len.max(idx + 1);
        Some(idx)
    }

    /// What the memo holds at `idx`, where it was stored before the entry.
    #[inline(always)]
    fn get(&self, idx: u32, memo: &mut Memo) -> Option<ValueId> {
        let idx = idx as usize;
        if idx >= self.least_mine && self.mine[..self.n_mine].contains(&idx) {
            return None;
        }
        memo.get_cached(idx)
    }

    /// A key's GET of `idx`: its value and what it names. Keys are a few memo slots named
    /// over and over, so the answer is kept by memo index (checked against the memo's value,
    /// which a store may have changed): the lookup by the string's id waited on the memo's
    /// answer first.
    #[inline(always)]
    fn key(
        &mut self,
        idx: u32,
        memo: &mut Memo,
        keys: &mut Keys,
        pk: &Pickle,
    ) -> Option<(ValueId, KeySlot)> {
        let line = self.key_lines[idx as usize % KEY_LINES];
        let k = self.get(idx, memo)?;
        if line.0 == idx as usize && line.1 == k {
            return Some((k, line.2));
        }
        let slot = keys.slot(pk, k)?;
        self.key_lines[idx as usize % KEY_LINES] = (idx as usize, k, slot);
        Some((k, slot))
    }

    /// Resolves the decoded entry `e` (its words, and the items they place in `items`)
    /// against the memo, as the loop would read it; `w` is the input from just past its `}`.
    /// False: it is not an entry this path reads.
    #[inline(always)]
    fn resolve(
        &mut self,
        (e, items): (&[u64], &[u32]),
        w: &[u8],
        memo: &mut Memo,
        keys: &mut Keys,
        pk: &Pickle,
        short_strs: &FxHashMap<ShortKey, ValueId>,
    ) -> Option<()> {
        let (len, n) = (e[0] as u32 as usize, (e[0] >> 32) as usize);
        self.put = self.put(e[1])?;
        let run = self.run_n == n
            && memo.watched_unchanged(Watch::Keys)
            && (0..n).all(|i| e[HEAD + 2 * i] as u32 == self.run_idx[i]);
        let (mut kept, mut ignored) = (0u16, 0u16);
        if run {
            kept = self.run_kept;
        }
        let mut below = 0;
        let mut items_run = false;
        for i in 0..n {
            let (kw, v) = (e[HEAD + 2 * i], e[HEAD + 2 * i + 1]);
            let slot = if run {
                self.keys[i] = self.run_keys[i];
                self.run_slots[i]
            } else {
                let (k, slot) = self.key(kw as u32, memo, keys, pk)?;
                self.keys[i] = k;
                match slot {
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
                }
            };
            below = below.max(kw as u32 as usize + 1);
            let mut put = NO_PUT;
            let (tag, v) = match (kw >> 32) as u8 {
                GOT => (GOT, self.get(v as u32, memo)?),
                SCALAR => (SCALAR, ValueId(v)),
                STR => {
                    let (at, n) = ((v & 0xffff) as usize, (v >> 16 & 0xff) as usize);
                    let b = w.get(at..at + n)?;
                    // A text met before was checked then (as `Reader::str_next` does).
                    let key = match w.get(at..at + SHORT_STR) {
                        Some(ahead) => key_ahead(ahead, n),
                        None => short_key(b),
                    };
                    // Word by word: compared as an array, the key went through the stack
                    // and its load stalled on the stores just made (a tenth of the scan).
                    let l = &self.last_str.0;
                    let r = if (key[0] ^ l[0]) | (key[1] ^ l[1]) | (key[2] ^ l[2]) | (key[3] ^ l[3])
                        == 0
                    {
                        (SCALAR, self.last_str.1)
                    } else if let Some(&id) = short_strs.get(&key) {
                        self.last_str = (key, id);
                        (SCALAR, id)
                    } else {
                        std::str::from_utf8(b).ok()?;
                        self.strs[i] = (at as u32, n as u32);
                        (STR, ABSENT)
                    };
                    put = self.put(v >> 24)?;
                    r
                }
                LIST => {
                    self.list_put = self.put(e[2])?;
                    let (first, count) = (e[3] as u32 as usize, (e[3] >> 32) as usize);
                    let idx = &items[first..first + count];
                    if memo.watched_unchanged(Watch::Items) && self.items_idx == idx {
                        self.items.extend_from_slice(&self.items_vals);
                        items_run = true;
                    } else {
                        for &item in idx {
                            let item = self.get(item, memo)?;
                            self.items.push(item);
                        }
                        // Watched from here: what the slots hold now, as read.
                        self.items_idx.clear();
                        self.items_idx.extend_from_slice(idx);
                        self.items_vals.clear();
                        self.items_vals.extend_from_slice(&self.items);
                        self.items_below = idx.iter().max().map_or(0, |&m| m as usize + 1);
                        memo.watch(Watch::Items, self.items_below);
                    }
                    (LIST, ABSENT)
                }
                _ => return None,
            };
            self.puts[i] = put;
            self.slots[i] = slot;
            self.tags[i] = tag;
            self.vals[i] = v;
            self.n = i + 1;
        }
        // What `Reader::record` asks: the first kept member.
        if kept & 1 == 0 {
            return None;
        }
        // The items' GETs held to the entry's own stores, as `get` holds them: the run's
        // items were read from before the entry.
        if items_run && self.least_mine < self.items_below {
            return None;
        }
        if run {
            // The keys' GETs held to the entry's own stores, as `get` holds them: the run's
            // keys were read from before the entry.
            if self.least_mine < below {
                return None;
            }
        } else {
            for i in 0..n {
                self.run_idx[i] = e[HEAD + 2 * i] as u32;
            }
            self.run_keys[..n].copy_from_slice(&self.keys[..n]);
            self.run_slots[..n].copy_from_slice(&self.slots[..n]);
            self.run_n = n;
            self.run_kept = kept;
            memo.watch(Watch::Keys, below);
        }
        self.len = len;
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
        let at = sc.at as u64;
        self.input.ahead(SCAN);
        // Decoded ahead, on another thread, where it was (an entry across two chunks was not),
        // else here.
        let ahead = self.input.decoded_at(at);
        let w = self.input.window();
        let (e, items) = if ahead {
            self.input.decoded()
        } else {
            self.local.clear();
            let w = &w[..w.len().min(SCAN)];
            if self.local.decode(w, at, &mut 0).is_none() {
                return Ok(false);
            }
            self.local.current()
        };
        let resolved = sc.resolve(
            (e, items),
            w,
            &mut self.memo,
            &mut self.keys,
            &self.pk,
            &self.short_strs,
        );
        if resolved.is_none() {
            return Ok(false);
        }
        if ahead {
            self.decoded_ahead += 1;
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
        // The new list's frozen number where it is the run's list again, and its place's
        // word where it starts a run.
        let mut known = None;
        let mut new_run = None;
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
                    let run = &self.list_run;
                    let empty = self.scan.items.is_empty();
                    if empty
                        && run.empty != NO_FROZEN
                        && !self.generic_given
                        && self.pk.seqs.slot(l.data()) == Slot::Flat(self.pk.seqs.flat.len(), 0)
                    {
                        // An empty list, as the loop leaves it (its place the table's end,
                        // frozen to the empty place's number).
                        known = Some(run.empty);
                        self.list_runs += 1;
                    } else if !empty
                        && run.frozen != NO_FROZEN
                        && !self.generic_given
                        && run.items == self.scan.items
                    {
                        // The items the last list was given, which the loop would share
                        // with it: the list holds their place, as the loop leaves it.
                        self.pk.seqs.items[l.data() as usize] = run.word;
                        known = Some(run.frozen);
                        self.list_runs += 1;
                    } else {
                        let from = self.stack.len();
                        self.stack.extend_from_slice(&self.scan.items);
                        let shared = self.add_to_list(l, from, offset)?;
                        // The sink's `appended` does nothing with items none of which is
                        // a record or a dict it was told of (`RecordSink::appended`); a
                        // dict that is no record never becomes one.
                        let sink_blind = !self.generic_given
                            && self
                                .scan
                                .items
                                .iter()
                                .all(|&v| self.pk.record_number(v).is_none());
                        if sink_blind && (empty || shared) {
                            new_run = Some(self.pk.seqs.items[l.data() as usize]);
                        }
                    }
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
            let frozen = self.freeze_fresh_list(known);
            if known.is_none() {
                let run = &mut self.list_run;
                let empty = self.scan.items.is_empty();
                match (new_run, frozen) {
                    (Some(_), Some(p)) if empty => run.empty = p,
                    (Some(word), Some(p)) => {
                        run.items.clear();
                        run.items.extend_from_slice(&self.scan.items);
                        run.word = word;
                        run.frozen = p;
                    }
                    _ if empty => run.empty = NO_FROZEN,
                    _ => run.frozen = NO_FROZEN,
                }
            }
        }
        self.stack.push(sunk);
        self.direct_records += 1;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each decoded entry: its offset, its words and its list's items.
    fn entries(d: &Decoded) -> Vec<(u64, Vec<u64>, Vec<u32>)> {
        (0..d.ats.len())
            .map(|i| {
                let s = d.starts[i] as usize;
                let e = d.starts.get(i + 1).map_or(d.words.len(), |&x| x as usize);
                let w = d.words[s..e].to_vec();
                let (first, n) = (w[3] as u32 as usize, (w[3] >> 32) as usize);
                (d.ats[i], w, d.items[first..first + n].to_vec())
            })
            .collect()
    }

    /// The thread ahead decodes each chunk alone: an entry it decodes there is the entry
    /// decoded from the whole input at that offset (words and items alike; the items' place
    /// aside), and the entries it cannot (those across two chunks) are few.
    #[test]
    fn an_entry_decoded_in_a_chunk_is_the_entry_decoded_from_the_whole_input() {
        let f = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/sample_traces/corpus/nanogpt_train_fp16_accum/snapshot.pickle.gz"
        );
        let gz = std::fs::read(f).unwrap();
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&gz[..]), &mut bytes).unwrap();
        let mut whole = Decoded::default();
        whole.decode_chunk(&bytes, 0);
        let whole: FxHashMap<u64, (Vec<u64>, Vec<u32>)> = entries(&whole)
            .into_iter()
            .map(|(at, mut w, items)| {
                w[3] = 0;
                (at, (w, items))
            })
            .collect();
        assert!(whole.len() > 5_000, "{}", whole.len());
        for size in [4099, 65_536 + 3] {
            let mut matched = 0;
            for (i, c) in bytes.chunks(size).enumerate() {
                let mut d = Decoded::default();
                d.decode_chunk(c, (i * size) as u64);
                for (at, mut w, items) in entries(&d) {
                    w[3] = 0;
                    if let Some(e) = whole.get(&at) {
                        assert_eq!(e, &(w, items), "at {at}, chunks of {size}");
                        matched += 1;
                    }
                }
            }
            assert!(
                matched * 100 >= whole.len() * 95,
                "{matched} of {}",
                whole.len()
            );
        }
    }

    /// Bytes whose `}`s each start what reads as an entry for a while (frame lists of GETs
    /// running on past the next `}`, whose index bytes hold `}` and MARK): the thread ahead
    /// reads a chunk of them a bounded number of times over, not once per `}`.
    #[test]
    fn a_chunk_of_entry_beginnings_costs_the_thread_ahead_work_in_proportion_to_its_size() {
        // `}` MARK, a key's GET, `]` MARK, then LONG_BINGETs in pairs, the first's index
        // bytes `}` MARK `j` and one more, the second's two more, `]` and MARK: from each
        // `}`, a MARK, a key's GET across the two, a new list and its MARK, and the GETs
        // that follow as its items, as far as the bytes go.
        let mut chunk = b"}(h\x00](".to_vec();
        while chunk.len() < 1 << 16 {
            chunk.extend_from_slice(b"j}(j\x01j\x02\x03](");
        }
        let mut d = Decoded::default();
        let read = d.decode_chunk(&chunk, 0);
        assert!(
            read <= TRIES * chunk.len() + SCAN,
            "{read} for {}",
            chunk.len()
        );
    }

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
