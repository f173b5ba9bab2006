//! Borrowing serde views of Kineto Chrome-trace events. They live only while a chunk is being
//! converted; nothing here outlives ingest.

use std::borrow::Cow;
use std::fmt;

use serde::de::{Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

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
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Lenient(pub Option<f64>, pub Option<i128>);

impl Lenient {
    pub(crate) fn i64(self) -> Option<i64> {
        match (self.1, self.0) {
            (Some(i), _) => i64::try_from(i).ok(),
            (None, Some(f)) if f.is_finite() => Some(f as i64),
            _ => None,
        }
    }
    pub(crate) fn u64(self) -> Option<u64> {
        match (self.1, self.0) {
            (Some(i), _) => u64::try_from(i).ok(),
            (None, Some(f)) if f.is_finite() && f >= 0.0 => Some(f as u64),
            _ => None,
        }
    }
    pub(crate) fn f64(self) -> Option<f64> {
        match (self.1, self.0) {
            (Some(i), _) => Some(i as f64),
            (None, f) => f,
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
                Ok(Lenient(None, Some(v as i128)))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Lenient, E> {
                Ok(Lenient(None, Some(v as i128)))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Lenient, E> {
                Ok(Lenient(Some(v), None))
            }
            fn visit_str<E>(self, v: &str) -> Result<Lenient, E> {
                let v = v.trim();
                if let Ok(i) = v.parse::<i128>() {
                    return Ok(Lenient(None, Some(i)));
                }
                Ok(Lenient(v.parse::<f64>().ok(), None))
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

/// The `args` members steptrace reads. Others are skipped by serde.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct RawArgs<'a> {
    #[serde(rename = "External id", alias = "external id", default)]
    pub ext_id: Lenient,
    #[serde(rename = "Record function id", default)]
    pub rf_id: Lenient,
    #[serde(rename = "Sequence number", default)]
    pub seq: Lenient,
    #[serde(rename = "Fwd thread id", default)]
    pub fwd_tid: Lenient,
    #[serde(default)]
    pub correlation: Lenient,
    #[serde(rename = "Addr", default)]
    pub addr: Lenient,
    #[serde(rename = "Bytes", default)]
    pub signed_bytes: Lenient,
    #[serde(rename = "Total Allocated", default)]
    pub total_allocated: Lenient,
    #[serde(rename = "Total Reserved", default)]
    pub total_reserved: Lenient,
    #[serde(rename = "Device Type", default)]
    pub device_type: Lenient,
    #[serde(rename = "Device Id", default)]
    pub device_id: Lenient,
    #[serde(default)]
    pub device: Lenient,
    #[serde(default)]
    pub stream: Lenient,
    #[serde(default)]
    pub bytes: Lenient,
    // PyTorch 1.x wrote `Input dims`.
    #[serde(rename = "Input Dims", alias = "Input dims", borrow, default)]
    pub input_dims: Option<&'a RawValue>,
    #[serde(rename = "Input type", borrow, default)]
    pub input_type: Option<&'a RawValue>,
    #[serde(rename = "Concrete Inputs", borrow, default)]
    pub concrete_inputs: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub name: LenientStr<'a>,
}

/// One element of `traceEvents`.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct RawEvent<'a> {
    #[serde(borrow, default)]
    pub ph: LenientStr<'a>,
    #[serde(borrow, default)]
    pub cat: LenientStr<'a>,
    #[serde(borrow, default)]
    pub name: LenientStr<'a>,
    #[serde(borrow, default)]
    pub pid: Option<IdOrName<'a>>,
    #[serde(borrow, default)]
    pub tid: Option<IdOrName<'a>>,
    #[serde(default)]
    pub ts: Lenient,
    #[serde(default)]
    pub dur: Lenient,
    #[serde(borrow, default)]
    pub id: Option<IdOrName<'a>>,
    #[serde(borrow, default)]
    pub args: Option<RawArgs<'a>>,
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
        assert_eq!(e.ts.f64(), Some(12.5));
        assert_eq!(e.dur.f64(), None);
        let a = e.args.unwrap();
        assert_eq!(a.addr.u64(), Some(140000000000000));
        assert_eq!(a.signed_bytes.i64(), Some(-512));
        assert_eq!(a.ext_id.i64(), None);
        assert_eq!(a.input_dims.unwrap().get(), "[[2,3],[]]");
    }
}
