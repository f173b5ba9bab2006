//! Outputs of a memory snapshot analysed on its own (`steptrace analyze snap.pickle.gz`):
//! summary.json, the timeline, what is alive at the peak and where it was allocated, flame-graph
//! stacks (flamegraph.pl's input, as torch's `_memory_viz memory` writes them), the segments,
//! what the history never saw freed, the annotated ranges, and report.html with the
//! interactive memory view.

use std::io::Write;

use super::console::human_bytes;
use super::csv_rows::{csv_err, csv_writer};
use super::out_dir::OutDir;
use super::{io, write_json, Error};
use crate::analysis::snapshot::{self as snap, SnapshotAnalysis};
use crate::diagnostics::Diagnostics;
use crate::model::snapshot::{Snapshot, StackId};
use rustc_hash::FxHashMap;
use steptrace_formats::summary::{DeviceSummary, SnapshotSummary};

/// The files written, besides `report.html` (unless turned off) and, with the `parquet`
/// feature, [`PARQUET_FILES`].
pub const FILES: [&str; 10] = [
    "summary.json",
    "memory_timeline.csv",
    "peak_allocations.csv",
    "peak_stacks.csv",
    "top_sites.csv",
    "stacks_at_peak.txt",
    "stacks_at_end.txt",
    "segments.csv",
    "never_freed.csv",
    "phases.csv",
];

/// Parquet copies of two of the tables, the CSV files' columns each (written with the
/// `parquet` feature).
pub const PARQUET_FILES: [&str; 2] = ["memory_timeline.parquet", "top_sites.parquet"];

/// A row of `memory_timeline.csv` and `.parquet`: a device's state after a history entry.
pub(super) struct TimelineRow {
    pub device: i64,
    pub entry: usize,
    /// Since the snapshot's first recorded time (the CSV prints it to the µs).
    pub time_ms: Option<f64>,
    pub allocated_bytes: u64,
    pub reserved_bytes: u64,
}

/// The rows of `memory_timeline`, device by device, in history order.
pub(super) fn timeline_rows(a: &SnapshotAnalysis) -> impl Iterator<Item = TimelineRow> + '_ {
    a.devices.iter().flat_map(move |d| {
        d.timeline.iter().map(move |t| TimelineRow {
            device: d.device,
            entry: t.entry,
            time_ms: rel_ms(a, t.time_us),
            allocated_bytes: t.allocated_bytes,
            reserved_bytes: t.reserved_bytes,
        })
    })
}

/// A row of `top_sites.csv` and `.parquet`: bytes alive at a device's peak by kind of code,
/// by Python frame or by C++ frame.
pub(super) struct TopSiteRow<'a> {
    pub device: i64,
    /// Kind of code, Python frame or C++ frame.
    pub by: snap::SiteBy,
    pub site: &'a str,
    pub kind: snap::SiteKind,
    pub bytes: u64,
    pub blocks: usize,
    /// Of the device's peak (none where the peak is 0; the CSV prints two decimals).
    pub pct_of_peak: Option<f64>,
}

/// The rows of `top_sites`: per device, its kinds, then its top Python and C++ frames.
pub(super) fn top_site_rows(a: &SnapshotAnalysis) -> Vec<TopSiteRow<'_>> {
    let mut rows = Vec::new();
    for d in &a.devices {
        let peak = d.peak.allocated_bytes;
        let pct = |b: u64| (peak != 0).then(|| 100.0 * b as f64 / peak as f64);
        for k in &d.peak.by_kind {
            rows.push(TopSiteRow {
                device: d.device,
                by: snap::SiteBy::Kind,
                site: k.kind.name(),
                kind: k.kind,
                bytes: k.bytes,
                blocks: k.blocks,
                pct_of_peak: pct(k.bytes),
            });
        }
        for (by, sites) in [
            (snap::SiteBy::PythonFrame, &d.peak.by_python_frame),
            (snap::SiteBy::CppFrame, &d.peak.by_cpp_frame),
        ] {
            for x in sites.iter().take(snap::TOP) {
                rows.push(TopSiteRow {
                    device: d.device,
                    by,
                    site: &x.site,
                    kind: x.kind,
                    bytes: x.bytes,
                    blocks: x.blocks,
                    pct_of_peak: pct(x.bytes),
                });
            }
        }
    }
    rows
}

/// ms since the snapshot's first recorded time.
fn rel_ms(a: &SnapshotAnalysis, t: Option<i64>) -> Option<f64> {
    Some((t? - a.t0_us?) as f64 / 1e3)
}

