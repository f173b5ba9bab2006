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
mod budget;
mod build;
mod call;
mod candidates;
mod checks;
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
pub use budget::Budget;
use candidates::*;
use checks::{every_block_point, measured_peak_and_floor, plannable, program_checkpoints};
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

/// Makes the plan: the run's measured iterations and rates, the candidates, the rounds (the
/// given modules, or the greedy search), and the prediction for the plan they end in.
pub fn plan(t: &Trace, a: &Analysis, opts: &Options) -> Result<Plan, Error> {
    plannable(t, a)?;
    let ids = a.liveness.identities.as_ref();
    let mut notes = build::first_notes(a);
    let spans = build::all_phase_spans(t, &a.step);
    let (rates, bw_source) = build::rates(&spans, a, opts, &mut notes);
    let (iters, iter_index) = build::measured_iterations(t, a, &rates, &spans)?;
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
        host_phases: build::host_phases(&ev, chosen),
        host_scale: build::host_scale(&rates),
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
mod tests;
