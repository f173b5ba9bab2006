//! Finding the inputs: a trace, a run directory (its manifest, or the files' names and heads), and one rank's files among several.

use super::*;

/// What each file in a directory looks like it is, from its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Trace,
    Snapshot,
    ExecTrace,
    Other,
}

pub(super) fn classify(name: &str) -> Kind {
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

/// What a directory entry is: by its name, and for a `.json[.gz]` whose name says nothing
/// (HolisticTraceAnalysis's test data: `sampled_rank-0.json.gz`), by whether its head holds
/// `"traceEvents"`, as every Kineto trace's does (before the events).
pub(super) fn classify_path(name: &str, path: &Path) -> Kind {
    let kind = classify(name);
    let lower = name.to_ascii_lowercase();
    let base = lower.strip_suffix(".gz").unwrap_or(&lower);
    let unnamed_json = kind == Kind::Other
        && base.ends_with(".json")
        && !(base.contains("memory_timeline")
            || base == "reference.json"
            || base == "manifest.json"
            || base.starts_with("shim"));
    if unnamed_json && head_has(path, b"\"traceEvents\"") {
        Kind::Trace
    } else {
        kind
    }
}

/// Whether the first 1 MiB of a file (inflated, when gzip) holds `needle`.
pub(super) fn head_has(path: &Path, needle: &[u8]) -> bool {
    use std::io::Read;
    let Ok(stream) = source::open_stream(path) else {
        return false;
    };
    let mut head = Vec::with_capacity(64 << 10);
    // A file that is not gzip after all, or that ends early, says what it read.
    let _ = stream.take(1 << 20).read_to_end(&mut head);
    memchr::memmem::find(&head, needle).is_some()
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

/// A file a manifest names, inside its run directory (a run directory is data, not
/// instructions): a plain relative name with no `..`, naming a regular file where one exists
/// (a device such as `/dev/zero` or a FIFO is refused; a missing file is left to the reader,
/// which says it is missing).
pub(super) fn inside_run_dir(dir: &Path, manifest: &Path, name: &str) -> Result<PathBuf, Error> {
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

/// Whether a directory entry is a regular file, or a folder, through symbolic links: people
/// arrange runs with links (`rank-0.json.gz -> ../runs/…/trace.json.gz`), and a link is read
/// as what it points to. (Links are never followed for writing: `report::out_dir`.)
pub(super) fn entry_is(e: &std::fs::DirEntry, dir: bool) -> bool {
    let is = |t: std::fs::FileType| if dir { t.is_dir() } else { t.is_file() };
    match e.file_type() {
        Ok(t) if t.is_symlink() => std::fs::metadata(e.path()).is_ok_and(|m| is(m.file_type())),
        Ok(t) => is(t),
        Err(_) => false,
    }
}

pub(super) fn discover_dir(dir: &Path, rank: Option<i64>) -> Result<Inputs, Error> {
    let manifest_path = dir.join("manifest.json");
    if let Some(text) =
        crate::file_error::read_side_file(&manifest_path, crate::file_error::MAX_MANIFEST_BYTES)?
    {
        let m = Manifest::from_json(&text).map_err(|e| Error::Format {
            path: manifest_path.clone(),
            what: format!("manifest.json: {e}"),
        })?;
        let fqns_of = |r: Option<i64>| {
            m.ranks
                .iter()
                .find(|x| r.is_none_or(|r| x.rank == r))
                .map(|x| x.module_fqns.clone())
                .unwrap_or_default()
        };
        let module_fqns = fqns_of(rank);
        let run_max_memory_allocated = m
            .ranks
            .iter()
            .find(|x| rank.is_none_or(|r| x.rank == r))
            .and_then(|x| x.run_max_memory_allocated);
        let (files, step_time, plan_probe) = match rank {
            Some(r) => match m.ranks.into_iter().find(|x| x.rank == r) {
                Some(x) => {
                    let t = x.timing.as_ref().and_then(program_step_time);
                    (
                        ManifestFiles::of(&x.files),
                        t,
                        x.plan_probe.as_ref().map(|p| p.figures),
                    )
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
                    Some(t) => program_step_time(t),
                    None => m
                        .step_time_s
                        .and_then(secs_to_ns)
                        .map(|ns| ProgramStepTime {
                            ns,
                            source: steptrace_formats::StepTimeSource::TimingPhase,
                            unsettled: None,
                            plan_ab: None,
                            host_lead_s: None,
                            optimizer_step_s: None,
                            forward_host_s: None,
                            backward_host_s: None,
                            passes_per_step: None,
                        }),
                };
                (
                    ManifestFiles::of(&m.files),
                    t,
                    m.ranks
                        .first()
                        .and_then(|r| r.plan_probe.as_ref().map(|p| p.figures)),
                )
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
                run_max_memory_allocated,
                module_fqns,
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

/// The error for a directory with no trace: what it holds, so that the user sees what was
/// looked at.
pub(super) fn no_trace_among(dir: &Path, names: &[(String, PathBuf)]) -> String {
    const SHOWN: usize = 8;
    let mut seen: Vec<&str> = names.iter().map(|(n, _)| n.as_str()).take(SHOWN).collect();
    if names.len() > SHOWN {
        seen.push("…");
    }
    if names.is_empty() {
        let mut folders: Vec<String> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok())
            .filter(|e| entry_is(e, true))
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        folders.sort();
        if folders.is_empty() {
            return "no Kineto trace (a .json or .json.gz holding traceEvents): the directory has no files".into();
        }
        let n = folders.len();
        folders.truncate(SHOWN);
        if n > SHOWN {
            folders.push("…".into());
        }
        format!(
            "no Kineto trace (a .json or .json.gz holding traceEvents): the directory holds no files, only {n} folder(s): {} (give one of them)",
            folders.join(", ")
        )
    } else {
        format!(
            "no Kineto trace (a .json or .json.gz holding traceEvents) among its {} file(s): {}",
            names.len(),
            seen.join(", ")
        )
    }
}

pub(super) fn discover_dir_filtered(
    dir: &Path,
    keep: &dyn Fn(&str) -> bool,
) -> Result<Inputs, Error> {
    let rd = std::fs::read_dir(dir).map_err(FileError::at(dir))?;
    let mut names: Vec<(String, PathBuf)> = rd
        .filter_map(|e| e.ok())
        .filter(|e| entry_is(e, false))
        .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
        .filter(|(n, _)| keep(n))
        .collect();
    names.sort();
    let pick = |kind: Kind| -> Vec<PathBuf> {
        names
            .iter()
            .filter(|(n, p)| classify_path(n, p) == kind)
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
                what: no_trace_among(dir, &names),
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
        run_max_memory_allocated: None,
        module_fqns: Default::default(),
    })
}
