//! The modules a plan can act on: every module enclosing a forward node, with the
//! events each action adds to each profiled iteration's measured memory, the time it adds,
//! and the blocks it drops; the "every block" class users would checkpoint by hand.

use super::*;
use crate::analysis::memory::Memory;
use crate::analysis::step::Step;

/// A module that can be planned: its forward nodes and what acting on it changes, per
/// iteration.
#[derive(Debug, Clone)]
pub(super) struct Candidate {
    pub(super) path: String,
    pub(super) instance: String,
    pub(super) class: String,
    pub(super) depth: usize,
    /// Per iteration (index into `Ctx::iters`): the events each action adds.
    pub(super) added: Vec<BTreeMap<Action, Vec<Added>>>,
    /// Activation bytes dropped (median over iterations).
    pub(super) dropped_bytes: i64,
    /// Blocks dropped, per iteration (for the never-twice check).
    pub(super) dropped_blocks: Vec<Vec<usize>>,
    /// Per iteration: the tensors a recompute of it keeps alive longer (its forward's inputs).
    pub(super) held: Vec<Vec<Held>>,
    /// Per iteration: the host and GPU work each action adds, where it runs.
    pub(super) work: Vec<BTreeMap<Action, Vec<Work>>>,
    /// Has modules below it.
    pub(super) composite: bool,
}

/// A block that checkpointing a module keeps alive past its measured free: non-reentrant
/// `torch.utils.checkpoint` holds the module's forward arguments until the module's backward
/// is done, so an input the rest of the model frees early (a LayerNorm's output that only a
/// cast read) lives on until then. Two modules holding one block hold it until the later of
/// their ends, never twice ([`Evaluator::added`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Held {
    pub(super) block: usize,
    /// Its measured free, ns.
    pub(super) from: i64,
    /// The module's last autograd node's end, ns.
    pub(super) until: i64,
    pub(super) bytes: i64,
}

pub(super) struct Iter {
    pub(super) label: String,
    pub(super) start: i64,
    pub(super) measured: Measured,
    /// Its launches, for the step model.
    pub(super) lane: Lane,
}

pub(super) fn depth_of(path: &str) -> usize {
    path.matches('/').count()
}

pub(super) fn under(module: &str, path: &str) -> bool {
    module == path
        || (module.len() > path.len()
            && module.starts_with(path)
            && module.as_bytes()[path.len()] == b'/')
}

pub(super) fn class_of(instance: &str) -> &str {
    match instance.rsplit_once('_') {
        Some((c, k)) if !c.is_empty() && k.chars().all(|x| x.is_ascii_digit()) => c,
        _ => instance,
    }
}

/// The class users would checkpoint "every block" of: among modules with modules below them,
/// the class with the most instances (two at least); ties go to the shallower, then by name.
pub(super) fn every_block_class(cands: &[Candidate]) -> Option<String> {
    let mut by_class: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for c in cands.iter().filter(|c| c.composite && c.depth > 0) {
        let e = by_class.entry(c.class.as_str()).or_insert((0, usize::MAX));
        e.0 += 1;
        e.1 = e.1.min(c.depth);
    }
    by_class
        .into_iter()
        .filter(|(_, (n, _))| *n >= 2)
        .max_by(|a, b| {
            a.1 .0
                .cmp(&b.1 .0)
                .then(b.1 .1.cmp(&a.1 .1))
                .then(b.0.cmp(a.0))
        })
        .map(|(c, _)| c.to_owned())
}

/// What acting on one call of a module changes in its iteration.
struct CallEffects {
    /// Events a recompute adds.
    rec: Vec<Added>,
    /// Events a swap adds.
    swp: Vec<Added>,
    /// Blocks dropped.
    dropped: Vec<usize>,
    /// Their bytes.
    bytes: i64,
    /// Tensors a recompute keeps alive longer.
    held: Vec<Held>,
    /// Work a recompute adds.
    rw: Vec<Work>,
    /// Work a swap adds.
    sw: Vec<Work>,
}