fn ms_text(v: Option<f64>) -> String {
    v.map(|v| format!("{v:.3}")).unwrap_or_default()
}

/// summary.json of a snapshot analysed alone.
pub fn summary(a: &SnapshotAnalysis, diag: &Diagnostics) -> SnapshotSummary {
    SnapshotSummary {
        format_version: steptrace_formats::summary::FORMAT_VERSION,
        kind: "memory_snapshot".to_owned(),
        snapshot: a.file.clone(),
        entries: a.entries,
        legacy_layout: a.legacy_layout,
        peak_allocated_bytes: a
            .devices
            .iter()
            .map(|d| d.peak.allocated_bytes)
            .max()
            .unwrap_or(0),
        peak_reserved_bytes: a
            .devices
            .iter()
            .map(|d| d.peak_reserved_bytes)
            .max()
            .unwrap_or(0),
        devices: a
            .devices
            .iter()
            .map(|d| DeviceSummary {
                device: d.device,
                entries: d.entries,
                peak_allocated_bytes: d.peak.allocated_bytes,
                peak_entry: d.peak.entry,
                peak_time_ms: rel_ms(a, d.peak.time_us),
                peak_phase: d.peak.phase.clone(),
                peak_reserved_bytes: d.peak_reserved_bytes,
                start_allocated_bytes: d.start_allocated_bytes,
                end_allocated_bytes: d.end_allocated_bytes,
                end_reserved_bytes: d.end_reserved_bytes,
                alive_at_peak: d.peak.alive.len(),
                by_kind: d.peak.by_kind.clone(),
                top_python_frames: d.peak.by_python_frame.iter().take(10).cloned().collect(),
                top_cpp_frames: d.peak.by_cpp_frame.iter().take(10).cloned().collect(),
                never_freed_bytes: d.never_freed_total.bytes,
            })
            .collect(),
        segments: a.segments,
        private_pools: a.private_pools.clone(),
        phases: a.phases.len(),
        warnings: diag.lines(),
    }
}

/// Writes every output of a snapshot analysis into `out` and commits them.
pub fn write(
    mut out: OutDir,
    s: &Snapshot,
    a: &SnapshotAnalysis,
    diag: &Diagnostics,
    html: bool,
) -> Result<(), Error> {
    let clearing = out.clear_previous(&s.path);
    let dir = out.path().to_path_buf();
    let summary = summary(a, diag);
    write_timeline(&dir.join("memory_timeline.csv"), a)?;
    write_peak_allocations(&dir, s, a)?;
    write_top_sites(&dir.join("top_sites.csv"), a)?;
    write_stacks(
        &dir.join("stacks_at_peak.txt"),
        a.devices.iter().flat_map(|d| {
            let prefix = (a.devices.len() > 1).then(|| format!("device_{};", d.device));
            d.peak
                .stacks
                .iter()
                .map(move |(l, b)| (format!("{}{l}", prefix.as_deref().unwrap_or("")), *b as i64))
        }),
    )?;
    write_stacks(
        &dir.join("stacks_at_end.txt"),
        snap::end_stacks(s).into_iter(),
    )?;
    write_segments(&dir.join("segments.csv"), a)?;
    write_never_freed(&dir.join("never_freed.csv"), a)?;
    write_phases(&dir.join("phases.csv"), a)?;
    #[cfg(feature = "parquet")]
    super::frames::write_snapshot(&dir, a)?;
    if html {
        super::snapshot_view::write(&dir.join("report.html"), s, a)?;
    }
    write_json(&dir.join("summary.json"), &summary)?;
    if let Some(h) = clearing {
        let _ = h.join();
    }
    out.commit()
}

fn write_timeline(p: &std::path::Path, a: &SnapshotAnalysis) -> Result<(), Error> {
    let mut w = csv_writer(p)?;
    let e = csv_err(p);
    w.write_record([
        "device",
        "entry",
        "time_ms",
        "allocated_bytes",
        "reserved_bytes",
    ])
    .map_err(&e)?;
    for t in timeline_rows(a) {
        w.write_record([
            t.device.to_string(),
            t.entry.to_string(),
            ms_text(t.time_ms),
            t.allocated_bytes.to_string(),
            t.reserved_bytes.to_string(),
        ])
        .map_err(&e)?;
    }
    w.flush().map_err(io(p))
}

