//! Reading input files: find them (a run directory or explicit paths), then read the Kineto
//! trace, the memory snapshot and the Execution Trace side by side.

pub mod args;
pub mod exec_trace;
pub(crate) mod json_scan;
pub mod kineto;
pub mod pickle;
pub mod snapshot;
pub mod source;

use crate::file_error::FileError;
use std::path::{Path, PathBuf};

use crate::diagnostics::Diagnostics;

/// Why an input could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The file could not be opened or read.
    #[error(transparent)]
    Io(#[from] FileError),
    /// The file was read but is not what it should be.
    #[error("{}: {what}", path.display())]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        what: String,
    },
    /// A run directory that does not hold (exactly) what analyze needs.
    #[error("{}: {what}", path.display())]
    Discovery {
        /// The directory.
        path: PathBuf,
        /// What is wrong.
        what: String,
    },
}

/// The files of one analysis.
#[derive(Debug, Clone, PartialEq)]
pub struct Inputs {
    /// Kineto Chrome trace.
    pub trace: PathBuf,
    /// CUDA memory snapshot pickle.
    pub snapshot: Option<PathBuf>,
    /// Execution Trace JSON.
    pub exec_trace: Option<PathBuf>,
    /// `manifest.json` of a capture run directory.
    pub manifest: Option<PathBuf>,
    /// Whether the snapshot and Execution Trace were found in a run directory rather than named
    /// by the user: then one that cannot be read is a warning, not an error (issue 17).
    pub side_files_optional: bool,
    /// The program's own step time, timed by capture with nothing recorded (from the
    /// manifest).
    pub program_step_time: Option<ProgramStepTime>,
    /// What a plan's checkpoints and swaps cost on the capture's machine (from the manifest).
    pub plan_probe: Option<PlanProbe>,
}

/// What checkpointing and swapping a module cost on the machine a run was captured on,
/// measured by the capture shim at the program's exit on a chain of tiny ops (issue 20): host
/// time that a trace cannot show at its real size, since the profiler's Python tracing inflates
/// Python-heavy code far more than ops.
#[derive(Debug, Clone, Copy, PartialEq, serde::Deserialize, serde::Serialize)]
pub struct PlanProbe {
    /// A non-reentrant checkpoint's own host time per call (set-up, RNG state), s.
    pub recompute_call_s: f64,
    /// Its host time per op of the module, beyond the op's replay (saved-tensor hooks in the
    /// forward and the recompute), s.
    pub recompute_per_op_s: f64,
    /// The swap hooks' host time per call, s.
    pub swap_call_s: f64,
    /// Their host time per op (pack and unpack, the copies' launches), s.
    pub swap_per_op_s: f64,
    /// Pinned device→host bandwidth, GB/s.
    pub dtoh_gbps: f64,
    /// Pinned host→device bandwidth, GB/s.
    pub htod_gbps: f64,
}

/// The program's own step time from a capture's manifest.
#[derive(Debug, Clone, PartialEq)]
pub struct ProgramStepTime {
    /// Step time, ns: the mean over the steps after the window (outliers left out), or the
    /// timing phase's median (`source`).
    pub ns: i64,
    /// Which steps were timed: `after_window` (the rest of the run) or `timing_phase` (steps
    /// before the window).
    pub source: &'static str,
    /// Why a timing phase the figure comes from ended before its median settled (`step_cap`,
    /// `time_cap`), with the steps in the median: the figure is then a rough one.
    pub unsettled: Option<(String, usize)>,
    /// A plan timed both ways in the timing phase (`capture --plan-ab`, `sweep --budgets`).
    pub plan_ab: Option<PlanTimedBothWays>,
    /// How far the host ran ahead of the GPU at the end of a step in the timing phase, s
    /// (median): host time a step can gain before the GPU waits for it.
    pub host_lead_s: Option<f64>,
}

