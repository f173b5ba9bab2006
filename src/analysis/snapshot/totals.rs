//! Totals of a replayed snapshot: bytes by kind, blocks never freed, annotated phases, segments and pools, the stacks alive at the end.

use super::*;

pub(super) fn by_kind(alive: &[AliveBlock]) -> Vec<KindBytes> {
    let mut v: Vec<KindBytes> = SITE_KINDS
        .iter()
        .map(|&kind| KindBytes {
            kind,
            bytes: 0,
            blocks: 0,
        })
        .collect();
    for b in alive {
        let k = &mut v[b.kind as usize];
        k.bytes += b.size;
        k.blocks += 1;
    }
    v.retain(|k| k.blocks > 0);
    v.sort_by_key(|k| (std::cmp::Reverse(k.bytes), k.kind));
    v
}

/// The never-freed blocks grouped by their stack's text (two stacks of equal frames are one
/// group whether or not the pickle shared the object), the first [`TOP`] by bytes, and the
/// totals over all of them, taken before the cut (100 stacks of 1 MiB are 100 MiB, not the
/// 50 MiB the list holds).
pub(super) fn never_freed(
    s: &Snapshot,
    intervals: &[Interval],
) -> (Vec<NeverFreed>, NeverFreedTotal) {
    let mut text: FxHashMap<StackId, std::rc::Rc<str>> = FxHashMap::default();
    let mut by_stack: FxHashMap<std::rc::Rc<str>, NeverFreed> = FxHashMap::default();
    let mut total = NeverFreedTotal::default();
    for v in intervals {
        let Some(m) = v.made else { continue };
        let m = m as usize;
        let key = text
            .entry(v.stack)
            .or_insert_with(|| collapsed_line(s, 0, v.stack).into())
            .clone();
        let n = by_stack.entry(key.clone()).or_insert_with(|| NeverFreed {
            stack: key.to_string(),
            site: sites::python_site(s, s.stack(v.stack))
                .or_else(|| sites::cpp_site(s, s.stack(v.stack)))
                .unwrap_or_else(|| sites::NO_STACK.to_owned()),
            kind: sites::kind(s, s.stack(v.stack)),
            blocks: 0,
            bytes: 0,
            first_entry: m,
            last_entry: m,
        });
        n.blocks += 1;
        n.bytes += v.size;
        n.first_entry = n.first_entry.min(m);
        n.last_entry = n.last_entry.max(m);
        total.blocks += 1;
        total.bytes += v.size;
    }
    total.stacks = by_stack.len();
    let mut v: Vec<NeverFreed> = by_stack.into_values().collect();
    v.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.stack.cmp(&b.stack)));
    v.truncate(TOP);
    (v, total)
}

pub(super) fn phases(s: &Snapshot) -> Vec<AnnotatedRange> {
    let mut open: FxHashMap<(i64, &str), Vec<usize>> = FxHashMap::default();
    let mut v: Vec<AnnotatedRange> = Vec::new();
    let mut ann: Vec<_> = s.annotations.iter().collect();
    ann.sort_by_key(|a| (a.time_us, !a.start));
    for a in ann {
        let name = s.str(a.name);
        if a.start {
            open.entry((a.device, name)).or_default().push(v.len());
            v.push(AnnotatedRange {
                name: name.to_owned(),
                device: a.device,
                start_us: a.time_us,
                end_us: None,
            });
        } else if let Some(i) = open.get_mut(&(a.device, name)).and_then(Vec::pop) {
            v[i].end_us = Some(a.time_us);
        }
    }
    v
}

/// The shortest range on `device` around `t`.
pub(super) fn innermost_phase(phases: &[AnnotatedRange], device: i64, t: i64) -> Option<String> {
    phases
        .iter()
        .filter(|p| p.device == device && p.start_us <= t && p.end_us.is_some_and(|e| t <= e))
        .min_by_key(|p| p.end_us.unwrap_or(i64::MAX) - p.start_us)
        .map(|p| p.name.clone())
}

