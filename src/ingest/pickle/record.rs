//! Dicts read as fixed records of a shape, and the sink that takes them as they complete.

use super::*;

/// Most members a [`RecordShape`] may name, kept or ignored (a record is built on the stack,
/// and ignored members are tracked in a byte).
pub const RECORD_MAX_KEYS: usize = 8;

/// A dict shape the caller reads by the million, stored as a fixed record of its kept
/// members instead of a generic dict (a GB snapshot's history entries: as generic dicts they
/// took several times the file's size). A dict is read as one when it is filled in one go
/// with two members or more, has the first kept member, string keys only, none twice, and
/// none outside `keys` and `ignored`; any other dict stays generic (a sink is told of one
/// with the first kept member: [`RecordSink::generic`]). [`Pickle::dict_get`] answers alike
/// for both.
#[derive(Debug)]
pub struct RecordShape {
    pub(super) keys: &'static [&'static str],
    pub(super) ignored: &'static [&'static str],
}

impl RecordShape {
    /// `keys`: the members kept, the first one required; `ignored`: members a record may
    /// also have, dropped. At most [`RECORD_MAX_KEYS`] of each.
    pub const fn new(keys: &'static [&'static str], ignored: &'static [&'static str]) -> Self {
        assert!(!keys.is_empty() && keys.len() <= RECORD_MAX_KEYS);
        assert!(ignored.len() <= RECORD_MAX_KEYS);
        RecordShape { keys, ignored }
    }

    /// The members kept, in the order a record holds them.
    pub fn keys(&self) -> &'static [&'static str] {
        self.keys
    }
}

/// Takes each dict of a [`RecordShape`] as it is completed, instead of the pickle keeping
/// its members: a GB snapshot's millions of history entries become the caller's own records
/// during the read, never held twice ([`parse_stream_into`]).
pub trait RecordSink {
    /// A record completed: its kept members in the shape's order (absent ones are `None`),
    /// with the pickle as read so far (a container they name that the pickle extends later,
    /// which no snapshot torch writes does, is seen as it is now). Returns the record's
    /// number, which [`Pickle::record_number`] gives for its dict.
    fn record(&mut self, pk: &Pickle, members: &[Option<ValueId>]) -> usize;
    /// The record `number` was extended after it was complete (no pickle torch writes does
    /// that): its dict is a generic one of the later members from here on, and the record
    /// is no longer what the dict holds.
    fn forget(&mut self, number: usize);
    /// `items` were just appended, in this order, to `list` (by APPEND, APPENDS or LIST):
    /// a record among them is in a list from here on, so a sink can hand it on and forget
    /// it instead of keeping every record to the end. True: every item was a record the
    /// sink handed on for good, so the list need not hold them (a GB snapshot's history
    /// lists held a word per entry): [`Pickle::items`] of the list then lacks them.
    /// Items none of which is a record ([`Pickle::record_number`]) or a dict the sink was
    /// told of by [`RecordSink::generic`] (a history entry's frame list) must change nothing
    /// and return false: the reader skips the call for a frame list like the last one.
    fn appended(&mut self, _pk: &Pickle, _list: ValueId, _items: &[ValueId]) -> bool {
        false
    }
    /// The generic dict `dict` (not read as a record: a member beyond the shape, a pair at a
    /// time) was given the shape's first member: the sink may read it by key once it is in a
    /// list.
    fn generic(&mut self, _dict: ValueId) {}
}

/// The kept members of a dict read as a record (see [`Pickle::record`]).
#[derive(Debug, Clone, Copy)]
pub struct Record<'p> {
    pub(super) keys: &'static [&'static str],
    pub(super) values: &'p [ValueId],
}

impl Record<'_> {
    /// The member `key`, as `dict_get` would give it.
    #[inline]
    pub fn get(&self, key: &str) -> Option<ValueId> {
        let v = self.values[self.keys.iter().position(|k| *k == key)?];
        (v.kind() != Kind::Absent).then_some(v)
    }
}
