//! Which ranks a directory holds and which trace is each one's: from the capture manifest, the
//! traces' names (`_rankN`) or their headers' `distributedInfo`.

use std::path::{Path, PathBuf};

use super::{classify_path, source, Kind, Manifest};

/// A directory's ranks, found in one pass over its traces (each trace's header read once).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RankLayout {
    /// The ranks, ascending: from the capture manifest where there is one, else from the
    /// traces (`_rankN` in the name, else the header's `distributedInfo.rank`).
    pub ranks: Vec<i64>,
    /// Traces known by the rank in their header alone (torch.profiler's
    /// `tensorboard_trace_handler` names them `<worker>.<ts>.pt.trace.json[.gz]`): the first
    /// by name of each rank. They are analysed as files.
    pub by_header: std::collections::BTreeMap<i64, PathBuf>,
    /// What is off: a rank with several traces (the first by name is analysed), or
    /// a `world_size` in the traces that disagrees with the ranks found.
    pub warnings: Vec<String>,
    /// Why the directory cannot be analysed as ranks: a manifest whose ranks name one trace
    /// file twice (each would be analysed in full, and merged as two ranks), or traces of
    /// jobs of different sizes.
    pub refused: Option<String>,
}

/// One trace of a directory with its rank.
pub(super) struct RankTrace {
    pub(super) rank: i64,
    pub(super) path: PathBuf,
    /// Whether the rank came from `_rankN` in the name (else from the header).
    pub(super) named: bool,
    /// The header's `distributedInfo.world_size`.
    pub(super) world_size: Option<i64>,
}

/// Every trace in `dir` that has a rank, sorted by rank then name.
pub(super) fn rank_traces(dir: &Path) -> Vec<RankTrace> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<RankTrace> = rd
        .filter_map(|e| e.ok())
        .filter(|e| super::entry_is(e, false))
        .filter(|e| classify_path(&e.file_name().to_string_lossy(), &e.path()) == Kind::Trace)
        .filter_map(|e| {
            let path = e.path();
            let named = rank_from_name(&e.file_name().to_string_lossy());
            let (header_rank, world_size) = distributed_info(&path).unwrap_or((None, None));
            Some(RankTrace {
                rank: named.or(header_rank)?,
                named: named.is_some(),
                world_size,
                path,
            })
        })
        .collect();
    v.sort_by(|a, b| (a.rank, &a.path).cmp(&(b.rank, &b.path)));
    v
}

/// The ranks `dir` holds and how to find each one's trace (see [`RankLayout`]).
pub fn rank_layout(dir: &Path) -> RankLayout {
    let traces = rank_traces(dir);
    let manifest = crate::file_error::read_side_file(
        &dir.join("manifest.json"),
        crate::file_error::MAX_MANIFEST_BYTES,
    );
    let mut refused = None;
    let mut ranks: Vec<i64> = match manifest
        .ok()
        .flatten()
        .and_then(|t| Manifest::from_json(&t).ok())
    {
        Some(m) => {
            let mut by_file = std::collections::BTreeMap::new();
            for x in &m.ranks {
                let Some(f) = x.files.get("trace") else {
                    continue;
                };
                if let Some(first) = by_file.insert(f.as_str(), x.rank) {
                    refused.get_or_insert_with(|| {
                        format!(
                            "the manifest's ranks {first} and {} both name the trace '{f}': each rank has a trace of its own",
                            x.rank
                        )
                    });
                }
            }
            m.ranks
                .iter()
                .filter(|x| x.files.contains_key("trace"))
                .map(|x| x.rank)
                .collect()
        }
        None => {
            // Traces that say they are of jobs of different sizes are not ranks of one job
            // (HolisticTraceAnalysis's test folders hold such pairs: rank 3 of 8 on an A100
            // beside rank 1 of 2 on a V100).
            let mut worlds: Vec<i64> = traces.iter().filter_map(|t| t.world_size).collect();
            worlds.sort_unstable();
            worlds.dedup();
            if worlds.len() > 1 {
                let each: Vec<String> = traces
                    .iter()
                    .map(|t| {
                        format!(
                            "rank {} of {} ({})",
                            t.rank,
                            t.world_size.map_or("?".into(), |w| w.to_string()),
                            t.path.file_name().unwrap_or_default().to_string_lossy()
                        )
                    })
                    .collect();
                refused = Some(format!(
                    "its traces are of different jobs ({}): analyse each file on its own, or one rank with --rank N",
                    each.join(", ")
                ));
            }
            traces.iter().map(|t| t.rank).collect()
        }
    };
    ranks.sort_unstable();
    ranks.dedup();
    let mut by_header = std::collections::BTreeMap::new();
    for t in traces.iter().filter(|t| !t.named) {
        by_header.entry(t.rank).or_insert_with(|| t.path.clone());
    }
    RankLayout {
        warnings: rank_warnings(&traces),
        ranks,
        by_header,
        refused,
    }
}

