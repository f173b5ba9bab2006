//! The reader's memo and containers: what PUT, GET and the appending opcodes do, dicts read as records, equal lists shared.

use super::*;

impl<'a> Reader<'a> {
    #[inline(always)]
    pub(super) fn memo_put(&mut self, idx: usize, offset: usize) -> Result<(), PickleError> {
        let v = self.top(offset)?;
        // No pickle stores more memo slots than it has bytes before them.
        if idx > self.pos() {
            return Err(self.malformed(format!("memo index {idx} out of range"), offset));
        }
        self.memo_store(idx, v, offset)
    }

    /// Stores `v` at memo index `idx` (in range: checked by the caller); the containers
    /// followed learn of it.
    #[inline(always)]
    pub(super) fn memo_store(
        &mut self,
        idx: usize,
        v: ValueId,
        offset: usize,
    ) -> Result<(), PickleError> {
        if !self.memo.set(idx, v) {
            return Err(self.malformed("more than 2^31 wide values memoized", offset));
        }
        self.fresh_dict.stored(v, idx);
        self.fresh_list.stored(v, idx);
        Ok(())
    }

    /// `v` was copied onto the stack (GET, DUP): a container followed is no longer alone.
    #[inline(always)]
    pub(super) fn copied(&mut self, v: ValueId) {
        self.fresh_dict.copied(v);
        self.fresh_list.copied(v);
    }

    /// A new empty dict (`}`), followed while a sink reads records.
    pub(super) fn empty_dict(&mut self) -> ValueId {
        let id = ValueId::new(Kind::Dict, self.pk.maps.add_empty());
        if self.release {
            self.fresh_dict = Fresh::new(id);
        }
        id
    }

    /// A new empty list (`]`), followed while a sink reads records.
    pub(super) fn empty_list(&mut self) -> ValueId {
        let id = ValueId::new(Kind::List, self.pk.seqs.add_empty());
        if self.release {
            self.fresh_list = Fresh::new(id);
        }
        id
    }

    /// After the sink took the record `r` of `dict`, whose members are `stack[from..]`:
    /// where nothing but its stack place and its memo slot names the dict, both become
    /// [`Kind::Sunk`] and its slot is given back, and so is the slot of a list among the
    /// members that nothing else names either (a history entry's new frame list: the sink
    /// has read it), whose memo slot then names its items' place ([`Kind::Frozen`]). The
    /// tables then hold nothing for the history's millions of entries. False: `dict` is named
    /// elsewhere too, and keeps its slot as a record.
    pub(super) fn sink_record(&mut self, dict: ValueId, from: usize, r: usize) -> bool {
        let f = self.fresh_dict;
        if from == 0 || self.stack[from - 1] != dict || !f.alone(dict) {
            return false;
        }
        let sunk = ValueId::new(Kind::Sunk, r as u64);
        self.stack[from - 1] = sunk;
        if f.put != NO_PUT {
            self.memo.set(f.put, sunk);
            self.sunk_puts.push_back((r as u64, f.put));
        }
        self.pk.maps.release(dict.data());
        self.fresh_dict = Fresh::NONE;
        let l = self.fresh_list;
        let member = (from + 1..self.stack.len())
            .step_by(2)
            .any(|i| self.stack[i] == l.id);
        if member {
            self.freeze_fresh_list();
        }
        true
    }

    /// The list last made, a member of a record the sink just took, given back where nothing
    /// else names it (see [`Reader::sink_record`]): its memo slot then names its items'
    /// place, frozen ([`Reader::freeze_place`]).
    pub(super) fn freeze_fresh_list(&mut self) {
        let l = self.fresh_list;
        if !(l.alone(l.id) && matches!(self.pk.seqs.slot(l.id.data()), Slot::Flat(..))) {
            return;
        }
        let mut w = self.pk.seqs.release(l.id.data());
        if let Slot::Flat(_, 0) = Slot::unpack(w) {
            // Every empty list has one place.
            w = Slot::flat(0, 0).expect("fits");
        }
        let p = self.freeze_place(w);
        if l.put != NO_PUT {
            self.memo.set(l.put, ValueId::new(Kind::Frozen, p));
        }
        self.fresh_list = Fresh::NONE;
    }

    /// The [`Kind::Frozen`] number of the items' place whose slot word is `w`: one number a
    /// place, however many lists held it.
    pub(super) fn freeze_place(&mut self, w: u64) -> u64 {
        let frozen = &mut self.pk.frozen;
        *self.frozen_at.entry(w).or_insert_with(|| {
            frozen.push(w);
            frozen.len() as u64 - 1
        })
    }

    /// The list at `stack[at]` made a list of its own again where it is [`Kind::Frozen`]
    /// (a pickle that extends a history entry's frame list after the entry: none torch
    /// writes). Its memo slot keeps naming the items as they were.
    pub(super) fn thaw(&mut self, at: usize) -> ValueId {
        let v = self.stack[at];
        if v.kind() != Kind::Frozen {
            return v;
        }
        let items = self.pk.items(v).to_vec();
        let c = self.pk.seqs.add_empty();
        self.pk.seqs.set_own(c, items);
        let l = ValueId::new(Kind::List, c);
        self.stack[at] = l;
        l
    }

