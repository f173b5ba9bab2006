//! Finding the iterations of a trace (the windows that [`super::compute`] fills with nodes),
//! and telling a last step the program never finished.

use super::*;

/// An iteration's window: start and end (ns), and its label.
pub(super) type Window = (i64, i64, String);

/// The iteration windows: `ProfilerStep#N` ranges, else one per step of autograd backward
/// passes (`passes_per_step` of them, one where capture did not count them; cut at the next
/// input copy, or at the host-only ops that build the batch just before it), else the whole
/// trace; and how many backward passes before the first window were left out (the end of a
/// step the window caught only in part).
pub(super) fn find_iterations(
    t: &Trace,
    node_ops: &[OpId],
    is_bw: &dyn Fn(OpId) -> bool,
    has_htod: &dyn Fn(usize) -> bool,
    host_only: &dyn Fn(usize) -> bool,
    main: Option<ThreadId>,
    passes_per_step: Option<usize>,
) -> (Detection, Vec<Window>, usize) {
    let mut steps: Vec<Window> = t
        .kineto
        .ops
        .iter()
        .filter(|o| {
            o.kind == OpKind::Annotation && t.kineto.str(o.name).starts_with("ProfilerStep#")
        })
        .map(|o| (o.start, o.end(), t.kineto.str(o.name).to_owned()))
        .collect();
    if !steps.is_empty() {
        steps.sort_by_key(|w| w.0);
        return (Detection::ProfilerStep, steps, 0);
    }
    // Main-thread nodes that are not backward, in time order, with their node index.
    let mut main_nodes: Vec<(i64, i64, usize)> = node_ops
        .iter()
        .enumerate()
        .filter(|(_, &o)| Some(t.op(o).thread) == main && !is_bw(o))
        .map(|(i, &o)| (t.op(o).start, t.op(o).end(), i))
        .collect();
    main_nodes.sort();
    let mut bw: Vec<(i64, i64)> = node_ops
        .iter()
        .filter(|&&o| is_bw(o))
        .map(|&o| (t.op(o).start, t.op(o).end()))
        .collect();
    bw.sort();
    let all_start = node_ops.iter().map(|&o| t.op(o).start).min();
    let all_end = node_ops.iter().map(|&o| t.op(o).end()).max();
    let (Some(all_start), Some(all_end)) = (all_start, all_end) else {
        return (Detection::WholeTrace, Vec::new(), 0);
    };
    if bw.is_empty() {
        return (
            Detection::WholeTrace,
            vec![(all_start, all_end + 1, "iteration 0".into())],
            0,
        );
    }
    // Backward passes: runs of backward nodes with no main-thread node starting in between.
    let mut passes: Vec<(i64, i64)> = Vec::new();
    for &(s, e) in &bw {
        if let Some(last) = passes.last_mut() {
            let lo = main_nodes.partition_point(|m| m.0 < last.1);
            let interrupted = main_nodes.get(lo).is_some_and(|m| m.0 < s);
            if !interrupted {
                last.1 = last.1.max(e);
                continue;
            }
        }
        passes.push((s, e));
    }
    // Cut before pass k: the first input copy after pass k-1 (or the trace start), else the
    // first main-thread op with an autograd sequence number, else pass k's start. What comes
    // before the first cut is the tail of an iteration the profiler did not see whole.
    let mut bounds = Vec::with_capacity(passes.len() + 1);
    let mut copy_before = Vec::with_capacity(passes.len());
    let mut prev_end = all_start;
    for &(next_start, end) in &passes {
        let lo = main_nodes.partition_point(|m| m.0 < prev_end);
        let hi = main_nodes.partition_point(|m| m.0 < next_start);
        let gap = &main_nodes[lo..hi];
        // The batch is built on the host before it is copied (a libtorch DataLoader without
        // workers: select, slice, flip, stack on the main thread): the iteration begins with
        // the run of host-only nodes just before the copy.
        let copy = gap.iter().position(|m| has_htod(m.2));
        copy_before.push(copy.is_some());
        let cut = match copy {
            Some(k) => {
                let mut first = k;
                while first > 0 && host_only(gap[first - 1].2) {
                    first -= 1;
                }
                Some(gap[first].0)
            }
            None => gap
                .iter()
                .find(|m| t.op(node_ops[m.2]).seq.is_some())
                .map(|m| m.0),
        }
        .unwrap_or(next_start);
        bounds.push(cut);
        prev_end = end;
    }
    bounds.push(all_end + 1);
    let (first, step_bounds) = step_bounds(&bounds, &copy_before, passes_per_step.unwrap_or(1));
    let windows = step_bounds
        .windows(2)
        .enumerate()
        .map(|(i, b)| (b[0], b[1], format!("iteration {i}")))
        .collect();
    (Detection::BackwardCycle, windows, first)
}

/// The steps' bounds from the cuts before each backward pass (`bounds`: one per pass, then the
/// trace's end) when a step holds `k` passes (capture counted them: a GAN's discriminator and
/// generator passes, several losses): every `k` passes are one step, the first of them the
/// pass an input copy precedes most often in the same place of the cycle (else the first
/// pass). Passes before the first such pass belong to a step the window caught the end of,
/// and are left out; how many is returned beside the bounds.
pub(super) fn step_bounds(bounds: &[i64], copy_before: &[bool], k: usize) -> (usize, Vec<i64>) {
    let n = copy_before.len();
    if k <= 1 || n < k {
        return (0, bounds.to_vec());
    }
    let copies_at = |o: usize| (o..n).step_by(k).filter(|&p| copy_before[p]).count();
    let first = (0..k)
        .max_by_key(|&o| (copies_at(o), std::cmp::Reverse(o)))
        .unwrap_or(0);
    let mut out: Vec<i64> = (first..n).step_by(k).map(|p| bounds[p]).collect();
    out.push(bounds[n]);
    (first, out)
}

/// Why the last iteration is a step the window cut (the program ended inside it, or the
/// profiler stopped before it finished), if it is: it lacks a phase of forward, backward and
/// optimizer that every other iteration has (a libtorch window that ends after a backward
/// pass, before the optimizer; a ProfilerStep range the program ended inside, which has no
/// backward pass), or it holds under a tenth of the others' median node count.
pub(super) fn cut_short(nodes: &[Vec<Node>]) -> Option<String> {
    let n = nodes.len();
    if n < 2 {
        return None;
    }
    const CORE: [Phase; 3] = [Phase::Forward, Phase::Backward, Phase::Optimizer];
    let has = |v: &[Node], p: Phase| v.iter().any(|x| x.phase == p);
    let (others, last) = (&nodes[..n - 1], &nodes[n - 1]);
    let missing: Vec<&str> = CORE
        .iter()
        .filter(|&&p| others.iter().all(|v| has(v, p)) && !has(last, p))
        .map(|p| p.as_str())
        .collect();
    let mut counts: Vec<i64> = others.iter().map(|v| v.len() as i64).collect();
    let median = crate::analysis::median_low(&mut counts)?;
    let len = last.len() as i64;
    if !missing.is_empty() {
        Some(format!(
            "no {} work where every other iteration has it",
            missing.join(" or ")
        ))
    } else if len * 10 < median {
        Some(format!("{len} node(s) against a median of {median}"))
    } else {
        None
    }
}
