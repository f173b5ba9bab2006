//! Which modules to recompute or swap so that a step fits a memory budget.
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
//! starts, with the module's forward temporaries replayed at that point. Added time, on
//! the host and on the GPU apart: the module's forward nodes again (their CPU time scaled by
//! the run's uninstrumented-to-instrumented step time ratio, and their GPU time) and the
//! checkpoint's own host work per call and per op, as the capture's probe measured it.
//! Swapping frees the same activations, brings each back at its first backward reader, and
//! adds the hooks' host work and bytes / bandwidth each way on the compute stream. The step
//! is as long as the busier of host and GPU (`search::Evaluator::step`).
//!
//! Here: the plan's types and [`plan`], the driver. `build`: the passes it runs in order;
//! `candidates`: what each module's actions
//! change; `search`: the evaluator and the greedy search; `sim`: one iteration's memory with a
//! plan's events added.

mod autocast;
mod build;
mod call;
mod candidates;
mod cost;
mod queue;
mod search;
pub mod sim;

use std::collections::{BTreeMap, BTreeSet};

use rayon::prelude::*;

use crate::analysis::memory::{Category, CATEGORIES};
use crate::analysis::step::Phase;
use crate::analysis::{liveness, median, Analysis};
use crate::model::{Trace, EVALUATE_FUNCTION};
use candidates::*;
use cost::Rates;
use queue::{Lane, Work};
use search::*;
use sim::{Added, Key, Measured, Peak};
pub use steptrace_formats::plan::{
    Action, CurvePoint, Decision, OverheadSource, Overheads, Plan, Policy, Timeline, FORMAT_VERSION,
};

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
    /// An instance name that several modules of the run have (two classes of one name).
    #[error(
        "module `{name}` is ambiguous: it names {modules}; give the path or the qualified name"
    )]
    AmbiguousModule {
        /// The name given.
        name: String,
        /// The modules it names: path (qualified name).
        modules: String,
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

/// The actions a policy allows.
fn actions(policy: Policy) -> &'static [Action] {
    match policy {
        Policy::Recompute => &[Action::Recompute],
        Policy::Swap => &[Action::Swap],
        Policy::Both => &[Action::Recompute, Action::Swap],
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

/// The name that stands, in a list of modules, for every instance of the repeated block class.
pub const EVERY_BLOCK: &str = "every-block";

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

/// What the program already recomputes itself (`already`: path and qualified name): said in
/// a note, and the names returned for the plan; an error when nothing else is left to plan, or
/// when the modules asked for by hand name one of them (never wrapped twice).
fn program_checkpoints(
    already: &[(String, Option<String>)],
    candidates: &[Candidate],
    opts: &Options,
    notes: &mut Vec<String>,
) -> Result<Vec<String>, Error> {
    let names: Vec<String> = already
        .iter()
        .map(|(p, fqn)| fqn.clone().unwrap_or_else(|| p.clone()))
        .collect();
    if !already.is_empty() {
        notes.push(format!(
            "the program already recomputes {} module(s) itself (its own activation checkpointing): {}; the measured peak includes it, the plan acts on the other modules and never wraps one of these, or a module holding one, again",
            already.len(),
            names.join(", ")
        ));
    }
    if candidates.is_empty() {
        return Err(Error::NothingToPlan(if already.is_empty() {
            "no module's forward made activations that only its own backward reads: record with with_modules (steptrace capture does) to plan"
                .into()
        } else {
            format!(
                "every module with activations is already recomputed by the program itself ({}): nothing is left to checkpoint",
                names.join(", ")
            )
        }));
    }
    let asked = opts.modules.iter().flatten();
    if let Some(n) = asked.into_iter().find(|n| {
        already.iter().any(|(path, fqn)| {
            *n == path
                || fqn.as_deref() == Some(n.as_str())
                || path.rsplit('/').next() == Some(n.as_str())
        })
    }) {
        return Err(Error::NothingToPlan(format!(
            "{n} is already recomputed by the program itself (its own activation checkpointing): it is not wrapped twice"
        )));
    }
    Ok(names)
}

/// Whether the analysis holds what a plan acts on: memory events and an iteration.
fn plannable(t: &Trace, a: &Analysis) -> Result<(), Error> {
    if t.memory.is_empty() {
        return Err(Error::NothingToPlan(
            "the trace holds no memory events: capture with profile_memory (steptrace capture does) to plan"
                .into(),
        ));
    }
    if a.step.iterations.is_empty() {
        return Err(Error::NothingToPlan(
            "no iteration was found in the trace".into(),
        ));
    }
    Ok(())
}

/// The measured peak over the iterations, and what parameters and optimizer state hold at
/// it: no plan goes below that floor.
fn measured_peak_and_floor(iters: &[Iter]) -> (i64, i64) {
    let peaks: Vec<Peak> = iters
        .iter()
        .map(|it| sim::simulate(&it.measured, &[], None))
        .collect();
    let measured_peak = peaks.iter().map(|p| p.bytes).max().unwrap_or(0);
    let at_peak = peaks
        .iter()
        .max_by_key(|p| p.bytes)
        .map_or([0; crate::analysis::memory::CATEGORY_COUNT], |p| {
            p.by_category
        });
    let floor = at_peak[Category::Param.index()] + at_peak[Category::OptState.index()];
    (measured_peak, floor)
}

/// Every instance of the repeated block class recomputed: the reference point users pick by
/// hand.
fn every_block_point(ev: &Evaluator<'_>, candidates: &[Candidate], class: &str) -> CurvePoint {
    let all = every_block_choices(candidates, class);
    let n = all.len();
    CurvePoint {
        label: format!("every {class} ({n})"),
        decisions: n,
        peak_bytes: ev.peak(&all).0.bytes,
        step_time_s: ev.step(&all),
    }
}

/// Makes the plan: the run's measured iterations and rates, the candidates, the rounds (the
/// given modules, or the greedy search), and the prediction for the plan they end in.
pub fn plan(t: &Trace, a: &Analysis, opts: &Options) -> Result<Plan, Error> {
    plannable(t, a)?;
    let ids = a.liveness.identities.as_ref();
    let mut notes = build::first_notes(a);
    let (rates, bw_source) = build::rates(a, opts, &mut notes);
    let (iters, iter_index) = build::measured_iterations(t, a, rates.cpu_scale)?;
    let s = &a.summary;
    let base_step = s.step_time_s;
    let replayed = candidates::replayed_forward_paths(t, &a.step);
    let candidates = build_candidates(t, a, &replayed, ids, &iters, &iter_index, &rates);
    let already = candidates::already_recomputed(t, a, &replayed);
    let already_names = program_checkpoints(&already, &candidates, opts, &mut notes)?;

    let (measured_peak, floor) = measured_peak_and_floor(&iters);
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
    let curve = build::curve(&ev, &rounds, measured_peak, opts.modules.is_some());
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
    let chosen: &[Choice] = if take == 0 { &[] } else { &rounds[take - 1] };
    let decisions = build::decisions(&ev, chosen, measured_peak);
    // The search never takes a block twice; modules the user names may nest (a checkpoint
    // inside a checkpointed module still lowers the peak of the outer one's recompute:
    // Lightning's demo with both `Transformer`s recomputed, predicted within 0.04%).
    debug_assert!(
        opts.modules.is_some() || !dropped_twice(&candidates, chosen),
        "a block dropped twice"
    );
    let (peak, worst_iter) = ev.peak(chosen);
    let predicted_step = ev.step(chosen);
    let feasible = budget.is_none_or(|b| peak.bytes <= b);

    let every = every_block
        .as_ref()
        .map(|class| every_block_point(&ev, &candidates, class));
    let timeline = Some(build::timeline(&ev, chosen, worst_iter));

    let by_category: BTreeMap<String, i64> = CATEGORIES
        .iter()
        .zip(peak.by_category.iter())
        .map(|(c, b)| (c.key().to_owned(), *b))
        .collect();
    Ok(Plan {
        format_version: FORMAT_VERSION,
        steptrace_version: env!("CARGO_PKG_VERSION").into(),
        run: s.name.clone(),
        budget_bytes: budget,
        policy: opts.policy,
        bandwidth_gbps: (rates.htod_gbps, rates.dtoh_gbps, bw_source.as_str().into()),
        overheads: rates.overheads,
        gpu_busy_s: s.gpu_busy_s,
        host_lead_s: rates.host_lead_s,
        measured_peak_bytes: measured_peak,
        measured_step_time_s: base_step,
        step_time_source: s.step_time_source,
        liveness_source: if ids.is_some() {
            "execution_trace"
        } else {
            "memory_events"
        }
        .into(),
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
        already_recomputed: already_names,
    })
}

/// How deep a module path is: its number of `/`.
pub(super) fn depth_of(path: &str) -> usize {
    path.matches('/').count()
}

/// Whether `module` is `path` or inside it, on whole names (`Block_10` is not in `Block_1`).
pub(super) fn under(module: &str, path: &str) -> bool {
    module == path
        || (module.len() > path.len()
            && module.starts_with(path)
            && module.as_bytes()[path.len()] == b'/')
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
        let class_of = crate::model::module_class;
        assert_eq!(class_of("Block_10"), "Block");
        assert_eq!(class_of("Block"), "Block");
        assert_eq!(class_of("My_Net_2"), "My_Net");
    }

    #[test]
    fn issue20_never_twice_sees_a_shared_block() {
        let c = |path: &str, blocks: Vec<usize>| Candidate {
            path: path.into(),
            instance: path.into(),
            fqn: None,
            class: "X".into(),
            depth: 0,
            added: vec![BTreeMap::new()],
            dropped_bytes: 0,
            dropped_blocks: vec![blocks],
            held: vec![Vec::new()],
            work: vec![BTreeMap::new()],
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
