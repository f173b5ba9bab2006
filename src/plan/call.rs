//! One call of a module, planned: what dropping its activations after its forward and
//! bringing them back at its backward (recompute or swap) changes in its iteration. A module
//! that runs several times an iteration (once per micro-batch) is planned call by call.

use std::collections::{BTreeMap, BTreeSet};

use super::queue::Work;
use super::sim::{Added, Key};
use super::under;
use super::Overheads;
use crate::analysis::liveness;
use crate::analysis::memory::{Category, Memory};
use crate::analysis::step::{Phase, Step};
use crate::model::{Trace, EVALUATE_FUNCTION};

/// What acting on one call of a module changes in its iteration.
pub(super) struct CallEffects {
    /// Events a recompute adds.
    pub(super) rec: Vec<Added>,
    /// Events a swap adds.
    pub(super) swp: Vec<Added>,
    /// Blocks dropped.
    pub(super) dropped: Vec<usize>,
    /// Their bytes.
    pub(super) bytes: i64,
    /// Tensors a recompute keeps alive longer.
    pub(super) held: Vec<Held>,
    /// Work a recompute adds.
    pub(super) rw: Vec<Work>,
    /// Work a swap adds.
    pub(super) sw: Vec<Work>,
}

/// A module's forward and backward nodes in one iteration, split into calls: each run of
/// forward nodes with the backward nodes that follow it before the module's next forward
/// node. A backward node before any forward one (a straddling iteration) belongs to none.
pub(super) fn calls(
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

/// Autograd nodes as they ran (`evaluate_function` ranges: start, end), by sequence number.
pub(super) type EvalFns = rustc_hash::FxHashMap<i64, Vec<(i64, i64)>>;

/// A forward op with a sequence number: its start, the number and its module.
pub(super) type FwdSeqOp = (i64, i64, crate::intern::StrId);

/// What every module's candidate reads: the run's tables and the lookups built once for all.
#[derive(Clone, Copy)]
pub(super) struct Ctx<'a> {
    pub(super) t: &'a Trace,
    pub(super) step: &'a crate::analysis::step::Step,
    pub(super) mem: &'a Memory,
    pub(super) ids: Option<&'a liveness::Identities>,
    /// Blocks by the node that made them.
    pub(super) made_by: &'a BTreeMap<usize, Vec<usize>>,
    /// Autograd nodes as they ran (`evaluate_function` ranges) by sequence number.
    pub(super) eval_fns: &'a EvalFns,
    /// Forward ops with a sequence number, with their module, by start.
    pub(super) fwd_seq_ops: &'a [FwdSeqOp],
    /// Parameters' casts autocast keeps until the forward pass ends ([`super::autocast`]).
    pub(super) autocast: &'a rustc_hash::FxHashSet<usize>,
    /// Starts of the backward nodes, sorted.
    pub(super) bwd_starts: &'a [i64],
    /// Host synchronisations by thread ([`Trace::host_syncs`]).
    pub(super) syncs: &'a [(crate::model::kineto::ThreadId, i64)],
    /// Profiled host time of the forward's ops to the program's own (a recompute runs them
    /// again).
    pub(super) forward_scale: f64,
    pub(super) htod: f64,
    pub(super) dtoh: f64,
    pub(super) ov: Overheads,
}

/// What acting on one call of the module at `path` changes in iteration `it`: its forward
/// nodes `fwd` and the backward nodes `bwd` that undo them.
pub(super) fn one_call(
    cx: &Ctx<'_>,
    path: &str,
    it: &crate::analysis::step::Iteration,
    fwd: &[usize],
    bwd: &[usize],
) -> Option<CallEffects> {
    let (t, step, mem) = (cx.t, cx.step, cx.mem);
    let op = |ni: usize| t.op(step.nodes[ni].op);
    let t0 = bwd.iter().map(|&ni| op(ni).start).min().expect("non-empty");
    let fs = fwd.iter().map(|&ni| op(ni).start).min().expect("non-empty");
    let fe = fwd.iter().map(|&ni| op(ni).end()).max().expect("non-empty");
    let bw_spans = backward_spans(cx, path, it, (fs, fe), bwd);
    // The module's backward starts with its first autograd node: the recompute
    // runs when that node unpacks what it saved.
    let t0 = t0.min(bw_spans.first().map_or(t0, |s| s.0));
    let dropped = dropped_blocks(cx, fwd, bwd, &bw_spans, fe, t0);
    if dropped.is_empty() {
        return None;
    }
    let held = cx.ids.map_or_else(Vec::new, |ids| {
        held_inputs(step, mem, ids, fwd, (it.start, fs), &bw_spans)
    });
    let (rec, swp) = added_events(cx, fwd, &dropped, (fs, fe), t0);
    let (rw, sw) = added_work(cx, fwd, &dropped, fs, t0);
    Some(CallEffects {
        rec,
        swp,
        dropped: dropped.iter().map(|d| d.block).collect(),
        bytes: dropped.iter().map(|d| mem.blocks[d.block].size).sum(),
        held,
        rw,
        sw,
    })
}

