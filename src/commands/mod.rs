//! Each subcommand's body: its arguments into the library's calls, and what the user sees
//! printed. main.rs parses and dispatches here; the library underneath never prints.

pub(crate) mod analyze;
pub(crate) mod capture;
pub(crate) mod compare;
pub(crate) mod flops;
pub(crate) mod merge;
pub(crate) mod plan;
pub(crate) mod sweep;
