//! History entries taken as the pickle completes each (a RecordSink), in batches, into the snapshot's own records.

use super::*;

/// Entries a batch gathers before it goes to the [`HistorySink`].
pub(super) const BATCH: usize = 8192;

/// The history entries, made as the pickle completes each one and handed on, list by list,
/// as the pickle appends them to a list: no entry is kept past the batch it goes in (torch's
/// pickler appends a thousand at a time).
pub(super) struct EntrySink<'h> {
    stacks: Stacks,
    /// Entries made and not yet in a list, by record number from `base` (`None`: taken).
    pending: std::collections::VecDeque<Option<TraceEntry>>,
    base: usize,
    /// Generic dicts with an `action` member (see [`pickle::RecordSink::generic`]), read
    /// by key when appended.
    generic: rustc_hash::FxHashSet<ValueId>,
    /// What each list that was given an entry got, by the list's dense index.
    lists: FxHashMap<usize, ListCount>,
    /// The batch being gathered, and its list.
    batch: Vec<TraceEntry>,
    batch_list: usize,
    out: &'h mut dyn HistorySink,
    /// Whether batches of the records made first, in order, are taken in one go
    /// ([`EntrySink::appended_in_order`]; off only in tests, to compare).
    pub(super) in_order: bool,
    /// The actions of recent `action` strings, by the string's id modulo [`ACTION_LINES`]:
    /// a history names a handful of distinct strings millions of times (short strings are
    /// one id per text), and reading each one's bytes to match them was a tenth of the
    /// sink's work for an entry.
    actions: [(ValueId, Action); ACTION_LINES],
    /// Entries whose `size` is there but no whole number of bytes (NaN, negative, a string,
    /// 2^64 - 1): counted as 0, and said.
    bad_sizes: u64,
}

/// Lines of [`EntrySink::actions`], a power of two.
pub(super) const ACTION_LINES: usize = 16;

/// What a list was given, as [`Extractor::run`] reports it for a device's history (its
/// other items, entries without an action among them, are what is left of its length).
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct ListCount {
    /// Entries handed on.
    pub(super) entries: usize,
    /// Items that were entries already given to a list (memo references).
    pub(super) repeats: usize,
    /// Entries the list no longer holds: batches whose every item was an entry handed on
    /// ([`pickle::RecordSink::appended`]).
    pub(super) dropped: usize,
}

/// An entry whose `action` is no string: no entry ([`Extractor::run`] warns once per such).
pub(super) const NO_ACTION: StackId = StackId(u32::MAX - 1);

impl<'h> EntrySink<'h> {
    pub(super) fn new(out: &'h mut dyn HistorySink) -> Self {
        EntrySink {
            stacks: Stacks::default(),
            pending: Default::default(),
            base: 0,
            generic: Default::default(),
            lists: FxHashMap::default(),
            batch: Vec::new(),
            batch_list: 0,
            out,
            in_order: true,
            actions: [(ValueId::ABSENT, Action::Other); ACTION_LINES],
            bad_sizes: 0,
        }
    }

    /// The entry of a history dict's members in [`HISTORY_ENTRY`]'s order (a record's, or
    /// a generic dict's looked up by key); its stack is [`NO_ACTION`] where `action` is no
    /// string.
    fn entry(&mut self, pk: &Pickle, m: &[Option<ValueId>]) -> TraceEntry {
        // Taken apart by a pattern, not by `map` over indices (an out-of-line call, 2.6% of
        // a GB snapshot's read).
        let &[action, addr, size, stream, time_us, frames] = m else {
            unreachable!("HISTORY_ENTRY has six kept members")
        };
        let u64_of = |v: Option<ValueId>| v.and_then(|v| pk.as_u64(v));
        let action = action.and_then(|a| {
            let line = &mut self.actions[a.line(ACTION_LINES)];
            if line.0 == a {
                return Some(line.1);
            }
            let parsed = parse_action(pk.str_bytes(a)?);
            *line = (a, parsed);
            Some(parsed)
        });
        let stack = if action.is_none() {
            NO_ACTION
        } else {
            // By where the list's frames are kept (lists of equal frames share them), not by
            // the list: a table by list number grew by a word for every entry's new list.
            self.stacks.stack_of(pk, frames)
        };
        let bytes = u64_of(size);
        if bytes.is_none() && size.is_some() {
            self.bad_sizes += 1;
        }
        TraceEntry {
            action: action.unwrap_or(Action::Other),
            addr: u64_of(addr).unwrap_or(0),
            size: bytes.unwrap_or(0),
            stream: stream.and_then(|v| pk.as_i64(v)).unwrap_or(0),
            time_us: time_us.and_then(|v| pk.as_i64(v)),
            stack,
        }
    }

