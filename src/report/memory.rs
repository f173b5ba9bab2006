//! Memory and liveness outputs: `activation_stats.csv`, `memory_timeline.csv`, `graph.json`
//! and `graph.dot` (with an Execution Trace).

use crate::file_error::FileError;
use std::io::Write;
use std::path::Path;

use super::{csv_err, io, secs, Error};
use crate::analysis::memory::CATEGORIES;
use crate::analysis::Analysis;
use crate::model::Trace;

pub(super) fn write_activation_stats(path: &Path, a: &Analysis) -> Result<(), Error> {
    let mut w = super::csv_writer(path)?;
    w.write_record([
        "activation_name",
        "creation_rank",
        "last_fw_use_rank",
        "first_bw_use_rank",
        "last_bw_use_rank",
        "median_mem_size_bytes",
        "inactive_time_s",
        "recomp_time_s",
        "recomp_memory_bytes",
        "swap_time_s",
        "recompute_ratio",
        "producer_op",
        "module",
        "storage_id",
        "iterations_present",
    ])
    .map_err(csv_err(path))?;
    for s in &a.liveness.activations {
        w.write_record([
            s.activation_name.clone(),
            s.creation_rank.to_string(),
            s.last_fw_use_rank.to_string(),
            s.first_bw_use_rank.to_string(),
            s.last_bw_use_rank.to_string(),
            s.median_mem_size_bytes.to_string(),
            secs(s.inactive_time_s),
            secs(s.recomp_time_s),
            s.recomp_memory_bytes.to_string(),
            secs(s.swap_time_s),
            format!("{:.1}", s.recompute_ratio),
            s.producer_op.clone(),
            s.module.clone(),
            s.storage_id.to_string(),
            s.iterations_present.to_string(),
        ])
        .map_err(csv_err(path))?;
    }
    w.flush().map_err(io(path))
}

pub(super) fn write_timeline(path: &Path, t: &Trace, a: &Analysis) -> Result<(), Error> {
    let mut header = vec![
        "time_ns",
        "epoch_us",
        "iteration",
        "node_rank",
        "node_name",
        "total_allocated_bytes",
    ];
    header.extend(CATEGORIES.iter().map(|c| c.key()));
    let t0 = t.memory.first().map_or(0, |m| m.ts);
    let rank_of: rustc_hash::FxHashMap<&str, u32> = a
        .node_stats
        .iter()
        .map(|s| (s.node_name.as_str(), s.rank))
        .collect();
    super::write_table(path, &header, &a.timeline, |w, r| {
        let node = r.node.map(|n| &a.step.nodes[n]);
        let iteration = r
            .iteration
            .map_or("", |i| a.step.iterations[i as usize].label.as_str());
        w.num(r.ts - t0).us(t.kineto.epoch_ns(r.ts)).text(iteration);
        match node.and_then(|n| rank_of.get(n.name.as_str())) {
            Some(rank) => w.num(*rank),
            None => w.text(""),
        };
        w.text(node.map_or("", |n| n.name.as_str())).num(r.total);
        for b in &r.breakdown {
            w.num(*b);
        }
        w.end();
    })
}

pub(super) fn write_graph(dir: &Path, a: &Analysis) -> Result<(), Error> {
    let Some(g) = &a.liveness.graph else {
        return Ok(());
    };
    let p = dir.join("graph.json");
    let text =
        serde_json::to_vec_pretty(g).map_err(|e| Error::from(FileError::new(&p, e.into())))?;
    super::write_file(&p, &text)?;
    let p = dir.join("graph.dot");
    let mut f = std::io::BufWriter::new(super::create(&p)?);
    let esc = |s: &str| s.replace('"', "\\\"");
    let mut text = format!(
        "digraph \"{}\" {{\n  rankdir=TB;\n  node [shape=box, fontsize=9];\n",
        esc(&g.iteration)
    );
    for n in &g.nodes {
        text += &format!("  \"{}\";\n", esc(n));
    }
    for e in &g.edges {
        text += &format!(
            "  \"{}\" -> \"{}\" [label=\"{}\"];\n",
            esc(&e.from),
            esc(&e.to),
            super::human_bytes(e.bytes)
        );
    }
    text += "}\n";
    f.write_all(text.as_bytes()).map_err(io(&p))?;
    f.flush().map_err(io(&p))
}
