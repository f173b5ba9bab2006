//! Chunks merged in file order into one trace: chunk-local string and thread ids become the
//! trace's, so the tables do not depend on how the file was cut or on the number of threads.

use rustc_hash::FxHashMap;

use super::classify::Partial;
use super::*;
use crate::diagnostics::Diagnostics;
use crate::intern::StrId;

pub(super) fn merge(trace: &mut KinetoTrace, mut partials: Vec<Partial>, diag: &mut Diagnostics) {
    use rayon::prelude::*;
    let (maps, text_bases) = global_ids(trace, &partials);
    relabel(&mut partials, &maps, &text_bases);
    join_tables(trace, &mut partials);
    let mut unanalysed = std::collections::BTreeMap::<String, usize>::new();
    for p in partials {
        trace.modules.extend(p.modules);
        trace.flows.extend(p.flows);
        trace.process_names.extend(p.process_names);
        for (kind, msg) in p.anomalies {
            diag.warn(kind, format!("{}: {msg}", trace.path.display()));
        }
        for (cat, n) in p.unanalysed {
            *unanalysed.entry(cat).or_default() += n;
        }
    }
    // One line naming each category, in name order: the trace's device activity that no GPU
    // figure counts (an MTIA trace read as "GPU busy 0.0 us" with nothing said).
    if !unanalysed.is_empty() {
        let what: Vec<String> = unanalysed
            .iter()
            .map(|(cat, n)| format!("{n} `{cat}`"))
            .collect();
        diag.warn(
            "unanalysed_device_activity",
            format!(
                "{}: activity steptrace does not analyse (MTIA's, the CUPTI range profiler's), left out of every GPU figure: {} event(s)",
                trace.path.display(),
                what.join(", ")
            ),
        );
    }
    // Allocator events must be replayed in time order; a stable sort keeps file order on ties,
    // which is the allocator's own order for events of one thread. Usually they are in order
    // already, and checking is cheaper than sorting.
    if !trace.memory.is_sorted_by_key(|m| m.ts) {
        // Stable, on all threads (3 ms on one for 80,000 events).
        trace.memory.par_sort_by_key(|m| m.ts);
    }
}

/// Per piece, in piece order, what its local string and thread ids become (ids are given in
/// order of first appearance in the file, whatever the threads), and where its recorded-input
/// text starts in the joined text.
#[allow(clippy::type_complexity)]
fn global_ids(
    trace: &mut KinetoTrace,
    partials: &[Partial],
) -> (Vec<(Vec<StrId>, Vec<ThreadId>)>, Vec<u64>) {
    use rayon::prelude::*;
    // First, in piece order, what each piece's local string and thread ids become: ids are
    // given in order of first appearance in the file, whatever the threads.
    let mut thread_index: FxHashMap<(ThreadKey, ThreadKey), ThreadId> = FxHashMap::default();
    let mut maps: Vec<(Vec<StrId>, Vec<ThreadId>)> = Vec::with_capacity(partials.len());
    let mut text_base = 0u64;
    let mut text_bases = Vec::with_capacity(partials.len());
    // The first piece's strings take the first ids, as they would one by one; which of the
    // other pieces' strings it already holds is looked up on all threads, and only the rest
    // are added here, in order. (Looking up every piece's names here was 8 ms on one thread.)
    // (`trace.strings` is still empty here: it starts as the first piece's table.)
    if let Some(first) = partials.first() {
        trace.strings = first.strings.clone();
    }
    let found: Vec<Vec<Option<StrId>>> = partials
        .par_iter()
        .map(|p| trace.strings.lookup(&p.strings))
        .collect();
    for (p, found) in partials.iter().zip(found) {
        let smap = trace.strings.absorb_rest(&p.strings, found);
        let k = |key: ThreadKey| match key {
            ThreadKey::Name(id) => ThreadKey::Name(smap[id.0 as usize]),
            n => n,
        };
        let tmap: Vec<ThreadId> = p
            .threads
            .iter()
            .map(|&(pid, tid)| {
                let key = (k(pid), k(tid));
                *thread_index.entry(key).or_insert_with(|| {
                    trace.threads.push(ThreadInfo {
                        pid: key.0,
                        tid: key.1,
                    });
                    ThreadId(trace.threads.len() as u32 - 1)
                })
            })
            .collect();
        maps.push((smap, tmap));
        text_bases.push(text_base);
        text_base += p.input_text.len() as u64;
    }
    (maps, text_bases)
}