    /// The entry `item` makes in a list, if it is one not yet in a list: a pending record's,
    /// or a generic entry dict read by key. `Err(())`: an entry met before.
    fn take(&mut self, pk: &Pickle, item: ValueId) -> Option<Result<TraceEntry, ()>> {
        if let Some(r) = pk.record_number(item) {
            let slot = r
                .checked_sub(self.base)
                .and_then(|i| self.pending.get_mut(i));
            return Some(slot.and_then(Option::take).ok_or(()));
        }
        if self.generic.is_empty() || !self.generic.remove(&item) {
            return None;
        }
        let m: Vec<Option<ValueId>> = HISTORY_ENTRY
            .keys()
            .iter()
            .map(|k| pk.dict_get(item, k))
            .collect();
        Some(Ok(self.entry(pk, &m)))
    }

    /// [`pickle::RecordSink::appended`] of a batch that is the records made first and not yet
    /// in a list, in the order they were made, each with an action (every batch of a history
    /// torch writes): their entries moved to the batch in one go, where the general path
    /// takes them one by one (a tenth of a GB snapshot's read, with the pickle's side). False,
    /// having done nothing, for any other batch.
    fn appended_in_order(&mut self, pk: &Pickle, li: usize, items: &[ValueId]) -> bool {
        let n = items.len();
        if n == 0 || n > self.pending.len() {
            return false;
        }
        let in_order = items
            .iter()
            .zip(&self.pending)
            .enumerate()
            .all(|(i, (&it, e))| {
                pk.record_number(it) == Some(self.base + i)
                    && e.as_ref().is_some_and(|e| e.stack != NO_ACTION)
            });
        if !in_order {
            return false;
        }
        for _ in 0..n {
            let Some(Some(e)) = self.pending.pop_front() else {
                continue; // checked above: every one is there
            };
            self.push(li, e);
        }
        self.base += n;
        let c = self.lists.entry(li).or_default();
        c.entries += n;
        c.dropped += n;
        self.drop_taken_front();
        true
    }

    /// Adds `e`, given to the list `li`, to the batch, which is handed on first where it is
    /// another list's or full.
    fn push(&mut self, li: usize, e: TraceEntry) {
        if self.batch_list != li || self.batch.len() >= BATCH {
            self.flush();
            self.batch_list = li;
        }
        self.batch.push(e);
    }

    /// Taken entries leave the front (records never put in a list stay: no snapshot torch
    /// writes has one).
    fn drop_taken_front(&mut self) {
        while let Some(None) = self.pending.front() {
            self.pending.pop_front();
            self.base += 1;
        }
    }

    /// Hands the batch gathered on.
    pub(super) fn flush(&mut self) {
        if !self.batch.is_empty() {
            let b = std::mem::replace(&mut self.batch, Vec::with_capacity(BATCH));
            self.out.entries(self.batch_list, b);
        }
    }

    /// The stacks, what each list was given, and how many entries had a size that is no
    /// whole number of bytes.
    pub(super) fn finish(self) -> (Stacks, FxHashMap<usize, ListCount>, u64) {
        (self.stacks, self.lists, self.bad_sizes)
    }
}

impl pickle::RecordSink for EntrySink<'_> {
    fn record(&mut self, pk: &Pickle, m: &[Option<ValueId>]) -> usize {
        let e = self.entry(pk, m);
        self.pending.push_back(Some(e));
        self.base + self.pending.len() - 1
    }

    fn forget(&mut self, number: usize) {
        if let Some(Some(e)) = number
            .checked_sub(self.base)
            .and_then(|i| self.pending.get_mut(i))
        {
            e.stack = NO_ACTION;
        }
    }

    fn generic(&mut self, dict: ValueId) {
        self.generic.insert(dict);
    }

    fn appended(&mut self, pk: &Pickle, list: ValueId, items: &[ValueId]) -> bool {
        let Some(li) = pk.seq_index(list) else {
            return false;
        };
        if self.in_order && self.appended_in_order(pk, li, items) {
            return true;
        }
        let mut count = ListCount::default();
        for &item in items {
            match self.take(pk, item) {
                None => {}
                Some(Err(())) => count.repeats += 1,
                Some(Ok(e)) if e.stack == NO_ACTION => {}
                Some(Ok(e)) => {
                    count.entries += 1;
                    self.push(li, e);
                }
            }
        }
        // A batch of entries alone (every batch of a history torch writes) leaves the list:
        // its entries are handed on, and the list would only hold a word for each.
        let all = !items.is_empty() && count.entries == items.len();
        if count.entries + count.repeats > 0 {
            let c = self.lists.entry(li).or_default();
            c.entries += count.entries;
            c.repeats += count.repeats;
            if all {
                c.dropped += count.entries;
            }
        }
        self.drop_taken_front();
        all
    }
}