/// The timing phase of a planned capture whose steps alternated with and without the plan
/// (issue 20): what the plan adds, measured in one process.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct PlanTimedBothWays {
    /// Median step with the plan, s.
    pub step_time_with_s: f64,
    /// Median step without it, s.
    pub step_time_without_s: f64,
    /// Which clock: `cuda_events` (events recorded on the stream at each boundary) where the
    /// shim had them, else `host`. The host clock reads a boundary when the CPU reaches it; a
    /// program that waits for the GPU after its boundary (`loss.item()` after the optimizer
    /// step) then counts each step's GPU time in the next step's interval, which with
    /// alternating steps moves the plan's cost into the steps without it (nanoGPT's bench.py:
    /// 49.7 and 30.7 ms on the host clock, 42.8 and 36.6 ms on the stream).
    pub clock: &'static str,
    /// Steps timed with it.
    pub steps_with: usize,
    /// Steps timed without it.
    pub steps_without: usize,
}

impl Inputs {
    /// A trace with nothing beside it.
    fn trace_only(trace: PathBuf) -> Inputs {
        Inputs {
            trace,
            snapshot: None,
            exec_trace: None,
            manifest: None,
            side_files_optional: false,
            program_step_time: None,
            plan_probe: None,
        }
    }
}

/// What each file in a directory looks like it is, from its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Trace,
    Snapshot,
    ExecTrace,
    Other,
}

fn classify(name: &str) -> Kind {
    let lower = name.to_ascii_lowercase();
    let base = lower.strip_suffix(".gz").unwrap_or(&lower);
    if base.ends_with(".pickle") || base.ends_with(".pkl") {
        return Kind::Snapshot;
    }
    if !base.ends_with(".json") {
        return Kind::Other;
    }
    if base.contains("exec_trace")
        || base.contains("execution_trace")
        || base.starts_with("et_")
        || base == "et.json"
    {
        return Kind::ExecTrace;
    }
    // References and timelines that sit beside the trace in sample directories.
    if base.contains("memory_timeline") || base == "reference.json" || base == "manifest.json" {
        return Kind::Other;
    }
    if base.contains("trace") {
        return Kind::Trace;
    }
    Kind::Other
}

/// Files listed by a capture's `manifest.json` (`files.trace`, `files.snapshot`,
/// `files.exec_trace`, relative to the directory).
#[derive(Debug, serde::Deserialize)]
struct Manifest {
    #[serde(default)]
    files: ManifestFiles,
    #[serde(default)]
    ranks: Vec<ManifestRank>,
    #[serde(default)]
    step_time_s: Option<f64>,
}

#[derive(Debug, serde::Deserialize)]
struct ManifestRank {
    rank: i64,
    #[serde(default)]
    files: ManifestFiles,
    #[serde(default)]
    timing: Option<ManifestTiming>,
    /// Absent in captures before the probe, and where it could not run (no CUDA).
    #[serde(default)]
    plan_probe: Option<PlanProbe>,
}

/// A rank's `timing` in the manifest: `step_time_s` with its `source` and the timing phase
/// nested (`timing_phase`), or, as capture wrote it before the after-window timing, the timing
/// phase's fields at the top.
#[derive(Debug, serde::Deserialize)]
struct ManifestTiming {
    step_time_s: f64,
    #[serde(default)]
    source: Option<String>,
    #[serde(default)]
    timing_phase: Option<ManifestPhase>,
    #[serde(flatten)]
    flat: ManifestPhase,
}

#[derive(Debug, Default, serde::Deserialize)]
struct ManifestPhase {
    #[serde(default)]
    steps: usize,
    /// Why the timing phase ended (absent before the settling rule).
    #[serde(default)]
    stop: Option<String>,
    /// The phase's median (steps with the plan, when it was timed both ways).
    #[serde(default)]
    step_time_s: Option<f64>,
    /// The same on the stream's clock (CUDA events).
    #[serde(default)]
    step_time_cuda_s: Option<f64>,
    /// The steps without the plan, when it was timed both ways.
    #[serde(default)]
    unplanned: Option<ManifestUnplanned>,
    /// How far the host ran ahead of the GPU (absent before capture measured it).
    #[serde(default)]
    host_lead_s: Option<f64>,
}

#[derive(Debug, serde::Deserialize)]
struct ManifestUnplanned {
    steps: usize,
    step_time_s: f64,
    #[serde(default)]
    step_time_cuda_s: Option<f64>,
}

