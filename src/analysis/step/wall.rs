//! An iteration's wall-clock time split by phase: what a framework's own timers around
//! `training_step`, `backward` and `optimizer_step` measure, where the nodes' own durations
//! leave out the Python between them.
//!
//! ```text
//!  main      [to]  [conv][bn] [relu]..[loss]               [foreach_add]  [foreach_mul]
//!  autograd                              [mm_bw]  [conv_bw]
//!  wall      |other|forward ...........|backward .........|~|optimizer .................|
//!                                                          between
//! ```
//! Each instant of the iteration goes to the phase whose work started first among what covers
//! it; a gap between two spans of one phase is that phase's own host code, a gap between
//! phases is "between phases" (the framework's code, the profiler's step), so the phases and
//! that remainder add up to the iteration exactly.

use super::{Phase, PhaseWall};

/// Splits the iteration `[start, end)` by the phase spans given (any order; clipped to the
/// iteration).
pub(super) fn split(spans: &mut [(i64, i64, Phase)], start: i64, end: i64) -> PhaseWall {
    // Ties: the longer span first, so that a range and the op that opens it count once.
    spans.sort_by_key(|&(s, e, _)| (s, std::cmp::Reverse(e)));
    let mut w = PhaseWall::default();
    let mut covered = start;
    let mut last: Option<Phase> = None;
    for &(s, e, p) in spans.iter() {
        let (s, e) = (s.max(start), e.min(end));
        if e <= covered || s >= e {
            continue;
        }
        if s > covered {
            let gap = s - covered;
            match last {
                Some(q) if q == p => w.by_phase[p.index()] += gap,
                _ => w.between += gap,
            }
        }
        w.by_phase[p.index()] += e - s.max(covered);
        covered = e;
        last = Some(p);
    }
    w.between += (end - covered).max(0);
    w
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn every_phase_indexes_its_own_slot() {
        for (i, p) in Phase::ALL.iter().enumerate() {
            assert_eq!(p.index(), i, "{p:?}");
        }
    }

    #[test]
    fn gaps_inside_a_phase_are_its_own_and_gaps_between_phases_are_not() {
        use Phase::*;
        let mut s = vec![
            (10, 20, Forward),
            (25, 30, Forward), // 5 ns of the forward's own Python before it
            (32, 40, Backward),
            (40, 45, Backward),
            (50, 60, Optimizer),
        ];
        let w = split(&mut s, 0, 100);
        assert_eq!(w.of(Forward), 20);
        assert_eq!(w.of(Backward), 13);
        assert_eq!(w.of(Optimizer), 10);
        // 10 before the first, 2 + 5 between phases, 40 after the last.
        assert_eq!(w.between, 57);
    }

    #[test]
    fn overlapping_spans_of_two_threads_count_each_instant_once() {
        use Phase::*;
        // A data-loading range holding an op, and a backward op on another thread overlapping
        // the forward's last op.
        let mut s = vec![
            (0, 30, DataLoading),
            (5, 10, DataLoading),
            (30, 50, Forward),
            (45, 70, Backward),
        ];
        let w = split(&mut s, 0, 70);
        assert_eq!(w.of(DataLoading), 30);
        assert_eq!(w.of(Forward), 20);
        assert_eq!(w.of(Backward), 20);
        assert_eq!(w.between, 0);
    }

    #[test]
    fn spans_past_the_iteration_are_clipped() {
        let mut s = vec![
            (-5, 10, Phase::Other),
            (90, 120, Phase::Forward),
            (130, 150, Phase::Backward),
        ];
        let w = split(&mut s, 0, 100);
        assert_eq!(w.of(Phase::Other), 10);
        assert_eq!(w.of(Phase::Forward), 10);
        assert_eq!(w.of(Phase::Backward), 0);
        assert_eq!(w.between, 80);
    }

    proptest! {
        #[test]
        fn phases_and_the_rest_add_up_to_the_iteration(
            raw in proptest::collection::vec((0i64..1000, 0i64..200, 0usize..6), 0..40),
            end in 1i64..1200,
        ) {
            let mut s: Vec<(i64, i64, Phase)> =
                raw.iter().map(|&(a, d, p)| (a, a + d, Phase::ALL[p])).collect();
            let w = split(&mut s, 0, end);
            prop_assert!(w.by_phase.iter().all(|&x| x >= 0) && w.between >= 0);
            prop_assert_eq!(w.by_phase.iter().sum::<i64>() + w.between, end);
        }
    }
}
