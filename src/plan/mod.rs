//! Which modules to recompute or swap so that a step fits a memory budget (issue 20).
//!
//! Above the analysis and below the report: it reads a run's analysis and returns a
//! [`Plan`]; `report::plan` writes it. The method is μ-TWO's greedy one, over what a program
//! can apply: whole modules (`nn.Module` instances, named as the profiler names them,
//! `Block_3`), each recomputed (non-reentrant `torch.utils.checkpoint` around its forward) or
//! swapped (its saved tensors copied to pinned host memory and back). Each round tries every
//! module not yet chosen against the plan so far, re-simulating the step's memory
//! ([`sim`]), and keeps the one that lowers the predicted peak most per second it adds, so
//! that memory two decisions would both free is never counted twice.
//!
//! What a module's checkpoint frees: the activations made by its forward's ops whose every
//! reader in backward is one of its own autograd nodes (with an Execution Trace; without one,
//! whose freeing node is). They die after their last forward reader (without an Execution
//! Trace: when the module's forward ends) and come back when the module's first backward node
//! starts, with the module's forward temporaries replayed at that point. Added time: the
//! module's forward nodes again, each at the larger of its GPU time and its CPU time (the
//! latter scaled by the run's uninstrumented-to-instrumented step time ratio). Swapping frees
//! the same activations, brings each back at its first backward reader, and adds
//! bytes / bandwidth each way on the compute stream.

pub mod sim;

use std::collections::{BTreeMap, BTreeSet};

use rayon::prelude::*;
use serde::Serialize;

use crate::analysis::memory::{Category, CATEGORIES};
use crate::analysis::step::Phase;
use crate::analysis::{liveness, median, Analysis};
use crate::model::{Trace, EVALUATE_FUNCTION};
use sim::{Added, Key, Measured, Peak};

/// Why no plan could be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The analysis has nothing a plan can act on.
    #[error("{0}")]
    NothingToPlan(String),
    /// A module named in an explicit plan is not in the run.
    #[error("module `{name}` is not in this run (its modules: {known})")]
    UnknownModule {
        /// The name given.
        name: String,
        /// Some of the run's module names.
        known: String,
    },
    /// The budget is below what parameters and optimizer state alone hold.
    #[error(
        "a budget of {} is below the {} that parameters and optimizer state alone hold: no plan of recomputation or swapping can meet it",
        gib(*budget),
        gib(*floor)
    )]
    BelowFloor {
        /// The budget, bytes.
        budget: i64,
        /// Parameters + optimizer state, bytes.
        floor: i64,
    },
    /// The budget text is not a size.
    #[error("budget `{0}` is not a size: write bytes, 10GiB, 9.5GB, 512MiB or 80% (of the measured peak)")]
    BadBudget(String),
}

fn gib(b: i64) -> String {
    format!("{:.3} GiB", b as f64 / (1u64 << 30) as f64)
}

/// What to do with a module.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Checkpoint: drop its saved activations, run its forward again in backward.
    Recompute,
    /// Copy its saved activations to pinned host memory and back.
    Swap,
}

/// Which actions the planner may choose.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Policy {
    /// Recompute only.
    #[default]
    Recompute,
    /// Swap only.
    Swap,
    /// Either, per module.
    Both,
}

impl Policy {
    fn actions(self) -> &'static [Action] {
        match self {
            Policy::Recompute => &[Action::Recompute],
            Policy::Swap => &[Action::Swap],
            Policy::Both => &[Action::Recompute, Action::Swap],
        }
    }
}

/// A budget as given: bytes, or a fraction of the measured peak.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Budget {
    /// Bytes.
    Bytes(i64),
    /// Fraction of the measured peak (0.8 for `80%`).
    Fraction(f64),
}

