//! `steptrace flops`: FLOPs by op and node, against FlopCounterMode references.

use std::io::Write;

use crate::console::terminal_safe;
use crate::process::limit_threads;

use crate::cli;

pub(crate) fn run(args: cli::FlopsArgs) -> anyhow::Result<u8> {
    if let Some(n) = args.input.threads {
        limit_threads(n)?;
    }
    let (_trace, analysis, _diag) = steptrace::run_analysis(&args.input.props(None, args.top)?)?;
    let mut text = steptrace::report::flops::graph_profile_block(&analysis, args.top.max(1));
    for path in &args.compare {
        let bytes = std::fs::read(path).map_err(|e| {
            steptrace::Error::Input(steptrace::ingest::Error::from(
                steptrace::file_error::FileError::new(path, e),
            ))
        })?;
        let v: serde_json::Value = serde_json::from_slice(&bytes).map_err(|e| {
            steptrace::Error::Input(steptrace::ingest::Error::Format {
                path: path.clone(),
                what: format!("not JSON: {e}"),
            })
        })?;
        let label = path.display().to_string();
        let r = steptrace::report::flops::Reference::from_json(&label, &v).ok_or_else(|| {
            steptrace::Error::Input(steptrace::ingest::Error::Format {
                path: path.clone(),
                what: "no FLOP total (flop_counter.total, total_flops or total)".into(),
            })
        })?;
        text.push('\n');
        text += &steptrace::report::flops::comparison_table(&analysis, &r);
    }
    let mut out = std::io::stdout().lock();
    out.write_all(terminal_safe(&text).as_bytes())?;
    out.flush()?;
    Ok(0)
}