/// A module's forward and backward nodes in one iteration, split into calls: each run of
/// forward nodes with the backward nodes that follow it before the module's next forward
/// node. A backward node before any forward one (a straddling iteration) belongs to none.
fn calls(
    fwd: &[usize],
    bwd: &[usize],
    start: impl Fn(usize) -> i64,
) -> Vec<(Vec<usize>, Vec<usize>)> {
    let mut order: Vec<(i64, bool, usize)> = fwd
        .iter()
        .map(|&n| (start(n), false, n))
        .chain(bwd.iter().map(|&n| (start(n), true, n)))
        .collect();
    order.sort_unstable();
    let mut out: Vec<(Vec<usize>, Vec<usize>)> = Vec::new();
    let mut cur: (Vec<usize>, Vec<usize>) = (Vec::new(), Vec::new());
    for (_, backward, n) in order {
        if backward {
            if !cur.0.is_empty() {
                cur.1.push(n);
            }
        } else {
            if !cur.1.is_empty() {
                out.push(std::mem::take(&mut cur));
            }
            cur.0.push(n);
        }
    }
    if !cur.0.is_empty() {
        out.push(cur);
    }
    out
}

/// Every module enclosing a forward node, with the events each action adds per iteration.
pub(super) fn build_candidates(
    t: &Trace,
    a: &Analysis,
    ids: Option<&liveness::Identities>,
    iters: &[Iter],
    iter_index: &BTreeMap<u32, usize>,
    rates: &Rates,
) -> Vec<Candidate> {
    let Rates {
        cpu_scale,
        htod_gbps: htod,
        dtoh_gbps: dtoh,
        overheads: ov,
        ..
    } = *rates;
    let step = &a.step;
    let mem = &a.memory;
    // Module paths (and every prefix) of forward nodes.
    let mut paths: BTreeSet<String> = BTreeSet::new();
    for n in &step.nodes {
        if n.phase != Phase::Forward {
            continue;
        }
        let Some(m) = n.module else { continue };
        let full = t.kineto.str(m);
        let mut end = 0;
        for (i, ch) in full.char_indices() {
            if ch == '/' {
                paths.insert(full[..i].to_owned());
            }
            end = i + ch.len_utf8();
        }
        paths.insert(full[..end].to_owned());
    }
    let module_of = |ni: usize| step.nodes[ni].module.map(|m| t.kineto.str(m));
    // Blocks by the node that made them.
    let mut made_by: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for (bi, b) in mem.blocks.iter().enumerate() {
        if let Some(p) = b.producer {
            made_by.entry(p).or_default().push(bi);
        }
    }
    // Autograd nodes as they ran (`evaluate_function` ranges) by sequence number, and the
    // forward ops that have one, with their module.
    let mut eval_fns: rustc_hash::FxHashMap<i64, Vec<(i64, i64)>> = Default::default();
    let mut fwd_seq_ops: Vec<(i64, i64, crate::intern::StrId)> = Vec::new();
    for (oi, o) in t.kineto.ops.iter().enumerate() {
        let Some(seq) = o.seq else { continue };
        if t.kineto.str(o.name).starts_with(EVALUATE_FUNCTION) {
            eval_fns
                .entry(seq)
                .or_default()
                .push((o.start, o.start + o.dur));
        } else if let Some(m) = t.module[oi] {
            fwd_seq_ops.push((o.start, seq, m));
        }
    }
    // By start, so each module's forward span is a range of it.
    fwd_seq_ops.sort_unstable();
    let paths: Vec<String> = paths.into_iter().collect();
    let composite: BTreeSet<&str> = paths
        .iter()
        .filter_map(|p| p.rsplit_once('/').map(|(parent, _)| parent))
        .collect();

    let cands: Vec<Option<Candidate>> = paths
        .par_iter()
        .map(|path| {
            let mut added = vec![BTreeMap::new(); iters.len()];
            let mut dropped_per_iter: Vec<i64> = Vec::new();
            let mut dropped_blocks = vec![Vec::new(); iters.len()];
            let mut held = vec![Vec::new(); iters.len()];
            let mut work = vec![BTreeMap::new(); iters.len()];
            for it in &step.iterations {
                let Some(&k) = iter_index.get(&it.index) else {
                    continue;
                };
                let nodes = it.nodes.clone();
                let fwd: Vec<usize> = nodes
                    .clone()
                    .filter(|&ni| {
                        step.nodes[ni].phase == Phase::Forward
                            && !step.nodes[ni].recompute
                            && module_of(ni).is_some_and(|m| under(m, path))
                    })
                    .collect();
                let bwd: Vec<usize> = nodes
                    .clone()
                    .filter(|&ni| {
                        step.nodes[ni].phase == Phase::Backward
                            && module_of(ni).is_some_and(|m| under(m, path))
                    })
                    .collect();
                if fwd.is_empty() || bwd.is_empty() {
                    continue;
                }
                let op = |ni: usize| t.op(step.nodes[ni].op);
                // What acting on one call of the module changes: its forward nodes `fwd`
                // and the backward nodes `bwd` that undo them.
                let one_call = |fwd: &[usize], bwd: &[usize]| -> Option<CallEffects> {
                    let t0 = bwd.iter().map(|&ni| op(ni).start).min().expect("non-empty");
                    let fs = fwd.iter().map(|&ni| op(ni).start).min().expect("non-empty");
                    let fe = fwd.iter().map(|&ni| op(ni).end()).max().expect("non-empty");
                    let in_fwd: BTreeSet<usize> = fwd.iter().copied().collect();
                    let in_bwd: BTreeSet<usize> = bwd.iter().copied().collect();
                    // The module's autograd nodes as they ran: a saved tensor is released when its
                    // node is done, inside `evaluate_function` but after the ops under it.
                    // Every autograd node of the module's forward ops (by sequence number), with
                    // or without ops of its own under it (a view's backward has none).
                    let span = fwd_seq_ops.partition_point(|o| o.0 < fs)
                        ..fwd_seq_ops.partition_point(|o| o.0 <= fe);
                    let mut bw_spans: Vec<(i64, i64)> = fwd_seq_ops[span]
                        .iter()
                        .filter(|&&(_, _, m)| under(t.kineto.str(m), path))
                        .flat_map(|&(_, seq, _)| eval_fns.get(&seq).into_iter().flatten())
                        .filter(|&&(st, _)| st > fe && st <= it.end)
                        .copied()
                        .chain(bwd.iter().map(|&ni| {
                            let o = step.nodes[ni].op;
                            t.ancestors(o)
                                .find(|a| t.op_name(*a).starts_with(EVALUATE_FUNCTION))
                                .map_or((op(ni).start, op(ni).end()), |a| {
                                    (t.op(a).start, t.op(a).end())
                                })
                        }))
                        .collect();
                    bw_spans.sort_unstable();
                    bw_spans.dedup();
                    // The module's backward starts with its first autograd node: the recompute
                    // runs when that node unpacks what it saved.
                    let t0 = t0.min(bw_spans.first().map_or(t0, |s| s.0));
                    // Spans of several threads may overlap: any that started by `ts` may hold it.
                    let freed_by_module = |ts: i64| {
                        let i = bw_spans.partition_point(|s| s.0 <= ts);
                        bw_spans[..i].iter().any(|s| ts <= s.1)
                    };
                    // What its checkpoint frees.
                    let mut dropped: Vec<(usize, i64, i64)> = Vec::new(); // (block, forward free, first bw use)
                    for &p in fwd {
                        for &bi in made_by.get(&p).map(Vec::as_slice).unwrap_or(&[]) {
                            let b = &mem.blocks[bi];
                            if b.category != Category::Activation {
                                continue;
                            }
                            let Some(freed) = b.free.filter(|&f| freed_by_module(f)) else {
                                continue;
                            };
                            let (fw_free, bw_first) =
                                match ids.and_then(|i| i.readers(step, mem, bi)) {
                                    Some(r) => {
                                        let r: Vec<usize> = r.collect();
                                        if r.iter().any(|&ni| {
                                            step.nodes[ni].phase == Phase::Backward
                                                && !in_bwd.contains(&ni)
                                        }) {
                                            continue; // also saved outside the module
                                        }
                                        let fw_last = r
                                            .iter()
                                            .filter(|&&ni| step.nodes[ni].phase == Phase::Forward)
                                            .map(|&ni| op(ni).end())
                                            .max()
                                            .unwrap_or(b.alloc);
                                        let bw_first = r
                                            .iter()
                                            .filter(|&&ni| in_bwd.contains(&ni))
                                            .map(|&ni| op(ni).start)
                                            .min()
                                            .unwrap_or(freed);
                                        (fw_last.max(b.alloc), bw_first)
                                    }
                                    None => (fe.max(b.alloc), t0),
                                };
                            if fw_free >= t0 {
                                continue;
                            }
                            dropped.push((bi, fw_free, bw_first.max(t0)));
                        }
                    }
                    if dropped.is_empty() {
                        return None;
                    }
                    let held = ids.map_or_else(Vec::new, |ids| {
                        held_inputs(step, mem, ids, fwd, (it.start, fs), &bw_spans)
                    });
                    let dropped_set: BTreeSet<usize> = dropped.iter().map(|d| d.0).collect();
                    let mut rec: Vec<Added> = Vec::new();
                    let mut swp: Vec<Added> = Vec::new();
                    for &(bi, fw_free, bw_first) in &dropped {
                        let b = &mem.blocks[bi];
                        let drop = Added {
                            key: Key {
                                ts: fw_free,
                                tie: 2,
                                seq: bi as u32,
                            },
                            bytes: -b.size,
                            category: b.category,
                        };
                        rec.push(drop);
                        swp.push(drop);
                        swp.push(Added {
                            key: Key {
                                ts: bw_first,
                                tie: 0,
                                seq: bi as u32,
                            },
                            bytes: b.size,
                            category: b.category,
                        });
                    }
                    // The recompute: the module's forward events again at t0, the dropped blocks
                    // kept, its temporaries freed where they were, the rest dropped at the end.
                    let lo = t.memory.partition_point(|m| m.ts < fs);
                    let hi = t.memory.partition_point(|m| m.ts <= fe);
                    let mut live: BTreeMap<usize, i64> = BTreeMap::new();
                    let mut seq = 0u32;
                    // The replayed events all fall at t0, before the measured ones there, in order.
                    let replay = |rec: &mut Vec<Added>, seq: &mut u32, bytes: i64, category| {
                        rec.push(Added {
                            key: Key {
                                ts: t0,
                                tie: 0,
                                seq: *seq,
                            },
                            bytes,
                            category,
                        });
                        *seq += 1;
                    };
                    for ei in lo..hi {
                        let Some(bi) = mem.event_block(ei) else {
                            continue;
                        };
                        let b = &mem.blocks[bi];
                        let e = &t.memory[ei];
                        if e.bytes > 0 {
                            if b.producer.is_some_and(|p| in_fwd.contains(&p)) {
                                replay(&mut rec, &mut seq, b.size, b.category);
                                if !dropped_set.contains(&bi) {
                                    live.insert(bi, b.size);
                                }
                            }
                        } else if let Some(sz) = live.remove(&bi) {
                            replay(&mut rec, &mut seq, -sz, b.category);
                        }
                    }
                    for (bi, sz) in live {
                        replay(&mut rec, &mut seq, -sz, mem.blocks[bi].category);
                    }
                    let bytes: i64 = dropped.iter().map(|d| mem.blocks[d.0].size).sum();
                    // Its forward again (the ops' host time, scaled to the program's own speed, and
                    // their GPU time) when its backward begins, and the checkpoint's own host work
                    // per call and per op, half in the forward and half in the backward (about what
                    // `capture/corpus/step_phases.py` measured on the GPT example's Blocks); the swap
                    // hooks' host work split the same way, each block's copy out queued as its
                    // producer ends and its copy back at its first backward reader.
                    let ops = fwd.len() as f64;
                    let replay_host: f64 = fwd
                        .iter()
                        .map(|&ni| step.nodes[ni].cpu_time as f64 * cpu_scale * 1e-9)
                        .sum();
                    let replay_gpu: f64 = fwd
                        .iter()
                        .map(|&ni| step.nodes[ni].gpu_time as f64 * 1e-9)
                        .sum();
                    let host = |ts: i64, host_s: f64| Work {
                        ts,
                        host_s,
                        gpu_s: 0.0,
                    };
                    let own = ov.recompute_call_s + ov.recompute_per_op_s * ops;
                    let rw = vec![
                        host(fs, own / 2.0),
                        Work {
                            ts: t0,
                            host_s: own / 2.0 + replay_host,
                            gpu_s: replay_gpu,
                        },
                    ];
                    let hooks = ov.swap_call_s + ov.swap_per_op_s * ops;
                    let mut sw = vec![host(fs, hooks / 2.0), host(t0, hooks / 2.0)];
                    for &(bi, _, bw_first) in &dropped {
                        let b = &mem.blocks[bi];
                        let made = b.producer.map_or(b.alloc, |p| op(p).end());
                        sw.push(Work {
                            ts: made,
                            host_s: 0.0,
                            gpu_s: b.size as f64 / (dtoh * 1e9),
                        });
                        sw.push(Work {
                            ts: bw_first,
                            host_s: 0.0,
                            gpu_s: b.size as f64 / (htod * 1e9),
                        });
                    }
                    Some(CallEffects {
                        rec,
                        swp,
                        dropped: dropped.iter().map(|d| d.0).collect(),
                        bytes,
                        held,
                        rw,
                        sw,
                    })
                };
                // Each call on its own: gradient accumulation runs the module once per
                // micro-batch (forward, backward, forward, ...); taken as one call, its
                // activations were dropped after the last micro-batch's forward and brought
                // back at the first one's backward, which raised the predicted peak (HF
                // Trainer, GPT-2 with accumulation 4: every block "added" 3 MiB; measured
                // -14.7%).
                let mut effects: Vec<CallEffects> = calls(&fwd, &bwd, |ni| op(ni).start)
                    .iter()
                    .filter_map(|(f, b)| one_call(f, b))
                    .collect();
                if effects.is_empty() {
                    continue;
                }
                let mut rec = Vec::new();
                let mut swp = Vec::new();
                let mut rw = Vec::new();
                let mut sw = Vec::new();
                let mut bytes = 0;
                for e in &mut effects {
                    rec.append(&mut e.rec);
                    swp.append(&mut e.swp);
                    rw.append(&mut e.rw);
                    sw.append(&mut e.sw);
                    dropped_blocks[k].append(&mut e.dropped);
                    held[k].append(&mut e.held);
                    bytes += e.bytes;
                }
                rec.sort_by_key(|x| x.key);
                swp.sort_by_key(|x| x.key);
                rw.sort_by_key(|x| x.ts);
                sw.sort_by_key(|x| x.ts);
                added[k].insert(Action::Recompute, rec);
                added[k].insert(Action::Swap, swp);
                work[k].insert(Action::Recompute, rw);
                work[k].insert(Action::Swap, sw);
                dropped_per_iter.push(bytes);
            }
            if dropped_per_iter.is_empty() {
                return None;
            }
            let mut dp: Vec<f64> = dropped_per_iter.iter().map(|&b| b as f64).collect();
            let instance = path.rsplit('/').next().unwrap_or(path).to_owned();
            Some(Candidate {
                class: class_of(&instance).to_owned(),
                instance,
                depth: depth_of(path),
                path: path.clone(),
                added,
                dropped_bytes: median(&mut dp).unwrap_or(0.0) as i64,
                dropped_blocks,
                held,
                work,
                composite: composite.contains(path.as_str()),
            })
        })
        .collect();
    cands.into_iter().flatten().collect()
}

