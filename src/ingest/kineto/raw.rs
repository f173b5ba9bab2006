//! Borrowing serde views of Kineto Chrome-trace events. They live only while a chunk is being
//! converted; nothing here outlives ingest.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::keys::{ArgKey, EventKey, KeyTable};
use super::time::RawTime;

/// A `pid`, `tid` or flow `id`: a number in most events, a string in some ("Spans").
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum IdOrName<'a> {
    Num(i64),
    Name(Cow<'a, str>),
}

impl<'de: 'a, 'a> Deserialize<'de> for IdOrName<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = IdOrName<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a number or a string")
            }
            fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
                Ok(IdOrName::Num(v))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
                Ok(IdOrName::Num(v as i64))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Self::Value, E> {
                Ok(IdOrName::Num(v as i64))
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(IdOrName::Name(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(IdOrName::Name(Cow::Owned(v.to_owned())))
            }
        }
        d.deserialize_any(V)
    }
}

/// A number that tolerates the shapes older or foreign writers use: integer, float, numeric
/// string, null. Anything else becomes `None` instead of failing the whole event.
/// 16 bytes, not the 48 of an `(Option<f64>, Option<i128>)`: an event holds fourteen of these
/// and is moved once per event, so its size showed in the parse profile.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) enum Lenient {
    /// Absent, null, or a shape that is not a number.
    #[default]
    None,
    /// An integer in `i64`'s range (non-negative ones included: one form per value, so two
    /// readers' results compare equal).
    Int(i64),
    /// An integer above `i64::MAX`.
    UInt(u64),
    Float(f64),
}

impl Lenient {
    /// An integer as read: `None` beyond both `i64` and `u64` (such a number names nothing
    /// steptrace uses).
    fn of_int(i: i128) -> Lenient {
        if let Ok(v) = i64::try_from(i) {
            Lenient::Int(v)
        } else if let Ok(v) = u64::try_from(i) {
            Lenient::UInt(v)
        } else {
            Lenient::None
        }
    }

    pub(crate) fn i64(self) -> Option<i64> {
        match self {
            Lenient::Int(i) => Some(i),
            Lenient::Float(f) if f.is_finite() => Some(f as i64),
            _ => None,
        }
    }
    pub(crate) fn u64(self) -> Option<u64> {
        match self {
            Lenient::Int(i) => u64::try_from(i).ok(),
            Lenient::UInt(u) => Some(u),
            Lenient::Float(f) if f.is_finite() && f >= 0.0 => Some(f as u64),
            _ => None,
        }
    }
}

impl<'de> Deserialize<'de> for Lenient {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Lenient;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a number")
            }
            fn visit_i64<E>(self, v: i64) -> Result<Lenient, E> {
                Ok(Lenient::Int(v))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Lenient, E> {
                Ok(Lenient::of_int(i128::from(v)))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Lenient, E> {
                Ok(Lenient::Float(v))
            }
            fn visit_str<E>(self, v: &str) -> Result<Lenient, E> {
                let v = v.trim();
                if let Ok(i) = v.parse::<i128>() {
                    return Ok(Lenient::of_int(i));
                }
                Ok(v.parse::<f64>().map_or(Lenient::None, Lenient::Float))
            }
            fn visit_bool<E>(self, _: bool) -> Result<Lenient, E> {
                Ok(Lenient::default())
            }
            fn visit_unit<E>(self) -> Result<Lenient, E> {
                Ok(Lenient::default())
            }
            fn visit_none<E>(self) -> Result<Lenient, E> {
                Ok(Lenient::default())
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Lenient, D::Error> {
                d.deserialize_any(V)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<Lenient, A::Error> {
                while a.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Lenient::default())
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<Lenient, A::Error> {
                while a.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Lenient::default())
            }
        }
        d.deserialize_any(V)
    }
}

/// A string field that tolerates non-strings (they become `None`).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct LenientStr<'a>(pub Option<Cow<'a, str>>);

impl<'de: 'a, 'a> Deserialize<'de> for LenientStr<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = LenientStr<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(LenientStr(Some(Cow::Borrowed(v))))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(LenientStr(Some(Cow::Owned(v.to_owned()))))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
                Ok(LenientStr(Some(Cow::Owned(v.to_string()))))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
                Ok(LenientStr(Some(Cow::Owned(v.to_string()))))
            }
            fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
                Ok(LenientStr(None))
            }
            fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
                Ok(LenientStr(None))
            }
            fn visit_unit<E>(self) -> Result<Self::Value, E> {
                Ok(LenientStr(None))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<Self::Value, A::Error> {
                while a.next_element::<IgnoredAny>()?.is_some() {}
                Ok(LenientStr(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<Self::Value, A::Error> {
                while a.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(LenientStr(None))
            }
        }
        d.deserialize_any(V)
    }
}

/// The `args` members steptrace reads (named in [`ArgKey`]); others are skipped.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct RawArgs<'a> {
    pub ext_id: Lenient,
    pub rf_id: Lenient,
    pub seq: Lenient,
    pub fwd_tid: Lenient,
    pub correlation: Lenient,
    pub addr: Lenient,
    pub signed_bytes: Lenient,
    pub total_allocated: Lenient,
    pub total_reserved: Lenient,
    pub device_type: Lenient,
    pub device_id: Lenient,
    pub device: Lenient,
    pub stream: Lenient,
    pub bytes: Lenient,
    /// Recorded inputs as their JSON text: read later, and only for the ops FLOPs need.
    pub input_dims: Option<&'a str>,
    pub input_type: Option<&'a str>,
    pub concrete_inputs: Option<&'a str>,
    pub name: LenientStr<'a>,
    pub collective: LenientStr<'a>,
    pub pg_name: LenientStr<'a>,
    pub in_nelems: Lenient,
    pub out_nelems: Lenient,
    pub dtype: LenientStr<'a>,
}

