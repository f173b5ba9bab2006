//! report.html of a memory snapshot: the headline figures and tables, and the interactive
//! memory view (`assets/memory_view.js`, embedded with its data: the page works offline and
//! from disk). The data is bounded whatever the snapshot's size: the [`MAX_DRAWN`] largest
//! allocations one by one, the timeline at most `TIMELINE_POINTS` points a device, and every
//! smaller allocation as one band.

use std::fmt::Write as _;
use std::path::Path;

use rustc_hash::FxHashMap;
use serde::Serialize;

use super::console::human_bytes;
use super::html::{esc, page_head, table};
use super::Error;
use crate::analysis::snapshot::{self as snap, SnapshotAnalysis, SITE_KINDS};
use crate::model::snapshot::{Snapshot, StackId};

/// Allocations drawn one by one: those the analysis keeps.
const MAX_DRAWN: usize = snap::KEPT_INTERVALS;

const SCRIPT: &str = include_str!("assets/memory_view.js");

#[derive(Serialize)]
struct Data {
    kinds: Vec<&'static str>,
    /// Each kind's colour (the legend's too): the one table of them.
    colors: Vec<&'static str>,
    stacks: Vec<Vec<String>>,
    /// The trace's ops that made drawn allocations (a run with a trace), by `Allocs::op`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    ops: Vec<String>,
    smaller_note: String,
    devices: Vec<DeviceData>,
}

#[derive(Serialize)]
struct DeviceData {
    device: i64,
    entries: usize,
    timeline: Timeline,
    peak: PeakData,
    phases: Vec<PhaseData>,
    allocs: Allocs,
}

#[derive(Serialize, Default)]
struct Timeline {
    entry: Vec<usize>,
    time_ms: Vec<Option<f64>>,
    allocated: Vec<u64>,
    reserved: Vec<u64>,
}

#[derive(Serialize)]
struct PeakData {
    entry: i64,
    bytes: u64,
}

#[derive(Serialize)]
struct PhaseData {
    name: String,
    start: usize,
    end: usize,
    /// Not inside another range.
    outer: bool,
}

#[derive(Serialize, Default)]
struct Allocs {
    made: Vec<i64>,
    freed: Vec<i64>,
    size: Vec<u64>,
    stack: Vec<u32>,
    kind: Vec<u8>,
    /// Index into `Data::ops` of the op that made it, -1 where the trace has none (empty
    /// without a trace).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    op: Vec<i32>,
}

/// The view's data for every device; `makers[d][i]`: the op that made device `d`'s `i`-th
/// kept allocation, where a trace says (empty without a trace).
fn data(s: &Snapshot, a: &SnapshotAnalysis, makers: &[Vec<Option<String>>]) -> Data {
    let mut stacks: Vec<Vec<String>> = Vec::new();
    let mut ops: Vec<String> = Vec::new();
    let mut op_index: FxHashMap<&str, i32> = FxHashMap::default();
    let mut stack_index: FxHashMap<StackId, (u32, u8)> = FxHashMap::default();
    let mut smaller = (0usize, 0u64);
    let mut devices = Vec::new();
    for (di, d) in a.devices.iter().enumerate() {
        // The analysis kept the largest allocations, in the order they were made.
        let drawn = &d.intervals;
        let made_by = makers.get(di).filter(|m| m.iter().any(Option::is_some));
        if d.allocations > drawn.len() {
            smaller.0 += d.allocations - drawn.len();
            smaller.1 = smaller.1.max(d.largest_not_kept);
        }
        let mut allocs = Allocs::default();
        for v in drawn {
            let (id, kind) = *stack_index.entry(v.stack).or_insert_with(|| {
                // Bounded as the flame-graph lines are: a pickle can repeat one long frame
                // many times in a stack for a few bytes each (13 MB of page from 239 KB).
                let (mut frames, left) =
                    snap::sites::bounded_frames(s, s.stack(v.stack).iter().copied());
                if left > 0 {
                    frames.push(format!("…(+{left} frames)"));
                }
                stacks.push(frames);
                (
                    stacks.len() as u32 - 1,
                    snap::sites::kind(s, s.stack(v.stack)) as u8,
                )
            });
            allocs.made.push(v.made.map_or(-1, i64::from));
            allocs.freed.push(v.freed.map_or(-1, i64::from));
            allocs.size.push(v.size);
            allocs.stack.push(id);
            allocs.kind.push(kind);
        }
        if let Some(m) = made_by {
            for i in 0..drawn.len() {
                let op = m.get(i).and_then(Option::as_deref).map_or(-1, |name| {
                    *op_index.entry(name).or_insert_with(|| {
                        ops.push(name.to_owned());
                        ops.len() as i32 - 1
                    })
                });
                allocs.op.push(op);
            }
        }
        let mut timeline = Timeline::default();
        for p in &d.timeline {
            timeline.entry.push(p.entry);
            timeline
                .time_ms
                .push(p.time_us.zip(a.t0_us).map(|(t, z)| (t - z) as f64 / 1e3));
            timeline.allocated.push(p.allocated_bytes);
            timeline.reserved.push(p.reserved_bytes);
        }
        let entry_at = |t: i64| d.time_index.entry_at(t, d.entries);
        let mut phases: Vec<PhaseData> = a
            .phases
            .iter()
            .filter(|p| p.device == d.device)
            .filter_map(|p| {
                Some(PhaseData {
                    name: p.name.clone(),
                    start: entry_at(p.start_us),
                    end: entry_at(p.end_us?),
                    outer: true,
                })
            })
            .collect();
        // Outermost: no longer range holds it (ranges come in time order, outer first).
        phases.sort_by_key(|p| (p.start, std::cmp::Reverse(p.end)));
        let mut reach = None;
        for p in &mut phases {
            if reach.is_some_and(|r| p.end <= r) {
                p.outer = false;
            } else {
                reach = Some(p.end);
            }
        }
        devices.push(DeviceData {
            device: d.device,
            entries: d.entries,
            timeline,
            peak: PeakData {
                entry: d.peak.entry.map_or(-1, |e| e as i64),
                bytes: d.peak.allocated_bytes,
            },
            phases,
            allocs,
        });
    }
    Data {
        kinds: SITE_KINDS.iter().map(|k| k.name()).collect(),
        colors: SITE_KINDS.iter().map(|&k| kind_color(k)).collect(),
        stacks,
        ops,
        smaller_note: if smaller.0 == 0 {
            "allocations too small to draw at this zoom".into()
        } else {
            format!(
                "{} allocations of {} or less, beyond the {MAX_DRAWN} largest a device drawn one by one",
                smaller.0,
                human_bytes(smaller.1 as i64)
            )
        },
        devices,
    }
}