/// What a recompute of the module whose forward nodes are `fwd` keeps alive longer: the
/// blocks its forward reads that were made earlier in the iteration (`start`, before the
/// module's forward began at `fs`) and freed before the module's backward (`bw_spans`, its
/// autograd nodes as they ran) ends. Parameters, gradients, optimizer state and workspaces
/// outlive the step anyway.
fn held_inputs(
    step: &Step,
    mem: &Memory,
    ids: &liveness::Identities,
    fwd: &[usize],
    (start, fs): (i64, i64),
    bw_spans: &[(i64, i64)],
) -> Vec<Held> {
    let Some(until) = bw_spans.iter().map(|s| s.1).max() else {
        return Vec::new();
    };
    let mut held: BTreeMap<usize, Held> = BTreeMap::new();
    for &ni in fwd {
        for &s in &ids.uses.reads[ni] {
            let Some(bi) = ids.block_read(step, mem, ni, s) else {
                continue;
            };
            let b = &mem.blocks[bi];
            let kept = matches!(
                b.category,
                Category::Activation | Category::Temporary | Category::Input
            );
            match b.free {
                Some(from)
                    if kept && start <= b.alloc && b.alloc < fs && fs <= from && from < until =>
                {
                    held.entry(bi).or_insert(Held {
                        block: bi,
                        from,
                        until,
                        bytes: b.size,
                    });
                }
                _ => {}
            }
        }
    }
    held.into_values().collect()
}

/// Blocks the decisions drop, per iteration: each at most once (a plan never counts a tensor
/// twice; nested modules are never both chosen).
pub(super) fn dropped_twice(cands: &[Candidate], chosen: &[Choice]) -> bool {
    let iters = cands.first().map_or(0, |c| c.dropped_blocks.len());
    (0..iters).any(|k| {
        let mut seen = BTreeSet::new();
        chosen
            .iter()
            .flat_map(|&(c, _)| cands[c].dropped_blocks[k].iter())
            .any(|b| !seen.insert(*b))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_module_run_once_per_micro_batch_is_split_into_its_calls() {
        // Gradient accumulation: forward (nodes 1, 2), backward (3), forward (4), backward
        // (5, 6); a backward node before any forward (0) belongs to no call.
        let start = |n: usize| [5, 10, 11, 20, 30, 40, 41][n];
        let c = calls(&[1, 2, 4], &[0, 3, 5, 6], start);
        assert_eq!(c, vec![(vec![1, 2], vec![3]), (vec![4], vec![5, 6])]);
        // One forward and one backward: one call.
        assert_eq!(calls(&[1, 2], &[3], start), vec![(vec![1, 2], vec![3])]);
    }
}
