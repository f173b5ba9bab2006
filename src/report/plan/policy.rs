//! `plan --print-policy`: the plan as Python to paste into the training program. Nothing from
//! the input reaches it but as a comment's text or a string literal, escaped.

use std::fmt::Write as _;

use crate::plan::Plan;
use crate::report::{human_bytes, human_time};

/// The plan as Python a user pastes into the training program after the model is built
/// (`model`: the module the capture's qualified names are under): each recomputed module's
/// forward under non-reentrant `torch.utils.checkpoint`, each swapped one's under
/// `torch.autograd.graph.save_on_cpu`, by qualified name. A module the capture did not name
/// (a run captured before names were recorded) is listed by its instance name in a comment.
pub fn policy_code(p: &Plan) -> String {
    use crate::plan::Action;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "# steptrace plan for {}: {} module(s); predicted peak {} (measured without the plan: {}), step {}.",
        comment_text(&p.run),
        p.decisions.len(),
        human_bytes(p.predicted_peak_bytes),
        human_bytes(p.measured_peak_bytes),
        human_time(p.predicted_step_time_s)
    );
    let _ = writeln!(
        o,
        "# Paste after the model is built; `model` is the module the names below are under."
    );
    let names = |action: Action| -> Vec<String> {
        p.decisions
            .iter()
            .filter(|d| d.action == action)
            .filter_map(|d| d.fqn.as_deref().map(py_str))
            .collect()
    };
    let (rec, swp) = (names(Action::Recompute), names(Action::Swap));
    let unnamed: Vec<String> = p
        .decisions
        .iter()
        .filter(|d| d.fqn.is_none())
        .map(|d| comment_text(&d.instance))
        .collect();
    o.push_str("import torch\nfrom torch.utils.checkpoint import checkpoint\n\n");
    if !rec.is_empty() {
        o.push_str(
            "def _recompute(module):\n    forward = module.forward\n    module.forward = lambda *a, **k: checkpoint(forward, *a, use_reentrant=False, **k)\n\n",
        );
    }
    if !swp.is_empty() {
        o.push_str(
            "def _swap(module):\n    forward = module.forward\n    def swapped(*a, **k):\n        with torch.autograd.graph.save_on_cpu(pin_memory=True):\n            return forward(*a, **k)\n    module.forward = swapped\n\n",
        );
    }
    for (names, wrap) in [(&rec, "_recompute"), (&swp, "_swap")] {
        if !names.is_empty() {
            let _ = writeln!(
                o,
                "for name in [{}]:\n    {wrap}(model.get_submodule(name))",
                names.join(", ")
            );
        }
    }
    if !p.already_recomputed.is_empty() {
        let names: Vec<String> = p
            .already_recomputed
            .iter()
            .map(|n| comment_text(n))
            .collect();
        let _ = writeln!(
            o,
            "# Already recomputed by the program itself (left as it is): {}",
            names.join(", ")
        );
    }
    if !unnamed.is_empty() {
        let _ = writeln!(
            o,
            "# Not named by the capture (capture again with this build to have their names): {}",
            unnamed.join(", ")
        );
    }
    // Every block recomputed is what frameworks offer as one switch.
    let every = p.every_block.as_ref().is_some_and(|e| {
        e.decisions == p.decisions.len()
            && p.decisions.iter().all(|d| d.action == Action::Recompute)
            && p.decisions.windows(2).all(|w| w[0].class == w[1].class)
    });
    if every {
        let class = comment_text(&p.decisions[0].class);
        let _ = writeln!(
            o,
            "# This is every {class} recomputed: with HF Transformers, \
             model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={{\"use_reentrant\": False}}) \
             does the same for its blocks; with torchtitan, [activation_checkpoint] mode = \"full\"."
        );
    }
    o
}

/// Text for a `#` comment of printed Python: every control character and Unicode line
/// separator written as its escape, so no string from the input (a run folder's name, an
/// instance name) can end the comment and put a line of its own into code that users paste
/// and run.
fn comment_text(s: &str) -> String {
    s.chars()
        .flat_map(|c| {
            let escape = c.is_control() || matches!(c, '\u{2028}' | '\u{2029}');
            let one: Vec<char> = if escape {
                c.escape_unicode().collect()
            } else {
                vec![c]
            };
            one
        })
        .collect()
}

/// A Python string literal holding `s` exactly: backslashes, quotes and control characters
/// escaped the way Python reads them (Rust's `{:?}` writes `\u{1b}`, which Python refuses).
fn py_str(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '\\' => o.push_str("\\\\"),
            '"' => o.push_str("\\\""),
            c if c.is_control() || matches!(c, '\u{2028}' | '\u{2029}') => {
                let v = c as u32;
                let _ = if v <= 0xff {
                    write!(o, "\\x{v:02x}")
                } else {
                    write!(o, "\\u{v:04x}")
                };
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

#[cfg(test)]
mod tests {
    use super::{comment_text, policy_code, py_str};
    use crate::plan::{Action, Decision, Plan};

    /// Each action's modules get their own loop, by qualified name; a module without one is a
    /// comment. A plan read from plan.json, as `--print-policy` prints it.
    #[test]
    fn recomputed_and_swapped_modules_each_get_their_wrapper() {
        let d = |fqn: Option<&str>, instance: &str, action| Decision {
            module: String::new(),
            instance: instance.into(),
            fqn: fqn.map(str::to_owned),
            class: String::new(),
            action,
            activation_bytes: 0,
            peak_saved_bytes: 0,
            time_added_s: 0.0,
            predicted_peak_bytes: 0,
            predicted_step_time_s: 0.0,
        };
        let p = Plan {
            decisions: vec![
                d(Some("h.0"), "Block_0", Action::Recompute),
                d(Some("h.1"), "Block_1", Action::Swap),
                d(None, "Block_2", Action::Recompute),
            ],
            ..Plan::default()
        };
        let code = policy_code(&p);
        assert!(
            code.contains("for name in [\"h.0\"]:\n    _recompute(model.get_submodule(name))"),
            "{code}"
        );
        assert!(
            code.contains("for name in [\"h.1\"]:\n    _swap(model.get_submodule(name))"),
            "{code}"
        );
        assert!(
            code.contains("# Not named by the capture") && code.contains("Block_2"),
            "{code}"
        );
    }

    /// Issue 80, item 6: a newline in a run folder's or an instance's name put a line of the
    /// user's choosing into the printed Python.
    #[test]
    fn no_input_string_leaves_a_comment_or_a_string_literal() {
        let evil = "run\nimport os; os.system('x')\r\u{2028}\u{1b}[2J";
        let c = comment_text(evil);
        assert!(!c.contains(['\n', '\r', '\u{2028}', '\u{1b}']), "{c}");
        assert!(c.contains("import os"), "kept as text: {c}");
        let lit = py_str("a\"b\\c\nd\u{1b}");
        assert_eq!(lit, r#""a\"b\\c\x0ad\x1b""#);
    }
}
