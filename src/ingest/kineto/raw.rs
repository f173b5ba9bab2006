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

/// A time (`ts`, `dur`) as written: the number's text, or a string's content. It is kept as
/// text so that [`time_ns`] can turn microseconds with three decimals into nanoseconds exactly;
/// going through `f64` loses the last digit on epoch-sized values.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct RawTime<'a>(pub Option<Cow<'a, str>>);

impl<'de: 'a, 'a> Deserialize<'de> for RawTime<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = <&'de RawValue>::deserialize(d)?;
        let text = raw.get();
        Ok(RawTime(match text.as_bytes().first() {
            Some(b'"') => serde_json::from_str::<String>(text).ok().map(Cow::Owned),
            Some(b'-' | b'0'..=b'9') => Some(Cow::Borrowed(text)),
            // null, booleans, arrays, objects: no time.
            _ => None,
        }))
    }
}

/// Why a time could not be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BadTime {
    /// Absent, or not a number.
    Missing,
    /// A number beyond ±2^62 ns (146 years either side of the epoch): corrupt, and arithmetic
    /// on it could overflow.
    OutOfRange,
}

/// Largest magnitude accepted, ns.
const MAX_ABS_NS: i128 = 1 << 62;

/// Microseconds written in decimal (`4451161997283.098`, `12`, `1.5e3`, `" 7 "`) to integer
/// nanoseconds, rounding half away from zero beyond the third decimal. Exact: no `f64` on the
/// way.
pub(crate) fn time_ns(t: &RawTime<'_>) -> Result<i64, BadTime> {
    let Some(text) = t.0.as_deref() else {
        return Err(BadTime::Missing);
    };
    plain_time_ns(text.as_bytes()).map_or_else(|| general_time_ns(text), Ok)
}

/// [`time_ns`] for any text.
fn general_time_ns(text: &str) -> Result<i64, BadTime> {
    let s = text.trim().as_bytes();
    let (neg, s) = match s.split_first() {
        Some((b'-', rest)) => (true, rest),
        Some((b'+', rest)) => (false, rest),
        _ => (false, s),
    };
    let mut mant: i128 = 0;
    let mut digits = 0usize;
    let mut scale: i64 = 0; // value = mant * 10^scale µs
    let mut i = 0;
    let mut seen_point = false;
    let mut any = false;
    while i < s.len() {
        match s[i] {
            c @ b'0'..=b'9' => {
                any = true;
                // Beyond 36 significant digits the rest cannot move a value that fits 2^62 ns
                // by half a nanosecond, except through the rounding digit: keep counting scale.
                if digits < 36 {
                    if mant != 0 || c != b'0' {
                        digits += 1;
                    }
                    mant = mant * 10 + i128::from(c - b'0');
                    if seen_point {
                        scale -= 1;
                    }
                } else if !seen_point {
                    scale += 1;
                }
            }
            b'.' if !seen_point => seen_point = true,
            _ => break,
        }
        i += 1;
    }
    if !any {
        return Err(BadTime::Missing);
    }
    if i < s.len() {
        if !matches!(s[i], b'e' | b'E') {
            return Err(BadTime::Missing);
        }
        let e = std::str::from_utf8(&s[i + 1..])
            .ok()
            .and_then(|e| e.strip_prefix('+').unwrap_or(e).parse::<i64>().ok())
            .ok_or(BadTime::Missing)?;
        scale = scale.saturating_add(e);
    }
    // µs → ns.
    let scale = scale.saturating_add(3);
    let ns = if mant == 0 {
        0
    } else if scale >= 0 {
        if scale > 30 {
            return Err(BadTime::OutOfRange);
        }
        mant.checked_mul(10i128.pow(scale as u32))
            .ok_or(BadTime::OutOfRange)?
    } else if scale < -37 {
        0
    } else {
        let div = 10i128.pow((-scale) as u32);
        let q = mant / div;
        if (mant % div) * 2 >= div {
            q + 1
        } else {
            q
        }
    };
    if ns >= MAX_ABS_NS {
        return Err(BadTime::OutOfRange);
    }
    let ns = ns as i64;
    Ok(if neg { -ns } else { ns })
}

/// A recorded-inputs member (`Input Dims`, ...) as its JSON text.
/// The common case of [`time_ns`] in integer arithmetic: unsigned digits with at most three
/// after the point (Kineto writes microseconds with nanosecond decimals) and at most 15 before
/// it, so the result is exact and below [`MAX_ABS_NS`]. Anything else is `None`.
#[inline]
fn plain_time_ns(s: &[u8]) -> Option<i64> {
    let point = s.iter().position(|&c| c == b'.').unwrap_or(s.len());
    let (int, frac) = (&s[..point], s.get(point + 1..).unwrap_or_default());
    if int.is_empty() || int.len() > 15 || frac.len() > 3 || (point < s.len() && frac.is_empty()) {
        return None;
    }
    let mut v: i64 = 0;
    for &c in int {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v * 10 + i64::from(c - b'0');
    }
    let mut f: i64 = 0;
    for &c in frac {
        if !c.is_ascii_digit() {
            return None;
        }
        f = f * 10 + i64::from(c - b'0');
    }
    Some(v * 1000 + f * [1000, 100, 10, 1][frac.len()])
}

