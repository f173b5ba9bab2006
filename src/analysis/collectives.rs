//! Collectives: each rank's communication kernels with their collective metadata,
//! and the same collective matched across ranks.
//!
//! Nothing in a Kineto trace numbers a collective, but every rank of a process group issues
//! the group's collectives in the same order. A collective is therefore known across ranks by
//! the iteration that launched it (`ProfilerStep#N`, the same step on every rank), its process
//! group and its order within both; the matched calls must agree on op, element type and
//! sizes, or the match is refused and said so.
//!
//! Who arrived last, without comparing clocks: an NCCL kernel starts when its rank enters the
//! collective and spins until every rank has, so all of a collective's kernels end together
//! (to within the transfer) and the rank that arrived last runs the shortest one. Its length is
//! the collective itself; every other rank's excess over it is time that rank spent waiting.
//! Clocks of different hosts need not agree for this.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use serde::Serialize;

use super::step::Step;
use crate::model::Trace;

/// A name a rank's collectives repeat (an iteration's label, a process group, an op, an
/// element type): one allocation shared by every call that carries it, because a rank holds
/// up to millions of calls and a handful of distinct names (a `String` each made a merge of
/// two ranks of 4M calls take 4.5 GB). A thin pointer (`Arc<String>`, not `Arc<str>`): eight
/// bytes less per name, four names a call.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Name(Arc<String>);

impl Name {
    /// The text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::ops::Deref for Name {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for Name {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::fmt::Debug for Name {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&*self.0, f)
    }
}

impl PartialEq<str> for Name {
    fn eq(&self, o: &str) -> bool {
        self.0.as_str() == o
    }
}

impl PartialEq<&str> for Name {
    fn eq(&self, o: &&str) -> bool {
        self.0.as_str() == *o
    }
}

impl From<&str> for Name {
    fn from(s: &str) -> Name {
        Name(Arc::new(s.to_owned()))
    }
}

impl Serialize for Name {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl std::borrow::Borrow<str> for Name {
    fn borrow(&self) -> &str {
        &self.0
    }
}

/// Hands out one shared [`Name`] per distinct text.
#[derive(Debug, Default)]
pub struct Names(HashSet<Name>);

impl Names {
    /// The shared name for `s`.
    pub fn get(&mut self, s: &str) -> Name {
        if let Some(n) = self.0.get(s) {
            return n.clone();
        }
        let n = Name::from(s);
        self.0.insert(n.clone());
        n
    }
}

/// One collective as one rank ran it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Call {
    /// Label of the iteration that launched it.
    pub iteration: Name,
    /// Process group name.
    pub pg: Name,
    /// Order among the group's collectives launched in that iteration, from 0.
    pub seq: u32,
    /// `allreduce`, `broadcast`, ...
    pub op: Name,
    /// Element type.
    pub dtype: Name,
    /// Input elements.
    pub in_nelems: Option<i64>,
    /// Output elements.
    pub out_nelems: Option<i64>,
    /// Kernel start, ns (this rank's clock).
    pub start_ns: i64,
    /// Kernel duration, ns.
    pub dur_ns: i64,
}