/// The rank of one trace file: `_rankN` in its name, else its header's `distributedInfo.rank`.
pub fn rank_of_trace(path: &Path) -> Option<i64> {
    path.file_name()
        .and_then(|n| rank_from_name(&n.to_string_lossy()))
        .or_else(|| distributed_info(path)?.0)
}

/// N of `rankN.` in a file name, with `_`, `-` or nothing between (`trace_rank3.json`,
/// HolisticTraceAnalysis's `sampled_rank-0.json.gz`), `rank` not inside a longer word.
fn rank_from_name(name: &str) -> Option<i64> {
    let lower = name.to_ascii_lowercase();
    let start = lower.rfind("rank")?;
    if lower[..start]
        .chars()
        .next_back()
        .is_some_and(|c| c.is_ascii_alphanumeric())
    {
        return None;
    }
    let rest = &lower[start + "rank".len()..];
    let rest = rest.strip_prefix(['_', '-']).unwrap_or(rest);
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    if digits.is_empty() || !rest[digits.len()..].starts_with('.') {
        return None;
    }
    digits.parse().ok()
}

/// `distributedInfo`'s `rank` and `world_size` from the first 1 MiB of a trace (Kineto writes
/// it before the events).
fn distributed_info(path: &Path) -> Option<(Option<i64>, Option<i64>)> {
    use std::io::Read;
    let mut head = Vec::with_capacity(1 << 20);
    let stream = source::open_stream(path).ok()?;
    stream.take(1 << 20).read_to_end(&mut head).ok()?;
    let text = String::from_utf8_lossy(&head);
    let info = &text[text.find("\"distributedInfo\"")?..];
    // Up to the first nested object's end: rank and world_size come before `pg_config`.
    let info = &info[..info.find('}').unwrap_or(info.len())];
    let int = |key: &str| -> Option<i64> {
        let at = info.find(key)? + key.len();
        let rest = info[at..].trim_start().strip_prefix(':')?.trim_start();
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        digits.parse().ok()
    };
    Some((int("\"rank\""), int("\"world_size\"")))
}

/// A rank with several traces, and a `world_size` the traces do not fill.
fn rank_warnings(traces: &[RankTrace]) -> Vec<String> {
    let name = |t: &RankTrace| {
        t.path
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned()
    };
    let mut out = Vec::new();
    for same in traces.chunk_by(|a, b| a.rank == b.rank) {
        if same.len() > 1 {
            out.push(format!(
                "rank {} has {} traces ({}); the first is analysed",
                same[0].rank,
                same.len(),
                same.iter().map(name).collect::<Vec<_>>().join(", ")
            ));
        }
    }
    let mut ranks: Vec<i64> = traces.iter().map(|t| t.rank).collect();
    ranks.dedup();
    let mut worlds: Vec<i64> = traces.iter().filter_map(|t| t.world_size).collect();
    worlds.sort_unstable();
    worlds.dedup();
    match worlds.as_slice() {
        [] => {}
        [w] if *w == ranks.len() as i64 => {}
        [w] => {
            let missing: Vec<String> = (0..*w)
                .filter(|r| !ranks.contains(r))
                .map(|r| r.to_string())
                .collect();
            out.push(format!(
                "the traces say world_size {w} but hold {} ranks{}",
                ranks.len(),
                if missing.is_empty() {
                    String::new()
                } else {
                    format!(" (missing: {})", missing.join(", "))
                }
            ));
        }
        ws => out.push(format!(
            "the traces disagree on world_size ({})",
            ws.iter()
                .map(|w| w.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ranks in file names as the ecosystem writes them; `rank` inside a word is not one.
    #[test]
    fn ranks_are_read_from_the_names_people_give_rank_files() {
        for (name, want) in [
            ("trace_rank3.json.gz", Some(3)),
            ("sampled_rank-0.json.gz", Some(0)),
            ("rank12.pt.trace.json", Some(12)),
            ("Rank_2.json", Some(2)),
            ("prank3.json", None),
            ("trace_rank3x.json", None),
            ("trace.json", None),
        ] {
            assert_eq!(rank_from_name(name), want, "{name}");
        }
    }
}
