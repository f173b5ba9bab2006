//! A memory budget as users give it: bytes (`4.5GiB`, `4800MB`) or a share of the measured
//! peak (`90%`).

use super::Error;

/// A budget as given: bytes, or a fraction of the measured peak.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Budget {
    /// Bytes.
    Bytes(i64),
    /// Fraction of the measured peak (0.8 for `80%`).
    Fraction(f64),
}

impl std::str::FromStr for Budget {
    type Err = Error;
    fn from_str(s: &str) -> Result<Budget, Error> {
        let t = s.trim();
        let bad = || Error::BadBudget(s.to_owned());
        if let Some(p) = t.strip_suffix('%') {
            let v: f64 = p.trim().parse().map_err(|_| bad())?;
            return (v > 0.0 && v.is_finite())
                .then_some(Budget::Fraction(v / 100.0))
                .ok_or_else(bad);
        }
        let split = t
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(t.len());
        let (num, unit) = t.split_at(split);
        let v: f64 = num.parse().map_err(|_| bad())?;
        let mult: f64 = match unit.trim().to_ascii_lowercase().as_str() {
            "" | "b" => 1.0,
            "kib" => 1024.0,
            "mib" => 1024.0 * 1024.0,
            "gib" => 1024.0 * 1024.0 * 1024.0,
            "kb" => 1e3,
            "mb" => 1e6,
            "gb" => 1e9,
            _ => return Err(bad()),
        };
        let b = v * mult;
        (1.0..9.0e18)
            .contains(&b)
            .then_some(Budget::Bytes(b as i64))
            .ok_or_else(bad)
    }
}
