//! A value in 8 bytes (ValueId: kind and payload) and the plain-data view of one (Value).

/// What kind of value a [`ValueId`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Kind {
    None,
    Bool,
    /// An integer of at most 60 bits, in the id itself.
    Int,
    /// A wider integer, in a side table.
    WideInt,
    Float,
    BigInt,
    Str,
    Bytes,
    List,
    Tuple,
    Dict,
    Set,
    /// A dict member that is not there (in a record).
    Absent,
    /// A dict read as a record that a [`RecordSink`] took, with nothing else naming it but
    /// the stack and the memo (`reader::Reader::sink_record`): no table keeps a slot for it.
    /// The payload is the record's number, or [`TAKEN`] once it was put in a list.
    Sunk,
    /// A list a sunk record held, with nothing else naming it but the memo: its items stay
    /// where they are in the shared table, and the payload indexes `Pickle::frozen`, their
    /// place (one per distinct place), so the list's own slot is free for the next one.
    Frozen,
}

/// The payload of a [`Kind::Sunk`] whose record was put in a list: the sink has seen it
/// there, and any later mention is a repeat. One value for all, so that the memo, where
/// millions of these end, holds them in a few bits (`reader::memo`).
pub(super) const TAKEN: u64 = PAYLOAD;

pub(super) const KINDS: [Kind; 15] = [
    Kind::None,
    Kind::Bool,
    Kind::Int,
    Kind::WideInt,
    Kind::Float,
    Kind::BigInt,
    Kind::Str,
    Kind::Bytes,
    Kind::List,
    Kind::Tuple,
    Kind::Dict,
    Kind::Set,
    Kind::Absent,
    Kind::Sunk,
    Kind::Frozen,
];

/// Bits of a [`ValueId`] below its kind.
pub(super) const PAYLOAD_BITS: u32 = 60;
pub(super) const PAYLOAD: u64 = (1 << PAYLOAD_BITS) - 1;

/// A value of a [`Pickle`](super::Pickle) in 8 bytes: the kind in the top 4 bits, and below it a small
/// integer itself or the index of a string, container or wide scalar. Two ids are equal when
/// they are the same object (containers, strings) or the same small scalar.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ValueId(pub(super) u64);

impl ValueId {
    pub(super) const fn new(kind: Kind, data: u64) -> Self {
        ValueId(((kind as u64) << PAYLOAD_BITS) | (data & PAYLOAD))
    }

    pub(super) fn kind(self) -> Kind {
        KINDS[(self.0 >> PAYLOAD_BITS) as usize]
    }

    /// An id that no member of a record holds (a member not there reads as `None`): the
    /// empty key of a cache of ids.
    pub const ABSENT: ValueId = ValueId::new(Kind::Absent, 0);

    /// The line of a direct-mapped cache of `lines` (a power of two) that this id takes:
    /// ids of one kind differ in their low bits only by their number, so they are mixed.
    #[inline]
    pub fn line(self, lines: usize) -> usize {
        (self.0.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize & (lines - 1)
    }

    pub(super) fn data(self) -> u64 {
        self.0 & PAYLOAD
    }
}

/// A plain-data pickle value, as seen through [`Pickle::get`](super::Pickle::get).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value<'p> {
    /// `None`.
    None,
    /// `True` / `False`.
    Bool(bool),
    /// An integer that fits in 64 bits.
    Int(i64),
    /// An integer too large for 64 bits, as little-endian two's complement bytes.
    BigInt(&'p [u8]),
    /// A float.
    Float(f64),
    /// A text string.
    Str(&'p str),
    /// A bytes object.
    Bytes(&'p [u8]),
    /// A list.
    List(&'p [ValueId]),
    /// A tuple.
    Tuple(&'p [ValueId]),
    /// A dict, in insertion order.
    Dict(&'p [(ValueId, ValueId)]),
    /// A set or frozenset.
    Set(&'p [ValueId]),
}
