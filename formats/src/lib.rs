//! The files one part of steptrace writes and another part (or another program) reads, each
//! with one definition that the writer and every reader use: `plan.json`, written by
//! `steptrace plan`, checked by `capture --plan`, applied by the Python shim and set beside a
//! planned run's measurements by `compare`; and the gzip members of the files capture
//! compresses, which analyze inflates on every core. No logic beyond what reading and writing
//! a file needs.

pub mod gzip_members;
pub mod manifest;
pub mod plan;
pub mod shim;
pub mod step_time;
pub mod summary;

pub use step_time::StepTimeSource;

/// Why a file steptrace writes could not be read back (the caller names the file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadError {
    /// Not JSON at all (or not an object).
    NotJson(String),
    /// JSON, but not the file of this schema.
    NotTheFormat(String),
    /// Written for a newer schema (the first) than this build reads (the second).
    NewerVersion(u32, u32),
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::NotJson(e) => write!(f, "not JSON ({e})"),
            ReadError::NotTheFormat(e) => write!(f, "not the file steptrace writes ({e})"),
            ReadError::NewerVersion(v, ours) => write!(
                f,
                "format version {v} is newer than this build reads ({ours}): use a newer steptrace"
            ),
        }
    }
}

impl std::error::Error for ReadError {}

/// `text` read as a `T` whose file carries `format_version` (1 where absent), refusing a
/// version newer than `supported` before reading the rest: a newer file may hold what this
/// build's type cannot.
pub fn read_versioned<T: serde::de::DeserializeOwned>(
    text: &[u8],
    supported: u32,
) -> Result<T, ReadError> {
    #[derive(serde::Deserialize)]
    struct Version {
        #[serde(default = "version_one")]
        format_version: u32,
    }
    let v: Version = serde_json::from_slice(text).map_err(|e| ReadError::NotJson(e.to_string()))?;
    if v.format_version > supported {
        return Err(ReadError::NewerVersion(v.format_version, supported));
    }
    serde_json::from_slice(text).map_err(|e| ReadError::NotTheFormat(e.to_string()))
}

/// The version of a file written before versions were (serde's default for `format_version`).
pub(crate) fn version_one() -> u32 {
    1
}