/// `peak_allocations.csv`, a row per block alive at the peak, and `peak_stacks.csv`, a row
/// per distinct stack among them (by its text) with the blocks and bytes it holds: each
/// stack's text is written once. A stack's text runs to 16 KiB, and written on every block's
/// row it made 49 MB of CSV from a 515 KB pickle whose blocks shared one long frame.
fn write_peak_allocations(
    dir: &std::path::Path,
    s: &Snapshot,
    a: &SnapshotAnalysis,
) -> Result<(), Error> {
    let p = dir.join("peak_allocations.csv");
    let mut w = csv_writer(&p)?;
    let e = csv_err(&p);
    w.write_record([
        "device",
        "address",
        "bytes",
        "stream",
        "kind",
        "made_at_entry",
        "freed_at_entry",
        "python_frame",
        "cpp_frame",
        "stack_id",
    ])
    .map_err(&e)?;
    let opt = |v: Option<usize>| v.map(|v| v.to_string()).unwrap_or_default();
    // Each stack formatted once, then known by its text: two stacks the pickle stored apart
    // with the same frames are one.
    let mut id_of: FxHashMap<StackId, usize> = FxHashMap::default();
    let mut by_text: FxHashMap<String, usize> = FxHashMap::default();
    let mut held: Vec<(usize, u64)> = Vec::new(); // per stack id: (blocks, bytes)
    for d in &a.devices {
        for b in &d.peak.alive {
            let id = *id_of.entry(b.stack).or_insert_with(|| {
                let next = by_text.len();
                *by_text
                    .entry(snap::sites::fragment(s, b.stack))
                    .or_insert(next)
            });
            if id == held.len() {
                held.push((0, 0));
            }
            held[id].0 += 1;
            held[id].1 = held[id].1.saturating_add(b.size);
            let frames = s.stack(b.stack);
            w.write_record([
                d.device.to_string(),
                format!("0x{:x}", b.addr),
                b.size.to_string(),
                b.stream.to_string(),
                b.kind.name().to_owned(),
                opt(b.made_at),
                opt(b.freed_at),
                snap::sites::python_site(s, frames).unwrap_or_default(),
                snap::sites::cpp_site(s, frames).unwrap_or_default(),
                id.to_string(),
            ])
            .map_err(&e)?;
        }
    }
    w.flush().map_err(io(&p))?;
    let p = dir.join("peak_stacks.csv");
    let mut w = csv_writer(&p)?;
    let e = csv_err(&p);
    w.write_record(["stack_id", "blocks", "bytes", "stack"])
        .map_err(&e)?;
    let mut texts: Vec<(usize, String)> = by_text.into_iter().map(|(t, id)| (id, t)).collect();
    texts.sort_unstable_by_key(|x| x.0);
    for (id, text) in texts {
        let (blocks, bytes) = held[id];
        w.write_record([id.to_string(), blocks.to_string(), bytes.to_string(), text])
            .map_err(&e)?;
    }
    w.flush().map_err(io(&p))
}

fn write_top_sites(p: &std::path::Path, a: &SnapshotAnalysis) -> Result<(), Error> {
    let mut w = csv_writer(p)?;
    let e = csv_err(p);
    w.write_record([
        "device",
        "by",
        "site",
        "kind",
        "bytes",
        "blocks",
        "pct_of_peak",
    ])
    .map_err(&e)?;
    for r in top_site_rows(a) {
        w.write_record([
            r.device.to_string(),
            r.by.as_str().into(),
            r.site.into(),
            r.kind.name().into(),
            r.bytes.to_string(),
            r.blocks.to_string(),
            r.pct_of_peak.map(|v| format!("{v:.2}")).unwrap_or_default(),
        ])
        .map_err(&e)?;
    }
    w.flush().map_err(io(p))
}

/// Flame-graph lines, `stack bytes` each (flamegraph.pl's collapsed form).
fn write_stacks(
    p: &std::path::Path,
    lines: impl Iterator<Item = (String, i64)>,
) -> Result<(), Error> {
    let mut w = std::io::BufWriter::new(super::create(p)?);
    for (l, b) in lines {
        writeln!(w, "{l} {b}").map_err(io(p))?;
    }
    w.flush().map_err(io(p))
}

fn write_segments(p: &std::path::Path, a: &SnapshotAnalysis) -> Result<(), Error> {
    let mut w = csv_writer(p)?;
    let e = csv_err(p);
    w.write_record([
        "device",
        "address",
        "stream",
        "pool",
        "total_bytes",
        "allocated_bytes",
        "free_internal_bytes",
        "free_external_bytes",
        "blocks",
        "active_blocks",
    ])
    .map_err(&e)?;
    for r in &a.segment_rows {
        w.write_record([
            r.device.to_string(),
            format!("0x{:x}", r.address),
            r.stream.to_string(),
            r.pool.clone(),
            r.total_bytes.to_string(),
            r.allocated_bytes.to_string(),
            r.free_internal_bytes.to_string(),
            r.free_external_bytes.to_string(),
            r.blocks.to_string(),
            r.active_blocks.to_string(),
        ])
        .map_err(&e)?;
    }
    w.flush().map_err(io(p))
}

