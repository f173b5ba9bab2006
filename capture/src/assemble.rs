//! The manifest of a finished run: every rank's files (compressed here), what the run lacks
//! and why, and the program's step time.

use std::path::{Path, PathBuf};

use crate::{child, env, finalize, host, shim, CaptureProps, Error, Manifest, Mode, RankFiles};

/// Why a rank's window was not recorded whole when the program simply ended: which steps went
/// where, counting the timing phase's (its length is not fixed: it ends when its median
/// settles).
fn short_window(props: &CaptureProps, st: &finalize::ShimStatus) -> String {
    let steps = st.steps.max(st.boundaries_epoch_ns.len() as i64);
    let s = &props.schedule;
    // The phase's readings are at step boundaries, its first at the end of the last skipped
    // step: n readings time the n-1 steps after it.
    let readings = st.timing_ns.len() as i64;
    let window = i64::from(s.wait + s.warmup + s.active);
    let first = i64::from(s.skip_first.max(1)) + 1;
    let last = (first + readings - 2).min(steps);
    format!(
        "the program ended after {steps} steps, before the active window closed: {} skipped, {}and the window (wait {}, warm-up {}, active {}) needed {window} more",
        s.skip_first,
        if readings > 1 {
            format!("steps {first}-{last} timed with nothing recorded (the timing phase), ")
        } else {
            String::new()
        },
        s.wait,
        s.warmup,
        s.active,
    )
}

/// What the launcher knows of a run once the program has ended.
pub(crate) struct Ran {
    pub(crate) mode: Mode,
    pub(crate) exit: child::Exit,
    pub(crate) started_at: String,
    pub(crate) ended_at: String,
    /// The torch probed for the C++ shim, where one was.
    pub(crate) torch: Option<shim::TorchInfo>,
    pub(crate) notes: Vec<String>,
}

/// The manifest of a run: every rank's files (compressed here, all ranks at once), what the
/// run lacks and why, and the program's step time.
pub(crate) fn finish(props: &CaptureProps, out: &Path, ran: Ran) -> Result<Manifest, Error> {
    let Ran {
        mode,
        exit,
        started_at,
        ended_at,
        torch,
        mut notes,
    } = ran;
    nvtx::range_push!("steptrace.capture.finalize");
    let statuses = finalize::read_statuses(out);
    let mut reasons = Vec::new();
    if let Some(s) = exit.ended_lingering_s {
        notes.push(format!(
            "every shim reported the program's clean exit, but the process was still running {s} s later: steptrace ended it ({} to keep it running longer); its files are complete",
            env::LINGER_S
        ));
    } else if exit.code != 0 {
        reasons.push(match exit.signal {
            Some(s) => format!("the program was killed by signal {s}"),
            None => format!("the program exited with status {}", exit.code),
        });
    }
    if statuses.is_empty() {
        reasons.push(
            "no shim reported: the program never loaded the capture shim (did it import torch?)"
                .into(),
        );
    }
    let mut ranks: Vec<RankFiles> = Vec::new();
    // (index in `ranks`, role, file name) of each file to gzip.
    let mut to_compress = Vec::new();
    for (_name, st) in &statuses {
        let r = rank_files(
            props,
            out,
            st,
            ranks.len(),
            &mut to_compress,
            &mut reasons,
            &mut notes,
        );
        ranks.push(r);
    }
    let t0 = std::time::Instant::now();
    let paths: Vec<PathBuf> = to_compress.iter().map(|(_, _, n)| out.join(n)).collect();
    let results = finalize::gzip_files(&paths);
    let compress_ms = t0.elapsed().as_secs_f64() * 1e3;
    for ((rank_index, role, name), result) in to_compress.into_iter().zip(results) {
        let rank = &mut ranks[rank_index];
        match result {
            Ok(gz) => {
                let gz = gz
                    .file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned();
                rank.files.insert(role, gz);
            }
            Err(e) => notes.push(format!("could not compress {name}: {e}")),
        }
    }
    for rank in &mut ranks {
        // Wall time of the whole run's compression, the same on every rank's line.
        rank.costs_ms
            .insert("compress".into(), (compress_ms * 1e3).round() / 1e3);
    }
    nvtx::range_pop!();
    let first = statuses.first().map(|(_, s)| s.clone()).unwrap_or_default();
    let files = ranks.first().map(|r| r.files.clone()).unwrap_or_default();
    if !files.contains_key("trace") && props.record.trace {
        reasons.push("no trace was written".into());
    }
    Ok(Manifest {
        format_version: steptrace_formats::manifest::FORMAT_VERSION,
        steptrace_version: env!("CARGO_PKG_VERSION").into(),
        command: props
            .program
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
        cwd: std::env::current_dir()
            .map(|p| p.display().to_string())
            .unwrap_or_default(),
        mode,
        exit,
        started_at,
        ended_at,
        host: host::host_name(),
        torch: first
            .torch
            .clone()
            .or_else(|| torch.as_ref().map(|t| t.version.clone())),
        cuda: first
            .cuda
            .clone()
            .or_else(|| torch.as_ref().and_then(|t| t.cuda.clone())),
        driver: host::driver_version(),
        gpu: first.gpu.clone(),
        gpu_memory_bytes: first.gpu_memory_bytes,
        schedule: props.schedule,
        record: props.record,
        rank: first.rank,
        world_size: statuses
            .iter()
            .map(|(_, s)| s.world_size)
            .max()
            .unwrap_or(1),
        step_time_s: ranks
            .first()
            .and_then(|r| r.timing.as_ref())
            .map(|t| t.step_time_s),
        completed: reasons.is_empty(),
        incomplete_reasons: reasons,
        files,
        ranks,
        notes,
        rerun: None,
    })
}

