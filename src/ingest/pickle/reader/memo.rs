//! The pickle's memo, in 4 bytes a slot and fewer where slots repeat. A snapshot torch
//! pickles memoizes every history entry, its new strings and its new frame lists, and nearly
//! none is named again: at a word a slot the memo grew with the file (with 4 bytes, a real
//! 1.7 GB snapshot's read went from 0.25x to 0.20x the file, docs/performance.md). Nearly
//! every memoized value is a container or a string numbered below 2^27, which a slot holds
//! itself (its kind and number); anything else (a scalar, or a number past that) is kept in a
//! side table the slot points to.
//!
//! Slots are kept in pages of [`PAGE`]. Once the memo has grown [`PACK_LAG`] pages past one,
//! the page is packed where its slots take few distinct values: each slot becomes an index
//! into the page's own list of them, in 0 to 8 bits. A sink's reader leaves a history's
//! slots so (each entry it took becomes one value, [`super::super::TAKEN`], and each frame
//! list it read one per distinct stack), and the memo of a 10 GB snapshot then takes tens of
//! MB instead of most of a GB. A write to a packed page unpacks it, to be packed again later.

use super::super::{ValueId, PAYLOAD, PAYLOAD_BITS};

/// A slot never stored to.
const UNSET: u32 = u32::MAX;
/// A slot that points into the side table (its other bits are the index there).
const SIDE: u32 = 1 << 31;
/// Bits of a slot's number, below its 4 bits of kind.
const NUMBER_BITS: u32 = 27;
/// The number that stands for [`PAYLOAD`] (all payload bits set: a record put in a list,
/// and the integer -1): numbers below it are themselves.
const NUMBER: u64 = (1 << NUMBER_BITS) - 1;
/// Most values the side table holds: below 2^31 - 1, so that no side slot reads as [`UNSET`]
/// (a few in the unit tests, so that the full table's error is reached).
const SIDE_MAX: usize = if cfg!(test) { 4 } else { (SIDE - 1) as usize };

/// Slots a page holds.
const PAGE_BITS: u32 = 12;
const PAGE: usize = 1 << PAGE_BITS;
/// Pages are packed once the memo's end is this many pages past them: a history's entries
/// are read as taken a batch (1,000 entries, a few thousand slots) after they were memoized,
/// and a packed page written to is unpacked again.
const PACK_LAG: usize = 4;
/// Most distinct values a packed page holds (indices of up to 8 bits).
const PALETTE_MAX: usize = 256;
/// Most times a page is packed: a pickle that stores over old slots again and again (none
/// torch writes) would otherwise have each store unpack a page and each 4,096 new slots pack
/// it again, work without bound per byte of input; this way each page costs at most this many
/// packings, and the memo's work stays linear in its size.
const PACKS_MAX: u8 = 3;

/// Log2 of the slots a word of a packed page holds, for `bits` (1, 2, 4 or 8) a slot.
#[inline]
fn per_word(bits: u32) -> u32 {
    6 - bits.trailing_zeros()
}

/// The slot that holds `v` itself, if one can (its number below [`NUMBER`], or
/// [`super::super::PAYLOAD`]); else `v` goes to the side table.
#[inline]
fn inline_slot(v: ValueId) -> Option<u32> {
    let (kind, data) = (v.0 >> PAYLOAD_BITS, v.data());
    let n = match data {
        PAYLOAD => NUMBER,
        d if d < NUMBER => d,
        _ => return None,
    };
    Some((kind as u32) << NUMBER_BITS | n as u32)
}

/// One page of slots.
#[derive(Debug)]
enum Page {
    Raw(Box<[u32]>),
    /// Each slot an index of `bits` bits (1, 2, 4 or 8) into `palette`, 64 / `bits` to a word
    /// (`bits` 0: the page's slots are all `palette[0]`). Read with shifts alone (`per_word`).
    Packed {
        palette: Box<[u32]>,
        bits: u32,
        words: Box<[u64]>,
    },
}

impl Page {
    /// A page of slots never stored to, in a few bytes (a sparse PUT index far ahead costs
    /// no memory for the pages between).
    fn unset() -> Page {
        Page::Packed {
            palette: Box::new([UNSET]),
            bits: 0,
            words: Box::new([]),
        }
    }

