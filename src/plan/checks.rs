//! What the planner checks and measures before it searches: that the run holds what a plan
//! acts on, what the program already recomputes itself, the measured peak and the floor no
//! plan goes below, and the every-block reference point.

use super::candidates::{Candidate, Iter};
use super::search::{every_block_choices, Evaluator};
use super::sim::{self, Peak};
use super::{CurvePoint, Error, Options};
use crate::analysis::memory::Category;
use crate::analysis::Analysis;
use crate::model::Trace;

/// What the program already recomputes itself (`already`: path and qualified name): said in
/// a note, and the names returned for the plan; an error when nothing else is left to plan, or
/// when the modules asked for by hand name one of them (never wrapped twice).
pub(super) fn program_checkpoints(
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
pub(super) fn plannable(t: &Trace, a: &Analysis) -> Result<(), Error> {
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
pub(super) fn measured_peak_and_floor(iters: &[Iter]) -> (i64, i64) {
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
pub(super) fn every_block_point(
    ev: &Evaluator<'_>,
    candidates: &[Candidate],
    class: &str,
) -> CurvePoint {
    let all = every_block_choices(candidates, class);
    let n = all.len();
    CurvePoint {
        label: format!("every {class} ({n})"),
        decisions: n,
        peak_bytes: ev.peak(&all).0.bytes,
        step_time_s: ev.step(&all),
    }
}
