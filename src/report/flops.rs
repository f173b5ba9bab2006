//! FLOP outputs: `flops.csv`, `flops_by_op.csv`, `flops_by_module.csv`, `graph_profile.json`
//! (the seed's shape), the GRAPH PROFILE console block and the comparison table.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use super::{csv_err, io, Error};
use crate::analysis::flops::FlopRow;
use crate::analysis::Analysis;

/// FLOPs with an SI unit, e.g. `8.21 G`.
pub fn human_flops(v: f64) -> String {
    let units = [("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("K", 1e3)];
    for (u, s) in units {
        if v.abs() >= s {
            return format!("{:.2} {u}", v / s);
        }
    }
    format!("{v:.0}")
}

fn f3(v: f64) -> String {
    format!("{v:.3}")
}

fn opt(v: Option<f64>) -> String {
    v.map_or(String::new(), |x| format!("{x:.2}"))
}

pub(super) fn write_flops_csv(path: &Path, a: &Analysis) -> Result<(), Error> {
    let mut w = super::csv_writer(path)?;
    w.write_record([
        "rank",
        "node_name",
        "op",
        "gtype",
        "module",
        "flops",
        "matmul_flops",
        "bytes",
        "arithmetic_intensity",
        "dtype",
        "median_run_time_s",
        "achieved_tflops",
        "achieved_gbps",
        "pct_peak_flops",
        "pct_peak_bandwidth",
        "bound",
    ])
    .map_err(csv_err(path))?;
    for r in &a.flops {
        w.write_record([
            r.rank.to_string(),
            r.node_name.clone(),
            r.op.clone(),
            r.gtype.as_str().to_owned(),
            r.module.clone(),
            r.flops.to_string(),
            r.matmul_flops.to_string(),
            r.bytes.to_string(),
            f3(r.arithmetic_intensity),
            r.dtype.as_str().to_owned(),
            super::secs(r.gpu_time_s),
            f3(r.achieved_tflops),
            f3(r.achieved_gbps),
            opt(r.pct_peak_flops),
            opt(r.pct_peak_bandwidth),
            r.bound.map_or("", |b| b.as_str()).to_owned(),
        ])
        .map_err(csv_err(path))?;
    }
    w.flush().map_err(io(path))
}

/// One row of `flops_by_op.csv` or `flops_by_module.csv`: the FLOP rows of one op, or of one
/// top-level module, summed.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Rollup {
    /// The op, or the module path's first two parts (`(no module)` for none).
    pub(crate) key: String,
    pub(crate) nodes: u64,
    pub(crate) flops: u64,
    pub(crate) matmul_flops: u64,
    pub(crate) bytes: u64,
    pub(crate) gpu_time_s: f64,
}

impl Rollup {
    /// FLOPs over GPU time, TFLOP/s (0 without GPU time).
    pub(crate) fn achieved_tflops(&self) -> f64 {
        if self.gpu_time_s > 0.0 {
            self.flops as f64 / self.gpu_time_s / 1e12
        } else {
            0.0
        }
    }
}

/// The rows grouped by `key`, most FLOPs first, then by key.
fn group_by(rows: &[FlopRow], key: impl Fn(&FlopRow) -> String) -> Vec<Rollup> {
    let mut m: BTreeMap<String, Rollup> = BTreeMap::new();
    for r in rows {
        let k = key(r);
        let g = m.entry(k.clone()).or_insert_with(|| Rollup {
            key: k,
            ..Rollup::default()
        });
        g.nodes += 1;
        g.flops += r.flops;
        g.matmul_flops += r.matmul_flops;
        g.bytes += r.bytes;
        g.gpu_time_s += r.gpu_time_s;
    }
    let mut v: Vec<Rollup> = m.into_values().collect();
    v.sort_by(|a, b| b.flops.cmp(&a.flops).then(a.key.cmp(&b.key)));
    v
}

/// `flops_by_op`'s rows.
pub(crate) fn by_op(a: &Analysis) -> Vec<Rollup> {
    group_by(&a.flops, |r| r.op.clone())
}

/// `flops_by_module`'s rows: by top-level child of the model (`ResNet_0/Sequential_1`), where
/// module paths exist.
pub(crate) fn by_module(a: &Analysis) -> Vec<Rollup> {
    group_by(&a.flops, |r| {
        let parts: Vec<&str> = r.module.split('/').collect();
        if r.module.is_empty() {
            "(no module)".into()
        } else {
            parts[..parts.len().min(2)].join("/")
        }
    })
}

fn write_groups(path: &Path, label: &str, groups: &[Rollup]) -> Result<(), Error> {
    let mut w = super::csv_writer(path)?;
    w.write_record([
        label,
        "nodes",
        "flops",
        "matmul_flops",
        "bytes",
        "gpu_time_s",
        "achieved_tflops",
    ])
    .map_err(csv_err(path))?;
    for g in groups {
        w.write_record([
            g.key.clone(),
            g.nodes.to_string(),
            g.flops.to_string(),
            g.matmul_flops.to_string(),
            g.bytes.to_string(),
            super::secs(g.gpu_time_s),
            f3(g.achieved_tflops()),
        ])
        .map_err(csv_err(path))?;
    }
    w.flush().map_err(io(path))
}

pub(super) fn write_rollups(dir: &Path, a: &Analysis) -> Result<(), Error> {
    write_groups(&dir.join("flops_by_op.csv"), "op", &by_op(a))?;
    write_groups(&dir.join("flops_by_module.csv"), "module", &by_module(a))
}

/// `graph_profile.json`: the seed's export (`model, total_flops, total_memory, layers[...]`),
/// per iteration, with the same split by phase.
#[derive(Debug, Serialize)]
pub struct GraphProfile {
    /// Model (trace) name.
    pub model: String,
    /// All FLOPs per iteration.
    pub total_flops: u64,
    /// FlopCounterMode FLOPs per iteration.
    pub matmul_flops: u64,
    /// Bytes per iteration.
    pub total_memory: u64,
    /// Nodes with FLOPs or traffic.
    pub layers: Vec<Layer>,
    /// The same per phase.
    pub phases: BTreeMap<String, PhaseProfile>,
}

/// Totals of one phase.
#[derive(Debug, Serialize)]
pub struct PhaseProfile {
    /// All FLOPs.
    pub total_flops: u64,
    /// FlopCounterMode FLOPs.
    pub matmul_flops: u64,
    /// Bytes.
    pub total_memory: u64,
    /// Nodes.
    pub layers: usize,
}

/// One node in the seed's layer shape.
#[derive(Debug, Serialize)]
pub struct Layer {
    /// Node name.
    pub name: String,
    /// Op.
    #[serde(rename = "type")]
    pub kind: String,
    /// All FLOPs.
    pub flops: u64,
    /// Bytes.
    pub memory: u64,
    /// FLOPs per byte.
    pub arithmetic_intensity: f64,
    /// `compute-bound`, `memory-bound`, or empty.
    pub bottleneck: String,
}

/// Builds the graph profile.
pub fn graph_profile(a: &Analysis) -> GraphProfile {
    let model = a.summary.name.clone();
    let layers = a
        .flops
        .iter()
        .filter(|r| r.flops > 0 || r.bytes > 0)
        .map(|r| Layer {
            name: r.node_name.clone(),
            kind: r.op.clone(),
            flops: r.flops,
            memory: r.bytes,
            arithmetic_intensity: (r.arithmetic_intensity * 1000.0).round() / 1000.0,
            bottleneck: if r.bound.is_none() {
                String::new()
            } else {
                format!("{}-bound", r.bound.map_or("", |b| b.as_str()))
            },
        })
        .collect();
    let mut phases: BTreeMap<String, PhaseProfile> = BTreeMap::new();
    for r in &a.flops {
        let p = phases
            .entry(r.gtype.as_str().to_owned())
            .or_insert(PhaseProfile {
                total_flops: 0,
                matmul_flops: 0,
                total_memory: 0,
                layers: 0,
            });
        p.total_flops += r.flops;
        p.matmul_flops += r.matmul_flops;
        p.total_memory += r.bytes;
        p.layers += 1;
    }
    GraphProfile {
        model,
        total_flops: a.summary.flops_per_iteration,
        matmul_flops: a.summary.matmul_flops_per_iteration,
        total_memory: a.summary.bytes_per_iteration,
        layers,
        phases,
    }
}

/// The seed's console block: totals, operation breakdown, bottleneck split, top layers.
pub fn graph_profile_block(a: &Analysis, top: usize) -> String {
    let s = &a.summary;
    let bar = "=".repeat(80);
    let mut o = format!(
        "{bar}\nGRAPH PROFILE: {} (per iteration{})\n{bar}\n\n",
        graph_profile(a).model,
        s.device
            .as_deref()
            .map(|d| format!(", {d}"))
            .unwrap_or_default()
    );
    let total = s.flops_per_iteration as f64;
    let ai = if s.bytes_per_iteration > 0 {
        total / s.bytes_per_iteration as f64
    } else {
        0.0
    };
    o += "Model Summary:\n";
    o += &format!("  Total Operators:      {}\n", a.flops.len());
    o += &format!(
        "  Total FLOPs:          {} (FlopCounterMode convention: {})\n",
        human_flops(total),
        human_flops(s.matmul_flops_per_iteration as f64)
    );
    o += &format!(
        "  Total Memory:         {}\n",
        super::human_bytes(s.bytes_per_iteration as i64)
    );
    o += &format!("  Arithmetic Intensity: {ai:.1} (FLOPs/Byte)\n");
    if !s.flops_from_execution_trace {
        o += "  (no Execution Trace: traffic estimated from allocations, foreach optimizer FLOPs not counted)\n";
    }
    o += "\nOperation Breakdown:\n";
    // Already most FLOPs first, then by op.
    for v in by_op(a).iter().filter(|g| g.flops > 0).take(8) {
        o += &format!(
            "  {:<44} {:>5.1}% ({} ops, {} FLOPs)\n",
            format!("{}:", v.key),
            if total > 0.0 {
                100.0 * v.flops as f64 / total
            } else {
                0.0
            },
            v.nodes,
            human_flops(v.flops as f64)
        );
    }
    let with = a.flops.iter().filter(|r| r.bound.is_some()).count();
    if with > 0 {
        let c = a
            .flops
            .iter()
            .filter(|r| r.bound == Some(super::super::analysis::flops::Bound::Compute))
            .count();
        o += "\nBottleneck Analysis (machine balance of the device):\n";
        o += &format!(
            "  Compute-bound:  {:.0}% ({c} nodes)\n",
            100.0 * c as f64 / with as f64
        );
        o += &format!(
            "  Memory-bound:   {:.0}% ({} nodes)\n",
            100.0 * (with - c) as f64 / with as f64,
            with - c
        );
    }
    o += "\nBy phase:\n";
    for (p, f) in steptrace_formats::summary::by_name_order(&s.flops_by_phase) {
        o += &format!("  {:<10} {} FLOPs\n", p.as_str(), human_flops(*f as f64));
    }
    o += &format!("\nLayer Details (Top {top} by FLOPs):\n");
    let mut rows: Vec<&FlopRow> = a.flops.iter().filter(|r| r.flops > 0).collect();
    rows.sort_by(|x, y| y.flops.cmp(&x.flops).then(x.rank.cmp(&y.rank)));
    for r in rows.iter().take(top) {
        o += &format!(
            "  {}: {} FLOPs, {}, AI={:.1}{}{}\n",
            r.node_name,
            human_flops(r.flops as f64),
            super::human_bytes(r.bytes as i64),
            r.arithmetic_intensity,
            if r.bound.is_none() {
                String::new()
            } else {
                format!(" ({}-bound)", r.bound.map_or("", |b| b.as_str()))
            },
            r.pct_peak_flops
                .map(|p| format!(", {p:.1}% of peak"))
                .unwrap_or_default()
        );
    }
    o
}

/// A reference to compare against: FlopCounterMode's (`{"flop_counter": {"total", "per_op"}}`,
/// as the samples' reference.json), the seed's (`{"total_flops"}`), or `{"total"}`.
pub struct Reference {
    /// Label.
    pub label: String,
    /// Total FLOPs.
    pub total: u64,
    /// Per op, when given.
    pub per_op: BTreeMap<String, u64>,
    /// Whether it counts only matmul-family ops (FlopCounterMode).
    pub matmul_convention: bool,
}

impl Reference {
    /// Reads a reference from JSON text.
    pub fn from_json(label: &str, v: &serde_json::Value) -> Option<Reference> {
        let (node, matmul) = if v.get("flop_counter").is_some() {
            (&v["flop_counter"], true)
        } else {
            (
                v,
                v.get("convention").and_then(|c| c.as_str()) == Some("matmul"),
            )
        };
        let total = node
            .get("total")
            .or_else(|| node.get("total_flops"))
            .and_then(|t| t.as_u64())?;
        let per_op = node
            .get("per_op")
            .and_then(|p| p.as_object())
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_u64()?)))
                    .collect()
            })
            .unwrap_or_default();
        Some(Reference {
            label: label.to_owned(),
            total,
            per_op,
            matmul_convention: matmul,
        })
    }
}