impl ManifestTiming {
    fn program_step_time(&self) -> Option<ProgramStepTime> {
        let after = self.source.as_deref() == Some("after_window");
        let phase = self.timing_phase.as_ref().unwrap_or(&self.flat);
        let plan_ab = phase.unplanned.as_ref().and_then(|u| {
            let (with, without, clock) = match (phase.step_time_cuda_s, u.step_time_cuda_s) {
                (Some(w), Some(wo)) if w > 0.0 && wo > 0.0 => (w, wo, "cuda_events"),
                _ => (phase.step_time_s?, u.step_time_s, "host"),
            };
            (with > 0.0 && without > 0.0).then_some(PlanTimedBothWays {
                step_time_with_s: with,
                step_time_without_s: without,
                clock,
                steps_with: phase.steps,
                steps_without: u.steps,
            })
        });
        let unsettled = match phase.stop.as_deref() {
            Some(s @ ("step_cap" | "time_cap")) if !after => Some((s.to_owned(), phase.steps)),
            _ => None,
        };
        Some(ProgramStepTime {
            ns: secs_to_ns(self.step_time_s)?,
            source: if after {
                "after_window"
            } else {
                "timing_phase"
            },
            unsettled,
            plan_ab,
            host_lead_s: phase.host_lead_s.filter(|l| l.is_finite() && *l >= 0.0),
        })
    }
}

fn secs_to_ns(s: f64) -> Option<i64> {
    (s.is_finite() && s > 0.0).then(|| (s * 1e9).round() as i64)
}

#[derive(Debug, Default, serde::Deserialize)]
struct ManifestFiles {
    trace: Option<String>,
    snapshot: Option<String>,
    exec_trace: Option<String>,
}

/// Resolves the command line's input (a trace file or a run directory) and the optional
/// explicit snapshot and Execution Trace into the files to read. Explicit paths win over what
/// a directory holds.
pub fn discover(
    input: &Path,
    snapshot: Option<&Path>,
    et: Option<&Path>,
    rank: Option<i64>,
) -> Result<Inputs, Error> {
    let meta = std::fs::metadata(input).map_err(FileError::at(input))?;
    let mut found = if meta.is_dir() {
        discover_dir(input, rank)?
    } else {
        Inputs::trace_only(input.to_path_buf())
    };
    // A side file the user names must be read; one found beside the trace may be skipped.
    found.side_files_optional = meta.is_dir() && snapshot.is_none() && et.is_none();
    if let Some(s) = snapshot {
        found.snapshot = Some(s.to_path_buf());
    }
    if let Some(e) = et {
        found.exec_trace = Some(e.to_path_buf());
    }
    Ok(found)
}

/// A file a manifest names, inside its run directory (issue 22: a run directory is data, not
/// instructions): a plain relative name with no `..`, naming a regular file where one exists
/// (a device such as `/dev/zero` or a FIFO is refused; a missing file is left to the reader,
/// which says it is missing).
fn inside_run_dir(dir: &Path, manifest: &Path, name: &str) -> Result<PathBuf, Error> {
    use std::path::Component;
    let refuse = |why: &str| Error::Discovery {
        path: manifest.to_path_buf(),
        what: format!("the manifest names '{name}', {why}: refused"),
    };
    let rel = Path::new(name);
    if name.is_empty() || !rel.components().all(|c| matches!(c, Component::Normal(_))) {
        return Err(refuse("which is not a file name inside the run directory"));
    }
    let p = dir.join(rel);
    match std::fs::metadata(&p) {
        Ok(m) if !m.is_file() => Err(refuse("which is not a regular file")),
        _ => Ok(p),
    }
}