    #[inline(always)]
    pub(super) fn memo_get(&mut self, idx: usize, offset: usize) -> Result<(), PickleError> {
        let v = self
            .memo
            .get_cached(idx)
            .ok_or_else(|| self.malformed(format!("memo index {idx} was never stored"), offset))?;
        self.copied(v);
        self.stack.push(v);
        Ok(())
    }

    /// Adds `stack[from..]` to the list or set `list`, and drops them from the stack. True
    /// where they went to a shared place, the one the same items will be given again
    /// (`share_items`).
    pub(super) fn add_to_list(
        &mut self,
        mut list: ValueId,
        from: usize,
        offset: usize,
    ) -> Result<bool, PickleError> {
        if list.kind() == Kind::Frozen {
            list = self.thaw(from - 1);
        }
        if !matches!(list.kind(), Kind::List | Kind::Set) {
            return Err(self.malformed("APPEND to something that is not a list", offset));
        }
        let c = list.data();
        let fresh = matches!(self.pk.seqs.slot(c), Slot::Flat(_, 0));
        let start = self.pk.seqs.flat.len();
        self.pk.seqs.extend(c, &self.stack[from..]);
        let (a, stack) = self.appending();
        appended(a, list, &stack[from..]);
        self.stack.truncate(from);
        if fresh && self.share {
            if let Slot::Flat(s, len) = self.pk.seqs.slot(c) {
                if s == start && len <= SHARE_MAX {
                    let (at, shared) = self.share_items(start);
                    if let Some(w) = Slot::flat(at, len) {
                        self.pk.seqs.items[c as usize] = w;
                        return Ok(shared);
                    }
                }
            }
        }
        Ok(false)
    }

    /// Adds `stack[from..]` as key, value pairs to the dict `dict`, and drops them.
    pub(super) fn add_to_dict(
        &mut self,
        mut dict: ValueId,
        from: usize,
        offset: usize,
    ) -> Result<(), PickleError> {
        if !(self.stack.len() - from).is_multiple_of(2) {
            return Err(self.malformed("SETITEMS with an odd number of items", offset));
        }
        if dict.kind() == Kind::Sunk {
            dict = self.unsink(dict, from);
        }
        if dict.kind() != Kind::Dict {
            return Err(self.malformed("SETITEM on something that is not a dict", offset));
        }
        let c = dict.data();
        match self.pk.maps.slot(c) {
            // A dict given a pair at a time (a protocol-0 pickle's SETITEMs) stays generic:
            // a sink takes a record's members for good, and a record of one member would be
            // voided by the next pair.
            Slot::Flat(_, 0) if self.stack.len() - from == 2 => {}
            Slot::Flat(_, 0) => {
                if let Some((rec, n)) = self.record(from) {
                    let r = if let Some(sink) = self.sink.as_mut() {
                        let members = rec.map(|v| (v != ABSENT).then_some(v));
                        sink.record(&self.pk, &members[..n])
                    } else {
                        self.pk.records.extend_from_slice(&rec[..n]);
                        self.pk.records.len() / n - 1
                    };
                    if !(self.release && self.sink_record(dict, from, r)) {
                        self.pk.maps.set_record(c, r);
                    }
                    self.stack.truncate(from);
                    return Ok(());
                }
            }
            Slot::Record(r) if self.pk.sunk => {
                // Its members went to the sink: a generic dict of the later ones from here.
                if let Some(sink) = self.sink.as_mut() {
                    sink.forget(r);
                }
                self.pk.maps.set_own(c, Vec::new());
            }
            Slot::Record(r) => {
                // Grown after all: back to a generic dict of the kept members.
                let names = self.pk.shape.map_or(&[][..], |s| s.keys);
                let n = names.len();
                let rec = self.pk.records[r * n..(r + 1) * n].to_vec();
                let keys: Vec<ValueId> = names
                    .iter()
                    .map(|k| self.owned_str(k.to_string()))
                    .collect();
                let pairs: Vec<(ValueId, ValueId)> = keys
                    .into_iter()
                    .zip(rec)
                    .filter(|(_, v)| v.kind() != Kind::Absent)
                    .collect();
                self.pk.maps.set_own(c, pairs);
            }
            _ => {}
        }
        let pairs = self.stack[from..].chunks_exact(2).map(|kv| (kv[0], kv[1]));
        self.pk.maps.extend_with(c, pairs);
        if self.sink.is_some() && self.pk.shape.is_some() {
            // Each distinct key is one string id (short strings are read once, and pickles
            // memoize their keys), so the id of the first kept member, once met, answers
            // for the millions of generic dicts (every frame of every stack) without a
            // lookup of each key.
            let first = (from..self.stack.len()).step_by(2).any(|i| {
                let k = self.stack[i];
                match self.keys.first {
                    Some(f) => k == f,
                    None => matches!(self.key_slot(k), Some(KeySlot::Kept(0))),
                }
            });
            if let (true, Some(sink)) = (first, self.sink.as_mut()) {
                sink.generic(dict);
                self.generic_given = true;
            }
        }
        self.stack.truncate(from);
        Ok(())
    }