/// The seed's comparison table.
pub fn comparison_table(a: &Analysis, r: &Reference) -> String {
    let ours = if r.matmul_convention {
        a.summary.matmul_flops_per_iteration
    } else {
        a.summary.flops_per_iteration
    };
    let bar = "=".repeat(80);
    let mut o = format!(
        "{bar}\nFLOP COMPARISON: steptrace vs {} ({} convention)\n{bar}\n\n",
        r.label,
        if r.matmul_convention {
            "FlopCounterMode"
        } else {
            "all-FLOPs"
        }
    );
    let row = |name: &str, ours: u64, theirs: u64| {
        let diff = ours as f64 - theirs as f64;
        let acc = if theirs > 0 {
            100.0 * (1.0 - diff.abs() / theirs as f64)
        } else {
            0.0
        };
        format!(
            "{:<36} {:>12} {:>12} {:>12} {:>8.1}%\n",
            name,
            human_flops(ours as f64),
            human_flops(theirs as f64),
            format!(
                "{}{}",
                if diff >= 0.0 { "+" } else { "-" },
                human_flops(diff.abs())
            ),
            acc
        )
    };
    o += &format!(
        "{:<36} {:>12} {:>12} {:>12} {:>9}\n",
        "Model / op", "Our FLOPs", "Ref FLOPs", "Difference", "Accuracy"
    );
    o += &"-".repeat(84);
    o += "\n";
    o += &row(&graph_profile(a).model, ours, r.total);
    for (op, theirs) in &r.per_op {
        let ours = a.matmul_flops_by_op.get(op).copied().unwrap_or(0);
        o += &row(&format!("  {op}"), ours, *theirs);
    }
    o
}