impl std::str::FromStr for Budget {
    type Err = Error;
    fn from_str(s: &str) -> Result<Budget, Error> {
        let t = s.trim();
        let bad = || Error::BadBudget(s.to_owned());
        if let Some(p) = t.strip_suffix('%') {
            let v: f64 = p.trim().parse().map_err(|_| bad())?;
            return (v > 0.0 && v.is_finite())
                .then_some(Budget::Fraction(v / 100.0))
                .ok_or_else(bad);
        }
        let split = t
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(t.len());
        let (num, unit) = t.split_at(split);
        let v: f64 = num.parse().map_err(|_| bad())?;
        let mult: f64 = match unit.trim().to_ascii_lowercase().as_str() {
            "" | "b" => 1.0,
            "kib" => 1024.0,
            "mib" => 1024.0 * 1024.0,
            "gib" => 1024.0 * 1024.0 * 1024.0,
            "kb" => 1e3,
            "mb" => 1e6,
            "gb" => 1e9,
            _ => return Err(bad()),
        };
        let b = v * mult;
        (1.0..9.0e18)
            .contains(&b)
            .then_some(Budget::Bytes(b as i64))
            .ok_or_else(bad)
    }
}

/// What the planner is asked.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The budget; `None`: only the budget curve and the reference points.
    pub budget: Option<Budget>,
    /// Actions allowed.
    pub policy: Policy,
    /// Host↔device bandwidth for swaps, GB/s (default: the analysis's, measured or by GPU).
    pub bandwidth_gbps: Option<f64>,
    /// Evaluate this plan instead of choosing one: module instance names (`Block_3`), each
    /// recomputed; `every-block` stands for every instance of the repeated block class.
    pub modules: Option<Vec<String>>,
}

/// One decision, with what the plan so far predicts once it is taken.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Decision {
    /// The module's path from the root, as the trace nests them (`GPT_0/Block_3`).
    pub module: String,
    /// The instance name the capture shim matches (`Block_3`).
    pub instance: String,
    /// Its class (`Block`).
    pub class: String,
    /// What is done with it.
    pub action: Action,
    /// Activation bytes it frees between its last forward use and its backward (one iteration).
    pub activation_bytes: i64,
    /// How much lower the predicted peak is for taking it.
    pub peak_saved_bytes: i64,
    /// Time it adds per step, s.
    pub time_added_s: f64,
    /// Predicted peak with every decision up to this one.
    pub predicted_peak_bytes: i64,
    /// Predicted step time with every decision up to this one, s.
    pub predicted_step_time_s: f64,
}

/// A point of the budget curve.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CurvePoint {
    /// What it is (`none`, `greedy 3`, `every Block`).
    pub label: String,
    /// Decisions taken.
    pub decisions: usize,
    /// Predicted peak, bytes.
    pub peak_bytes: i64,
    /// Predicted step time, s.
    pub step_time_s: f64,
}

/// The planner's answer.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    /// steptrace version that made it.
    pub steptrace_version: &'static str,
    /// The run planned for.
    pub run: String,
    /// The budget, bytes (`None`: curve only).
    pub budget_bytes: Option<i64>,
    /// `recompute`, `swap` or `both`.
    pub policy: &'static str,
    /// Host→device and device→host bandwidth used for swaps, GB/s, and where it came from.
    pub bandwidth_gbps: (f64, f64, &'static str),
    /// The measured peak (the allocator's, over the profiled iterations).
    pub measured_peak_bytes: i64,
    /// The step time the prediction starts from, s, and which one it is.
    pub measured_step_time_s: f64,
    /// `timing_phase` (the program's own, uninstrumented) or `profiled`.
    pub step_time_source: &'static str,
    /// Where liveness comes from (`execution_trace` or `memory_events`).
    pub liveness_source: &'static str,
    /// Parameters and optimizer state at the peak, bytes: no plan goes below it.
    pub floor_bytes: i64,
    /// The decisions, in the order taken.
    pub decisions: Vec<Decision>,
    /// Predicted peak with the plan, bytes.
    pub predicted_peak_bytes: i64,
    /// Predicted peak by category (param, grad, opt_state, activation, input, temporary,
    /// other), bytes.
    pub predicted_peak_by_category: BTreeMap<&'static str, i64>,
    /// Predicted step time with the plan, s.
    pub predicted_step_time_s: f64,
    /// Whether the predicted peak is at or under the budget.
    pub feasible: bool,
    /// The lowest peak the greedy order reaches, bytes: the smallest budget it can meet.
    pub smallest_feasible_bytes: i64,
    /// Predicted peak and step time after each greedy decision, from none to all.
    pub curve: Vec<CurvePoint>,
    /// Every instance of the repeated block class recomputed, the choice users make by hand.
    pub every_block: Option<CurvePoint>,
    /// The iteration whose predicted peak is the plan's, and its timeline before and after.
    #[serde(skip)]
    pub timeline: Option<Timeline>,
    /// Limits of the prediction worth knowing.
    pub notes: Vec<String>,
}