/// Writes report.html.
pub(super) fn write(path: &Path, s: &Snapshot, a: &SnapshotAnalysis) -> Result<(), Error> {
    let mut o = page_head(&a.file);
    let hb = |b: u64| human_bytes(b as i64);
    table(
        &mut o,
        &["", ""],
        [
            vec!["snapshot".into(), a.file.clone()],
            vec!["history entries".into(), a.entries.to_string()],
            vec![
                "segments at the end".into(),
                format!(
                    "{} · {} reserved · {} asked for · {} free ({} rounding)",
                    a.segments.segments,
                    hb(a.segments.reserved_bytes),
                    hb(a.segments.allocated_bytes),
                    hb(a.segments.free_internal_bytes + a.segments.free_external_bytes),
                    hb(a.segments.free_internal_bytes)
                ),
            ],
        ]
        .into_iter(),
    );
    legend(&mut o);
    for d in &a.devices {
        let p = &d.peak;
        let _ = write!(
            o,
            "<h2>Device {}: peak {} allocated{}</h2>",
            d.device,
            hb(p.allocated_bytes),
            p.phase
                .as_ref()
                .map(|ph| format!(" in {}", esc(ph)))
                .unwrap_or_default(),
        );
        view_div(&mut o, d.device);
        o.push_str("<h3>At the peak, by the code that allocated it</h3>");
        table(
            &mut o,
            &["kind", "bytes", "blocks"],
            p.by_kind
                .iter()
                .map(|k| vec![k.kind.name().into(), hb(k.bytes), k.blocks.to_string()]),
        );
        for (what, sites) in [
            ("Python frame", &p.by_python_frame),
            ("C++ frame", &p.by_cpp_frame),
        ] {
            if sites.is_empty() {
                continue;
            }
            let _ = write!(o, "<h3>At the peak, by {what}</h3>");
            table(
                &mut o,
                &["site", "kind", "bytes", "blocks"],
                sites.iter().take(15).map(|x| {
                    vec![
                        x.site.clone(),
                        x.kind.name().into(),
                        hb(x.bytes),
                        x.blocks.to_string(),
                    ]
                }),
            );
        }
        if !d.never_freed.is_empty() {
            o.push_str("<h3>Allocated within the history and never freed in it</h3>");
            table(
                &mut o,
                &["site", "kind", "bytes", "blocks", "entries"],
                d.never_freed.iter().take(15).map(|n| {
                    vec![
                        n.site.clone(),
                        n.kind.name().into(),
                        hb(n.bytes),
                        n.blocks.to_string(),
                        format!("{}-{}", n.first_entry, n.last_entry),
                    ]
                }),
            );
        }
    }
    o.push_str(&script(s, a, &[]));
    o.push_str("</body></html>\n");
    super::write_file(path, o.as_bytes())
}

