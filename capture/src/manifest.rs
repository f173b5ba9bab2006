//! `manifest.json` and what a capture returns. The one definition of the file: capture writes
//! it and `analyze` reads it with these types. Reading is lenient where older captures wrote
//! less (every field has a default; a rank's timing as it was written before the steps after
//! the window were timed is read too), so a run directory from an earlier build still loads.

use std::path::PathBuf;

use crate::child;
pub use steptrace_formats::manifest::{Manifest, RankFiles, Rerun};

/// What a capture produced.
#[derive(Debug)]
pub struct Outcome {
    /// How the child ended; the CLI exits with `exit.code`.
    pub exit: child::Exit,
    /// The manifest written.
    pub manifest: Manifest,
    /// Where.
    pub out: PathBuf,
    /// Why manifest.json could not be written (a full disk), if it could not.
    pub manifest_error: Option<String>,
}