    #[inline]
    fn get(&self, i: usize) -> u32 {
        match self {
            Page::Raw(s) => s[i],
            Page::Packed {
                palette,
                bits,
                words,
            } => {
                if *bits == 0 {
                    return palette[0];
                }
                let per_word = per_word(*bits);
                let w = words[i >> per_word] >> ((i as u32 & ((1 << per_word) - 1)) * bits);
                palette[(w & ((1 << bits) - 1)) as usize]
            }
        }
    }

    /// The page's slots, unpacked.
    fn raw(&self) -> Box<[u32]> {
        match self {
            Page::Raw(s) => s.clone(),
            Page::Packed { .. } => (0..PAGE).map(|i| self.get(i)).collect(),
        }
    }

    /// The page packed, if it is raw and its slots take at most [`PALETTE_MAX`] values.
    fn packed(&self) -> Option<Page> {
        let Page::Raw(slots) = self else {
            return None;
        };
        // The distinct values, by a small open-addressed table of their indices (UNSET
        // marks an empty place: it is a value too, given a place of its own).
        const TABLE: usize = 2 * PALETTE_MAX;
        let mut table = [u16::MAX; TABLE];
        let mut palette: Vec<u32> = Vec::new();
        let mut idx = vec![0u8; PAGE];
        let (mut last, mut last_i) = (slots[0], 0u8);
        for (i, &s) in slots.iter().enumerate() {
            // Runs and alternations are the common case: the previous value first.
            if s == last && i > 0 {
                idx[i] = last_i;
                continue;
            }
            let mut h = (s.wrapping_mul(0x9E37_79B1) >> (32 - (TABLE.trailing_zeros()))) as usize;
            let p = loop {
                match table[h] {
                    u16::MAX => {
                        if palette.len() == PALETTE_MAX {
                            return None;
                        }
                        palette.push(s);
                        table[h] = (palette.len() - 1) as u16;
                        break palette.len() - 1;
                    }
                    p if palette[p as usize] == s => break p as usize,
                    _ => h = (h + 1) % TABLE,
                }
            };
            idx[i] = p as u8;
            (last, last_i) = (s, p as u8);
        }
        // Bits a slot.
        let bits = match palette.len() {
            1 => 0,
            2 => 1,
            3..=4 => 2,
            5..=16 => 4,
            _ => 8,
        };
        let words = if bits == 0 {
            Box::new([]) as Box<[u64]>
        } else {
            idx.chunks(1 << per_word(bits))
                .map(|c| {
                    c.iter()
                        .enumerate()
                        .fold(0u64, |w, (j, &x)| w | (x as u64) << (j as u32 * bits))
                })
                .collect()
        };
        Some(Page::Packed {
            palette: palette.into(),
            bits,
            words,
        })
    }
}

/// Lines of the cache of recent GETs, a power of two.
const CACHE: usize = 256;

/// The memo: slots by index, as the pickle's PUT and MEMOIZE store them.
#[derive(Debug)]
pub(super) struct Memo {
    /// (index, value) of recent GETs by index modulo [`CACHE`]: a history's entries name
    /// their keys and frames by GET, a few dozen indices over and over, and through the
    /// pages each GET cost a tenth of a GB snapshot's read (two loads more than a flat
    /// table; measured: 0.53 s of 4.1 s on the 1 GB generated snapshot).
    cache: Box<[(usize, ValueId); CACHE]>,
    pages: Vec<Page>,
    len: usize,
    side: Vec<ValueId>,
    /// Pages below this one were offered for packing.
    offered: usize,
    /// Packed pages a write unpacked, to be offered again.
    unpacked: Vec<usize>,
    /// How many times each page was packed.
    packs: Vec<u8>,
}

impl Default for Memo {
    fn default() -> Self {
        Memo {
            cache: Box::new([(usize::MAX, ValueId(0)); CACHE]),
            pages: Vec::new(),
            len: 0,
            side: Vec::new(),
            offered: 0,
            unpacked: Vec::new(),
            packs: Vec::new(),
        }
    }
}