    /// A sunk record's dict (at `stack[from - 1]`) given more members: the sink forgets the
    /// record, and the dict is a generic one of the later members from here on, in a slot of
    /// its own, which its memo slot names too while the record was not yet in a list (after
    /// that, the memo and the list name the record the sink took).
    pub(super) fn unsink(&mut self, sunk: ValueId, from: usize) -> ValueId {
        let r = sunk.data();
        if r != TAKEN {
            if let Some(sink) = self.sink.as_mut() {
                sink.forget(r as usize);
            }
        }
        let c = self.pk.maps.add_empty();
        self.pk.maps.set_own(c, Vec::new());
        let d = ValueId::new(Kind::Dict, c);
        if from > 0 && self.stack[from - 1] == sunk {
            self.stack[from - 1] = d;
        }
        if let Some(i) = self.sunk_puts.iter().position(|&(x, _)| x == r) {
            if let Some((_, idx)) = self.sunk_puts.remove(i) {
                if self.memo.get(idx) == Some(sunk) {
                    self.memo.set(idx, d);
                }
            }
        }
        d
    }

    /// The record (and its length) of `stack[from..]` (key, value, key, value, ...) when it is
    /// a dict of the caller's [`RecordShape`]: the first kept member, string keys, nothing
    /// beyond the shape's kept and ignored members, no key twice.
    pub(super) fn record(&mut self, from: usize) -> Option<([ValueId; RECORD_MAX_KEYS], usize)> {
        let n = self.pk.shape?.keys.len();
        let mut rec = [ABSENT; RECORD_MAX_KEYS];
        let mut ignored = 0u8;
        for i in (from..self.stack.len()).step_by(2) {
            let (k, v) = (self.stack[i], self.stack[i + 1]);
            match self.key_slot(k)? {
                KeySlot::Kept(i) => {
                    if rec[i] != ABSENT {
                        return None;
                    }
                    rec[i] = v;
                }
                KeySlot::Ignored(i) => {
                    if ignored & (1 << i) != 0 {
                        return None;
                    }
                    ignored |= 1 << i;
                }
            }
        }
        (rec[0] != ABSENT).then_some((rec, n))
    }

    #[inline]
    pub(super) fn key_slot(&mut self, k: ValueId) -> Option<KeySlot> {
        self.keys.slot(&self.pk, k)
    }

    pub(super) fn int(&mut self, v: i64) -> ValueId {
        inline_int(v).unwrap_or_else(|| {
            self.pk.wide.push(v);
            ValueId::new(Kind::WideInt, self.pk.wide.len() as u64 - 1)
        })
    }

    pub(super) fn float(&mut self, v: f64) -> ValueId {
        self.pk.floats.push(v);
        ValueId::new(Kind::Float, self.pk.floats.len() as u64 - 1)
    }

    /// A new container holding `stack[from..]`, which are dropped from the stack.
    pub(super) fn seq_from_stack(&mut self, kind: Kind, from: usize) -> ValueId {
        let id = self.pk.seqs.add(&self.stack[from..]);
        let v = ValueId::new(kind, id);
        let (a, stack) = self.appending();
        appended(a, v, &stack[from..]);
        self.stack.truncate(from);
        v
    }

    /// LONG1 / LONG4: the next `n` bytes, little-endian two's complement.
    pub(super) fn long_next(&mut self, n: usize) -> Result<ValueId, PickleError> {
        let b = self.input.take(n)?;
        if b.is_empty() {
            return Ok(self.int(0));
        }
        if b.len() <= 8 {
            let neg = b[b.len() - 1] & 0x80 != 0;
            let mut bytes = if neg { [0xffu8; 8] } else { [0u8; 8] };
            bytes[..b.len()].copy_from_slice(b);
            return Ok(self.int(i64::from_le_bytes(bytes)));
        }
        Ok(ValueId::new(Kind::BigInt, self.pk.texts.push_bytes(b)))
    }

    /// Where the items just read into `seqs.flat[start..]` are kept: an earlier list's equal
    /// items, the new ones then dropped, or `start` itself; and whether that place is the one
    /// the same items will be given again (false for no items, and for items kept apart
    /// because another list has their hash). Safe to share: a list that grows later moves
    /// its items to a vector of its own first ([`Store::extend_with`]).
    pub(super) fn share_items(&mut self, start: usize) -> (usize, bool) {
        let items = &self.pk.seqs.flat[start..];
        if items.is_empty() {
            return (start, false);
        }
        let h = {
            let mut hasher = FxHasher::default();
            items.hash(&mut hasher);
            hasher.finish()
        };
        match self.shared.get(&h) {
            Some(&at) if self.pk.seqs.flat.get(at..at + items.len()) == Some(items) => {
                self.pk.seqs.flat.truncate(start);
                (at, true)
            }
            // Another list with this hash: kept apart.
            Some(_) => (start, false),
            None => {
                self.shared.insert(h, start);
                (start, true)
            }
        }
    }
}
