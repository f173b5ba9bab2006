//! The writing of an analysis's outputs as independent tasks (`write_into` runs them side by
//! side): each file's task, and the tables' list.

use std::path::Path;

use super::tables::{
    write_critical_path, write_graph_profile, write_idle_time, write_iterations, write_kernels,
    write_launches, write_node_iterations, write_node_stats, write_streams, write_summary,
};
use super::{flops, memory, Error};
use crate::analysis::Analysis;
use crate::model::Trace;

/// Writes one output (or a few that belong together).
pub(super) type Job<'a> = Box<dyn Fn() -> Result<(), Error> + Send + Sync + 'a>;
/// A job and the name `--timings` gives it.
pub(super) type Task<'a> = (String, Job<'a>);

pub(super) fn named<'a>(name: &str, f: Job<'a>) -> Task<'a> {
    (name.to_owned(), f)
}

/// A task writing the one file `name` in `dir`.
pub(super) fn file<'a>(
    dir: &'a Path,
    name: &'static str,
    w: impl Fn(&Path) -> Result<(), Error> + Send + Sync + 'a,
) -> Task<'a> {
    named(name, Box::new(move || w(&dir.join(name))))
}

/// The summary, the tables (CSV, and Parquet with the feature) and the graph: every output but
/// the annotated trace and the plots.
pub(super) fn tables<'a>(dir: &'a Path, t: &'a Trace, a: &'a Analysis) -> Vec<Task<'a>> {
    #[allow(unused_mut)] // pushed to only with the `parquet` feature
    let mut tasks = vec![
        file(dir, "summary.json", |p| write_summary(p, a)),
        file(dir, "node_stats.csv", |p| write_node_stats(p, t, a)),
        file(dir, "node_iterations.csv", |p| {
            write_node_iterations(p, t, a)
        }),
        file(dir, "iterations.csv", |p| write_iterations(p, a)),
        file(dir, "flops.csv", |p| flops::write_flops_csv(p, a)),
        named("flops rollups", Box::new(|| flops::write_rollups(dir, a))),
        file(dir, "graph_profile.json", |p| write_graph_profile(p, a)),
        file(dir, "activation_stats.csv", |p| {
            memory::write_activation_stats(p, a)
        }),
        file(dir, "memory_timeline.csv", |p| {
            memory::write_timeline(p, t, a)
        }),
        named("graph.json/dot", Box::new(|| memory::write_graph(dir, a))),
        file(dir, "kernels.csv", |p| write_kernels(p, a)),
        file(dir, "streams.csv", |p| write_streams(p, a)),
        file(dir, "idle_time.csv", |p| write_idle_time(p, a)),
        file(dir, "launches.csv", |p| write_launches(p, t, a)),
        file(dir, "critical_path.csv", |p| write_critical_path(p, t, a)),
    ];
    #[cfg(feature = "parquet")]
    for table in super::frames::TABLES {
        let name = table.file_name();
        tasks.push(named(&name, Box::new(move || table.write(dir, t, a))));
    }
    tasks
}
