//! Integration tests: one test binary (one link) with a module per concern.

mod capture;
mod cli;
mod common;
mod corpus;
mod determinism;
mod edges;
mod formats;
mod gen_ranks;
mod golden;
mod hostile;
mod idle;
mod liveness;
mod memory_snapshot;
mod outputs;
mod plan;
mod properties;
mod ranks;
mod reports;
mod robustness;
mod samples;
mod synthetic;
mod truncated;