/// One iteration's allocated memory, measured and with the plan: (ms from the iteration's
/// start, MiB).
#[derive(Debug, Clone)]
pub struct Timeline {
    /// The iteration's label.
    pub iteration: String,
    /// Measured.
    pub measured: Vec<(f64, f64)>,
    /// With the plan.
    pub planned: Vec<(f64, f64)>,
}

/// A module that can be planned: its forward nodes and what acting on it changes, per
/// iteration.
#[derive(Debug, Clone)]
struct Candidate {
    path: String,
    instance: String,
    class: String,
    depth: usize,
    /// Per iteration (index into `Ctx::iters`): the events each action adds.
    added: Vec<BTreeMap<Action, Vec<Added>>>,
    /// Activation bytes dropped (median over iterations).
    dropped_bytes: i64,
    /// Blocks dropped, per iteration (for the never-twice check).
    dropped_blocks: Vec<Vec<usize>>,
    /// Time each action adds, s.
    time: BTreeMap<Action, f64>,
    /// Has modules below it.
    composite: bool,
}

struct Iter {
    label: String,
    start: i64,
    measured: Measured,
}

fn depth_of(path: &str) -> usize {
    path.matches('/').count()
}

fn under(module: &str, path: &str) -> bool {
    module == path
        || (module.len() > path.len()
            && module.starts_with(path)
            && module.as_bytes()[path.len()] == b'/')
}

fn class_of(instance: &str) -> &str {
    match instance.rsplit_once('_') {
        Some((c, k)) if !c.is_empty() && k.chars().all(|x| x.is_ascii_digit()) => c,
        _ => instance,
    }
}

