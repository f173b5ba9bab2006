//! `plan.json`: which modules to recompute or swap, with the planner's predictions.
//!
//! Schema version [`FORMAT_VERSION`]. What a program needs to apply a plan is `decisions`, each
//! with `instance` (the module instance the capture shim matches, `Block_3`) and `action`
//! (`recompute` or `swap`); a hand-written plan may hold only that. Everything else is the
//! planner's prediction and how it was made, read back by `compare` and the sweep. A reader
//! refuses a `format_version` newer than its own (the Python shim does too); a file without
//! one is version 1.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The schema version this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;

/// What to do with a module.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Checkpoint: drop its saved activations, run its forward again in backward.
    Recompute,
    /// Copy its saved activations to pinned host memory and back.
    Swap,
}

impl Action {
    /// As written in plan.json.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Recompute => "recompute",
            Action::Swap => "swap",
        }
    }
}

/// Which actions the planner may choose.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Policy {
    /// Recompute only.
    #[default]
    Recompute,
    /// Swap only.
    Swap,
    /// Either, per module.
    Both,
}

/// One decision, with what the plan so far predicts once it is taken.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    /// The module's path from the root, as the trace nests them (`GPT_0/Block_3`).
    #[serde(default)]
    pub module: String,
    /// The instance name the capture shim matches (`Block_3`).
    pub instance: String,
    /// Its fully qualified name as `model.named_modules()` gives it (`transformer.h.3`), where
    /// the capture recorded the module tree: what users' code, Lightning, HF and torchtitan
    /// name modules by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fqn: Option<String>,
    /// Its class (`Block`).
    #[serde(default)]
    pub class: String,
    /// What is done with it.
    pub action: Action,
    /// Activation bytes it frees between its last forward use and its backward (one iteration).
    #[serde(default)]
    pub activation_bytes: i64,
    /// How much lower the predicted peak is for taking it.
    #[serde(default)]
    pub peak_saved_bytes: i64,
    /// Time it adds per step, s.
    #[serde(default)]
    pub time_added_s: f64,
    /// Predicted peak with every decision up to this one.
    #[serde(default)]
    pub predicted_peak_bytes: i64,
    /// Predicted step time with every decision up to this one, s.
    #[serde(default)]
    pub predicted_step_time_s: f64,
}

/// A point of the budget curve.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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

/// Profiled host time to the program's own, as the step model scales it: the profiler slows
/// a Python forward more than the autograd engine's backward, and both more or less than a
/// DataLoader's collation, so where capture timed the program's forward and backward each
/// scales by its own figure and the rest of the step by what is left of its host time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct HostScale {
    /// The step's host time outside the forward and the backward (the whole step's where
    /// those are not timed): the program's own over the profiled.
    pub rest: f64,
    /// The forward's (its outermost module's host time in capture's timing phase over the
    /// profiled forward), where known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forward: Option<f64>,
    /// The backward's (a backward call's host time over the profiled backward), where known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backward: Option<f64>,
}

/// The host's time in the forward and in the backward, s, as the step model replays a step
/// (median over the profiled iterations): each from its phase's first op to its last, waits
/// for the GPU included.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct HostPhases {
    /// The forward without the plan.
    pub forward_s: f64,
    /// The backward without the plan.
    pub backward_s: f64,
    /// The forward with the plan (a checkpoint's and a swap's own work in it).
    pub planned_forward_s: f64,
    /// The backward with the plan (recomputes, copies back and the waits they cause).
    pub planned_backward_s: f64,
}

/// The host work a checkpoint or a swap adds beyond its module's own ops, s: the capture
/// shim's probe on the capture's machine, or none where the run has no probe (the prediction
/// then leaves it out, and says so).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Overheads {
    /// A checkpoint's own host time per call.
    pub recompute_call_s: f64,
    /// Per op of the module, beyond the op's replay.
    pub recompute_per_op_s: f64,
    /// The swap hooks' host time per call.
    pub swap_call_s: f64,
    /// Per op of the module.
    pub swap_per_op_s: f64,
    /// Where they come from.
    pub source: OverheadSource,
}

/// Where a plan's [`Overheads`] come from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OverheadSource {
    /// The capture shim's probe.
    CaptureProbe,
    /// Not measured: left out.
    #[default]
    None,
}

