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