/// Makes the plan.
pub fn plan(t: &Trace, a: &Analysis, opts: &Options) -> Result<Plan, Error> {
    let step = &a.step;
    let mem = &a.memory;
    if t.memory.is_empty() {
        return Err(Error::NothingToPlan(
            "the trace holds no memory events: capture with profile_memory (steptrace capture does) to plan"
                .into(),
        ));
    }
    if step.iterations.is_empty() {
        return Err(Error::NothingToPlan(
            "no iteration was found in the trace".into(),
        ));
    }
    let ids = a.liveness.identities.as_ref();
    let mut notes = Vec::new();
    if ids.is_none() {
        notes.push(
            "no Execution Trace: an activation is taken as freed when its module's forward ends, and as saved by the module whose backward node frees it"
                .to_string(),
        );
    }
    if step.nodes.iter().any(|n| n.recompute) {
        notes.push(
            "the run already recomputes some forward ops in backward (it checkpoints): the plan adds to what it does"
                .to_string(),
        );
    }

    // The measured events of each iteration (those with allocator events), and where each
    // profiled iteration's are.
    let mut iters: Vec<Iter> = Vec::new();
    let mut iter_index: BTreeMap<u32, usize> = BTreeMap::new();
    for it in &step.iterations {
        let lo = t.memory.partition_point(|m| m.ts < it.start);
        let hi = t.memory.partition_point(|m| m.ts <= it.end);
        if lo >= hi {
            continue;
        }
        let first = &t.memory[lo];
        let before = first.total_allocated - first.bytes;
        let mut m = Measured {
            before,
            before_by_category: mem.breakdown_at(first.ts - 1, before),
            ..Measured::default()
        };
        for (ei, e) in t.memory[lo..hi].iter().enumerate() {
            m.events.push((e.ts, e.total_allocated));
            let cat = mem
                .event_block
                .get(lo + ei)
                .copied()
                .flatten()
                .map_or(Category::Other, |b| mem.blocks[b].category);
            m.deltas.push((cat, e.bytes));
        }
        iter_index.insert(it.index, iters.len());
        iters.push(Iter {
            label: it.label.clone(),
            start: it.start,
            measured: m,
        });
    }
    if iters.is_empty() {
        return Err(Error::NothingToPlan(
            "no allocator event falls inside an iteration".into(),
        ));
    }

    // Step time the prediction starts from, and the CPU-time scale.
    let s = &a.summary;
    let base_step = s.step_time_s;
    let cpu_scale = if s.step_time_source != "instrumented" && s.step_time_instrumented_s > 0.0 {
        (s.step_time_s / s.step_time_instrumented_s).min(1.0)
    } else {
        1.0
    };
    let bw = &a.liveness.bandwidth;
    let (htod, dtoh, bw_source) = match opts.bandwidth_gbps {
        Some(b) => (b, b, "override"),
        None => (bw.htod_gbps, bw.dtoh_gbps, bw.source),
    };

    let candidates = build_candidates(t, a, ids, &iters, &iter_index, cpu_scale, (htod, dtoh));
    if candidates.is_empty() {
        return Err(Error::NothingToPlan(
            "no module's forward made activations that only its own backward reads: record with with_modules (steptrace capture does) to plan"
                .into(),
        ));
    }

    let measured_peaks: Vec<Peak> = iters
        .iter()
        .map(|it| sim::simulate(&it.measured, &[], None))
        .collect();
    let measured_peak = measured_peaks.iter().map(|p| p.bytes).max().unwrap_or(0);
    let at_peak = measured_peaks
        .iter()
        .max_by_key(|p| p.bytes)
        .map_or([0; crate::analysis::memory::CATEGORY_COUNT], |p| {
            p.by_category
        });
    let floor = at_peak[Category::Param.index()] + at_peak[Category::OptState.index()];
    let budget = opts.budget.map(|b| match b {
        Budget::Bytes(x) => x,
        Budget::Fraction(f) => (measured_peak as f64 * f) as i64,
    });
    if let Some(b) = budget {
        if b < floor {
            return Err(Error::BelowFloor { budget: b, floor });
        }
    }

    let ev = Evaluator {
        cands: &candidates,
        iters: &iters,
        base_step,
    };

    // Either the given modules, each a round, or the greedy rounds to the end.
    let every_block = every_block_class(&candidates);
    let rounds: Vec<Vec<Choice>> = match &opts.modules {
        Some(names) => {
            let list = explicit(&candidates, names, every_block.as_deref())?;
            (1..=list.len()).map(|k| list[..k].to_vec()).collect()
        }
        None => greedy(&ev, opts.policy, budget),
    };
    let mut curve = vec![CurvePoint {
        label: "none".into(),
        decisions: 0,
        peak_bytes: measured_peak,
        step_time_s: base_step,
    }];
    for (k, r) in rounds.iter().enumerate() {
        curve.push(CurvePoint {
            label: format!(
                "{} {}",
                if opts.modules.is_some() {
                    "given"
                } else {
                    "round"
                },
                k + 1
            ),
            decisions: r.len(),
            peak_bytes: ev.peak(r).0.bytes,
            step_time_s: ev.step(r),
        });
    }
    let smallest = curve
        .iter()
        .map(|p| p.peak_bytes)
        .min()
        .unwrap_or(measured_peak);
    // The plan: the first round that meets the budget (the last when none does).
    let take = match budget {
        Some(b) if opts.modules.is_none() => curve
            .iter()
            .position(|p| p.peak_bytes <= b)
            .unwrap_or(curve.len() - 1),
        _ => rounds.len(),
    };
    let chosen: Vec<Choice> = if take == 0 {
        Vec::new()
    } else {
        rounds[take - 1].clone()
    };
    // Its decisions in the order they were taken, each with the prediction up to it.
    let mut decisions = Vec::new();
    let mut prev_peak = measured_peak;
    for k in 0..chosen.len() {
        let (c, act) = chosen[k];
        let cand = &candidates[c];
        let peak = ev.peak(&chosen[..=k]).0.bytes;
        decisions.push(Decision {
            module: cand.path.clone(),
            instance: cand.instance.clone(),
            class: cand.class.clone(),
            action: act,
            activation_bytes: cand.dropped_bytes,
            peak_saved_bytes: prev_peak - peak,
            time_added_s: cand.time[&act],
            predicted_peak_bytes: peak,
            predicted_step_time_s: ev.step(&chosen[..=k]),
        });
        prev_peak = peak;
    }
    let chosen = &chosen[..];
    debug_assert!(!dropped_twice(&candidates, chosen), "a block dropped twice");
    let (peak, worst_iter) = ev.peak(chosen);
    let predicted_step = ev.step(chosen);
    let feasible = budget.is_none_or(|b| peak.bytes <= b);

    let every = every_block.as_ref().map(|class| {
        let all: Vec<Choice> = candidates
            .iter()
            .enumerate()
            .filter(|(_, c)| &c.class == class)
            .map(|(i, _)| (i, Action::Recompute))
            .collect();
        let n = all.len();
        CurvePoint {
            label: format!("every {class} ({n})"),
            decisions: n,
            peak_bytes: ev.peak(&all).0.bytes,
            step_time_s: ev.step(&all),
        }
    });

    // Timeline of the iteration that sets the predicted peak, before and after.
    let timeline = {
        let it = &iters[worst_iter];
        let added = ev.added(chosen, worst_iter);
        let (mut before, mut after) = (Vec::new(), Vec::new());
        sim::simulate(&it.measured, &[], Some(&mut before));
        sim::simulate(&it.measured, &added, Some(&mut after));
        let f = |v: Vec<(i64, i64)>| -> Vec<(f64, f64)> {
            v.into_iter()
                .map(|(ts, b)| ((ts - it.start) as f64 * 1e-6, b as f64 / (1 << 20) as f64))
                .collect()
        };
        Some(Timeline {
            iteration: it.label.clone(),
            measured: f(before),
            planned: f(after),
        })
    };

    let by_category: BTreeMap<&'static str, i64> = CATEGORIES
        .iter()
        .zip(peak.by_category.iter())
        .map(|(c, b)| (c.key(), *b))
        .collect();
    Ok(Plan {
        steptrace_version: env!("CARGO_PKG_VERSION"),
        run: s.name.clone(),
        budget_bytes: budget,
        policy: match opts.policy {
            Policy::Recompute => "recompute",
            Policy::Swap => "swap",
            Policy::Both => "both",
        },
        bandwidth_gbps: (htod, dtoh, bw_source),
        measured_peak_bytes: measured_peak,
        measured_step_time_s: base_step,
        step_time_source: s.step_time_source,
        liveness_source: if ids.is_some() {
            "execution_trace"
        } else {
            "memory_events"
        },
        floor_bytes: floor,
        decisions,
        predicted_peak_bytes: peak.bytes,
        predicted_peak_by_category: by_category,
        predicted_step_time_s: predicted_step,
        feasible,
        smallest_feasible_bytes: smallest,
        curve,
        every_block: every,
        timeline,
        notes,
    })
}