/// One iteration's allocated memory, measured and with the plan: (ms from the iteration's
/// start, MiB). Drawn beside the plan; not part of the file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Timeline {
    /// The iteration's label.
    pub iteration: String,
    /// Measured.
    pub measured: Vec<(f64, f64)>,
    /// With the plan.
    pub planned: Vec<(f64, f64)>,
}

/// The planner's answer: plan.json. Every field but `decisions` may be absent on reading (a
/// hand-written plan).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Plan {
    /// The schema's version ([`FORMAT_VERSION`]); absent in files written before it was
    /// recorded, which are version 1.
    #[serde(default = "version_one")]
    pub format_version: u32,
    /// steptrace version that made it.
    #[serde(default)]
    pub steptrace_version: String,
    /// The run planned for.
    #[serde(default)]
    pub run: String,
    /// The budget, bytes (`None`: curve only).
    #[serde(default)]
    pub budget_bytes: Option<i64>,
    /// The actions the planner could choose.
    #[serde(default)]
    pub policy: Policy,
    /// Host→device and device→host bandwidth used for swaps, GB/s, and where it came from
    /// (`override`, `capture_probe`, `measured` from the trace's copies, or `default` for the
    /// GPU model).
    #[serde(default)]
    pub bandwidth_gbps: (f64, f64, String),
    /// The checkpoint's and the swap hooks' own host work used for step times.
    #[serde(default)]
    pub overheads: Overheads,
    /// GPU busy time per step, s: what the GPU does of the step, the rest it waits for the host.
    #[serde(default)]
    pub gpu_busy_s: f64,
    /// How far the host ran ahead of the GPU at the end of a step, s (capture's timing phase;
    /// 0 where not measured): the program's own host time per step is the step less it.
    #[serde(default)]
    pub host_lead_s: f64,
    /// How the step model turned profiled host time into the program's own.
    #[serde(default)]
    pub host_scale: HostScale,
    /// The host's time in the forward and in the backward as the step model replays them,
    /// without the plan and with it: what capture's `forward_host_s` and `backward_host_s`
    /// time in a run without the plan and in the planned run, to see which phase a step
    /// prediction misses in. None where the profiled iterations have no single forward and
    /// backward.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_phases: Option<HostPhases>,
    /// The measured peak (the allocator's, over the profiled iterations).
    #[serde(default)]
    pub measured_peak_bytes: i64,
    /// The step time the prediction starts from, s.
    #[serde(default)]
    pub measured_step_time_s: f64,
    /// Which step time that is: the program's own (`timing_phase`, `after_window`) or the
    /// profiled one (`instrumented`).
    #[serde(default)]
    pub step_time_source: crate::StepTimeSource,
    /// Where liveness comes from (`execution_trace` or `memory_events`).
    #[serde(default)]
    pub liveness_source: String,
    /// Parameters and optimizer state at the peak, bytes: no plan goes below it.
    #[serde(default)]
    pub floor_bytes: i64,
    /// The decisions, in the order taken.
    pub decisions: Vec<Decision>,
    /// Predicted peak with the plan, bytes.
    #[serde(default)]
    pub predicted_peak_bytes: i64,
    /// Predicted peak by category (param, grad, opt_state, activation, input, temporary,
    /// other), bytes.
    #[serde(default)]
    pub predicted_peak_by_category: BTreeMap<String, i64>,
    /// Predicted step time with the plan, s.
    #[serde(default)]
    pub predicted_step_time_s: f64,
    /// Whether the predicted peak is at or under the budget.
    #[serde(default)]
    pub feasible: bool,
    /// The lowest peak the greedy order reaches, bytes: the smallest budget it can meet.
    #[serde(default)]
    pub smallest_feasible_bytes: i64,
    /// Predicted peak and step time after each greedy decision, from none to all.
    #[serde(default)]
    pub curve: Vec<CurvePoint>,
    /// Every instance of the repeated block class recomputed, the choice users make by hand.
    #[serde(default)]
    pub every_block: Option<CurvePoint>,
    /// The iteration whose predicted peak is the plan's, and its timeline before and after.
    #[serde(skip)]
    pub timeline: Option<Timeline>,
    /// Limits of the prediction worth knowing.
    #[serde(default)]
    pub notes: Vec<String>,
    /// Modules the program already recomputes itself (its own activation checkpointing), by
    /// qualified name where known: the plan never wraps them, or a module holding one, again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub already_recomputed: Vec<String>,
}