fn discover_dir(dir: &Path, rank: Option<i64>) -> Result<Inputs, Error> {
    let manifest_path = dir.join("manifest.json");
    if manifest_path.is_file() {
        let text = std::fs::read(&manifest_path).map_err(FileError::at(&manifest_path))?;
        let m: Manifest = serde_json::from_slice(&text).map_err(|e| Error::Format {
            path: manifest_path.clone(),
            what: format!("not a steptrace manifest: {e}"),
        })?;
        let (files, step_time, plan_probe) = match rank {
            Some(r) => match m.ranks.into_iter().find(|x| x.rank == r) {
                Some(x) => {
                    let t = x
                        .timing
                        .as_ref()
                        .and_then(ManifestTiming::program_step_time);
                    (x.files, t, x.plan_probe)
                }
                None => {
                    return Err(Error::Discovery {
                        path: dir.to_path_buf(),
                        what: format!("the manifest lists no rank {r}"),
                    })
                }
            },
            None => {
                // The run's step time is the first rank's (finalize writes it so); a manifest
                // with no ranks' timing may still carry the top-level figure.
                let t = match m.ranks.first().and_then(|r| r.timing.as_ref()) {
                    Some(t) => t.program_step_time(),
                    None => m
                        .step_time_s
                        .and_then(secs_to_ns)
                        .map(|ns| ProgramStepTime {
                            ns,
                            source: "timing_phase",
                            unsettled: None,
                            plan_ab: None,
                            host_lead_s: None,
                        }),
                };
                (m.files, t, m.ranks.first().and_then(|r| r.plan_probe))
            }
        };
        if let Some(trace) = files.trace {
            let inside = |name: String| inside_run_dir(dir, &manifest_path, &name);
            return Ok(Inputs {
                trace: inside(trace)?,
                snapshot: files.snapshot.map(inside).transpose()?,
                exec_trace: files.exec_trace.map(inside).transpose()?,
                manifest: Some(manifest_path),
                side_files_optional: false, // decided by `discover`
                program_step_time: step_time,
                plan_probe,
            });
        }
    }
    if let Some(r) = rank {
        // Without a manifest, rank files are found by their `_rankN` suffix, or (a
        // tensorboard_trace_handler directory) the trace by the rank its header names.
        let tag = format!("_rank{r}.");
        let by_tag = discover_dir_filtered(dir, &|n: &str| n.contains(&tag));
        if by_tag.is_ok() {
            return by_tag;
        }
        if let Some(t) = rank_traces(dir).into_iter().find(|t| t.rank == r) {
            return Ok(Inputs::trace_only(t.path));
        }
        return Err(Error::Discovery {
            path: dir.to_path_buf(),
            what: format!("no trace of rank {r} (by `_rank{r}` in a file name or `distributedInfo` in a trace)"),
        });
    }
    discover_dir_filtered(dir, &|_| true)
}

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
    /// What is off (issue 18): a rank with several traces (the first by name is analysed), or
    /// a `world_size` in the traces that disagrees with the ranks found.
    pub warnings: Vec<String>,
}

/// One trace of a directory with its rank.
struct RankTrace {
    rank: i64,
    path: PathBuf,
    /// Whether the rank came from `_rankN` in the name (else from the header).
    named: bool,
    /// The header's `distributedInfo.world_size`.
    world_size: Option<i64>,
}

/// Every trace in `dir` that has a rank, sorted by rank then name.
fn rank_traces(dir: &Path) -> Vec<RankTrace> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<RankTrace> = rd
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .filter(|e| classify(&e.file_name().to_string_lossy()) == Kind::Trace)
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
    let mut ranks: Vec<i64> = match std::fs::read(dir.join("manifest.json"))
        .ok()
        .and_then(|t| serde_json::from_slice::<Manifest>(&t).ok())
    {
        Some(m) => m
            .ranks
            .iter()
            .filter(|x| x.files.trace.is_some())
            .map(|x| x.rank)
            .collect(),
        None => traces.iter().map(|t| t.rank).collect(),
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
    }
}

/// The rank of one trace file: `_rankN` in its name, else its header's `distributedInfo.rank`.
pub fn rank_of_trace(path: &Path) -> Option<i64> {
    path.file_name()
        .and_then(|n| rank_from_name(&n.to_string_lossy()))
        .or_else(|| distributed_info(path)?.0)
}

