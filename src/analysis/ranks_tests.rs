//! Tests of `ranks.rs`.

use super::*;

fn rank(rank: i64, comm_us: i64, nodes: &[(&str, f64)]) -> RankResult {
    RankResult {
        rank,
        trace: format!("trace_rank{rank}.json"),
        iterations: 3,
        step_time_s: 0.01,
        step_time_instrumented_s: 0.012,
        step_times_s: vec![0.01, 0.011, 0.01],
        profiler_cost_s: None,
        own_optimizer_step_s: None,
        collective_overlap: Default::default(),
        gpu: Temporal {
            communication_ns: comm_us * 1000,
            ..Temporal::default()
        },
        peak_allocated_bytes: None,
        collectives: Vec::new(),
        nodes: nodes
            .iter()
            .map(|(n, t)| (n.to_string(), *t, *t / 2.0))
            .collect(),
    }
}

#[test]
fn the_rank_with_least_communication_is_the_straggler_and_its_slow_node_is_named() {
    // Rank 2 computes longer in `conv`, so ranks 0, 1 and 3 wait in NCCL.
    let nodes = |conv: f64| vec![("conv", conv), ("relu", 0.001), ("fc", 0.002)];
    let r = combine(
        vec![
            rank(3, 900, &nodes(0.004)),
            rank(0, 1000, &nodes(0.004)),
            rank(2, 100, &nodes(0.0049)),
            rank(1, 950, &nodes(0.004)),
        ],
        5,
    );
    assert_eq!(
        r.ranks.iter().map(|x| x.rank).collect::<Vec<_>>(),
        [0, 1, 2, 3]
    );
    let s = r.straggler.expect("a straggler");
    assert_eq!(s.rank, 2);
    assert!((s.wait_caused_s - (900.0 + 850.0 + 800.0) * 1e-6).abs() < 1e-12);
    // conv on the GPU first (0.9 ms more), then on the host (0.45 ms more).
    assert_eq!(s.slower_nodes.len(), 2);
    assert_eq!(
        (s.slower_nodes[0].node.as_str(), s.slower_nodes[0].time),
        ("conv", NodeTime::Gpu)
    );
    assert_eq!(s.slower_nodes[1].time, NodeTime::Cpu);
    assert!((s.slower_nodes[0].others_s - 0.004).abs() < 1e-12);
}

/// The frameworks issue: on a short host-bound step the profiler alone makes one rank
/// late (FSDP2's example). A straggler whose nodes explain little of the wait it causes
/// drifted; one whose nodes' extra time is within what the profiler cost it beyond the
/// other ranks is the profiler's; beyond both, it stands, with both figures.
#[test]
fn a_lead_the_profiler_can_make_names_no_straggler() {
    let n = [("a", 0.001)];
    // Rank 1 caused 2.7 ms of waits over 3 iterations: 0.9 ms per profiled step, all of
    // it in its slower node `a`.
    let slow = [("a", 0.0019)];
    let with_cost = |cost: f64| {
        let mut v = vec![rank(0, 3000, &n), rank(1, 300, &slow)];
        v[0].profiler_cost_s = Some(0.001);
        v[1].profiler_cost_s = Some(0.001 + cost);
        combine(v, 5)
    };
    let noise = with_cost(0.0011);
    assert_eq!(
        noise.no_straggler_reason.unwrap(),
        "no straggler beyond profiler noise: rank 1 made each other rank wait 0.900 ms per profiled step, but its nodes took only 0.900 ms per step longer than the other ranks', within the 1.100 ms more the profiler cost it per step than the other ranks (its step under the profiler less its own, against theirs)"
    );
    // The same, with rank 1's own optimizer step 3x the other's with nothing recorded
    // (its host is slower in the program itself): a straggler, whatever the profiler cost.
    let mut v = vec![rank(0, 3000, &n), rank(1, 300, &slow)];
    v[0].profiler_cost_s = Some(0.001);
    v[1].profiler_cost_s = Some(0.0021);
    v[0].own_optimizer_step_s = Some(0.010);
    v[1].own_optimizer_step_s = Some(0.030);
    let host = combine(v, 5)
        .straggler
        .expect("a host slower with nothing recorded");
    assert_eq!((host.rank, host.own_host_ratio), (1, Some(3.0)));
    let real = with_cost(0.0005)
        .straggler
        .expect("a straggler beyond the noise");
    assert_eq!(real.rank, 1);
    assert!((real.wait_per_step_s - 0.0009).abs() < 1e-12);
    assert!((real.explained_per_step_s - 0.0009).abs() < 1e-12);
    assert!((real.profiler_skew_s.unwrap() - 0.0005).abs() < 1e-12);
    // No rank's own step time: the straggler stands, with no bound.
    let unknown = combine(vec![rank(0, 3000, &n), rank(1, 300, &slow)], 5);
    assert_eq!(
        unknown.straggler.expect("a straggler").profiler_skew_s,
        None
    );
    // Late without being slower: its nodes explain under a quarter of the wait.
    let drift = combine(vec![rank(0, 3000, &n), rank(1, 300, &[("a", 0.0012)])], 5);
    assert_eq!(
        drift.no_straggler_reason.unwrap(),
        "no straggler beyond profiler noise: rank 1 made each other rank wait 0.900 ms per profiled step, but its nodes took only 0.200 ms per step longer than the other ranks' (22% of the wait): it arrived late without being slower at its work (its host drifted behind, as the profiler's uneven cost makes it)"
    );
    // The same late rank whose own optimizer step, with nothing recorded, is 5x the others':
    // its host is slow in the program itself, so it is named although its profiled nodes
    // explain little of the wait (FSDP2 on four ranks, rank 1's host slowed on purpose).
    let mut v = vec![rank(0, 3000, &n), rank(1, 300, &[("a", 0.0012)])];
    v[0].own_optimizer_step_s = Some(0.005);
    v[1].own_optimizer_step_s = Some(0.025);
    let slowed = combine(v, 5)
        .straggler
        .expect("a host slower with nothing recorded");
    assert_eq!((slowed.rank, slowed.own_host_ratio), (1, Some(5.0)));
    // 1.6x is the spread of ranks' own optimizer steps with no rank slowed (FSDP2's example on
    // four H200s: 7.6 ms against a median of 4.8 ms): the drift verdict stands.
    let mut v = vec![rank(0, 3000, &n), rank(1, 300, &[("a", 0.0012)])];
    v[0].own_optimizer_step_s = Some(0.0048);
    v[1].own_optimizer_step_s = Some(0.0076);
    let spread = combine(v, 5);
    assert!(spread.straggler.is_none(), "{:?}", spread.straggler);
    assert!(spread
        .no_straggler_reason
        .unwrap()
        .contains("drifted behind"));
}

#[test]
fn even_ranks_or_no_communication_name_no_straggler() {
    let n = [("a", 0.001)];
    let even = combine(vec![rank(0, 1000, &n), rank(1, 990, &n)], 5);
    assert!(even.straggler.is_none());
    assert!(even.no_straggler_reason.unwrap().contains("even"));
    let tie = combine(
        vec![rank(0, 1000, &n), rank(1, 100, &n), rank(2, 101, &n)],
        5,
    );
    assert_eq!(
        tie.no_straggler_reason.unwrap(),
        "2 ranks tie for the least communication time (ranks 1, 2): no single straggler"
    );
    let none = combine(vec![rank(0, 0, &n), rank(1, 0, &n)], 5);
    assert!(none
        .no_straggler_reason
        .unwrap()
        .contains("no communication"));
}
