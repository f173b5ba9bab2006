//! Finding the iterations of a trace (the windows that [`super::compute`] fills with nodes),
//! and telling a last step the program never finished.

use super::*;

/// An iteration's window: start and end (ns), and its label.
pub(super) type Window = (i64, i64, String);

/// The iteration windows: `ProfilerStep#N` ranges, else one per autograd backward pass (cut at
/// the next input copy, or at the host-only ops that build the batch just before it), else the
/// whole trace.
pub(super) fn find_iterations(
    t: &Trace,
    node_ops: &[OpId],
    is_bw: &dyn Fn(OpId) -> bool,
    has_htod: &dyn Fn(usize) -> bool,
    host_only: &dyn Fn(usize) -> bool,
    main: Option<ThreadId>,
) -> (Detection, Vec<Window>) {
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
        return (Detection::ProfilerStep, steps);
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
        return (Detection::WholeTrace, Vec::new());
    };
    if bw.is_empty() {
        return (
            Detection::WholeTrace,
            vec![(all_start, all_end + 1, "iteration 0".into())],
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
    let mut prev_end = all_start;
    for &(next_start, end) in &passes {
        let lo = main_nodes.partition_point(|m| m.0 < prev_end);
        let hi = main_nodes.partition_point(|m| m.0 < next_start);
        let gap = &main_nodes[lo..hi];
        // The batch is built on the host before it is copied (a libtorch DataLoader without
        // workers: select, slice, flip, stack on the main thread): the iteration begins with
        // the run of host-only nodes just before the copy.
        let cut = match gap.iter().position(|m| has_htod(m.2)) {
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
    let windows = bounds
        .windows(2)
        .enumerate()
        .map(|(i, b)| (b[0], b[1], format!("iteration {i}")))
        .collect();
    (Detection::BackwardCycle, windows)
}

/// Whether the last iteration is a step the program never finished: under half the median
/// node count of the others and no backward pass where they have one, or under a tenth of it.
pub(super) fn cut_short(iterations: &[Iteration], nodes: &[Vec<Node>]) -> bool {
    let n = iterations.len();
    if n < 2 {
        return false;
    }
    let mut counts: Vec<i64> = nodes[..n - 1].iter().map(|v| v.len() as i64).collect();
    let Some(median) = crate::analysis::median_low(&mut counts) else {
        return false;
    };
    let last = nodes[n - 1].len() as i64;
    let others_backward = iterations[..n - 1].iter().any(|i| i.backward.is_some());
    (iterations[n - 1].backward.is_none() && others_backward && last * 2 < median)
        || last * 10 < median
}
