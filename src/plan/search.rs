//! Choosing modules: the evaluator that predicts a set of decisions' peak and step
//! time by re-simulating every profiled iteration, μ-TWO's greedy search over it, and the
//! plans a user names.

use super::call::Held;
use super::*;

/// A module and what is done with it.
pub(super) type Choice = (usize, Action);

/// Predicts a plan's peak and step time.
pub(super) struct Evaluator<'a> {
    pub(super) cands: &'a [Candidate],
    pub(super) iters: &'a [Iter],
    /// The program's step time, s.
    pub(super) base_step: f64,
}

impl Evaluator<'_> {
    /// The events `chosen` adds to iteration `k`, in order.
    pub(super) fn added(&self, chosen: &[Choice], k: usize) -> Vec<Added> {
        let mut added: Vec<Added> = Vec::new();
        // Blocks kept alive by checkpoints: each until the latest of the modules holding it.
        let mut held: BTreeMap<usize, Held> = BTreeMap::new();
        for &(c, act) in chosen {
            if let Some(v) = self.cands[c].added[k].get(&act) {
                added.extend_from_slice(v);
            }
            if act == Action::Recompute {
                for h in &self.cands[c].held[k] {
                    held.entry(h.block)
                        .and_modify(|e| e.until = e.until.max(h.until))
                        .or_insert(*h);
                }
            }
        }
        for h in held.values() {
            let seq = h.block as u32;
            // Back on at its measured free (after it), off when the last holder is done.
            added.push(Added {
                key: Key {
                    ts: h.from,
                    tie: 2,
                    seq,
                },
                bytes: h.bytes,
                category: Category::Activation,
            });
            added.push(Added {
                key: Key {
                    ts: h.until,
                    tie: 2,
                    seq,
                },
                bytes: -h.bytes,
                category: Category::Activation,
            });
        }
        added.sort_by_key(|x| x.key);
        added
    }

    /// The highest predicted peak over the iterations, and which iteration has it.
    pub(super) fn peak(&self, chosen: &[Choice]) -> (Peak, usize) {
        let mut worst: Option<(Peak, usize)> = None;
        for (k, it) in self.iters.iter().enumerate() {
            let p = sim::simulate(&it.measured, &self.added(chosen, k), None);
            if worst.as_ref().is_none_or(|w| p.bytes > w.0.bytes) {
                worst = Some((p, k));
            }
        }
        worst.expect("at least one iteration")
    }

    /// The work `chosen` adds to iteration `k`, by time.
    fn work(&self, chosen: &[Choice], k: usize) -> Vec<Work> {
        let mut work: Vec<Work> = chosen
            .iter()
            .filter_map(|&(c, act)| self.cands[c].work.get(k)?.get(&act))
            .flatten()
            .copied()
            .collect();
        work.sort_by_key(|w| w.ts);
        work
    }

    /// The predicted step time, s: the program's step and what the plan's work adds to each
    /// profiled iteration replayed on the GPU queue ([`queue::Lane`]), the median over them.
    pub(super) fn step(&self, chosen: &[Choice]) -> f64 {
        let mut added: Vec<f64> = (0..self.iters.len())
            .map(|k| self.iters[k].lane.added(&self.work(chosen, k)))
            .collect();
        self.base_step + median(&mut added).unwrap_or(0.0)
    }

    /// The host's time in the forward and in the backward with `chosen`, s (the median over
    /// the iterations that have one of each): what capture times as `forward_host_s` and
    /// `backward_host_s`, set against a planned run's own to see where a prediction is off.
    pub(super) fn phase_times(&self, chosen: &[Choice]) -> Option<(f64, f64)> {
        let (mut f, mut b): (Vec<f64>, Vec<f64>) = (0..self.iters.len())
            .filter_map(|k| {
                let (fs, bs) = self.iters[k].phases?;
                let t = self.iters[k]
                    .lane
                    .host_spans(&self.work(chosen, k), &[fs, bs]);
                Some((t[0], t[1]))
            })
            .unzip();
        Some((median(&mut f)?, median(&mut b)?))
    }
}