fn raw_text<'de, D: Deserializer<'de>>(d: D) -> Result<Option<&'de str>, D::Error> {
    Ok(Option::<&'de RawValue>::deserialize(d)?.map(RawValue::get))
}

/// The `args` members steptrace reads. Others are skipped by serde.
#[derive(Debug, Default, PartialEq, Deserialize)]
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
    #[serde(
        rename = "Input Dims",
        alias = "Input dims",
        borrow,
        default,
        deserialize_with = "raw_text"
    )]
    pub input_dims: Option<&'a str>,
    #[serde(rename = "Input type", borrow, default, deserialize_with = "raw_text")]
    pub input_type: Option<&'a str>,
    #[serde(
        rename = "Concrete Inputs",
        borrow,
        default,
        deserialize_with = "raw_text"
    )]
    pub concrete_inputs: Option<&'a str>,
    #[serde(borrow, default)]
    pub name: LenientStr<'a>,
    // A collective's metadata, on NCCL kernels and the `record_param_comms` op (issue 18).
    #[serde(rename = "Collective name", borrow, default)]
    pub collective: LenientStr<'a>,
    #[serde(rename = "Process Group Name", borrow, default)]
    pub pg_name: LenientStr<'a>,
    #[serde(rename = "In msg nelems", default)]
    pub in_nelems: Lenient,
    #[serde(rename = "Out msg nelems", default)]
    pub out_nelems: Lenient,
    #[serde(borrow, default)]
    pub dtype: LenientStr<'a>,
}

/// One element of `traceEvents`.
#[derive(Debug, Default, PartialEq, Deserialize)]
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
    #[serde(borrow, default)]
    pub ts: RawTime<'a>,
    #[serde(borrow, default)]
    pub dur: RawTime<'a>,
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
        assert_eq!(time_ns(&e.ts), Ok(12_500));
        assert_eq!(time_ns(&e.dur), Err(BadTime::Missing));
        let a = e.args.unwrap();
        assert_eq!(a.addr.u64(), Some(140000000000000));
        assert_eq!(a.signed_bytes.i64(), Some(-512));
        assert_eq!(a.ext_id.i64(), None);
        assert_eq!(a.input_dims, Some("[[2,3],[]]"));
    }

    fn ns(text: &str) -> Result<i64, BadTime> {
        time_ns(&RawTime(Some(text.into())))
    }

    #[test]
    fn issue7_times_convert_to_nanoseconds_exactly() {
        // f64 gives ...283097.66 for this one; the text says ...283098.
        assert_eq!(ns("4451161997283.098"), Ok(4_451_161_997_283_098));
        assert_eq!(ns("12"), Ok(12_000));
        assert_eq!(ns("-0.0005"), Ok(-1));
        assert_eq!(ns("0.0004999"), Ok(0));
        assert_eq!(ns("1.5e3"), Ok(1_500_000));
        assert_eq!(ns("15E-1"), Ok(1_500));
        assert_eq!(ns(" 7 "), Ok(7_000));
        assert_eq!(ns("0.000"), Ok(0));
        assert_eq!(ns("1e300"), Err(BadTime::OutOfRange));
        assert_eq!(ns("4611686018427387.904"), Err(BadTime::OutOfRange));
        assert_eq!(ns("4611686018427387.903"), Ok((1 << 62) - 1));
        assert_eq!(ns("1e-400"), Ok(0));
        assert_eq!(ns("abc"), Err(BadTime::Missing));
        assert_eq!(ns("1.2.3"), Err(BadTime::Missing));
        assert_eq!(ns(""), Err(BadTime::Missing));
        assert_eq!(time_ns(&RawTime(None)), Err(BadTime::Missing));
        // Long mantissas: digits past 36 only shift the scale.
        assert_eq!(ns("1.0000000000000000000000000000000000000009"), Ok(1_000));
        assert_eq!(
            ns("123456789012345678901234567890123456789"),
            Err(BadTime::OutOfRange)
        );
    }

    proptest::proptest! {
        /// The integer fast path gives what the general conversion gives, wherever it answers.
        #[test]
        fn issue7_plain_time_agrees_with_general(
            text in "[0-9]{0,17}(\\.[0-9]{0,5})?[ e.-]?",
        ) {
            if let Some(fast) = plain_time_ns(text.as_bytes()) {
                proptest::prop_assert_eq!(Ok(fast), general_time_ns(&text), "{}", text);
            }
        }
    }
}