/// The rank's collectives launched inside its iterations, in launch order, and how many
/// communication kernels carried metadata but were launched outside every iteration (such as
/// the one a window opens on, launched before it).
pub fn calls(t: &Trace, step: &Step) -> (Vec<Call>, usize) {
    let mut found: Vec<(usize, i64, usize)> = Vec::new(); // (iteration, launch time, gpu index)
    let mut outside = 0;
    for (i, g) in t.kineto.gpu.iter().enumerate() {
        if g.collective.is_none() {
            continue;
        }
        let at = t.launch[i].map_or(g.start, |(_, ts)| ts);
        let k = step.iterations.partition_point(|it| it.end < at);
        match step.iterations.get(k) {
            Some(it) if it.start <= at => found.push((k, at, i)),
            _ => outside += 1,
        }
    }
    found.sort_unstable_by_key(|&(k, at, i)| (k, at, t.kineto.gpu[i].start, i));
    let mut names = Names::default();
    let mut next: BTreeMap<(usize, Name), u32> = BTreeMap::new();
    let calls = found
        .into_iter()
        .filter_map(|(k, _, i)| {
            let g = &t.kineto.gpu[i];
            let c = g.collective.as_deref()?;
            let mut s = |id| names.get(t.kineto.strings.resolve(id));
            let (pg, op, dtype) = (s(c.pg), s(c.op), s(c.dtype));
            let n = next.entry((k, pg.clone())).or_insert(0);
            let seq = *n;
            *n += 1;
            Some(Call {
                iteration: names.get(&step.iterations[k].label),
                pg,
                seq,
                op,
                dtype,
                in_nelems: c.in_nelems,
                out_nelems: c.out_nelems,
                start_ns: g.start,
                dur_ns: g.dur,
            })
        })
        .collect();
    (calls, outside)
}

/// One collective matched across the ranks that ran it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Matched {
    /// Iteration label.
    pub iteration: Name,
    /// Process group name.
    pub pg: Name,
    /// Order within the group and iteration.
    pub seq: u32,
    /// Op.
    pub op: Name,
    /// Element type.
    pub dtype: Name,
    /// Input elements.
    pub in_nelems: Option<i64>,
    /// Ranks that ran it.
    pub ranks: usize,
    /// The rank that arrived last (its kernel was the shortest; the lowest rank of equals).
    pub last_rank: i64,
    /// The collective itself: the last rank's kernel, ns.
    pub collective_ns: i64,
    /// Time the other ranks spent waiting for the last one, summed, ns.
    pub wait_ns: i64,
    /// The longest of those waits, ns.
    pub max_wait_ns: i64,
    /// How far apart its kernels end on the ranks' clocks, ns: near zero when the ranks'
    /// windows cover the same steps and their clocks agree (one host).
    pub end_spread_ns: i64,
}

/// One rank's part in the matched collectives.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Arrivals {
    /// The rank.
    pub rank: i64,
    /// Matched collectives it ran.
    pub collectives: usize,
    /// Of those, how many it arrived at last.
    pub last: usize,
    /// Time the other ranks waited for it, summed, ns.
    pub wait_caused_ns: i64,
    /// Time it waited for others, summed, ns.
    pub waited_ns: i64,
}

/// The collectives of every rank, matched. In ranks.json: `matched` (the first
/// [`MATCHED_IN_JSON`]; collectives.csv has every one), `matched_count` (how many in all),
/// then the other fields.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Matching {
    /// Matched collectives, by iteration (in the order first seen), group, order.
    pub matched: Vec<Matched>,
    /// Per rank, in rank order.
    pub arrivals: Vec<Arrivals>,
    /// Collectives only one rank ran in its window (no peer to match).
    pub unmatched: usize,
    /// Collectives whose ranks disagree on op, element type or size (not matched), one line
    /// each up to a few.
    pub disagreements: Vec<String>,
    /// How many disagreed in all.
    pub disagreeing: usize,
}

/// Most disagreements spelled out; the rest are counted.
const SHOWN_DISAGREEMENTS: usize = 5;

/// The most matched collectives ranks.json lists: a merge of ranks with millions of
/// collectives each wrote a 1.3 GB ranks.json; every one is in collectives.csv.
pub const MATCHED_IN_JSON: usize = 10_000;

impl Serialize for Matching {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        /// The first [`MATCHED_IN_JSON`] of the list, as a sequence.
        struct First<'a>(&'a [Matched]);
        impl Serialize for First<'_> {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_seq(self.0.iter().take(MATCHED_IN_JSON))
            }
        }
        let mut st = s.serialize_struct("Matching", 6)?;
        st.serialize_field("matched", &First(&self.matched))?;
        st.serialize_field("matched_count", &self.matched.len())?;
        st.serialize_field("arrivals", &self.arrivals)?;
        st.serialize_field("unmatched", &self.unmatched)?;
        st.serialize_field("disagreements", &self.disagreements)?;
        st.serialize_field("disagreeing", &self.disagreeing)?;
        st.end()
    }
}