fn version_one() -> u32 {
    1
}

/// Why a plan file cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadError {
    /// Not JSON at all.
    NotJson(String),
    /// JSON, but not a plan (a field missing or of the wrong kind).
    NotAPlan(String),
    /// Written for a newer schema than this build reads.
    NewerVersion(u32),
    /// A decision names no module instance the shim could match (`Block_3`: letters, digits
    /// and `_` only).
    BadInstance(usize),
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::NotJson(e) => write!(f, "not JSON ({e})"),
            ReadError::NotAPlan(e) => write!(
                f,
                "not a plan: {e} (a plan needs `decisions`, each with `instance` and `action`)"
            ),
            ReadError::NewerVersion(v) => write!(
                f,
                "plan format version {v} is newer than this build reads ({FORMAT_VERSION})"
            ),
            ReadError::BadInstance(i) => write!(
                f,
                "decision {i} names no module instance (`instance`: e.g. \"Block_3\")"
            ),
        }
    }
}

impl std::error::Error for ReadError {}

impl Plan {
    /// Reads plan.json's text, checking what applying it needs: a version this build reads and
    /// an instance name of letters, digits and `_` in every decision (the shim matches it
    /// against module names; nothing else may reach the program).
    pub fn from_json(text: &str) -> Result<Plan, ReadError> {
        let p: Plan = serde_json::from_str(text).map_err(|e| {
            if e.is_syntax() || e.is_eof() {
                ReadError::NotJson(e.to_string())
            } else {
                ReadError::NotAPlan(e.to_string())
            }
        })?;
        if p.format_version > FORMAT_VERSION {
            return Err(ReadError::NewerVersion(p.format_version));
        }
        for (i, d) in p.decisions.iter().enumerate() {
            let ok = !d.instance.is_empty()
                && d.instance
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !ok {
                return Err(ReadError::BadInstance(i + 1));
            }
        }
        Ok(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hand_written_plan_needs_only_its_decisions() {
        let p = Plan::from_json(r#"{"decisions": [{"instance": "Block_0", "action": "swap"}]}"#)
            .unwrap();
        assert_eq!((p.format_version, p.decisions[0].action), (1, Action::Swap));
        assert_eq!(p.policy, Policy::Recompute);
    }

    #[test]
    fn plan_files_that_cannot_be_applied_say_why() {
        let err = |t: &str| Plan::from_json(t).unwrap_err().to_string();
        assert!(err("{not json").starts_with("not JSON"));
        assert!(err(r#"{"plan": []}"#).contains("`decisions`"));
        assert!(err(r#"{"decisions": [{"instance": "Block_0"}]}"#).contains("`action`"));
        assert!(
            err(r#"{"decisions": [{"instance": "B", "action": "delete"}]}"#)
                .contains("unknown variant")
        );
        assert_eq!(
            err(r#"{"decisions": [{"instance": "x; rm", "action": "swap"}]}"#),
            "decision 1 names no module instance (`instance`: e.g. \"Block_3\")"
        );
        assert!(err(r#"{"format_version": 2, "decisions": []}"#).contains("version 2 is newer"));
    }

    #[test]
    fn a_plan_written_reads_back_the_same() {
        let p = Plan {
            format_version: FORMAT_VERSION,
            steptrace_version: "0.1.0".into(),
            policy: Policy::Both,
            bandwidth_gbps: (20.0, 19.5, "capture_probe".into()),
            decisions: vec![Decision {
                module: "GPT_0/Block_3".into(),
                instance: "Block_3".into(),
                fqn: Some("h.3".into()),
                class: "Block".into(),
                action: Action::Recompute,
                activation_bytes: 10,
                peak_saved_bytes: 8,
                time_added_s: 0.001,
                predicted_peak_bytes: 100,
                predicted_step_time_s: 0.05,
            }],
            predicted_peak_by_category: [("activation".to_owned(), 5)].into(),
            already_recomputed: vec!["h.0".into()],
            ..Plan::default()
        };
        let text = serde_json::to_string(&p).unwrap();
        let back = Plan::from_json(&text).unwrap();
        assert_eq!(serde_json::to_string(&back).unwrap(), text);
    }
}