/// JSON text that is safe inside a `<script>` element: every `<` and `>` (they occur only
/// inside strings) written as its `\u` escape, so no string from the input (`</script>`,
/// `<!--<script>`, which puts the HTML parser in a state where the element's end is missed and
/// the rest of the page is swallowed) can end or disturb the element. The JSON means the same.
fn script_safe_json(json: &str) -> String {
    json.replace('<', "\\u003c").replace('>', "\\u003e")
}

/// The view's style, data and script, to end a page whose `memory-view-N` divs it fills.
fn script(s: &Snapshot, a: &SnapshotAnalysis, makers: &[Vec<Option<String>>]) -> String {
    let mut o = String::from(STYLE);
    // The data is plain numbers and strings: it always serialises.
    let json = script_safe_json(
        &serde_json::to_string(&data(s, a, makers)).unwrap_or_else(|_| "{}".into()),
    );
    o.push_str("<style>");
    for k in SITE_KINDS {
        let _ = write!(o, ".k-{}{{background:{}}}", k.name(), kind_color(k));
    }
    o.push_str("</style>");
    let _ = write!(
        o,
        "<script id=\"steptrace-memory\" type=\"application/json\">{json}</script><script>{SCRIPT}</script>"
    );
    o
}

/// One device's view: controls, the canvas, the tooltip and the pinned panel.
fn view_div(o: &mut String, device: i64) {
    let _ = write!(
        o,
        "<div class=mv id=\"memory-view-{device}\"><label><input type=checkbox class=reserved> reserved</label> \
         <button class=zoom-peak>zoom to the peak</button> <button class=zoom-reset>whole history</button> \
         <span style=\"font-size:12px;color:#555\">wheel: zoom · drag: pan · hover: an allocation · click: pin it</span>\
         <canvas></canvas><div class=tip></div><div class=pinned></div></div>"
    );
}

/// The legend of the kinds' colours.
fn legend(o: &mut String) {
    o.push_str("<div class=legend>");
    for k in SITE_KINDS {
        let _ = write!(o, "<span><i class=\"k-{0}\"></i>{0}</span>", k.name());
    }
    o.push_str("<span><i style=\"background:#ddd\"></i>smaller allocations</span></div>");
}

/// The section a trace's report.html gets when the run has a memory snapshot: its history as
/// the interactive view, device by device, each drawn allocation the trace saw made with the
/// op that made it (`makers`, as [`data`] takes them).
pub(super) fn section(
    s: &Snapshot,
    a: &SnapshotAnalysis,
    makers: &[Vec<Option<String>>],
) -> String {
    let mut o = String::from(
        "<h2>Memory over the snapshot's history</h2><p>The allocator's history from the memory snapshot (all of it, not only the profiled window), drawn as memory_viz's Active Memory Timeline.</p>",
    );
    legend(&mut o);
    for d in &a.devices {
        let _ = write!(
            o,
            "<h3>Device {}: peak {} allocated</h3>",
            d.device,
            human_bytes(d.peak.allocated_bytes as i64)
        );
        view_div(&mut o, d.device);
    }
    o.push_str(&script(s, a, makers));
    o
}

const STYLE: &str = "<style>.mv{position:relative;margin:1em 0}.mv canvas{width:100%;height:440px;border:1px solid #ddd;cursor:crosshair}\
     .mv .tip{position:absolute;display:none;background:#fff;border:1px solid #888;padding:6px;font-size:12px;max-width:360px;pointer-events:none;z-index:2}\
     .mv .pinned{font-size:12px;margin-top:.5em}.st{font-family:monospace;font-size:11px}\
     .legend span{display:inline-block;margin-right:1em;font-size:12px}.legend i{display:inline-block;width:10px;height:10px;margin-right:4px}</style>";

/// A kind's colour in the view and its legend.
fn kind_color(k: snap::SiteKind) -> &'static str {
    use snap::SiteKind as K;
    match k {
        K::Optimizer => "#e6550d",
        K::Backward => "#3182bd",
        K::ModuleForward => "#31a354",
        K::DataLoading => "#756bb1",
        K::ModelSetup => "#636363",
        K::Workspace => "#bcbd22",
        K::Program => "#17becf",
        K::NoStack => "#9ecae1",
        K::Other => "#fdae6b",
    }
}

#[cfg(test)]
mod tests {
    use super::script_safe_json;

    /// Issue 80, item 4: a frame name holding `<!--<script>` switched the interactive view off
    /// (and hid the report's Warnings); `</` alone was escaped.
    #[test]
    fn no_input_string_can_end_or_disturb_the_data_block() {
        let v = serde_json::json!({"frame": "<!--<script>x</script>-->", "n": [1, 2]});
        let text = script_safe_json(&v.to_string());
        assert!(!text.contains('<') && !text.contains('>'), "{text}");
        let back: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(back, v);
    }
}
