//! Time intervals `[start, end)`, ns: merging overlaps, their total length, the length two
//! merged lists share. One implementation for the step (GPU busy time per iteration) and the
//! GPU timeline (busy time per stream, HolisticTraceAnalysis's breakdown).

/// Sorts `iv` and merges overlapping or touching intervals, in the vector itself (no second
/// allocation: the step runs it for every iteration).
pub fn merged(mut iv: Vec<(i64, i64)>) -> Vec<(i64, i64)> {
    iv.sort_unstable();
    let mut n = 0;
    for i in 0..iv.len() {
        let (s, e) = iv[i];
        if n > 0 && s <= iv[n - 1].1 {
            iv[n - 1].1 = iv[n - 1].1.max(e);
        } else {
            iv[n] = (s, e);
            n += 1;
        }
    }
    iv.truncate(n);
    iv
}

/// Total length of a list of disjoint intervals (as [`merged`] gives).
pub fn total_len(iv: &[(i64, i64)]) -> i64 {
    iv.iter().map(|(s, e)| e - s).sum()
}

/// Length of the union of intervals: overlaps counted once.
pub fn union_len(iv: Vec<(i64, i64)>) -> i64 {
    total_len(&merged(iv))
}

/// Length of the intersection of two merged interval lists.
pub fn intersection_len(a: &[(i64, i64)], b: &[(i64, i64)]) -> i64 {
    let (mut i, mut j, mut total) = (0, 0, 0);
    while i < a.len() && j < b.len() {
        let lo = a[i].0.max(b[j].0);
        let hi = a[i].1.min(b[j].1);
        total += (hi - lo).max(0);
        if a[i].1 < b[j].1 {
            i += 1;
        } else {
            j += 1;
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn union_counts_overlaps_once() {
        assert_eq!(union_len(vec![(0, 10), (5, 15), (20, 25)]), 20);
        assert_eq!(union_len(Vec::new()), 0);
        assert_eq!(union_len(vec![(3, 4), (0, 10)]), 10);
        assert_eq!(union_len(vec![(30, 40), (0, 10), (10, 12)]), 22);
    }

    #[test]
    fn intersection_of_merged_lists() {
        let a = merged(vec![(0, 10), (5, 20), (30, 40)]);
        assert_eq!(a, [(0, 20), (30, 40)]);
        assert_eq!(intersection_len(&a, &[(15, 35)]), 5 + 5);
        assert_eq!(intersection_len(&a, &[]), 0);
    }
}
