//! Interned strings: op and kernel names repeat thousands of times in a trace, so the model
//! stores a `StrId` (4 bytes) per event and keeps each distinct name once.

use rustc_hash::FxHashMap;

/// Handle to a string in an [`Interner`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StrId(pub u32);

/// A string table: each distinct string stored once, addressed by [`StrId`].
#[derive(Debug, Default, Clone)]
pub struct Interner {
    strings: Vec<Box<str>>,
    index: FxHashMap<Box<str>, StrId>,
}

impl Interner {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// The id of `s`, adding it if new.
    pub fn intern(&mut self, s: &str) -> StrId {
        if let Some(&id) = self.index.get(s) {
            return id;
        }
        let id = StrId(u32::try_from(self.strings.len()).expect("more than 2^32 distinct strings"));
        self.strings.push(s.into());
        self.index.insert(s.into(), id);
        id
    }

    /// The id of `s` if it was interned.
    pub fn get(&self, s: &str) -> Option<StrId> {
        self.index.get(s).copied()
    }

    /// The string behind `id`.
    pub fn resolve(&self, id: StrId) -> &str {
        &self.strings[id.0 as usize]
    }

    /// Number of distinct strings.
    pub fn len(&self) -> usize {
        self.strings.len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.strings.is_empty()
    }

    /// Adds every string of `other` and returns the map from `other`'s ids to ours, so tables
    /// built in parallel can be merged in a fixed order.
    pub fn absorb(&mut self, other: &Interner) -> Vec<StrId> {
        other.strings.iter().map(|s| self.intern(s)).collect()
    }

    /// The first half of [`Interner::absorb`], which only reads this table (so it can run on
    /// many tables at once): which of `other`'s strings this table holds already.
    pub fn lookup(&self, other: &Interner) -> Vec<Option<StrId>> {
        other.strings.iter().map(|s| self.get(s)).collect()
    }

    /// The second half of [`Interner::absorb`]: adds the strings of `other` that `found`
    /// (from [`Interner::lookup`] on this table, or on an earlier state of it) lacks, in
    /// `other`'s order, and returns the same map as `absorb` would.
    pub fn absorb_rest(&mut self, other: &Interner, found: Vec<Option<StrId>>) -> Vec<StrId> {
        debug_assert_eq!(found.len(), other.strings.len());
        other
            .strings
            .iter()
            .zip(found)
            .map(|(s, f)| f.unwrap_or_else(|| self.intern(s)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interning_is_stable_and_absorb_remaps() {
        let mut a = Interner::new();
        let x = a.intern("aten::mm");
        assert_eq!(a.intern("aten::mm"), x);
        let mut b = Interner::new();
        let y = b.intern("aten::add");
        let z = b.intern("aten::mm");
        let map = a.absorb(&b);
        assert_eq!(a.resolve(map[y.0 as usize]), "aten::add");
        assert_eq!(map[z.0 as usize], x);
        assert_eq!(a.len(), 2);
    }

    #[test]
    fn lookup_then_absorb_rest_is_absorb() {
        let table = |names: &[&str]| {
            let mut t = Interner::new();
            for n in names {
                t.intern(n);
            }
            t
        };
        let pieces = [
            table(&["a", "b"]),
            table(&["c", "a", "d"]),
            table(&["d", "e", "c", "b"]),
        ];
        let mut one_by_one = Interner::new();
        let maps: Vec<Vec<StrId>> = pieces.iter().map(|p| one_by_one.absorb(p)).collect();
        // Looked up against the first piece only, then completed in order.
        let mut two_steps = pieces[0].clone();
        let found: Vec<_> = pieces.iter().map(|p| two_steps.lookup(p)).collect();
        for ((p, f), m) in pieces.iter().zip(found).zip(&maps) {
            assert_eq!(&two_steps.absorb_rest(p, f), m);
        }
        fn all(t: &Interner) -> Vec<String> {
            (0..t.len() as u32)
                .map(|i| t.resolve(StrId(i)).to_owned())
                .collect()
        }
        assert_eq!(all(&one_by_one), all(&two_steps));
    }
}
