//! The tables an Execution Trace becomes (ingest's reader fills them): one node per recorded
//! op with the identities of the tensors it reads and writes.

use std::path::PathBuf;

use crate::intern::Interner;
use crate::intern::StrId;

/// A tensor as the ET records it: `[tensor_id, storage_id, offset, numel, itemsize, device]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TensorRef {
    /// Tensor id (unique per tensor object in the window).
    pub tensor_id: i64,
    /// Storage id (shared by views).
    pub storage_id: i64,
    /// Element offset into the storage.
    pub offset: i64,
    /// Elements.
    pub numel: i64,
    /// Bytes per element.
    pub itemsize: i64,
    /// Device, e.g. `cuda:0`.
    pub device: StrId,
}

/// One ET node.
#[derive(Debug, Clone, PartialEq)]
pub struct ExecNode {
    /// Node id.
    pub id: i64,
    /// Op or annotation name.
    pub name: StrId,
    /// Parent node (`ctrl_deps`).
    pub parent: Option<i64>,
    /// Record function id: joins to the Kineto op's `Record function id`.
    pub rf_id: Option<i64>,
    /// Autograd sequence number (-1 when none).
    pub seq_id: Option<i64>,
    /// Thread (ET's own numbering).
    pub tid: Option<i64>,
    /// Tensor inputs, flattened (tensor lists included).
    pub inputs: Vec<TensorRef>,
    /// Tensor outputs, flattened.
    pub outputs: Vec<TensorRef>,
}

/// A parsed Execution Trace.
#[derive(Debug, Clone)]
pub struct ExecTrace {
    /// The file.
    pub path: PathBuf,
    /// `schema`.
    pub schema: String,
    /// Names and devices.
    pub strings: Interner,
    /// Nodes in file order.
    pub nodes: Vec<ExecNode>,
    /// Index into `nodes` by record function id (the last node of an id, where several
    /// share one): what the joins to Kineto's ops look nodes up by.
    pub by_rf: rustc_hash::FxHashMap<i64, u32>,
}

impl ExecTrace {
    /// The node recorded for a Kineto op's record function id.
    pub fn node_by_rf(&self, rf: i64) -> Option<&ExecNode> {
        self.by_rf.get(&rf).map(|&i| &self.nodes[i as usize])
    }
}