/// Every piece's rows rewritten to the global ids, each piece on its own thread.
fn relabel(partials: &mut [Partial], maps: &[(Vec<StrId>, Vec<ThreadId>)], text_bases: &[u64]) {
    use rayon::prelude::*;
    // Then every piece's rows are rewritten to the global ids, each piece on its own thread.
    partials.par_iter_mut().zip(maps).zip(text_bases).for_each(
        |((p, (smap, tmap)), &text_base)| {
            let s = |id: StrId| smap[id.0 as usize];
            let t = |id: ThreadId| tmap[id.0 as usize];
            for o in &mut p.ops {
                o.name = s(o.name);
                o.thread = t(o.thread);
                // Ops without inputs keep the all-zero span, wherever their piece began.
                if o.inputs != InputSpans::default() {
                    o.inputs.start += text_base;
                }
            }
            for r in &mut p.runtime {
                r.name = s(r.name);
                r.thread = t(r.thread);
            }
            for g in &mut p.gpu {
                g.name = s(g.name);
                if let Some(c) = &mut g.collective {
                    c.op = s(c.op);
                    c.pg = s(c.pg);
                    c.dtype = s(c.dtype);
                }
            }
            for m in &mut p.memory {
                m.thread = t(m.thread);
            }
            for m in &mut p.modules {
                m.name = s(m.name);
                m.thread = t(m.thread);
            }
            for f in &mut p.flows {
                f.thread = t(f.thread);
            }
        },
    );
}

/// The pieces' tables joined into the trace's.
fn join_tables(trace: &mut KinetoTrace, partials: &mut [Partial]) {
    // And the tables are joined, each one's pieces copied side by side: copying (and faulting
    // in) tens of MB on one thread was most of this merge.
    fn take_each<T: Default>(parts: &mut [Partial], f: fn(&mut Partial) -> &mut T) -> Vec<T> {
        parts.iter_mut().map(|p| std::mem::take(f(p))).collect()
    }
    let mut texts = take_each(partials, |p| &mut p.input_text);
    let mut ops = take_each(partials, |p| &mut p.ops);
    let mut runtime = take_each(partials, |p| &mut p.runtime);
    let mut gpu = take_each(partials, |p| &mut p.gpu);
    let mut memory = take_each(partials, |p| &mut p.memory);
    let ((o, r), (g, (m, text))) = rayon::join(
        || {
            rayon::join(
                || crate::par::concat(&mut ops),
                || crate::par::concat(&mut runtime),
            )
        },
        || {
            rayon::join(
                || crate::par::concat(&mut gpu),
                || {
                    rayon::join(
                        || crate::par::concat(&mut memory),
                        || {
                            let mut bytes: Vec<Vec<u8>> = texts
                                .iter_mut()
                                .map(|t| std::mem::take(t).into_bytes())
                                .collect();
                            crate::par::concat(&mut bytes)
                        },
                    )
                },
            )
        },
    );
    trace.ops = o;
    trace.runtime = r;
    trace.gpu = g;
    trace.memory = m;
    // Every piece's text is the text of a `String` (UTF-8), and UTF-8 texts joined are UTF-8.
    // SAFETY: each piece's text was a `String`, so valid UTF-8, and UTF-8 texts joined whole
    // are UTF-8 (checking 20 MB again cost 1.5 ms on the one thread the merge waits on).
    trace.input_text = unsafe { String::from_utf8_unchecked(text) };
}
