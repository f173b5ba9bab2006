//! The step's memory replayed with a plan applied.
//!
//! The measured curve is the allocator's own `Total Allocated` after each event of the
//! iteration; a plan adds events to it, never rewrites it:
//!
//! ```text
//!  block b, made in module M's forward, saved only by M's own autograd nodes
//!  measured:   +b ........................................ -b (freed by M's backward)
//!  recompute:  +b ..... -b (last forward use)   +b (M's backward starts: M's forward again,
//!                                                   its temporaries with it)  ... -b
//!  swap:       +b ..... -b (last forward use)   +b (copied back at first backward use) -b
//! ```
//!
//! The predicted memory at any point is the measured total there plus the sum of the added
//! events before it, so what the plan does not touch is exactly what was measured (a plan
//! with no decision predicts the measured peak to the byte).

use crate::analysis::memory::{Breakdown, Category};

/// Where an added event falls among the measured ones: at `ts`; `tie` 0 before the measured
/// events at that time, 2 after them; `seq` orders events of one tie.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Key {
    pub(crate) ts: i64,
    pub(crate) tie: u8,
    pub(crate) seq: u32,
}

/// An event a decision adds in one iteration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Added {
    pub(crate) key: Key,
    pub(crate) bytes: i64,
    pub(crate) category: Category,
}

/// One iteration's measured allocator events, in time order.
#[derive(Debug, Clone, Default)]
pub(crate) struct Measured {
    /// (time, allocated bytes after the event).
    pub(crate) events: Vec<(i64, i64)>,
    /// Allocated bytes before the first event.
    pub(crate) before: i64,
    /// Bytes by category before the first event.
    pub(crate) before_by_category: Breakdown,
    /// Signed bytes by category of each event: its block's size in its block's category.
    /// Whatever else the allocator's total moved by at that event is OTHER (see [`simulate`]).
    pub(crate) deltas: Vec<(Category, i64)>,
}

/// What a simulation found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Peak {
    /// Highest predicted allocated bytes.
    pub(crate) bytes: i64,
    /// When, trace ns.
    pub(crate) ts: i64,
    /// Bytes by category there.
    pub(crate) by_category: Breakdown,
}

