//! The model of one step: the tables read from the inputs ([`tables`]: Kineto's ops, GPU
//! activities and memory events, the snapshot's history, the Execution Trace's tensors, the
//! run's own step time), the structure built on them ([`Trace`]: which op encloses which,
//! which op launched each GPU activity, which module each op ran in, the training loop's
//! thread and device), and the step rebuilt from it ([`step`]: iterations, nodes, phases;
//! memory categories). Analysis, plan and report read these; the files behind them are
//! ingest's business, and the vocabulary the files share (phases, categories) is
//! `steptrace_formats`'.

pub mod step;
pub mod tables;
mod trace;

pub use step::{Category, Detection, Iteration, Node, Phase, PhaseWall, Step};
pub use tables::{exec_trace, kineto, run, snapshot};
pub use trace::*;