/// A module and what is done with it.
type Choice = (usize, Action);

/// Predicts a plan's peak and step time.
struct Evaluator<'a> {
    cands: &'a [Candidate],
    iters: &'a [Iter],
    base_step: f64,
}

impl Evaluator<'_> {
    /// The events `chosen` adds to iteration `k`, in order.
    fn added(&self, chosen: &[Choice], k: usize) -> Vec<Added> {
        let mut added: Vec<Added> = Vec::new();
        for &(c, act) in chosen {
            if let Some(v) = self.cands[c].added[k].get(&act) {
                added.extend_from_slice(v);
            }
        }
        added.sort_by_key(|x| x.key);
        added
    }

    /// The highest predicted peak over the iterations, and which iteration has it.
    fn peak(&self, chosen: &[Choice]) -> (Peak, usize) {
        let mut worst: Option<(Peak, usize)> = None;
        for (k, it) in self.iters.iter().enumerate() {
            let p = sim::simulate(&it.measured, &self.added(chosen, k), None);
            if worst.as_ref().is_none_or(|w| p.bytes > w.0.bytes) {
                worst = Some((p, k));
            }
        }
        worst.expect("at least one iteration")
    }

    /// The predicted step time, s.
    fn step(&self, chosen: &[Choice]) -> f64 {
        self.base_step
            + chosen
                .iter()
                .map(|&(c, act)| self.cands[c].time[&act])
                .sum::<f64>()
    }
}