impl Memo {
    /// The number of slots (MEMOIZE stores at this index).
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Stores `v` at `idx`, growing the memo to it. False, storing nothing, for a value past
    /// what a slot holds once the side table has [`SIDE_MAX`] of them (billions of wide values
    /// memoized: no pickle torch writes, and the reader refuses it).
    #[inline(always)]
    pub(super) fn set(&mut self, idx: usize, v: ValueId) -> bool {
        let slot = if let Some(slot) = inline_slot(v) {
            slot
        } else if self.side.len() < SIDE_MAX {
            self.side.push(v);
            SIDE | (self.side.len() - 1) as u32
        } else {
            return false;
        };
        let line = &mut self.cache[idx % CACHE];
        if line.0 == idx {
            line.1 = v;
        }
        let (p, i) = (idx >> PAGE_BITS, idx & (PAGE - 1));
        // A raw page: every store but the first to a page, the marks of taken records, and
        // each MEMOIZE of a protocol-4 pickle (at the end: the packing behind it moves only
        // when the end reaches another page).
        if let Some(Page::Raw(s)) = self.pages.get_mut(p) {
            s[i] = slot;
            if idx >= self.len {
                let before = self.len;
                self.len = idx + 1;
                if self.len >> PAGE_BITS != before >> PAGE_BITS {
                    self.pack_behind();
                }
            }
            return true;
        }
        self.store(idx, slot)
    }

    /// Stores `new` at `idx` where the slot holds `old` (a value a slot holds itself, not
    /// the side table's): true where it did. One look at the slot where its page is raw, as
    /// it is for the slots a history's batch names when the batch is put in its list (the
    /// marks of taken records: a look and a store through the pages each had been a tenth
    /// of the reader's work for an entry).
    #[inline]
    pub(super) fn replace(&mut self, idx: usize, old: ValueId, new: ValueId) -> bool {
        let (Some(o), Some(n)) = (inline_slot(old), inline_slot(new)) else {
            return self.get(idx) == Some(old) && self.set(idx, new);
        };
        let (p, i) = (idx >> PAGE_BITS, idx & (PAGE - 1));
        match self.pages.get_mut(p) {
            Some(Page::Raw(s)) => {
                if s[i] != o {
                    return false;
                }
                s[i] = n;
                let line = &mut self.cache[idx % CACHE];
                if line.0 == idx {
                    line.1 = new;
                }
                true
            }
            _ => self.get(idx) == Some(old) && self.set(idx, new),
        }
    }

    /// [`Memo::set`] of a slot to a page that is packed or not yet there, or past the end.
    #[inline(never)]
    fn store(&mut self, idx: usize, slot: u32) -> bool {
        let (p, i) = (idx >> PAGE_BITS, idx & (PAGE - 1));
        if self.pages.len() <= p {
            self.pages.resize_with(p + 1, Page::unset);
            self.packs.resize(p + 1, 0);
        }
        let page = &mut self.pages[p];
        if let Page::Packed { .. } = page {
            if page.get(i) == slot {
                return true;
            }
            *page = Page::Raw(page.raw());
            if self.packs[p] > 0 && self.packs[p] < PACKS_MAX {
                self.unpacked.push(p);
            }
        }
        if let Page::Raw(s) = page {
            s[i] = slot;
        }
        if idx >= self.len {
            self.len = idx + 1;
            self.pack_behind();
        }
        true
    }

    /// Packs the pages [`PACK_LAG`] behind the end that have not been offered yet, and those
    /// a write unpacked that are that far behind again.
    fn pack_behind(&mut self) {
        let upto = (self.len >> PAGE_BITS).saturating_sub(PACK_LAG);
        if upto <= self.offered {
            return;
        }
        let offered = self.offered;
        let mut keep = Vec::new();
        for p in (offered..upto).chain(std::mem::take(&mut self.unpacked)) {
            if p >= upto {
                keep.push(p);
            } else if let Some(packed) = self.pages[p].packed() {
                self.pages[p] = packed;
                self.packs[p] += 1;
            }
        }
        self.offered = upto;
        self.unpacked = keep;
    }

    /// [`Memo::get`] through the cache of recent GETs (the GET opcodes'). The hit inlined
    /// where it is called (out of line, the call was 4.6% of the 1 GB generated snapshot's
    /// read), the miss not.
    #[inline(always)]
    pub(super) fn get_cached(&mut self, idx: usize) -> Option<ValueId> {
        let line = self.cache[idx % CACHE];
        if line.0 == idx {
            return Some(line.1);
        }
        self.get_missed(idx)
    }

    #[inline(never)]
    fn get_missed(&mut self, idx: usize) -> Option<ValueId> {
        let v = self.get(idx)?;
        self.cache[idx % CACHE] = (idx, v);
        Some(v)
    }

