//! The pickle's memo in 4 bytes a slot. A snapshot torch pickles memoizes every history entry,
//! its new strings and its new frame lists, and nearly none is named again: at a word a slot
//! the memo grew with the file (with 4 bytes, a real 1.7 GB snapshot's read went from 0.25x to
//! 0.20x the file, docs/performance.md). Nearly every memoized value is a container or a string numbered below 2^27, which a slot
//! holds itself (its kind and number); anything else (a scalar, or a number past that) is kept
//! in a side table the slot points to.

use super::super::ValueId;
use super::super::PAYLOAD_BITS;

/// A slot never stored to.
const UNSET: u32 = u32::MAX;
/// A slot that points into the side table (its other bits are the index there).
const SIDE: u32 = 1 << 31;
/// Bits of a slot's number, below its 4 bits of kind.
const NUMBER_BITS: u32 = 27;
const NUMBER: u64 = (1 << NUMBER_BITS) - 1;
/// Most values the side table holds: below 2^31 - 1, so that no side slot reads as [`UNSET`]
/// (a few in the unit tests, so that the full table's error is reached).
const SIDE_MAX: usize = if cfg!(test) { 4 } else { (SIDE - 1) as usize };

/// The memo: slots by index, as the pickle's PUT and MEMOIZE store them.
#[derive(Debug, Default)]
pub(super) struct Memo {
    slots: Vec<u32>,
    side: Vec<ValueId>,
}

impl Memo {
    /// The number of slots (MEMOIZE stores at this index).
    pub(super) fn len(&self) -> usize {
        self.slots.len()
    }

    /// Stores `v` at `idx`, growing the memo to it. False, storing nothing, for a value past
    /// what a slot holds once the side table has [`SIDE_MAX`] of them (billions of wide values
    /// memoized: no pickle torch writes, and the reader refuses it).
    pub(super) fn set(&mut self, idx: usize, v: ValueId) -> bool {
        let (kind, data) = (v.0 >> PAYLOAD_BITS, v.data());
        let slot = if data <= NUMBER {
            (kind as u32) << NUMBER_BITS | data as u32
        } else if self.side.len() < SIDE_MAX {
            self.side.push(v);
            SIDE | (self.side.len() - 1) as u32
        } else {
            return false;
        };
        if self.slots.len() <= idx {
            self.slots.resize(idx + 1, UNSET);
        }
        self.slots[idx] = slot;
        true
    }

    /// The value stored at `idx`, if one was.
    pub(super) fn get(&self, idx: usize) -> Option<ValueId> {
        let s = *self.slots.get(idx)?;
        if s == UNSET {
            return None;
        }
        if s & SIDE != 0 {
            return self.side.get((s & !SIDE) as usize).copied();
        }
        let (kind, data) = ((s >> NUMBER_BITS) as u64, (s as u64) & NUMBER);
        Some(ValueId(kind << PAYLOAD_BITS | data))
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
            ValueId::new(Kind::Dict, NUMBER),
            ValueId::new(Kind::Dict, NUMBER + 1),
            ValueId::new(Kind::Str, 12345),
            ValueId::new(Kind::List, 1 << 40),
            ValueId::new(Kind::Int, (-1i64) as u64),
            ValueId::new(Kind::Int, 7),
            ValueId::new(Kind::Absent, 0),
            ValueId::new(Kind::None, 0),
            ValueId::new(Kind::Bool, 1),
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
        // What needed the side table went there; the rest took 4 bytes.
        assert_eq!(m.side.len(), 3, "{:?}", m.side);
        // One more fills it; past that a wide value is refused and its slot left as it was,
        // while a narrow one is still stored.
        let wide = ValueId::new(Kind::Int, 1 << 50);
        assert!(m.set(1, wide));
        assert!(!m.set(2, wide));
        assert_eq!(m.get(2), None);
        assert!(m.set(2, ValueId::new(Kind::Str, 9)));
    }
}