/// One element of `traceEvents` (members named in [`EventKey`]; others are skipped).
#[derive(Debug, Default, PartialEq)]
pub(crate) struct RawEvent<'a> {
    pub ph: LenientStr<'a>,
    pub cat: LenientStr<'a>,
    pub name: LenientStr<'a>,
    pub pid: Option<IdOrName<'a>>,
    pub tid: Option<IdOrName<'a>>,
    pub ts: RawTime<'a>,
    pub dur: RawTime<'a>,
    pub id: Option<IdOrName<'a>>,
    pub args: Option<RawArgs<'a>>,
}

/// A member's key, looked up in a [`KeyTable`] as serde reads it, without copying it.
struct Member<K>(Option<K>);

impl<'de, K: KeyTable> Deserialize<'de> for Member<K> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<K>(PhantomData<K>);
        impl<K: KeyTable> Visitor<'_> for V<K> {
            type Value = Member<K>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a member name")
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Member(K::parse(v)))
            }
        }
        d.deserialize_identifier(V(PhantomData))
    }
}

/// Reads an object's members into `T` through `fill`, which is given each field the key table
/// names once: a field named twice (an alias counts as its field) is an error, as serde's
/// derive made it, and a member no table names is skipped.
fn read_members<'de, M, K, T>(
    mut map: M,
    mut out: T,
    mut fill: impl FnMut(&mut T, K, &mut M) -> Result<(), M::Error>,
) -> Result<T, M::Error>
where
    M: MapAccess<'de>,
    K: KeyTable,
{
    let mut seen = 0u32;
    while let Some(Member(key)) = map.next_key::<Member<K>>()? {
        match key {
            Some(key) if seen & key.bit() != 0 => {
                return Err(serde::de::Error::duplicate_field(key.text()))
            }
            Some(key) => {
                seen |= key.bit();
                fill(&mut out, key, &mut map)?;
            }
            None => {
                map.next_value::<IgnoredAny>()?;
            }
        }
    }
    Ok(out)
}

/// A member's value as its JSON text, borrowed from the input.
fn raw_value<'de, M: MapAccess<'de>>(map: &mut M) -> Result<Option<&'de str>, M::Error> {
    Ok(map
        .next_value::<Option<&'de RawValue>>()?
        .map(RawValue::get))
}

impl<'de: 'a, 'a> Deserialize<'de> for RawArgs<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawArgs<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an args object")
            }
            fn visit_map<M: MapAccess<'de>>(self, map: M) -> Result<Self::Value, M::Error> {
                read_members(map, RawArgs::default(), |a, key: ArgKey, m| {
                    match key {
                        ArgKey::ExtId => a.ext_id = m.next_value()?,
                        ArgKey::RfId => a.rf_id = m.next_value()?,
                        ArgKey::Seq => a.seq = m.next_value()?,
                        ArgKey::FwdTid => a.fwd_tid = m.next_value()?,
                        ArgKey::Correlation => a.correlation = m.next_value()?,
                        ArgKey::Addr => a.addr = m.next_value()?,
                        ArgKey::SignedBytes => a.signed_bytes = m.next_value()?,
                        ArgKey::TotalAllocated => a.total_allocated = m.next_value()?,
                        ArgKey::TotalReserved => a.total_reserved = m.next_value()?,
                        ArgKey::DeviceType => a.device_type = m.next_value()?,
                        ArgKey::DeviceId => a.device_id = m.next_value()?,
                        ArgKey::Device => a.device = m.next_value()?,
                        ArgKey::Stream => a.stream = m.next_value()?,
                        ArgKey::Bytes => a.bytes = m.next_value()?,
                        ArgKey::InputDims => a.input_dims = raw_value(m)?,
                        ArgKey::InputType => a.input_type = raw_value(m)?,
                        ArgKey::ConcreteInputs => a.concrete_inputs = raw_value(m)?,
                        ArgKey::Name => a.name = m.next_value()?,
                        ArgKey::Collective => a.collective = m.next_value()?,
                        ArgKey::PgName => a.pg_name = m.next_value()?,
                        ArgKey::InNelems => a.in_nelems = m.next_value()?,
                        ArgKey::OutNelems => a.out_nelems = m.next_value()?,
                        ArgKey::Dtype => a.dtype = m.next_value()?,
                    }
                    Ok(())
                })
            }
        }
        d.deserialize_map(V)
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for RawEvent<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawEvent<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an event object")
            }
            fn visit_map<M: MapAccess<'de>>(self, map: M) -> Result<Self::Value, M::Error> {
                read_members(map, RawEvent::default(), |ev, key: EventKey, m| {
                    match key {
                        EventKey::Ph => ev.ph = m.next_value()?,
                        EventKey::Cat => ev.cat = m.next_value()?,
                        EventKey::Name => ev.name = m.next_value()?,
                        EventKey::Pid => ev.pid = m.next_value()?,
                        EventKey::Tid => ev.tid = m.next_value()?,
                        EventKey::Ts => ev.ts = m.next_value()?,
                        EventKey::Dur => ev.dur = m.next_value()?,
                        EventKey::Id => ev.id = m.next_value()?,
                        EventKey::Args => ev.args = m.next_value()?,
                    }
                    Ok(())
                })
            }
        }
        d.deserialize_map(V)
    }
}