/// The module's autograd nodes as they ran, by start: a saved tensor is released when its
/// node is done, inside `evaluate_function` but after the ops under it. Every autograd node
/// of the module's forward ops (by sequence number; forward from `fs` to `fe`), with or
/// without ops of its own under it (a view's backward has none), and those of `bwd`.
fn backward_spans(
    cx: &Ctx<'_>,
    path: &str,
    it: &crate::analysis::step::Iteration,
    (fs, fe): (i64, i64),
    bwd: &[usize],
) -> Vec<(i64, i64)> {
    let (t, step) = (cx.t, cx.step);
    let ops = cx.fwd_seq_ops;
    let span = ops.partition_point(|o| o.0 < fs)..ops.partition_point(|o| o.0 <= fe);
    let mut bw_spans: Vec<(i64, i64)> = ops[span]
        .iter()
        .filter(|&&(_, _, m)| under(t.kineto.str(m), path))
        .flat_map(|&(_, seq, _)| cx.eval_fns.get(&seq).into_iter().flatten())
        .filter(|&&(st, _)| st > fe && st <= it.end)
        .copied()
        .chain(bwd.iter().map(|&ni| {
            let o = step.nodes[ni].op;
            let own = t.op(o);
            t.ancestors(o)
                .find(|a| t.op_name(*a).starts_with(EVALUATE_FUNCTION))
                .map_or((own.start, own.end()), |a| (t.op(a).start, t.op(a).end()))
        }))
        .collect();
    bw_spans.sort_unstable();
    bw_spans.dedup();
    bw_spans
}

/// A block a checkpoint or a swap of the call frees after the forward: when the forward is
/// done with it, its first backward use, and the end of its last backward use (where the
/// readers are known).
#[derive(Debug, Clone, Copy)]
pub(super) struct Dropped {
    pub(super) block: usize,
    pub(super) fw_free: i64,
    pub(super) bw_first: i64,
    pub(super) bw_last: Option<i64>,
}