/// The greedy rounds: each adds the (module, action) lowering the predicted peak most per
/// second added. A module around chosen ones may replace them (a whole block after parts of
/// it: what it frees beyond them is what it is scored on), so the search does not stall on
/// small modules whose outputs their parent keeps. Stops at the budget, or when nothing
/// lowers the peak. Returns the plan after each round.
fn greedy(ev: &Evaluator<'_>, policy: Policy, budget: Option<i64>) -> Vec<Vec<Choice>> {
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
            .flat_map(|i| policy.actions().iter().map(move |&a| (i, a)))
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
        let scored: Vec<(i64, f64, usize, Action)> = moves
            .par_iter()
            .map(|&(i, act)| {
                let trial = trial_of((i, act));
                let saved = cur - ev.peak(&trial).0.bytes;
                let dt = (ev.step(&trial) - cur_time).max(1e-9);
                (saved, saved as f64 / dt, i, act)
            })
            .collect();
        // Highest ratio; ties: more saved, then the earlier module (deterministic).
        let best = scored.into_iter().filter(|s| s.0 > 0).max_by(|x, y| {
            x.1.total_cmp(&y.1)
                .then(x.0.cmp(&y.0))
                .then(y.2.cmp(&x.2))
                .then(y.3.cmp(&x.3))
        });
        let Some((_, _, i, act)) = best else { break };
        chosen = trial_of((i, act));
        cur = ev.peak(&chosen).0.bytes;
        cur_time = ev.step(&chosen);
        rounds.push(chosen.clone());
    }
    rounds
}

