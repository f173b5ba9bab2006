//! `steptrace capture`: run the program under the shims, then say what was written.

use crate::cli;

pub(crate) fn run(args: cli::CaptureArgs) -> anyhow::Result<u8> {
    let outcome = steptrace_capture::run(&args.props()?)?;
    let m = &outcome.manifest;
    for n in &m.notes {
        eprintln!("steptrace: {n}");
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
    Ok(outcome.exit.code.clamp(0, 255) as u8)
}
