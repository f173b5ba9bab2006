//! Non-fatal anomalies found while reading and reconstructing: counted by kind, with the first
//! few examples kept, so a summary can say "3,412 kernels had no launch" without a flood.

use std::collections::BTreeMap;

/// How many examples are kept per kind.
const EXAMPLES_PER_KIND: usize = 3;

/// One kind of anomaly.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Entry {
    /// How often it happened.
    pub count: u64,
    /// The first few messages.
    pub examples: Vec<String>,
}

/// Counted anomalies, keyed by a stable kind name (ordered, so output is deterministic).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Diagnostics {
    entries: BTreeMap<&'static str, Entry>,
}

impl Diagnostics {
    /// Records one anomaly of `kind`.
    pub fn warn(&mut self, kind: &'static str, message: impl Into<String>) {
        let e = self.entries.entry(kind).or_default();
        e.count += 1;
        if e.examples.len() < EXAMPLES_PER_KIND {
            e.examples.push(message.into());
        }
    }

    /// Records `n` anomalies of `kind` with one message describing them.
    pub fn warn_n(&mut self, kind: &'static str, n: u64, message: impl Into<String>) {
        if n == 0 {
            return;
        }
        let e = self.entries.entry(kind).or_default();
        e.count += n;
        if e.examples.len() < EXAMPLES_PER_KIND {
            e.examples.push(message.into());
        }
    }

    /// How many anomalies of `kind` were recorded.
    pub fn count(&self, kind: &str) -> u64 {
        self.entries.get(kind).map_or(0, |e| e.count)
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Kinds with their entries, in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, &Entry)> {
        self.entries.iter().map(|(k, v)| (*k, v))
    }

    /// Adds everything in `other`.
    pub fn extend(&mut self, other: Diagnostics) {
        for (k, v) in other.entries {
            let e = self.entries.entry(k).or_default();
            e.count += v.count;
            for ex in v.examples {
                if e.examples.len() < EXAMPLES_PER_KIND {
                    e.examples.push(ex);
                }
            }
        }
    }

    /// One line per kind: `kind (count): first example`.
    pub fn lines(&self) -> Vec<String> {
        self.entries
            .iter()
            .map(|(k, e)| {
                let ex = e.examples.first().map(String::as_str).unwrap_or("");
                if e.count == 1 {
                    format!("{k}: {ex}")
                } else {
                    format!("{k} ({}x): {ex}", e.count)
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_caps_examples() {
        let mut d = Diagnostics::default();
        for i in 0..10 {
            d.warn("b", format!("m{i}"));
        }
        d.warn("a", "x");
        assert_eq!(d.count("b"), 10);
        assert_eq!(d.iter().next().unwrap().0, "a");
        assert_eq!(d.lines()[1], "b (10x): m0");
        assert_eq!(d.iter().nth(1).unwrap().1.examples.len(), EXAMPLES_PER_KIND);
    }
}