/// The activations a checkpoint of the call frees ([`Dropped`]): blocks the call's forward
/// made, freed by the module's own backward (`bw_spans`), read by no backward outside it,
/// and done with before `t0`.
fn dropped_blocks(
    cx: &Ctx<'_>,
    fwd: &[usize],
    bwd: &[usize],
    bw_spans: &[(i64, i64)],
    fe: i64,
    t0: i64,
) -> Vec<Dropped> {
    let (t, step, mem) = (cx.t, cx.step, cx.mem);
    let op = |ni: usize| t.op(step.nodes[ni].op);
    let in_bwd: BTreeSet<usize> = bwd.iter().copied().collect();
    // Spans of several threads may overlap: any that started by `ts` may hold it.
    let freed_by_module = |ts: i64| {
        let i = bw_spans.partition_point(|s| s.0 <= ts);
        bw_spans[..i].iter().any(|s| ts <= s.1)
    };
    let mut dropped = Vec::new();
    for &p in fwd {
        for &bi in cx.made_by.get(&p).map(Vec::as_slice).unwrap_or(&[]) {
            let b = &mem.blocks[bi];
            if b.category != Category::Activation {
                continue;
            }
            let Some(freed) = b.free.filter(|&f| freed_by_module(f)) else {
                continue;
            };
            let (fw_free, bw_first, bw_last) = match cx.ids.and_then(|i| i.readers(step, mem, bi)) {
                Some(r) => {
                    let r: Vec<usize> = r.collect();
                    if r.iter()
                        .any(|&ni| step.nodes[ni].phase == Phase::Backward && !in_bwd.contains(&ni))
                    {
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
                    let bw_last = r
                        .iter()
                        .filter(|&&ni| in_bwd.contains(&ni))
                        .map(|&ni| op(ni).end())
                        .max();
                    (fw_last.max(b.alloc), bw_first, bw_last)
                }
                None => (fe.max(b.alloc), t0, None),
            };
            // A parameter's cast lives in autocast's cache until the region exits: at the
            // end of this call's forward pass, before its micro-batch's backward starts.
            let fw_free = if cx.autocast.contains(&bi) {
                let i = cx.bwd_starts.partition_point(|&s| s <= fe);
                cx.bwd_starts
                    .get(i)
                    .map_or(fw_free, |&s| fw_free.max(s - 1))
            } else {
                fw_free
            };
            if fw_free >= t0 {
                continue;
            }
            dropped.push(Dropped {
                block: bi,
                fw_free,
                bw_first: bw_first.max(t0),
                bw_last,
            });
        }
    }
    dropped
}

/// The allocator events a recompute and a swap of the call add: each dropped block freed
/// when the forward is done with it; the swap brings it back at its first backward use; the
/// recompute replays the module's forward events (from `fs` to `fe`) at `t0`, the dropped
/// blocks kept, its temporaries freed where they were, the rest dropped at the end. A block
/// the recompute made again is freed at the end of its last backward use, not where the
/// autograd node that saved it let it go: the checkpoint hands it to the node and keeps no
/// reference (timm's ViT-B/16: the recomputed input of the MLP's second linear freed after
/// its two matmuls, before the bias gradient's sum allocated 111 MiB beside it; held to the
/// node's end, the every-block peak was predicted 5.6% high).
fn added_events(
    cx: &Ctx<'_>,
    fwd: &[usize],
    dropped: &[Dropped],
    (fs, fe): (i64, i64),
    t0: i64,
) -> (Vec<Added>, Vec<Added>) {
    let (t, mem) = (cx.t, cx.mem);
    let mut rec: Vec<Added> = Vec::new();
    let mut swp: Vec<Added> = Vec::new();
    for d in dropped {
        let (bi, fw_free, bw_first) = (d.block, d.fw_free, d.bw_first);
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
        if let (Some(last), Some(freed)) = (d.bw_last, b.free) {
            if last.max(t0) < freed {
                // Freed at its last use; the measured free then finds it gone.
                rec.push(Added {
                    key: Key {
                        ts: last.max(t0),
                        tie: 2,
                        seq: bi as u32,
                    },
                    bytes: -b.size,
                    category: b.category,
                });
                rec.push(Added {
                    key: Key {
                        ts: freed,
                        tie: 0,
                        seq: bi as u32,
                    },
                    bytes: b.size,
                    category: b.category,
                });
            }
        }
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
    let in_fwd: BTreeSet<usize> = fwd.iter().copied().collect();
    let dropped_set: BTreeSet<usize> = dropped.iter().map(|d| d.block).collect();
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
        if t.memory[ei].bytes > 0 {
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
    (rec, swp)
}

/// The work a recompute and a swap of the call add. Its forward again when its backward
/// begins ([`replay_work`]), and the
/// checkpoint's own host work per call and per op, half in the forward and half in the
/// backward (about what `capture/corpus/step_phases.py` measured on the GPT example's
/// Blocks); the swap hooks' host work split the same way, each block's copy out queued as its
/// producer ends and its copy back at its first backward reader.
fn added_work(
    cx: &Ctx<'_>,
    fwd: &[usize],
    dropped: &[Dropped],
    fs: i64,
    t0: i64,
) -> (Vec<Work>, Vec<Work>) {
    let (t, step, mem, ov) = (cx.t, cx.step, cx.mem, &cx.ov);
    let ops = fwd.len() as f64;
    let host = |ts: i64, host_s: f64| Work {
        ts,
        host_s,
        gpu_s: 0.0,
        drain: false,
    };
    let own = ov.recompute_call_s + ov.recompute_per_op_s * ops;
    let mut rw = vec![host(fs, own / 2.0)];
    rw.extend(replay_work(cx, fwd, t0, own / 2.0));
    let hooks = ov.swap_call_s + ov.swap_per_op_s * ops;
    let mut sw = vec![host(fs, hooks / 2.0), host(t0, hooks / 2.0)];
    for d in dropped {
        let (bi, bw_first) = (d.block, d.bw_first);
        let b = &mem.blocks[bi];
        let made = b.producer.map_or(b.alloc, |p| t.op(step.nodes[p].op).end());
        sw.push(Work {
            ts: made,
            host_s: 0.0,
            gpu_s: b.size as f64 / (cx.dtoh * 1e9),
            drain: false,
        });
        sw.push(Work {
            ts: bw_first,
            host_s: 0.0,
            gpu_s: b.size as f64 / (cx.htod * 1e9),
            drain: false,
        });
    }
    (rw, sw)
}

/// The forward replayed at `t0` (each op's host time, scaled to the program's own speed, and
/// its GPU time) after `lead_s` of the checkpoint's own host work, cut after each op that
/// waited for the GPU ([`crate::model::is_host_sync`]): the piece after it drains the queue.
fn replay_work(cx: &Ctx<'_>, fwd: &[usize], t0: i64, lead_s: f64) -> Vec<Work> {
    let (t, step) = (cx.t, cx.step);
    let mut order: Vec<usize> = fwd.to_vec();
    order.sort_by_key(|&ni| t.op(step.nodes[ni].op).start);
    let mut out = Vec::new();
    let mut cur = Work {
        ts: t0,
        host_s: lead_s,
        gpu_s: 0.0,
        drain: false,
    };
    for ni in order {
        let n = &step.nodes[ni];
        cur.host_s += n.cpu_time as f64 * cx.forward_scale * 1e-9;
        cur.gpu_s += n.gpu_time as f64 * 1e-9;
        let o = t.op(n.op);
        let lo = cx.syncs.partition_point(|&s| s < (o.thread, o.start));
        if cx
            .syncs
            .get(lo)
            .is_some_and(|&(th, ts)| th == o.thread && ts <= o.end())
        {
            out.push(std::mem::replace(
                &mut cur,
                Work {
                    ts: t0,
                    host_s: 0.0,
                    gpu_s: 0.0,
                    drain: true,
                },
            ));
        }
    }
    out.push(cur);
    out
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

/// What a recompute of the module whose forward nodes are `fwd` keeps alive longer: the
/// blocks its forward reads that were made earlier in the iteration (`start`, before the
/// module's forward began at `fs`) and freed before the module's backward (`bw_spans`, its
/// autograd nodes as they ran) ends. Parameters, gradients, optimizer state and workspaces
/// outlive the step anyway.
pub(super) fn held_inputs(
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