/// memory_viz `stats`'s totals and rows, and the private pools. A private pool's segments
/// count in the reserved bytes (torch's `memory_reserved` holds them) but not in the free and
/// fragmentation figures: their free blocks are a graph's workspace, reused by each replay,
/// not memory the program's other allocations can take.
pub(crate) fn segment_totals(s: &Snapshot) -> (SegmentTotals, Vec<SegmentRow>, Vec<PrivatePool>) {
    let mut t = SegmentTotals {
        segments: s.segments.len(),
        ..Default::default()
    };
    let mut rows = Vec::with_capacity(s.segments.len());
    let mut pools: std::collections::BTreeMap<(i64, (i64, i64)), PrivatePool> = Default::default();
    for g in &s.segments {
        let private = g.pool.filter(|&p| p != (0, 0));
        let kind = g
            .segment_type
            .map(|p| s.str(p).to_owned())
            .unwrap_or_default();
        let mut r = SegmentRow {
            device: g.device,
            address: g.address,
            stream: g.stream,
            pool: match private {
                Some((a, b)) => format!("{kind} private {a},{b}"),
                None => kind,
            },
            total_bytes: g.total_size,
            allocated_bytes: 0,
            free_internal_bytes: 0,
            free_external_bytes: 0,
            blocks: g.blocks.len(),
            active_blocks: 0,
        };
        for b in &g.blocks {
            if s.str(b.state) == "active_allocated" {
                let asked = b.requested_size.unwrap_or(b.size).min(b.size);
                r.allocated_bytes += asked;
                r.free_internal_bytes += b.size - asked;
                r.active_blocks += 1;
            } else {
                r.free_external_bytes += b.size;
                if s.str(b.state) == "inactive" && private.is_none() {
                    t.largest_free_block_bytes = t.largest_free_block_bytes.max(b.size);
                }
            }
        }
        t.reserved_bytes += g.total_size;
        if let Some(id) = private {
            let p = pools.entry((g.device, id)).or_insert_with(|| PrivatePool {
                device: g.device,
                id: format!("{},{}", id.0, id.1),
                segments: 0,
                reserved_bytes: 0,
                allocated_bytes: 0,
            });
            p.segments += 1;
            p.reserved_bytes += g.total_size;
            p.allocated_bytes += r.allocated_bytes;
            t.allocated_bytes += r.allocated_bytes;
            rows.push(r);
            continue;
        }
        t.allocated_bytes += r.allocated_bytes;
        t.free_internal_bytes += r.free_internal_bytes;
        t.free_external_bytes += r.free_external_bytes;
        rows.push(r);
    }
    let free = t.free_internal_bytes + t.free_external_bytes;
    if free > 0 {
        t.internal_pct = Some(100.0 * t.free_internal_bytes as f64 / free as f64);
    }
    if t.free_external_bytes > 0 {
        t.fragmentation_pct = Some(
            100.0
                * (t.free_external_bytes - t.largest_free_block_bytes.min(t.free_external_bytes))
                    as f64
                / t.free_external_bytes as f64,
        );
    }
    rows.sort_by_key(|r| (r.device, r.address));
    (t, rows, pools.into_values().collect())
}

/// memory_viz `memory`'s flame-graph lines for the state at the snapshot's end: every block
/// of every segment, active or not, at what was asked for, and the rest as `<gaps>`. As torch
/// does, an inactive block keeps the size last asked of it, which can exceed the block (it
/// was split since): its gap is then negative.
pub fn end_stacks(s: &Snapshot) -> Vec<(String, i64)> {
    let mut m: FxHashMap<String, i64> = FxHashMap::default();
    for g in &s.segments {
        for b in &g.blocks {
            let state = s.str(b.state);
            let asked = b.requested_size.unwrap_or(b.size) as i64;
            let prefix = format!("stream_{};{state};", g.stream);
            *m.entry(format!("{prefix}{}", sites::fragment(s, b.stack)))
                .or_default() += asked;
            let gaps = b.size as i64 - asked;
            if gaps != 0 {
                *m.entry(format!("{prefix}<gaps>")).or_default() += gaps;
            }
        }
    }
    let mut v: Vec<(String, i64)> = m.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    v
}

pub(super) fn sorted(m: FxHashMap<String, u64>) -> Vec<(String, u64)> {
    let mut v: Vec<(String, u64)> = m.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    v
}