/// The greedy rounds: each adds the (module, action) lowering the predicted peak most per
/// second added. A module around chosen ones may replace them (a whole block after parts of
/// it: what it frees beyond them is what it is scored on), so the search does not stall on
/// small modules whose outputs their parent keeps. Stops at the budget, or when nothing
/// lowers the peak. Returns the plan after each round.
pub(super) fn greedy(ev: &Evaluator<'_>, policy: Policy, budget: Option<i64>) -> Vec<Vec<Choice>> {
    let cands = ev.cands;
    let mut chosen: Vec<Choice> = Vec::new();
    let mut rounds = Vec::new();
    let mut cur = ev.peak(&chosen).0.bytes;
    let mut cur_time = ev.step(&chosen);
    // Without a budget the whole curve is wanted: go on until nothing helps.
    let target = budget.unwrap_or(i64::MIN);
    while cur > target {
        let moves: Vec<Choice> = (0..cands.len())
            .filter(|&i| {
                chosen
                    .iter()
                    .all(|&(c, _)| !under(&cands[i].path, &cands[c].path))
            })
            .flat_map(|i| super::actions(policy).iter().map(move |&a| (i, a)))
            .collect();
        let trial_of = |(i, act): Choice| -> Vec<Choice> {
            let mut t: Vec<Choice> = chosen
                .iter()
                .copied()
                .filter(|&(c, _)| !under(&cands[c].path, &cands[i].path))
                .collect();
            t.push((i, act));
            t
        };
        // And each chosen module split into its own candidate children, the same action: a
        // whole layer's recompute can itself set the peak (its replay), which only its parts
        // can lower (ResNet-18's `layer1`).
        let mut trials: Vec<Vec<Choice>> = moves.iter().map(|&m| trial_of(m)).collect();
        for &(c, act) in &chosen {
            let (path, depth) = (&cands[c].path, depth_of(&cands[c].path));
            let children: Vec<Choice> = (0..cands.len())
                .filter(|&j| under(&cands[j].path, path) && depth_of(&cands[j].path) == depth + 1)
                .map(|j| (j, act))
                .collect();
            if !children.is_empty() {
                let mut t: Vec<Choice> = chosen.iter().copied().filter(|&x| x.0 != c).collect();
                t.extend(children);
                trials.push(t);
            }
        }
        let scored: Vec<(i64, f64, usize)> = trials
            .par_iter()
            .enumerate()
            .map(|(k, trial)| {
                let saved = cur - ev.peak(trial).0.bytes;
                let dt = (ev.step(trial) - cur_time).max(1e-9);
                (saved, saved as f64 / dt, k)
            })
            .collect();
        // Highest ratio; ties: more saved, then the earlier trial (modules in order, then
        // splits: deterministic).
        let best = scored
            .into_iter()
            .filter(|s| s.0 > 0)
            .max_by(|x, y| x.1.total_cmp(&y.1).then(x.0.cmp(&y.0)).then(y.2.cmp(&x.2)));
        let Some((_, _, k)) = best else { break };
        chosen = trials.swap_remove(k);
        cur = ev.peak(&chosen).0.bytes;
        cur_time = ev.step(&chosen);
        rounds.push(chosen.clone());
    }
    rounds
}

/// Every instance of the block class `class`, recomputed: the plan users write by hand.
pub(super) fn every_block_choices(cands: &[Candidate], class: &str) -> Vec<Choice> {
    (0..cands.len())
        .filter(|&i| cands[i].class == class && !inside_own_class(cands, &cands[i]))
        .map(|i| (i, Action::Recompute))
        .collect()
}

pub(super) fn explicit(
    cands: &[Candidate],
    names: &[String],
    every_block: Option<&str>,
) -> Result<Vec<Choice>, Error> {
    let mut out: Vec<Choice> = Vec::new();
    for n in names {
        if n == super::EVERY_BLOCK {
            let class = every_block.ok_or_else(|| Error::UnknownModule {
                name: n.clone(),
                known: "no class repeats as a block".into(),
            })?;
            for m in every_block_choices(cands, class) {
                if !out.iter().any(|o| o.0 == m.0) {
                    out.push(m);
                }
            }
            continue;
        }
        let (name, act) = match n.split_once(':') {
            Some((m, "swap")) => (m, Action::Swap),
            Some((m, "recompute")) => (m, Action::Recompute),
            _ => (n.as_str(), Action::Recompute),
        };
        let matches: Vec<usize> = (0..cands.len())
            .filter(|&i| {
                let c = &cands[i];
                c.instance == name || c.path == name || c.fqn.as_deref() == Some(name)
            })
            .collect();
        // Two classes of one name are numbered apart by the profiler (Lightning's demo
        // `Transformer` and the `nn.Transformer` inside it are both `Transformer_0`): an
        // instance name that stands for several modules is refused, not taken as the first.
        if matches.len() > 1 {
            return Err(Error::AmbiguousModule {
                name: name.to_owned(),
                modules: matches
                    .iter()
                    .map(|&i| match &cands[i].fqn {
                        Some(f) => format!("{} ({f})", cands[i].path),
                        None => cands[i].path.clone(),
                    })
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
        let i = matches
            .first()
            .copied()
            .ok_or_else(|| Error::UnknownModule {
                name: name.to_owned(),
                known: {
                    let v: Vec<&str> = cands.iter().take(12).map(|c| c.instance.as_str()).collect();
                    format!(
                        "{}{}",
                        v.join(", "),
                        if cands.len() > 12 { ", ..." } else { "" }
                    )
                },
            })?;
        if !out.iter().any(|o| o.0 == i) {
            out.push((i, act));
        }
    }
    Ok(out)
}
