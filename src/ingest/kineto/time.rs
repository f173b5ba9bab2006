//! Kineto's times (`ts`, `dur`) from the text they are written as to integer nanoseconds,
//! exactly: microseconds with nanosecond decimals lose their last digit through `f64` at
//! epoch-sized values.

use std::borrow::Cow;

use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

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

#[cfg(test)]
mod tests {
    use super::*;

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