/// Replays `m` with `added` (sorted by key) and returns the peak. `curve` receives every
/// point (time, predicted bytes) when given.
pub(crate) fn simulate(
    m: &Measured,
    added: &[Added],
    mut curve: Option<&mut Vec<(i64, i64)>>,
) -> Peak {
    let mut cur = m.before;
    let mut cats = m.before_by_category;
    let mut delta = 0i64;
    let mut best = Peak {
        bytes: m.before,
        ts: m.events.first().map_or(0, |e| e.0),
        by_category: m.before_by_category,
    };
    let mut consider = |ts: i64, total: i64, cats: &Breakdown, best: &mut Peak| {
        if let Some(c) = curve.as_deref_mut() {
            c.push((ts, total));
        }
        if total > best.bytes {
            *best = Peak {
                bytes: total,
                ts,
                by_category: *cats,
            };
        }
    };
    let mut ai = 0usize;
    for (ei, &(ts, total)) in m.events.iter().enumerate() {
        // Added events before this measured one (tie 0 at its time, or earlier times).
        while ai < added.len()
            && (added[ai].key.ts < ts || (added[ai].key.ts == ts && added[ai].key.tie < 1))
        {
            let a = added[ai];
            delta += a.bytes;
            cats[a.category.index()] += a.bytes;
            consider(a.key.ts, cur + delta, &cats, &mut best);
            ai += 1;
        }
        // The category gets its block's bytes and OTHER the rest of the total's move, as the
        // memory timeline counts (analysis::memory::timeline): an event whose bytes differ
        // from its block's size (sample_traces/plan/gpt: frees of 4 MiB against 3 MiB blocks
        // at zero_grad) drove GRAD negative in the predicted breakdown.
        let (c, d) = m.deltas[ei];
        cats[c.index()] += d;
        cats[Category::Other.index()] += total - cur - d;
        cur = total;
        consider(ts, cur + delta, &cats, &mut best);
    }
    for a in &added[ai..] {
        delta += a.bytes;
        cats[a.category.index()] += a.bytes;
        consider(a.key.ts, cur + delta, &cats, &mut best);
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    fn measured(deltas: &[(i64, i64)], before: i64) -> Measured {
        let mut total = before;
        let mut m = Measured {
            before,
            ..Measured::default()
        };
        m.before_by_category[Category::Param.index()] = before;
        for &(ts, d) in deltas {
            total += d;
            m.events.push((ts, total));
            m.deltas.push((Category::Activation, d));
        }
        m
    }

    fn add(ts: i64, tie: u8, seq: u32, bytes: i64) -> Added {
        Added {
            key: Key { ts, tie, seq },
            bytes,
            category: Category::Activation,
        }
    }

    /// An event that moves the allocator's total by more than its block's size (a 4 MiB free
    /// of a 3 MiB GRAD block, as at zero_grad in sample_traces/plan/gpt): the category loses
    /// the block's bytes and OTHER the rest, so no category goes negative and the parts add up
    /// to the total, as in the memory timeline.
    #[test]
    fn issue20_the_breakdown_gives_other_what_an_event_moves_beyond_its_block() {
        let mut m = Measured {
            before: 1000,
            ..Measured::default()
        };
        m.before_by_category[Category::Grad.index()] = 300;
        m.before_by_category[Category::Other.index()] = 700;
        // The 400-byte free of a 300-byte block, then a 50-byte activation.
        m.events = vec![(1, 600), (2, 650)];
        m.deltas = vec![(Category::Grad, -300), (Category::Activation, 50)];
        // With 500 added at 3 the peak is there: 650 + 500.
        let p = simulate(&m, &[add(3, 0, 0, 500)], None);
        assert_eq!(p.bytes, 1150);
        assert_eq!(p.by_category.iter().sum::<i64>(), p.bytes, "{p:?}");
        assert_eq!(p.by_category[Category::Grad.index()], 0);
        assert_eq!(p.by_category[Category::Other.index()], 600);
        assert_eq!(p.by_category[Category::Activation.index()], 550);
    }

    #[test]
    fn issue20_no_decision_predicts_the_measured_peak() {
        let m = measured(&[(1, 100), (2, 50), (3, -30), (4, 200), (5, -320)], 1000);
        let p = simulate(&m, &[], None);
        assert_eq!(p.bytes, 1320);
        assert_eq!(p.ts, 4);
    }

    #[test]
    fn issue20_a_dropped_block_lowers_the_peak_between_its_drop_and_its_return() {
        // Forward: a (100) at 1, b (50) at 2; backward starts at 10 with a peak of 200 more
        // (at 11); b comes back at 10 and is freed at 12, a at 13. Hand-computed: measured peak
        // 1000+100+50+200 = 1350 at 11; dropping b between 3 and 10 changes nothing there
        // (b is back), dropping it for good between 3 and 12 would give 1300.
        let m = measured(
            &[
                (1, 100),
                (2, 50),
                (11, 200),
                (12, -50),
                (13, -100),
                (14, -200),
            ],
            1000,
        );
        assert_eq!(simulate(&m, &[], None).bytes, 1350);
        let back_at_10 = [add(3, 2, 0, -50), add(10, 0, 0, 50)];
        assert_eq!(simulate(&m, &back_at_10, None).bytes, 1350);
        // Brought back only after the 200 were freed: the peak is then 1300.
        let back_at_14 = [add(3, 2, 0, -50), add(14, 2, 0, 50)];
        let p = simulate(&m, &back_at_14, None);
        assert_eq!(p.bytes, 1300);
        // A transient of 80 replayed at 10 (a recomputed temporary) on top of the 1150 there.
        let with_transient = [
            add(3, 2, 0, -50),
            add(10, 0, 0, 50),
            add(10, 0, 1, 80),
            add(10, 0, 2, -80),
        ];
        let mut curve = Vec::new();
        let p = simulate(&m, &with_transient, Some(&mut curve));
        assert_eq!(p.bytes, 1350);
        assert!(curve.contains(&(10, 1230)), "{curve:?}");
    }
}