    /// The value stored at `idx`, if one was.
    #[inline]
    pub(super) fn get(&self, idx: usize) -> Option<ValueId> {
        let s = self.pages.get(idx >> PAGE_BITS)?.get(idx & (PAGE - 1));
        if s == UNSET {
            return None;
        }
        if s & SIDE != 0 {
            return self.side.get((s & !SIDE) as usize).copied();
        }
        let (kind, n) = ((s >> NUMBER_BITS) as u64, (s as u64) & NUMBER);
        let data = if n == NUMBER { PAYLOAD } else { n };
        Some(ValueId(kind << PAYLOAD_BITS | data))
    }

    /// Bytes the slots of page `p` take (for the tests of what the memo holds).
    #[cfg(test)]
    fn page_bytes(&self, p: usize) -> usize {
        match &self.pages[p] {
            Page::Raw(s) => s.len() * 4,
            Page::Packed { palette, words, .. } => palette.len() * 4 + words.len() * 8,
        }
    }

    #[cfg(test)]
    fn slot_bytes(&self) -> usize {
        (0..self.pages.len()).map(|p| self.page_bytes(p)).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::Kind;
    use super::*;

    #[test]
    fn every_value_reads_back_as_stored_whether_the_slot_holds_it_or_the_side_table() {
        let values = [
            ValueId::new(Kind::Dict, 0),
            ValueId::new(Kind::Dict, NUMBER - 1),
            ValueId::new(Kind::Dict, NUMBER),
            ValueId::new(Kind::Str, 12345),
            ValueId::new(Kind::List, 1 << 40),
            ValueId::new(Kind::Int, (-1i64) as u64),
            ValueId::new(Kind::Int, (-2i64) as u64),
            ValueId::new(Kind::Int, 7),
            ValueId::new(Kind::Absent, 0),
            ValueId::new(Kind::None, 0),
            ValueId::new(Kind::Bool, 1),
            ValueId::new(Kind::Sunk, PAYLOAD),
            ValueId::new(Kind::Frozen, 3),
        ];
        let mut m = Memo::default();
        // Sparse indices (BINPUT may skip), and a slot stored twice keeps the later value.
        for (i, &v) in values.iter().enumerate() {
            assert!(m.set(3 * i, ValueId::new(Kind::Set, 1)));
            assert!(m.set(3 * i, v));
        }
        for (i, &v) in values.iter().enumerate() {
            assert_eq!(m.get(3 * i), Some(v), "{v:?}");
            assert_eq!(m.get(3 * i + 1), None, "never stored");
        }
        assert_eq!(m.get(1 << 20), None);
        assert_eq!(m.len(), 3 * (values.len() - 1) + 1);
        // What needed the side table went there (the number that stands for all payload
        // bits, -1's and a taken record's, did not); the rest took 4 bytes.
        assert_eq!(m.side.len(), 3, "{:?}", m.side);
        // One more fills it; past that a wide value is refused and its slot left as it was,
        // while a narrow one is still stored.
        let wide = ValueId::new(Kind::Int, 1 << 50);
        assert!(m.set(1, wide));
        assert!(!m.set(2, wide));
        assert_eq!(m.get(2), None);
        assert!(m.set(2, ValueId::new(Kind::Str, 9)));
    }

    /// A slot is replaced only where it holds the value named, on a raw page, a packed one
    /// and through the side table alike, and a read through the cache sees the new value.
    #[test]
    fn a_slot_is_replaced_only_where_it_holds_the_value_named() {
        let sunk = |r: u64| ValueId::new(Kind::Sunk, r);
        let taken = sunk(PAYLOAD);
        let mut m = Memo::default();
        // A raw page at the end, packed pages behind it (one value each).
        let n = 8 * PAGE;
        for i in 0..n {
            let v = if i < 5 * PAGE { taken } else { sunk(i as u64) };
            assert!(m.set(i, v));
        }
        assert!(matches!(m.pages[0], Page::Packed { .. }));
        let last = n - 1;
        assert_eq!(m.get_cached(last), Some(sunk(last as u64)));
        assert!(!m.replace(last, sunk(1), taken), "holds another record");
        assert!(m.replace(last, sunk(last as u64), taken));
        assert_eq!(m.get_cached(last), Some(taken), "through the cache");
        assert_eq!(m.get(last), Some(taken));
        // On a packed page: the slot's value, replaced, unpacks it; another is refused.
        assert!(!m.replace(3, sunk(3), sunk(9)));
        assert!(m.replace(3, taken, sunk(9)));
        assert_eq!(m.get(3), Some(sunk(9)));
        assert_eq!(m.get(4), Some(taken));
        // A value past what a slot holds, in the side table.
        let wide = ValueId::new(Kind::Int, 1 << 50);
        assert!(m.set(n, wide));
        assert!(!m.replace(n, taken, sunk(1)));
        assert!(m.replace(n, wide, sunk(1)));
        assert_eq!(m.get(n), Some(sunk(1)));
        // A slot never stored is not replaced.
        assert!(!m.replace(n + 5, taken, sunk(1)));
        assert_eq!(m.get(n + 5), None);
    }

    /// Pages of few distinct values are packed once the memo is past them, read back the
    /// same, unpacked by a write and packed again; pages of many values stay as they were.
    #[test]
    fn pages_of_repeated_slots_are_packed_and_read_back_as_stored() {
        let taken = ValueId::new(Kind::Sunk, PAYLOAD);
        // As a history leaves it: each entry taken, its string one of a few, its frame list
        // one of a few dozen stacks; then a stretch of all-distinct strings; then pages of
        // one value, then sparse slots.
        let value = |i: usize| -> ValueId {
            match i {
                _ if i < 10 * PAGE => match i % 3 {
                    0 => taken,
                    1 => ValueId::new(Kind::Str, (i % 7 == 1) as u64),
                    _ => ValueId::new(Kind::Frozen, (i / 5 % 40) as u64),
                },
                _ if i < 12 * PAGE => ValueId::new(Kind::Str, i as u64),
                _ => taken,
            }
        };
        let n = 20 * PAGE + 5;
        let mut m = Memo::default();
        for i in 0..n {
            assert!(m.set(i, value(i)));
        }
        for i in 0..n {
            assert_eq!(m.get(i), Some(value(i)), "slot {i}");
        }
        // 43 values: a byte a slot; one value: the value alone.
        assert!(m.page_bytes(0) <= PAGE + 256 * 4, "{}", m.page_bytes(0));
        assert_eq!(m.page_bytes(13), 4);
        let packed = |m: &Memo, p: usize| matches!(m.pages[p], Page::Packed { .. });
        assert!(packed(&m, 0) && packed(&m, 13), "packed behind the end");
        assert!(!packed(&m, 10), "too many values to pack");
        assert!(!packed(&m, 19), "too near the end");
        // A write to a packed page of a value it holds keeps it packed; another unpacks it,
        // and it is packed again once the memo has grown past it.
        // Reads through the cache see every write.
        let r = 10 * PAGE + 7;
        assert_eq!(m.get_cached(r), Some(value(r)));
        assert!(m.set(r, ValueId::new(Kind::Dict, 78)));
        assert_eq!(m.get_cached(r), Some(ValueId::new(Kind::Dict, 78)));
        assert!(m.set(r, value(r)));
        assert_eq!(m.get_cached(r), Some(value(r)));
        assert_eq!(m.get_cached(r + CACHE), Some(value(r + CACHE)));
        assert_eq!(value(6), taken);
        assert!(m.set(6, taken));
        assert!(packed(&m, 0));
        assert!(m.set(5, ValueId::new(Kind::Dict, 77)));
        assert!(!packed(&m, 0));
        assert_eq!(m.get(5), Some(ValueId::new(Kind::Dict, 77)));
        for i in n..n + PAGE {
            assert!(m.set(i, taken));
        }
        assert!(packed(&m, 0));
        assert_eq!(m.get(5), Some(ValueId::new(Kind::Dict, 77)));
        assert_eq!(m.get(6), Some(value(6)));
        // A page stored over again and again is packed PACKS_MAX times, then left raw.
        let mut end = n + PAGE;
        for round in 0..5u64 {
            assert!(m.set(5, ValueId::new(Kind::Dict, 100 + round)));
            for i in end..end + PAGE {
                assert!(m.set(i, taken));
            }
            end += PAGE;
            assert_eq!(packed(&m, 0), round + 2 < PACKS_MAX as u64, "round {round}");
            assert_eq!(m.get(5), Some(ValueId::new(Kind::Dict, 100 + round)));
        }
        assert_eq!(m.packs[0], PACKS_MAX);
        // An index far ahead costs no page of its own for those between.
        let before = m.slot_bytes();
        assert!(m.set(1 << 26, taken));
        assert!(
            m.slot_bytes() - before < 64 * PAGE,
            "{}",
            m.slot_bytes() - before
        );
        assert_eq!(m.get((1 << 26) - 1), None);
        assert_eq!(m.get(1 << 26), Some(taken));
    }
}