fn write_never_freed(p: &std::path::Path, a: &SnapshotAnalysis) -> Result<(), Error> {
    let mut w = csv_writer(p)?;
    let e = csv_err(p);
    w.write_record([
        "device",
        "site",
        "kind",
        "blocks",
        "bytes",
        "first_entry",
        "last_entry",
        "stack",
    ])
    .map_err(&e)?;
    for d in &a.devices {
        for n in &d.never_freed {
            w.write_record([
                d.device.to_string(),
                n.site.clone(),
                n.kind.name().into(),
                n.blocks.to_string(),
                n.bytes.to_string(),
                n.first_entry.to_string(),
                n.last_entry.to_string(),
                n.stack.clone(),
            ])
            .map_err(&e)?;
        }
    }
    w.flush().map_err(io(p))
}

fn write_phases(p: &std::path::Path, a: &SnapshotAnalysis) -> Result<(), Error> {
    let mut w = csv_writer(p)?;
    let e = csv_err(p);
    w.write_record(["device", "name", "start_ms", "end_ms"])
        .map_err(&e)?;
    for r in &a.phases {
        w.write_record([
            r.device.to_string(),
            r.name.clone(),
            ms_text(rel_ms(a, Some(r.start_us))),
            ms_text(rel_ms(a, r.end_us)),
        ])
        .map_err(&e)?;
    }
    w.flush().map_err(io(p))
}

/// The console summary of a snapshot.
pub fn console(a: &SnapshotAnalysis, diag: &Diagnostics, top: usize) -> String {
    let mut o = String::new();
    let span = a.devices.iter().filter_map(|d| {
        let last = d.timeline.last()?.time_us?;
        rel_ms(a, Some(last))
    });
    let span = span.fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))));
    o += &format!(
        "{}: memory snapshot, {} device{}, {} history entries{}\n",
        a.file,
        a.devices.len(),
        if a.devices.len() == 1 { "" } else { "s" },
        a.entries,
        span.map(|s| format!(" over {s:.1} ms")).unwrap_or_default()
    );
    let hb = |b: u64| human_bytes(b as i64);
    for d in &a.devices {
        let p = &d.peak;
        let at = match (p.entry, rel_ms(a, p.time_us)) {
            (Some(e), Some(t)) => format!(" at +{t:.3} ms (entry {e})"),
            (Some(e), None) => format!(" after entry {e}"),
            (None, _) => " before the history's first entry".to_owned(),
        };
        o += &format!(
            "device {}: peak {} allocated{at}{}; reserved at most {}; at the end {} allocated, {} reserved\n",
            d.device,
            hb(p.allocated_bytes),
            p.phase.as_ref().map(|ph| format!(", in {ph}")).unwrap_or_default(),
            hb(d.peak_reserved_bytes),
            hb(d.end_allocated_bytes),
            hb(d.end_reserved_bytes),
        );
        for pool in a.private_pools.iter().filter(|x| x.device == d.device) {
            o += &format!(
                "  private pool {} (a CUDA graph's): {} reserved in {} segments, {} allocated; its free blocks are the graph's workspace, not free memory or fragmentation\n",
                pool.id,
                hb(pool.reserved_bytes),
                pool.segments,
                hb(pool.allocated_bytes)
            );
        }
        if p.allocated_bytes == 0 {
            continue;
        }
        let pct = |b: u64| 100.0 * b as f64 / p.allocated_bytes as f64;
        let kinds: Vec<String> = p
            .by_kind
            .iter()
            .map(|k| format!("{} {} ({:.0}%)", k.kind.name(), hb(k.bytes), pct(k.bytes)))
            .collect();
        o += &format!(
            "  at the peak, by the code that allocated it: {}\n",
            kinds.join(", ")
        );
        for (what, sites) in [
            ("Python frame", &p.by_python_frame),
            ("C++ frame", &p.by_cpp_frame),
        ] {
            if sites.iter().all(|x| x.site == snap::sites::NO_STACK) {
                continue;
            }
            o += &format!("  at the peak, by {what}:\n");
            for x in sites.iter().take(top) {
                o += &format!(
                    "    {:>10} {:>5.1}%  {:<14} {}\n",
                    hb(x.bytes),
                    pct(x.bytes),
                    x.kind.name(),
                    super::console::truncate(&x.site, 90)
                );
            }
        }
        if !d.never_freed.is_empty() {
            let total = d.never_freed_total;
            o += &format!(
                "  allocated within the history and never freed in it: {} in {} stack{} (never_freed.csv: the first {}); most: {} {} ({} blocks)\n",
                hb(total.bytes),
                total.stacks,
                if total.stacks == 1 { "" } else { "s" },
                d.never_freed.len(),
                hb(d.never_freed[0].bytes),
                super::console::truncate(&d.never_freed[0].site, 70),
                d.never_freed[0].blocks
            );
        }
    }
    let g = &a.segments;
    o += &format!(
        "segments at the end: {}, {} reserved, {} asked for, {} free ({} of it rounding inside blocks){}\n",
        g.segments,
        hb(g.reserved_bytes),
        hb(g.allocated_bytes),
        hb(g.free_internal_bytes + g.free_external_bytes),
        g.internal_pct.map(|p| format!("{p:.1}%")).unwrap_or_else(|| "none".into()),
        match g.fragmentation_pct {
            Some(f) => format!(
                "; largest free block {}, {f:.0}% of the cached free memory outside it",
                hb(g.largest_free_block_bytes)
            ),
            None => String::new(),
        }
    );
    if !a.phases.is_empty() {
        o += &format!(
            "{} annotated ranges (phases.csv), e.g. {}\n",
            a.phases.len(),
            a.phases[0].name
        );
    }
    for w in diag.lines() {
        o += &format!("warning: {w}\n");
    }
    o
}

