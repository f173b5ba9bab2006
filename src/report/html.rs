//! `report.html`: one self-contained page (summary, tables, the plots inline as SVG) that a
//! browser opens from disk.

use std::fmt::Write;
use std::path::Path;

use super::{human_bytes, human_time, Error};
use crate::analysis::Analysis;
use crate::diagnostics::Diagnostics;

pub(super) fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// An HTML table of `rows` under the headings `head`; a table of name-value pairs passes
/// headings that are all empty and gets no heading row (a blank grey bar otherwise).
pub(super) fn table(o: &mut String, head: &[&str], rows: impl Iterator<Item = Vec<String>>) {
    o.push_str("<table>");
    if head.iter().any(|h| !h.is_empty()) {
        o.push_str("<thead><tr>");
        for h in head {
            let _ = write!(o, "<th>{}</th>", esc(h));
        }
        o.push_str("</tr></thead>");
    }
    o.push_str("<tbody>");
    for r in rows {
        o.push_str("<tr>");
        for c in r {
            let _ = write!(o, "<td>{}</td>", esc(&c));
        }
        o.push_str("</tr>");
    }
    o.push_str("</tbody></table>");
}

/// Writes `report.html` into `dir`, inlining the SVG plots given (name, text), in order.
/// The page's head, style and title heading.
pub(super) fn page_head(title: &str) -> String {
    let mut o = String::new();
    let _ = write!(
        o,
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>steptrace: {}</title><style>\
         body{{font-family:sans-serif;margin:2em;max-width:1300px}}table{{border-collapse:collapse;margin:1em 0}}\
         td,th{{border:1px solid #ccc;padding:3px 8px;font-size:13px;text-align:left}}th{{background:#eee}}\
         .plot svg{{max-width:100%;height:auto;border:1px solid #eee}}</style></head><body>",
        esc(title)
    );
    let _ = write!(o, "<h1>steptrace: {}</h1>", esc(title));
    o
}

/// The plots inline (the SVG element, without its XML prolog), each with its name as id.
fn plots(o: &mut String, svgs: &[(&str, String)]) {
    // No heading over nothing: a trace with nothing to plot has no plots section.
    if svgs.is_empty() {
        return;
    }
    o.push_str("<h2>Plots</h2>");
    for (name, svg) in svgs {
        let body = svg.find("<svg").map_or(svg.as_str(), |i| &svg[i..]);
        let _ = write!(o, "<div class=\"plot\" id=\"{name}\">{body}</div>");
    }
}

/// `report.html` of a distributed run: the ranks table, the straggler, the plots
/// inline, and a link to each rank's own report.
pub(super) fn write_ranks(
    dir: &Path,
    title: &str,
    r: &crate::analysis::ranks::Ranks,
    svgs: &[(&str, String)],
) -> Result<(), Error> {
    let mut o = page_head(title);
    o.push_str("<h2>Ranks</h2>");
    let pct = |g: &crate::analysis::kernels::Temporal, ns| {
        g.pct(ns).map_or(String::new(), |p| format!("{p:.2}%"))
    };
    table(
        &mut o,
        &[
            "rank",
            "trace",
            "iterations",
            "step time",
            "GPU idle",
            "compute",
            "non-compute",
            "communication",
            "overlap",
            "peak allocated",
        ],
        r.ranks.iter().map(|x| {
            let g = &x.gpu;
            vec![
                x.rank.to_string(),
                x.trace.clone(),
                x.iterations.to_string(),
                human_time(x.step_time_s),
                pct(g, g.idle_ns),
                pct(g, g.compute_ns),
                pct(g, g.non_compute_ns),
                human_time(g.communication_ns as f64 * 1e-9),
                g.comm_comp_overlap_pct
                    .map_or(String::new(), |p| format!("{p:.1}%")),
                x.peak_allocated_bytes.map_or(String::new(), human_bytes),
            ]
        }),
    );
    match (&r.straggler, &r.no_straggler_reason) {
        (Some(s), _) => {
            let _ = write!(
                o,
                "<h2>Straggler: rank {}</h2><p>{}.</p>",
                s.rank,
                esc(&super::ranks::verdict(s))
            );
            table(
                &mut o,
                &["node", "time", "straggler", "other ranks (median)"],
                s.slower_nodes.iter().map(|n| {
                    vec![
                        n.node.clone(),
                        n.time.as_str().to_owned(),
                        human_time(n.straggler_s),
                        human_time(n.others_s),
                    ]
                }),
            );
        }
        (None, Some(why)) => {
            let _ = write!(o, "<p>No straggler named: {}.</p>", esc(why));
        }
        (None, None) => {}
    }
    if !r.by_iteration.is_empty() {
        o.push_str("<h2>Straggler per iteration</h2>");
        table(
            &mut o,
            &["iteration", "rank", "others waited for it", "all waiting"],
            r.by_iteration.iter().map(|i| {
                vec![
                    i.iteration.clone(),
                    i.rank.to_string(),
                    human_time(i.wait_caused_s),
                    human_time(i.wait_s),
                ]
            }),
        );
    }
    for (rank, why) in &r.not_analysed {
        let _ = write!(o, "<p>Rank {rank} not analysed: {}</p>", esc(why));
    }
    plots(&mut o, svgs);
    o.push_str("<h2>Each rank</h2><ul>");
    for x in &r.ranks {
        let _ = write!(
            o,
            "<li><a href=\"rank{0}/report.html\">rank {0}</a></li>",
            x.rank
        );
    }
    o.push_str("</ul></body></html>\n");
    super::write_file(&dir.join("report.html"), o.as_bytes())
}

pub(super) fn write(
    dir: &Path,
    svgs: &[(&str, String)],
    a: &Analysis,
    diag: &Diagnostics,
    memory_view: Option<String>,
) -> Result<(), Error> {
    let s = &a.summary;
    let mut o = page_head(&s.name);
    o.push_str("<h2>Summary</h2>");
    table(&mut o, &["", ""], summary_rows(s).into_iter());
    // The warnings qualify the figures above: they come right after them, not at the end.
    let lines = diag.lines();
    if !lines.is_empty() {
        o.push_str("<h2>Warnings</h2><ul>");
        for l in lines {
            let _ = write!(o, "<li>{}</li>", esc(&l));
        }
        o.push_str("</ul>");
    }
    for l in super::input_lacks(a) {
        let (what, rest) = l.split_once(": ").unwrap_or((l, ""));
        let _ = write!(o, "<p><b>{}</b>: {}</p>", esc(what), esc(rest));
    }
    super::waits::section(&mut o, s);
    if s.peak_allocated_bytes.is_some() {
        o.push_str("<h2>Memory at the peak</h2>");
        table(
            &mut o,
            &["category", "bytes", "size"],
            steptrace_formats::summary::by_name_order(&s.peak_breakdown_bytes)
                .into_iter()
                .map(|(k, v)| vec![k.key().to_owned(), v.to_string(), human_bytes(*v)]),
        );
    }
    top_nodes(&mut o, a);
    if !a.liveness.activations.is_empty() {
        largest_activations(&mut o, a);
    }
    plots(&mut o, svgs);
    if let Some(v) = memory_view {
        o.push_str(
            "<p>The memory view below replays the snapshot's whole history, from the start of \
             recording to the window's end: its peak is over all of it, where the summary's \
             is over the profiled iterations only, so the two can differ.</p>",
        );
        o.push_str(&v);
    }
    o.push_str("</body></html>\n");
    let path = dir.join("report.html");
    super::write_file(&path, o.as_bytes())
}

/// The summary table's GPU rows: the utilisation (against the program's own step where it is
/// known) and why the GPU waits.
fn gpu_rows(s: &crate::analysis::Summary) -> Vec<Vec<String>> {
    let profiled = 100.0 * s.gpu_utilization_profiled;
    let mut rows = vec![match s.gpu_utilization {
            Some(u) => vec![
                "GPU utilisation".into(),
                format!(
                    "{:.0}%: busy {} of the program's own step (under the profiler {profiled:.0}%, its idle {:.0}% largely the profiler's host work)",
                    100.0 * u,
                    human_time(s.gpu_busy_s),
                    100.0 - profiled
                ),
            ],
            None if s.profiler_overhead.is_some() => vec![
                "GPU busy (median)".into(),
                format!(
                    "{} ({profiled:.0}% of the profiled step), more than the program's own step: no utilisation (see the warnings)",
                    human_time(s.gpu_busy_s),
                ),
            ],
            None => vec![
                "GPU busy (median)".into(),
                format!(
                    "{} ({profiled:.0}% of the profiled step, which the profiler's host work lengthens; the program's own step is not known)",
                    human_time(s.gpu_busy_s),
                ),
            ],
        }];
    let idle = super::console::idle_line(s);
    if let Some(rest) = idle
        .trim_end()
        .strip_prefix("GPU idle per profiled iteration ")
    {
        rows.push(vec![
            "why the GPU waits (idle per profiled iteration)".into(),
            rest.into(),
        ]);
    }
    rows
}

/// The report's summary table: what was analysed and the headline figures.
fn summary_rows(s: &crate::analysis::Summary) -> Vec<Vec<String>> {
    let mut rows = vec![
        vec!["trace".into(), s.trace.clone()],
        vec![
            "device".into(),
            match (&s.device, s.gpu_busy_s == 0.0) {
                (_, true) => "the CPU (no GPU activity in the trace)".into(),
                (Some(d), false) => d.clone(),
                (None, false) => "unknown GPU (the trace has no deviceProperties)".into(),
            },
        ],
        vec![
            "iterations".into(),
            format!("{} ({:?})", s.iterations, s.iteration_detection),
        ],
        vec![
            "nodes per iteration".into(),
            s.nodes_per_iteration.to_string(),
        ],
        vec![
            "step time (median)".into(),
            match s.profiler_overhead {
                Some(x) => format!(
                    "{} (the program's own, timed with nothing recorded); {} under the profiler ({x:.1}x)",
                    human_time(s.step_time_s),
                    human_time(s.step_time_instrumented_s)
                ),
                None => format!("{} (under the profiler)", human_time(s.step_time_s)),
            },
        ],
    ];
    // What the input does not hold is left out, not shown blank or as 0.
    if s.gpu_busy_s > 0.0 {
        rows.extend(gpu_rows(s));
    }
    let phases = super::console::phase_parts(s, s.gpu_busy_s == 0.0);
    if !phases.is_empty() {
        let mut line = phases.join(", ");
        if let Some(n) = super::console::phase_sum_note(s) {
            line.push_str(&format!(" ({n})"));
        }
        rows.push(vec![
            "by phase, per iteration (wall time; GPU time)".into(),
            line,
        ]);
    }
    if let Some(p) = s.peak_allocated_bytes {
        rows.push(vec!["peak allocated".into(), human_bytes(p)]);
        rows.push(vec![
            "peak at".into(),
            format!(
                "{} ({})",
                s.peak_node.clone().unwrap_or_default(),
                s.peak_iteration.clone().unwrap_or_default()
            ),
        ]);
    }
    if let Some(k) = s.backward_passes_per_iteration {
        rows.push(vec![
            "backward passes per iteration".into(),
            format!(
                "{k}: gradient accumulation over {k} micro-batches (or a step with {k} losses); per-node figures count each pass's nodes apart (#0 … #{})",
                k - 1
            ),
        ]);
    }
    if let Some(g) = &s.cuda_graphs {
        let line = super::console::graphs_line(g);
        rows.push(vec![
            "CUDA graphs".into(),
            line.trim_end()
                .trim_start_matches("CUDA graphs: ")
                .to_owned(),
        ]);
    }
    if s.flops_counted() && s.flops_per_iteration == 0 {
        rows.push(vec![
            "FLOPs per iteration".into(),
            "none of its ops has a FLOP formula".into(),
        ]);
    } else if s.flops_counted() {
        rows.push(vec![
            "FLOPs per iteration".into(),
            super::flops::human_flops(s.flops_per_iteration as f64),
        ]);
        rows.push(vec![
            "FlopCounterMode FLOPs per iteration".into(),
            super::flops::human_flops(s.matmul_flops_per_iteration as f64),
        ]);
    }
    if s.activations > 0 || s.peak_allocated_bytes.is_some() {
        rows.push(vec![
            "activations".into(),
            format!("{} (liveness from {:?})", s.activations, s.liveness_source),
        ]);
    }
    rows
}

/// The 20 nodes with the most GPU time; by CPU time in a trace with no GPU time; a sentence
/// where the iterations hold no node (an empty table would read as a step that did nothing).
fn top_nodes(o: &mut String, a: &Analysis) {
    if a.node_stats.is_empty() {
        o.push_str("<h2>Nodes</h2><p>No operator runs inside the profiled iterations (");
        o.push_str(&esc(&a.summary.iteration_labels.join(", ")));
        o.push_str("): the trace's operators all lie outside them.</p>");
        return;
    }
    if super::nodes_without_gpu_time(&a.node_stats) {
        return top_nodes_by_cpu(o, a);
    }
    let by_time = super::nodes_by_time(&a.node_stats, |n| n.median_run_time_s);
    o.push_str("<h2>Top nodes by GPU time</h2>");
    // Without memory data a peak column would read 0 B on every row.
    let memory = a.summary.peak_allocated_bytes.is_some();
    let head: &[&str] = if memory {
        &[
            "order", "node", "phase", "GPU time", "kernels", "peak", "type",
        ]
    } else {
        &["order", "node", "phase", "GPU time", "kernels"]
    };
    // Only nodes with GPU time: a short step's list was padded with 0.0 µs rows.
    table(
        o,
        head,
        by_time
            .iter()
            .filter(|n| n.median_run_time_s > 0.0)
            .take(20)
            .map(|n| {
                let mut row = vec![
                    n.rank.to_string(),
                    n.node_name.clone(),
                    n.gtype.as_str().into(),
                    human_time(n.median_run_time_s),
                    n.kernels.to_string(),
                ];
                if memory {
                    row.push(human_bytes(n.median_peak_mem_bytes));
                    row.push(n.node_type.as_str().into());
                }
                row
            }),
    );
}

/// The 20 nodes with the most host time, for a trace with no GPU time.
fn top_nodes_by_cpu(o: &mut String, a: &Analysis) {
    let by_time = super::nodes_by_time(&a.node_stats, |n| n.median_cpu_time_s);
    o.push_str("<h2>Top nodes by CPU time</h2><p>No node has GPU time.</p>");
    table(
        o,
        &["order", "node", "phase", "CPU time"],
        by_time.iter().take(20).map(|n| {
            vec![
                n.rank.to_string(),
                n.node_name.clone(),
                n.gtype.as_str().into(),
                human_time(n.median_cpu_time_s),
            ]
        }),
    );
}

/// The 20 largest activations with their liveness.
fn largest_activations(o: &mut String, a: &Analysis) {
    let mut acts: Vec<_> = a.liveness.activations.iter().collect();
    acts.sort_by(|x, y| {
        y.median_mem_size_bytes
            .cmp(&x.median_mem_size_bytes)
            .then(x.creation_rank.cmp(&y.creation_rank))
    });
    o.push_str(
        "<h2>Largest activations</h2><p>Created, last forward use and first backward use are \
         places in the step's execution order (the nodes' <code>order</code> above), not times.</p>",
    );
    table(
        o,
        &[
            "activation",
            "size",
            "created (order)",
            "last fw use (order)",
            "first bw use (order)",
            "inactive",
            "recompute",
            "swap",
        ],
        acts.iter().take(20).map(|x| {
            vec![
                x.activation_name.clone(),
                human_bytes(x.median_mem_size_bytes),
                x.creation_rank.to_string(),
                x.last_fw_use_rank.to_string(),
                x.first_bw_use_rank.to_string(),
                human_time(x.inactive_time_s),
                human_time(x.recomp_time_s),
                human_time(x.swap_time_s),
            ]
        }),
    );
}
