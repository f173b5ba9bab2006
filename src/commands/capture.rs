//! `steptrace capture`: run the program under the shims, then say what was written.

use crate::cli;

/// The exit status of a capture that recorded no trace while the program itself exited 0
/// (it never imported torch, or ended before the window): there is nothing to analyse, and a
/// script must not read success. Documented in docs/capture.md.
pub(crate) const NO_TRACE: u8 = 3;

pub(crate) fn run(args: cli::CaptureArgs) -> anyhow::Result<u8> {
    let props = args.props()?;
    // The folder capture names itself (`steptrace-<program>-<time>`) is removed again when the
    // capture ends with nothing to analyse; a folder the user named is left as it is.
    let own_folder = args.out.is_none() && !props.out.exists();
    let outcome = steptrace_capture::run(&props)?;
    let m = &outcome.manifest;
    for n in &m.notes {
        eprintln!("steptrace: {n}");
    }
    let traced =
        m.files.contains_key("trace") || m.ranks.iter().any(|r| r.files.contains_key("trace"));
    let code = outcome.exit.code.clamp(0, 255) as u8;
    if !traced {
        let why = if m.incomplete_reasons.is_empty() {
            "the program wrote none".to_owned()
        } else {
            m.incomplete_reasons.join("; ")
        };
        let removed = own_folder
            && only_status_files(&outcome.out)
            && std::fs::remove_dir_all(&outcome.out).is_ok();
        eprintln!(
            "steptrace: error: no trace was recorded: {why}{}",
            if removed {
                String::new()
            } else {
                format!(" (what was written is in {})", outcome.out.display())
            }
        );
        // The program's own failure first; else capture's.
        return Ok(if code != 0 { code } else { NO_TRACE });
    }
    for r in &m.incomplete_reasons {
        eprintln!("steptrace: incomplete: {r}");
    }
    match &outcome.manifest_error {
        Some(e) => eprintln!(
            "steptrace: error: could not write the manifest ({e}); the files recorded are kept"
        ),
        None => eprintln!(
            "steptrace: wrote {} (analyze it with `steptrace analyze {}`)",
            outcome.out.display(),
            outcome.out.display()
        ),
    }
    // The child's own status, clamped to what an exit code can carry.
    Ok(code)
}

/// Whether a run folder holds only capture's own status files (the manifest, the shims'
/// status): nothing a user would keep.
fn only_status_files(dir: &std::path::Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|rd| {
        rd.filter_map(|e| e.ok()).all(|e| {
            let n = e.file_name();
            let n = n.to_string_lossy();
            e.file_type().is_ok_and(|t| t.is_file())
                && (n == "manifest.json" || (n.starts_with("shim") && n.ends_with(".json")))
        })
    })
}