fn explicit(
    cands: &[Candidate],
    names: &[String],
    every_block: Option<&str>,
) -> Result<Vec<Choice>, Error> {
    let mut out: Vec<Choice> = Vec::new();
    for n in names {
        if n == "every-block" {
            let class = every_block.ok_or_else(|| Error::UnknownModule {
                name: n.clone(),
                known: "no class repeats as a block".into(),
            })?;
            for (i, c) in cands.iter().enumerate() {
                if c.class == class && !out.iter().any(|o| o.0 == i) {
                    out.push((i, Action::Recompute));
                }
            }
            continue;
        }
        let (name, act) = match n.split_once(':') {
            Some((m, "swap")) => (m, Action::Swap),
            Some((m, "recompute")) => (m, Action::Recompute),
            _ => (n.as_str(), Action::Recompute),
        };
        let i = cands
            .iter()
            .position(|c| c.instance == name || c.path == name)
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

/// The class users would checkpoint "every block" of: among modules with modules below them,
/// the class with the most instances (two at least); ties go to the shallower, then by name.
fn every_block_class(cands: &[Candidate]) -> Option<String> {
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

/// Every module enclosing a forward node, with the events each action adds per iteration.
fn build_candidates(
    t: &Trace,
    a: &Analysis,
    ids: Option<&liveness::Identities>,
    iters: &[Iter],
    iter_index: &BTreeMap<u32, usize>,
    cpu_scale: f64,
    (htod, dtoh): (f64, f64),
) -> Vec<Candidate> {
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
            let mut times: Vec<f64> = Vec::new();
            let mut swap_times: Vec<f64> = Vec::new();
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
                for &p in &fwd {
                    for &bi in made_by.get(&p).map(Vec::as_slice).unwrap_or(&[]) {
                        let b = &mem.blocks[bi];
                        if b.category != Category::Activation {
                            continue;
                        }
                        let Some(freed) = b.free.filter(|&f| freed_by_module(f)) else {
                            continue;
                        };
                        let (fw_free, bw_first) = match ids.and_then(|i| i.readers(step, mem, bi)) {
                            Some(r) => {
                                let r: Vec<usize> = r.collect();
                                if r.iter().any(|&ni| {
                                    step.nodes[ni].phase == Phase::Backward && !in_bwd.contains(&ni)
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
                    continue;
                }
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
                    let Some(bi) = mem.event_block.get(ei).copied().flatten() else {
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
                rec.sort_by_key(|x| x.key);
                swp.sort_by_key(|x| x.key);
                added[k].insert(Action::Recompute, rec);
                added[k].insert(Action::Swap, swp);
                let bytes: i64 = dropped.iter().map(|d| mem.blocks[d.0].size).sum();
                dropped_per_iter.push(bytes);
                dropped_blocks[k] = dropped.iter().map(|d| d.0).collect();
                let t_rec: f64 = fwd
                    .iter()
                    .map(|&ni| {
                        let n = &step.nodes[ni];
                        (n.gpu_time as f64).max(n.cpu_time as f64 * cpu_scale) * 1e-9
                    })
                    .sum();
                times.push(t_rec);
                swap_times.push(bytes as f64 / (dtoh * 1e9) + bytes as f64 / (htod * 1e9));
            }
            if dropped_per_iter.is_empty() {
                return None;
            }
            let mut dp: Vec<f64> = dropped_per_iter.iter().map(|&b| b as f64).collect();
            let instance = path.rsplit('/').next().unwrap_or(path).to_owned();
            let mut time = BTreeMap::new();
            time.insert(Action::Recompute, median(&mut times).unwrap_or(0.0));
            time.insert(Action::Swap, median(&mut swap_times).unwrap_or(0.0));
            Some(Candidate {
                class: class_of(&instance).to_owned(),
                instance,
                depth: depth_of(path),
                path: path.clone(),
                added,
                dropped_bytes: median(&mut dp).unwrap_or(0.0) as i64,
                dropped_blocks,
                time,
                composite: composite.contains(path.as_str()),
            })
        })
        .collect();
    cands.into_iter().flatten().collect()
}

/// Blocks the decisions drop, per iteration: each at most once (a plan never counts a tensor
/// twice; nested modules are never both chosen).
fn dropped_twice(cands: &[Candidate], chosen: &[Choice]) -> bool {
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
    fn issue20_budgets_parse_as_sizes_or_fractions() {
        assert_eq!("10GiB".parse::<Budget>().unwrap(), Budget::Bytes(10 << 30));
        assert_eq!(
            "9.5GB".parse::<Budget>().unwrap(),
            Budget::Bytes(9_500_000_000)
        );
        assert_eq!(
            "512 MiB".parse::<Budget>().unwrap(),
            Budget::Bytes(512 << 20)
        );
        assert_eq!("80%".parse::<Budget>().unwrap(), Budget::Fraction(0.8));
        assert_eq!("1234".parse::<Budget>().unwrap(), Budget::Bytes(1234));
        for bad in ["", "ten", "10XB", "-5GiB", "0", "%", "1e30GB"] {
            assert!(bad.parse::<Budget>().is_err(), "{bad}");
        }
    }

    #[test]
    fn module_paths_nest_on_whole_names() {
        assert!(under("GPT_0/Block_1/MLP_1", "GPT_0/Block_1"));
        assert!(under("GPT_0/Block_1", "GPT_0/Block_1"));
        assert!(!under("GPT_0/Block_10", "GPT_0/Block_1"));
        assert_eq!(class_of("Block_10"), "Block");
        assert_eq!(class_of("Block"), "Block");
        assert_eq!(class_of("My_Net_2"), "My_Net");
    }

    #[test]
    fn issue20_never_twice_sees_a_shared_block() {
        let c = |path: &str, blocks: Vec<usize>| Candidate {
            path: path.into(),
            instance: path.into(),
            class: "X".into(),
            depth: 0,
            added: vec![BTreeMap::new()],
            dropped_bytes: 0,
            dropped_blocks: vec![blocks],
            time: BTreeMap::new(),
            composite: false,
        };
        let cands = [c("A", vec![1, 2]), c("B", vec![3]), c("C", vec![2])];
        assert!(!dropped_twice(
            &cands,
            &[(0, Action::Recompute), (1, Action::Recompute)]
        ));
        assert!(dropped_twice(
            &cands,
            &[(0, Action::Recompute), (2, Action::Swap)]
        ));
    }
}