/// The top-level members other than `traceEvents`.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct RawHeader {
    #[serde(rename = "schemaVersion", default)]
    pub schema_version: Lenient,
    #[serde(rename = "baseTimeNanoseconds", default)]
    pub base_time_ns: Lenient,
    #[serde(rename = "deviceProperties", default)]
    pub device_properties: Option<Vec<RawDevice>>,
    #[serde(default)]
    pub record_shapes: Lenient,
    #[serde(default)]
    pub profile_memory: Lenient,
    #[serde(default)]
    pub with_stack: Lenient,
    #[serde(default)]
    pub with_modules: Lenient,
    #[serde(default)]
    pub with_flops: Lenient,
    #[serde(default)]
    pub cuda_runtime_version: Lenient,
    #[serde(rename = "distributedInfo", default)]
    pub distributed_info: Option<RawDistributed>,
}

/// One entry of `deviceProperties`.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct RawDevice {
    #[serde(default)]
    pub id: Lenient,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(rename = "totalGlobalMem", default)]
    pub total_global_mem: Lenient,
    #[serde(rename = "computeMajor", default)]
    pub compute_major: Lenient,
    #[serde(rename = "computeMinor", default)]
    pub compute_minor: Lenient,
    #[serde(rename = "numSms", default)]
    pub num_sms: Lenient,
}

/// `distributedInfo`, written under torch.distributed.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct RawDistributed {
    #[serde(default)]
    pub rank: Lenient,
    #[serde(default)]
    pub world_size: Lenient,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::kineto::time::{time_ns, BadTime};

    fn event(text: &str) -> Result<RawEvent<'_>, serde_json::Error> {
        serde_json::from_str(text)
    }

    // The serde path reads members through the shared key table, as the derive did.
    #[test]
    fn issue21_serde_reads_members_through_the_key_table() {
        let e = event(
            r#"{"\u0070h":"X","args":{"external id":4,"Input dims":[[1]],"\u0041ddr":9,"Ev Idx":1},"x":[{}]}"#,
        )
        .unwrap();
        assert_eq!(e.ph.0.as_deref(), Some("X"));
        let a = e.args.unwrap();
        assert_eq!(a.ext_id, Lenient::Int(4));
        assert_eq!(a.input_dims, Some("[[1]]"));
        assert_eq!(a.addr, Lenient::Int(9));
        // A field named twice, the second time through its alias, is refused as the derive did.
        let dup = event(r#"{"args":{"External id":1,"external id":2}}"#).unwrap_err();
        assert!(
            dup.to_string().contains("duplicate field `External id`"),
            "{dup}"
        );
        assert!(event(r#"{"ts":1,"ts":2}"#).is_err());
        // An event is an object, never a sequence read by position.
        assert!(event(r#"["X","cpu_op"]"#).is_err());
        assert_eq!(event("{}").unwrap(), RawEvent::default());
        assert_eq!(event(r#"{"args":null}"#).unwrap().args, None);
    }

    #[test]
    fn lenient_numbers_accept_odd_shapes() {
        let e: RawEvent = serde_json::from_str(
            r#"{"ph":"X","name":"a\"b","pid":"Spans","tid":7,"ts":"12.5","dur":null,
                "args":{"Addr":140000000000000,"Bytes":-512,"External id":[1],"Input Dims":[[2,3],[]]}}"#,
        )
        .unwrap();
        assert_eq!(e.name.0.as_deref(), Some("a\"b"));
        assert_eq!(e.pid, Some(IdOrName::Name("Spans".into())));
        assert_eq!(e.tid, Some(IdOrName::Num(7)));
        assert_eq!(time_ns(&e.ts), Ok(12_500));
        assert_eq!(time_ns(&e.dur), Err(BadTime::Missing));
        let a = e.args.unwrap();
        assert_eq!(a.addr.u64(), Some(140000000000000));
        assert_eq!(a.signed_bytes.i64(), Some(-512));
        assert_eq!(a.ext_id.i64(), None);
        assert_eq!(a.input_dims, Some("[[2,3],[]]"));
    }
}
