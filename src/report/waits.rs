//! The report's "Why the GPU waits" section: the profiled step's critical path as a bar split
//! by what it waited for, the busiest stream's idle time as a bar split by cause, and the ops
//! holding most of the path. Every figure is the profiled iterations', and says so.

use std::fmt::Write;

use steptrace_formats::summary::{IdleCause, PathKind};

use super::console::human_time;
use super::html::{esc, table};
use crate::analysis::Summary;

const BAR_W: f64 = 760.0;

fn kind_colour(k: PathKind) -> &'static str {
    match k {
        PathKind::Host => "#d95f02",
        PathKind::LaunchDelay => "#e6ab02",
        PathKind::Kernel => "#1b9e77",
        PathKind::Memcpy => "#66a61e",
        PathKind::Memset => "#a6d854",
        PathKind::StreamGap => "#bbbbbb",
        PathKind::CrossStream => "#7570b3",
        PathKind::Sync => "#e7298a",
    }
}

fn cause_colour(c: IdleCause) -> &'static str {
    match c {
        IdleCause::HostWait => "#d95f02",
        IdleCause::DataLoading => "#a6761d",
        IdleCause::HostSync => "#e7298a",
        IdleCause::KernelWait => "#bbbbbb",
        IdleCause::CommunicationWait => "#7570b3",
        IdleCause::Other => "#666666",
    }
}

/// One horizontal bar of `parts` (label, seconds, colour), widths by share of their sum, drawn
/// with boxes rather than SVG (the report's SVGs are its plots), and its legend.
fn bar(o: &mut String, title: &str, parts: &[(String, f64, &str)]) {
    let total: f64 = parts.iter().map(|p| p.1).sum();
    if total <= 0.0 {
        return;
    }
    let _ = write!(
        o,
        "<p>{}</p><div role=\"img\" style=\"display:flex;width:{BAR_W}px;height:24px;border:1px solid #eee\">",
        esc(title)
    );
    for (label, v, colour) in parts.iter().filter(|p| p.1 > 0.0) {
        let _ = write!(
            o,
            "<div title=\"{}: {} ({:.1}%)\" style=\"width:{:.3}%;background:{colour}\"></div>",
            esc(label),
            human_time(*v),
            100.0 * v / total,
            100.0 * v / total
        );
    }
    o.push_str("</div><table><thead><tr><th>part</th><th>per iteration</th><th>share</th></tr></thead><tbody>");
    for (label, v, colour) in parts.iter().filter(|p| p.1 > 0.0) {
        let _ = write!(
            o,
            "<tr><td><span style=\"display:inline-block;width:12px;height:12px;background:{colour}\"></span> {}</td><td>{}</td><td>{:.1}%</td></tr>",
            esc(label),
            human_time(*v),
            100.0 * v / total
        );
    }
    o.push_str("</tbody></table>");
}

/// The section, where the run has a critical path or idle time.
pub(super) fn section(o: &mut String, s: &Summary) {
    if s.critical_path.is_none() && s.idle.is_none() {
        return;
    }
    o.push_str("<h2>Why the GPU waits</h2>");
    if let Some(p) = &s.critical_path {
        let parts: Vec<(String, f64, &str)> = PathKind::ALL
            .iter()
            .map(|&k| {
                let v = p.per_iteration_s.get(&k).copied().unwrap_or(0.0);
                (k.as_str().replace('_', " "), v, kind_colour(k))
            })
            .collect();
        let mut title = format!(
            "The critical path of a profiled iteration, {}: the host {:.0}% of it (host time under the profiler",
            human_time(p.length_s),
            100.0 * p.host_share
        );
        match p.host_s_at_program_speed {
            Some(h) => {
                let _ = write!(
                    title,
                    "; at the program's own speed about {})",
                    human_time(h)
                );
            }
            None => title.push(')'),
        }
        bar(o, &title, &parts);
        let _ = write!(
            o,
            "<p>{}-bound: a host that cost nothing (CUDA graphs, a faster host) would leave the GPU's busy time, {}, of the {} step.</p>",
            esc(&p.bound),
            human_time(p.host_free_step_s),
            human_time(s.step_time_s)
        );
        if !p.top_ops.is_empty() {
            o.push_str("<p>What holds the path (host stretches by node, GPU work by the op that launched it):</p>");
            table(
                o,
                &["op", "on the path per iteration"],
                p.top_ops
                    .iter()
                    .map(|op| vec![op.op.clone(), human_time(op.path_s)]),
            );
        }
    }
    if let Some(idle) = &s.idle {
        let idle_total: f64 = idle.per_iteration_s.values().sum();
        let busy = (s.step_time_instrumented_s - idle_total).max(0.0);
        let mut parts: Vec<(String, f64, &str)> = vec![("busy".into(), busy, "#1b9e77")];
        parts.extend(IdleCause::ALL.iter().map(|&c| {
            let v = idle.per_iteration_s.get(&c).copied().unwrap_or(0.0);
            (
                format!("idle: {}", c.as_str().replace('_', " ")),
                v,
                cause_colour(c),
            )
        }));
        bar(
            o,
            &format!(
                "Stream {} over a profiled iteration: busy, and idle by cause (host causes lengthened by the profiler)",
                idle.stream
            ),
            &parts,
        );
    }
}
