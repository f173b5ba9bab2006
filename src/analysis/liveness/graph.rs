//! The data-flow graph of the first iteration (with an Execution Trace): which node wrote each
//! storage another node read, the storages with their sizes and categories.

use std::collections::{BTreeMap, BTreeSet};

use rustc_hash::FxHashMap;
use serde::Serialize;

use super::EtUses;
use crate::analysis::memory::{Category, Memory};
use crate::analysis::step::Step;
use crate::model::Trace;

/// An edge of the data-flow graph: `from` wrote a storage `to` read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, PartialOrd, Ord)]
pub struct Edge {
    /// Producer node name.
    pub from: String,
    /// Consumer node name.
    pub to: String,
    /// Storage ids carried.
    pub storages: Vec<i64>,
    /// Bytes carried.
    pub bytes: i64,
}

fn category_name<S: serde::Serializer>(c: &Option<Category>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(c.map_or("EXTERNAL", Category::as_str))
}

/// A tensor storage of the graph.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GraphTensor {
    /// ET storage id.
    pub storage_id: i64,
    /// Bytes.
    pub bytes: i64,
    /// Its memory category; `None` for a tensor made before the window that no snapshot block
    /// names (written `EXTERNAL`).
    #[serde(serialize_with = "category_name")]
    pub category: Option<Category>,
    /// Producer node name (empty for tensors made before the window).
    pub producer: String,
    /// Consumer node names.
    pub consumers: Vec<String>,
}

/// The data-flow graph of the first iteration.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Graph {
    /// Iteration label.
    pub iteration: String,
    /// Node names in rank order.
    pub nodes: Vec<String>,
    /// Producer → consumer edges.
    pub edges: Vec<Edge>,
    /// Storages.
    pub tensors: Vec<GraphTensor>,
}

pub(super) fn build_graph(
    t: &Trace,
    step: &Step,
    mem: &Memory,
    u: &EtUses,
    storage_of_block: &FxHashMap<usize, i64>,
) -> Graph {
    let Some(it) = step.iterations.first() else {
        return Graph {
            iteration: String::new(),
            nodes: Vec::new(),
            edges: Vec::new(),
            tensors: Vec::new(),
        };
    };
    let range = it.nodes.clone();
    // Writer of each storage in this iteration (the first node that wrote it).
    let mut writer: BTreeMap<i64, (usize, i64)> = BTreeMap::new();
    for ni in range.clone() {
        for &(s, b) in &u.writes[ni] {
            writer.entry(s).or_insert((ni, b));
        }
    }
    let category_of: FxHashMap<i64, Category> = storage_of_block
        .iter()
        .filter(|(bi, _)| mem.blocks[**bi].iteration == Some(it.index))
        .map(|(bi, s)| (*s, mem.blocks[*bi].category))
        .collect();
    let mut edges: BTreeMap<(usize, usize), (BTreeSet<i64>, i64)> = BTreeMap::new();
    let mut consumers: BTreeMap<i64, BTreeSet<usize>> = BTreeMap::new();
    for ni in range.clone() {
        for s in &u.reads[ni] {
            consumers.entry(*s).or_default().insert(ni);
            if let Some(&(w, b)) = writer.get(s) {
                if w != ni {
                    let e = edges.entry((w, ni)).or_default();
                    if e.0.insert(*s) {
                        e.1 += b;
                    }
                }
            }
        }
    }
    let name = |ni: usize| step.nodes[ni].name.clone();
    let tensors = consumers
        .iter()
        .map(|(s, cs)| {
            let w = writer.get(s);
            GraphTensor {
                storage_id: *s,
                bytes: w.map_or(0, |x| x.1),
                category: category_of.get(s).copied().or_else(|| {
                    // Written inside the window but by no block the snapshot categorised.
                    w.is_some().then_some(Category::Temporary)
                }),
                producer: w.map_or(String::new(), |x| name(x.0)),
                consumers: cs.iter().map(|&c| name(c)).collect(),
            }
        })
        .collect();
    let _ = t;
    Graph {
        iteration: it.label.clone(),
        nodes: range.map(name).collect(),
        edges: edges
            .into_iter()
            .map(|((a, b), (s, bytes))| Edge {
                from: name(a),
                to: name(b),
                storages: s.into_iter().collect(),
                bytes,
            })
            .collect(),
        tensors,
    }
}