/// `steptrace compare` of memory snapshots: compare_snapshots.csv in `dir` (every row of
/// [`snap::compare`] of each snapshot against the first), and the console text: each one's
/// peak, then what grew most at the peak by kind, Python frame and C++ frame.
pub fn write_compare(
    dir: &std::path::Path,
    labels: &[String],
    analyses: &[SnapshotAnalysis],
    top: usize,
) -> Result<String, Error> {
    let folder = super::out_dir::Writer::open(dir)?;
    let p = dir.join("compare_snapshots.csv");
    let mut w = csv_writer(&p)?;
    let e = csv_err(&p);
    w.write_record([
        "baseline",
        "label",
        "device",
        "by",
        "site",
        "base_bytes",
        "bytes",
        "delta_bytes",
    ])
    .map_err(&e)?;
    let hb = |b: u64| human_bytes(b as i64);
    let mut o = String::new();
    for (l, a) in labels.iter().zip(analyses) {
        for d in &a.devices {
            o += &format!(
                "{l}: device {} peak {} allocated{}, {} reserved at most\n",
                d.device,
                hb(d.peak.allocated_bytes),
                d.peak
                    .phase
                    .as_ref()
                    .map(|p| format!(" in {p}"))
                    .unwrap_or_default(),
                hb(d.peak_reserved_bytes)
            );
        }
    }
    let (base_label, base) = (&labels[0], &analyses[0]);
    for (l, a) in labels.iter().zip(analyses).skip(1) {
        let rows = snap::compare(base, a);
        for r in &rows {
            w.write_record([
                base_label.clone(),
                l.clone(),
                r.device.to_string(),
                r.by.as_str().to_owned(),
                r.site.clone(),
                r.base_bytes.to_string(),
                r.bytes.to_string(),
                r.delta().to_string(),
            ])
            .map_err(&e)?;
        }
        for by in [
            snap::SiteBy::Kind,
            snap::SiteBy::PythonFrame,
            snap::SiteBy::CppFrame,
        ] {
            let grew: Vec<&snap::Growth> = rows
                .iter()
                .filter(|r| r.by == by && r.delta() > 0)
                .take(top)
                .collect();
            if grew.is_empty() {
                continue;
            }
            o += &format!(
                "grew at the peak from {base_label} to {l}, by {}:\n",
                by.as_str()
            );
            for r in grew {
                o += &format!(
                    "  device {} {:>11} ({} -> {})  {}\n",
                    r.device,
                    format!("+{}", human_bytes(r.delta())),
                    hb(r.base_bytes),
                    hb(r.bytes),
                    super::console::truncate(&r.site, 90)
                );
            }
        }
    }
    w.flush().map_err(io(&p))?;
    drop(w);
    folder.finish()?;
    Ok(o)
}