/// One rank's files as the manifest lists them (the missing ones noted and left out), with
/// the files to compress pushed to `to_compress` under the rank's `index`, and what the rank's
/// shim reported as missing or noted.
fn rank_files(
    props: &CaptureProps,
    out: &Path,
    st: &finalize::ShimStatus,
    index: usize,
    to_compress: &mut Vec<(usize, String, String)>,
    reasons: &mut Vec<String>,
    notes: &mut Vec<String>,
) -> RankFiles {
    let mut files = st.files.clone();
    if st.native {
        // The C++ shim records the window itself (trace, Execution Trace, snapshot at
        // the window's end); without a window, the exit snapshot is what there is.
        if !files.contains_key("snapshot") {
            if let Some(s) = files.get("snapshot_exit").cloned() {
                files.insert("snapshot".into(), s);
            }
        }
    }
    if !st.window_complete && st.no_trace_reason.is_none() {
        let why = st
            .window_incomplete_reason
            .clone()
            .unwrap_or_else(|| short_window(props, st));
        reasons.push(format!("rank {}: {why}", st.rank));
    }
    if let Some(r) = &st.no_trace_reason {
        reasons.push(format!("rank {}: {r}", st.rank));
    }
    if let Some(r) = &st.no_snapshot_reason {
        notes.push(format!("rank {}: no memory snapshot: {r}", st.rank));
    }
    for n in &st.notes {
        notes.push(format!("rank {}: {n}", st.rank));
    }
    // Compress what is there (below, every rank's files at once); drop roles whose file
    // is missing.
    let mut present = std::collections::BTreeMap::new();
    for (role, name) in files {
        let p = out.join(&name);
        if !p.is_file() {
            if Path::new(&format!("{}.gz", p.display())).is_file() {
                present.insert(role, format!("{name}.gz"));
            } else {
                notes.push(format!(
                    "rank {}: {role} file {name} was not written",
                    st.rank
                ));
            }
            continue;
        }
        to_compress.push((index, role.clone(), name.clone()));
        present.insert(role, name);
    }
    let timing = finalize::program_timing(st);
    if timing.is_none() && st.window_complete && props.timing.steps > 0 {
        notes.push(format!(
            "rank {}: the program ended inside the timing phase before the window: its own step time is unknown",
            st.rank
        ));
    }
    RankFiles {
        rank: st.rank,
        files: present,
        steps: st.steps.max(st.boundaries_epoch_ns.len() as i64),
        boundary: st.boundary.clone(),
        errors: st.errors.clone(),
        timing,
        reference: st.reference.clone(),
        plan_probe: st.plan_probe.clone(),
        module_fqns: st.module_fqns.clone(),
        costs_ms: st.costs_ms.clone(),
        run_max_memory_allocated: st.run_max_memory_allocated,
    }
}