/// Matches the collectives of `ranks` (rank, its calls), given in rank order.
pub fn match_ranks(ranks: &[(i64, &[Call])]) -> Matching {
    let mut m = Matching {
        arrivals: ranks
            .iter()
            .map(|&(rank, _)| Arrivals {
                rank,
                ..Arrivals::default()
            })
            .collect(),
        ..Matching::default()
    };
    let keys = group_keys(ranks);
    let mut calls: Vec<(usize, i64, &Call)> = Vec::new();
    for run in keys.chunk_by(|a, b| a.0 == b.0) {
        calls.clear();
        calls.extend(run.iter().map(|&(_, r, c)| {
            let (rank, cs) = ranks[r as usize];
            (r as usize, rank, &cs[c as usize])
        }));
        match_one(&calls, &mut m);
    }
    m
}

/// Every call as (its collective's key, rank index, call index), sorted by key and, within a
/// key, in rank order. A key is (the iteration's first position, the group's place in name
/// order, order): the iteration order is the first rank's. Twenty bytes a call, where a map
/// of per-collective lists took about a hundred.
fn group_keys(ranks: &[(i64, &[Call])]) -> Vec<((u32, u32, u32), u32, u32)> {
    let mut order: HashMap<&str, u32> = HashMap::new();
    let mut pgs: BTreeMap<&str, u32> = BTreeMap::new();
    for &(_, calls) in ranks {
        for c in calls {
            let n = order.len() as u32;
            order.entry(&c.iteration).or_insert(n);
            pgs.insert(&c.pg, 0);
        }
    }
    for (i, v) in pgs.values_mut().enumerate() {
        *v = i as u32;
    }
    let mut keys = Vec::with_capacity(ranks.iter().map(|r| r.1.len()).sum());
    for (r, &(_, calls)) in ranks.iter().enumerate() {
        for (i, c) in calls.iter().enumerate() {
            let key = (order[&*c.iteration], pgs[&*c.pg], c.seq);
            keys.push((key, r as u32, i as u32));
        }
    }
    // Stable: a key's calls stay in rank order.
    keys.sort_by_key(|k| k.0);
    keys
}

/// Matches one collective's `calls` (the rank's place in `m.arrivals`, rank, call; two or
/// more to match) into `m`.
fn match_one(calls: &[(usize, i64, &Call)], m: &mut Matching) {
    let (_, first_rank, first) = calls[0];
    if calls.len() < 2 {
        m.unmatched += 1;
        return;
    }
    let differs = calls.iter().find(|(_, _, c)| {
        (&c.op, &c.dtype, c.in_nelems) != (&first.op, &first.dtype, first.in_nelems)
    });
    if let Some(&(_, rank, c)) = differs {
        m.disagreeing += 1;
        if m.disagreements.len() < SHOWN_DISAGREEMENTS {
            let what = |c: &Call| {
                format!(
                    "{} of {} {}",
                    c.op,
                    c.in_nelems.map_or("?".into(), |n| n.to_string()),
                    c.dtype
                )
            };
            m.disagreements.push(format!(
                "{} group {} collective {}: rank {} ran {}, rank {} {}",
                first.iteration,
                first.pg,
                first.seq,
                first_rank,
                what(first),
                rank,
                what(c)
            ));
        }
        return;
    }
    let &(last_at, last_rank, last) = calls
        .iter()
        .min_by_key(|(_, rank, c)| (c.dur_ns, *rank))
        .expect("two or more calls");
    let mut wait = 0;
    let mut max_wait = 0;
    // Saturating sums: merged tables can carry durations near i64::MAX (a damaged or
    // hostile rank table), which wrapped into negative waits.
    let ends = calls
        .iter()
        .map(|(_, _, c)| c.start_ns.saturating_add(c.dur_ns));
    let end_spread = ends
        .clone()
        .max()
        .unwrap_or(0)
        .saturating_sub(ends.min().unwrap_or(0));
    for &(at, _, c) in calls {
        let w = c.dur_ns.saturating_sub(last.dur_ns);
        wait = i64::saturating_add(wait, w);
        max_wait = max_wait.max(w);
        let a = &mut m.arrivals[at];
        a.collectives += 1;
        a.waited_ns = a.waited_ns.saturating_add(w);
    }
    let a = &mut m.arrivals[last_at];
    a.last += 1;
    a.wait_caused_ns = a.wait_caused_ns.saturating_add(wait);
    m.matched.push(Matched {
        iteration: first.iteration.clone(),
        pg: first.pg.clone(),
        seq: first.seq,
        op: first.op.clone(),
        dtype: first.dtype.clone(),
        in_nelems: first.in_nelems,
        ranks: calls.len(),
        last_rank,
        collective_ns: last.dur_ns,
        wait_ns: wait,
        max_wait_ns: max_wait,
        end_spread_ns: end_spread,
    });
}