/// N of `_rankN.` in a file name.
fn rank_from_name(name: &str) -> Option<i64> {
    let at = name.rfind("_rank")? + "_rank".len();
    let digits: String = name[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    if digits.is_empty() || !name[at + digits.len()..].starts_with('.') {
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

fn discover_dir_filtered(dir: &Path, keep: &dyn Fn(&str) -> bool) -> Result<Inputs, Error> {
    let rd = std::fs::read_dir(dir).map_err(FileError::at(dir))?;
    let mut names: Vec<(String, PathBuf)> = rd
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().map(|t| t.is_file()).unwrap_or(false))
        .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
        .filter(|(n, _)| keep(n))
        .collect();
    names.sort();
    let pick = |kind: Kind| -> Vec<PathBuf> {
        names
            .iter()
            .filter(|(n, _)| classify(n) == kind)
            .map(|(_, p)| p.clone())
            .collect()
    };
    let traces = pick(Kind::Trace);
    let snapshots = pick(Kind::Snapshot);
    let ets = pick(Kind::ExecTrace);
    let list = |v: &[PathBuf]| {
        v.iter()
            .map(|p| {
                p.file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let trace = match traces.len() {
        0 => {
            return Err(Error::Discovery {
                path: dir.to_path_buf(),
                what: "no Kineto trace (*trace*.json or .json.gz) in this directory".into(),
            })
        }
        1 => traces[0].clone(),
        _ => {
            return Err(Error::Discovery {
                path: dir.to_path_buf(),
                what: format!(
                    "several traces ({}); name the one to analyse",
                    list(&traces)
                ),
            })
        }
    };
    let one = |v: Vec<PathBuf>, what: &str| -> Result<Option<PathBuf>, Error> {
        match v.len() {
            0 => Ok(None),
            1 => Ok(v.into_iter().next()),
            _ => Err(Error::Discovery {
                path: dir.to_path_buf(),
                what: format!("several {what} files ({}); pass the one to use", list(&v)),
            }),
        }
    };
    Ok(Inputs {
        trace,
        snapshot: one(snapshots, "snapshot")?,
        exec_trace: one(ets, "Execution Trace")?,
        manifest: None,
        side_files_optional: false, // decided by `discover`
        program_step_time: None,
        plan_probe: None,
    })
}

/// Everything read for one analysis.
#[derive(Debug)]
pub struct Loaded {
    /// The Kineto trace.
    pub kineto: kineto::KinetoTrace,
    /// The memory snapshot, if given.
    pub snapshot: Option<snapshot::Snapshot>,
    /// The Execution Trace, if given.
    pub exec_trace: Option<exec_trace::ExecTrace>,
    /// Anomalies met while reading.
    pub diagnostics: Diagnostics,
}

/// Reads all inputs, the three files in parallel. Diagnostics are merged in a fixed order.
pub fn load_all(inputs: &Inputs) -> Result<Loaded, Error> {
    let ((kin, snap), et) = rayon::join(
        || {
            rayon::join(
                || {
                    let mut d = Diagnostics::default();
                    kineto::load(&inputs.trace, &mut d).map(|t| (t, d))
                },
                || {
                    inputs.snapshot.as_deref().map(|p| {
                        let mut d = Diagnostics::default();
                        snapshot::load(p, &mut d).map(|s| (s, d))
                    })
                },
            )
        },
        || {
            inputs.exec_trace.as_deref().map(|p| {
                let mut d = Diagnostics::default();
                exec_trace::load(p, &mut d).map(|e| (e, d))
            })
        },
    );
    let (kineto, mut diagnostics) = kin?;
    let optional = inputs.side_files_optional;
    let snapshot = side_file(snap, optional, &mut diagnostics)?;
    let exec_trace = side_file(et, optional, &mut diagnostics)?;
    Ok(Loaded {
        kineto,
        snapshot,
        exec_trace,
        diagnostics,
    })
}

/// A snapshot or Execution Trace as read: one found in a run directory that cannot be read is
/// a warning and the analysis goes on without it (issue 17); one the user named is an error.
fn side_file<T>(
    r: Option<Result<(T, Diagnostics), Error>>,
    optional: bool,
    diagnostics: &mut Diagnostics,
) -> Result<Option<T>, Error> {
    match r {
        Some(Ok((v, d))) => {
            diagnostics.extend(d);
            Ok(Some(v))
        }
        None => Ok(None),
        Some(Err(e)) if optional => {
            diagnostics.warn("side_file_unreadable", format!("{e}; analysed without it"));
            Ok(None)
        }
        Some(Err(e)) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_file_names() {
        assert_eq!(classify("trace.json.gz"), Kind::Trace);
        assert_eq!(classify("host_123.1700000000.pt.trace.json"), Kind::Trace);
        assert_eq!(classify("exec_trace.json.gz"), Kind::ExecTrace);
        assert_eq!(classify("snapshot.pickle.gz"), Kind::Snapshot);
        assert_eq!(classify("memory_timeline_torch.json.gz"), Kind::Other);
        assert_eq!(classify("reference.json"), Kind::Other);
        assert_eq!(classify("notes.txt"), Kind::Other);
    }

    /// A run directory whose manifest carries `timing` as given, beside an empty trace.
    fn run_dir(timing: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("trace.json"), "{}").unwrap();
        let manifest = format!(
            r#"{{"files": {{"trace": "trace.json"}}, "step_time_s": 0.01,
                 "ranks": [{{"rank": 0, "files": {{"trace": "trace.json"}}, "timing": {timing}}}]}}"#
        );
        std::fs::write(dir.path().join("manifest.json"), manifest).unwrap();
        dir
    }

    #[test]
    fn issue17_manifest_step_time_names_its_source_and_only_a_timing_phase_is_unsettled() {
        // Issue 17: capture's figure from the steps after the window is the run's; a timing
        // phase that stopped at its cap is still said to be rough, but only where it is the
        // figure reported.
        let phase = r#"{"steps": 20, "stop": "step_cap", "step_time_s": 0.012}"#;
        let after = format!(
            r#"{{"step_time_s": 0.011, "source": "after_window", "timing_phase": {phase}}}"#
        );
        let dir = run_dir(&after);
        let t = discover(dir.path(), None, None, None)
            .unwrap()
            .program_step_time
            .unwrap();
        assert_eq!(
            (t.ns, t.source, t.unsettled),
            (11_000_000, "after_window", None)
        );
        // The same phase reported as the figure.
        let dir = run_dir(&format!(
            r#"{{"step_time_s": 0.012, "source": "timing_phase", "timing_phase": {phase}}}"#
        ));
        let t = discover(dir.path(), Some(Path::new("x")), None, Some(0))
            .unwrap()
            .program_step_time
            .unwrap();
        assert_eq!(t.source, "timing_phase");
        assert_eq!(t.unsettled, Some(("step_cap".to_owned(), 20)));
        // Manifests written before the after-window timing: the phase's fields at the top.
        let dir = run_dir(phase);
        let t = discover(dir.path(), None, None, None)
            .unwrap()
            .program_step_time
            .unwrap();
        assert_eq!(
            (t.ns, t.source, t.unsettled),
            (
                12_000_000,
                "timing_phase",
                Some(("step_cap".to_owned(), 20))
            )
        );
    }

    #[test]
    fn issue20_a_plan_timed_both_ways_is_read_on_the_streams_clock_where_there_is_one() {
        let phase = |cuda: &str| {
            format!(
                r#"{{"step_time_s": 0.0497, "source": "timing_phase", "timing_phase": {{"steps": 8, "stop": "settled", "step_time_s": 0.0497{cuda},
                     "unplanned": {{"steps": 8, "step_time_s": 0.0307{cuda_off}, "plan_on": [true, false]}}}}}}"#,
                cuda_off = cuda.replace("0.0428", "0.0366")
            )
        };
        let read = |timing: &str| {
            let dir = run_dir(timing);
            discover(dir.path(), None, None, None)
                .unwrap()
                .program_step_time
                .unwrap()
                .plan_ab
        };
        let ab = read(&phase(r#", "step_time_cuda_s": 0.0428"#)).unwrap();
        assert_eq!(
            (ab.clock, ab.step_time_with_s, ab.step_time_without_s),
            ("cuda_events", 0.0428, 0.0366)
        );
        assert_eq!((ab.steps_with, ab.steps_without), (8, 8));
        let ab = read(&phase("")).unwrap();
        assert_eq!(
            (ab.clock, ab.step_time_with_s, ab.step_time_without_s),
            ("host", 0.0497, 0.0307)
        );
        // Timed one way only: none.
        assert_eq!(
            read(
                r#"{"step_time_s": 0.012, "source": "timing_phase", "timing_phase": {"steps": 20, "step_time_s": 0.012}}"#
            ),
            None
        );
    }
}