/// Above this median end spread, matched collectives are not one event seen from each rank.
const END_SPREAD_LIMIT_NS: i64 = 1_000_000;

/// A warning when the matched collectives' kernels do not end together: the ranks' windows
/// then cover different steps (a capture whose ranks opened their windows at different steps)
/// or their clocks differ (ranks on several hosts), and who arrived last cannot be trusted in
/// the first case.
pub fn spread_warning(m: &Matching) -> Option<String> {
    let mut v: Vec<i64> = m.matched.iter().map(|x| x.end_spread_ns).collect();
    let med = super::median_low(&mut v)?;
    (med > END_SPREAD_LIMIT_NS).then(|| {
        format!(
            "the matched collectives' kernels end {:.3} ms apart across ranks (median): the ranks' windows may cover different steps, or their clocks differ (several hosts); who arrived last is read from kernel lengths and holds only in the second case",
            med as f64 * 1e-6
        )
    })
}

/// The rank that caused the most wait in each iteration's matched collectives, with that
/// wait, ns: (iteration, rank, wait caused, all wait in the iteration), in iteration order.
pub fn by_iteration(m: &Matching) -> Vec<(Name, i64, i64, i64)> {
    let mut out: Vec<(Name, BTreeMap<i64, i64>, i64)> = Vec::new();
    for x in &m.matched {
        if out.last().is_none_or(|o| o.0 != x.iteration) {
            out.push((x.iteration.clone(), BTreeMap::new(), 0));
        }
        let o = out.last_mut().expect("pushed");
        let caused = o.1.entry(x.last_rank).or_insert(0);
        *caused = caused.saturating_add(x.wait_ns);
        o.2 = o.2.saturating_add(x.wait_ns);
    }
    out.into_iter()
        .filter_map(|(it, per, all)| {
            let (&rank, &wait) = per.iter().max_by_key(|&(r, w)| (*w, -r))?;
            Some((it, rank, wait, all))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(it: &str, seq: u32, op: &str, n: i64, dur_us: i64) -> Call {
        Call {
            iteration: it.into(),
            pg: "0".into(),
            seq,
            op: op.into(),
            dtype: "Float".into(),
            in_nelems: Some(n),
            out_nelems: Some(n),
            start_ns: 0,
            dur_ns: dur_us * 1000,
        }
    }

    /// Issue 80 (low): durations near i64::MAX in merged tables wrapped the waits' sums into
    /// negative waits; the sums saturate.
    #[test]
    fn huge_durations_never_make_a_negative_wait() {
        let mut big = call("ProfilerStep#3", 0, "allreduce", 8, 1);
        big.dur_ns = i64::MAX;
        let small = call("ProfilerStep#3", 0, "allreduce", 8, 1);
        let r0 = [big.clone()];
        let r1 = [big.clone()];
        let r2 = [small];
        let m = match_ranks(&[(0, &r0), (1, &r1), (2, &r2)]);
        assert_eq!(m.matched.len(), 1);
        assert!(
            m.matched[0].wait_ns > 0 && m.matched[0].end_spread_ns >= 0,
            "{:?}",
            m.matched[0]
        );
        assert!(by_iteration(&m)
            .iter()
            .all(|(_, _, caused, all)| *caused > 0 && *all > 0));
    }

    #[test]
    fn the_shortest_kernel_marks_the_last_arrival_and_the_others_waits() {
        // Rank 1 arrives last at both all-reduces of step 3 (its kernels are the
        // shortest); at step 4's, rank 0 does.
        let r0 = [
            call("ProfilerStep#3", 0, "allreduce", 21, 500),
            call("ProfilerStep#3", 1, "allreduce", 8, 300),
            call("ProfilerStep#4", 0, "allreduce", 21, 100),
        ];
        let r1 = [
            call("ProfilerStep#3", 0, "allreduce", 21, 100),
            call("ProfilerStep#3", 1, "allreduce", 8, 100),
            call("ProfilerStep#4", 0, "allreduce", 21, 150),
        ];
        let r2 = [
            call("ProfilerStep#3", 0, "allreduce", 21, 300),
            call("ProfilerStep#3", 1, "allreduce", 8, 120),
            call("ProfilerStep#4", 0, "allreduce", 21, 110),
        ];
        let m = match_ranks(&[(0, &r0), (1, &r1), (2, &r2)]);
        assert_eq!(m.matched.len(), 3);
        assert_eq!(
            m.matched.iter().map(|x| x.last_rank).collect::<Vec<_>>(),
            [1, 1, 0]
        );
        assert_eq!(m.matched[0].collective_ns, 100_000);
        assert_eq!(m.matched[0].wait_ns, (400 + 200) * 1000);
        assert_eq!(m.matched[0].max_wait_ns, 400_000);
        assert_eq!(m.arrivals[1].last, 2);
        assert_eq!(m.arrivals[1].wait_caused_ns, (600 + 220) * 1000);
        assert_eq!(m.arrivals[0].wait_caused_ns, (50 + 10) * 1000);
        assert_eq!(m.arrivals[0].waited_ns, (400 + 200) * 1000);
        assert_eq!(
            by_iteration(&m),
            [
                ("ProfilerStep#3".into(), 1, 820_000, 820_000),
                ("ProfilerStep#4".into(), 0, 60_000, 60_000)
            ]
        );
    }

    #[test]
    fn collectives_that_disagree_or_have_no_peer_are_not_matched() {
        let r0 = [
            call("ProfilerStep#3", 0, "allreduce", 21, 500),
            call("ProfilerStep#3", 1, "allreduce", 8, 300),
        ];
        let r1 = [call("ProfilerStep#3", 0, "broadcast", 21, 100)];
        let m = match_ranks(&[(0, &r0), (1, &r1)]);
        assert!(m.matched.is_empty());
        assert_eq!((m.unmatched, m.disagreeing), (1, 1));
        assert_eq!(
            m.disagreements,
            ["ProfilerStep#3 group 0 collective 0: rank 0 ran allreduce of 21 Float, rank 1 broadcast of 21 Float"]
        );
    }

    /// The grouping as first written (a map of per-collective lists, 4.5 GB for two ranks of
    /// 4M calls): (iteration, group, order, ranks) for every collective, in output order.
    fn grouped_by_a_map(ranks: &[(i64, &[Call])]) -> Vec<(String, String, u32, Vec<i64>)> {
        let mut order: BTreeMap<&str, usize> = BTreeMap::new();
        let mut groups: BTreeMap<(usize, &str, u32), Vec<i64>> = BTreeMap::new();
        for &(rank, calls) in ranks {
            for c in calls {
                let n = order.len();
                let pos = *order.entry(c.iteration.as_str()).or_insert(n);
                let key = (pos, c.pg.as_str(), c.seq);
                groups.entry(key).or_default().push(rank);
            }
        }
        let it = |pos| order.iter().find(|(_, &p)| p == pos).unwrap().0.to_string();
        groups
            .into_iter()
            .map(|((pos, pg, seq), r)| (it(pos), pg.to_string(), seq, r))
            .collect()
    }

    proptest::proptest! {
        /// Issue 80: grouping by one sorted list of keys finds the collectives, in the order
        /// and with the ranks, that the map of lists found; every call matched or counted.
        #[test]
        fn sorted_keys_group_as_the_map_of_lists_did(
            spec in proptest::collection::vec(
                proptest::collection::vec((0u8..4, 0u8..3, 0u32..4), 0..12), 1..5)
        ) {
            let pgs = ["0", "10", "2"];
            let ranks: Vec<(i64, Vec<Call>)> = spec
                .iter()
                .enumerate()
                .map(|(r, cs)| {
                    let calls = cs.iter().map(|&(it, pg, seq)| Call {
                        pg: pgs[pg as usize].into(),
                        ..call(&format!("ProfilerStep#{it}"), seq, "allreduce", 8, 1 + r as i64)
                    });
                    (r as i64 * 3, calls.collect())
                })
                .collect();
            let view: Vec<(i64, &[Call])> = ranks.iter().map(|(r, c)| (*r, c.as_slice())).collect();
            let m = match_ranks(&view);
            let want = grouped_by_a_map(&view);
            let got: Vec<_> = m.matched.iter().map(|x| (x.iteration.to_string(), x.pg.to_string(), x.seq, x.ranks)).collect();
            let matched: Vec<_> = want.iter().filter(|w| w.3.len() > 1).map(|w| (w.0.clone(), w.1.clone(), w.2, w.3.len())).collect();
            proptest::prop_assert_eq!(got, matched);
            proptest::prop_assert_eq!(m.unmatched, want.iter().filter(|w| w.3.len() == 1).count());
            let runs: usize = want.iter().filter(|w| w.3.len() > 1).map(|w| w.3.len()).sum();
            proptest::prop_assert_eq!(m.arrivals.iter().map(|a| a.collectives).sum::<usize>(), runs);
        }
    }

    /// Issue 80 (item 9): ranks.json listed every matched collective (1.3 GB for two ranks
    /// of 4M); it lists the first `MATCHED_IN_JSON` and says how many there are.
    #[test]
    fn ranks_json_lists_a_bounded_number_of_matched_collectives() {
        let n = MATCHED_IN_JSON as u32 + 7;
        let r0: Vec<Call> = (0..n)
            .map(|s| call("ProfilerStep#1", s, "allreduce", 8, 2))
            .collect();
        let r1: Vec<Call> = (0..n)
            .map(|s| call("ProfilerStep#1", s, "allreduce", 8, 1))
            .collect();
        let m = match_ranks(&[(0, &r0), (1, &r1)]);
        assert_eq!(m.matched.len(), n as usize);
        let v = serde_json::to_value(&m).unwrap();
        assert_eq!(v["matched"].as_array().unwrap().len(), MATCHED_IN_JSON);
        assert_eq!(v["matched_count"], n as usize);
    }

    /// Issue 80 (item 9): a name repeated by many calls is one allocation.
    #[test]
    fn names_are_shared_not_copied() {
        let mut names = Names::default();
        let (a, b) = (names.get("allreduce"), names.get("allreduce"));
        assert!(Arc::ptr_eq(&a.0, &b.0));
        assert!(!Arc::ptr_eq(&a.0, &names.get("broadcast").0));
    }
}
