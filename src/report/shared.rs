//! What the writers share: files created with their path in the error, seconds as text, what the input lacks, nodes by time.

use super::*;

pub(crate) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::from(FileError::new(path, source))
}

/// Creates an output file under its part name ([`out_dir::part_path`]); the run's
/// [`OutDir::commit`] (or [`out_dir::Writer::finish`]) gives it its final name once every file is
/// complete. Part names are new files: nothing is truncated in place (which on ext4 also
/// made closing the file wait for its data, `auto_da_alloc`).
pub(crate) fn create(path: &Path) -> Result<File, Error> {
    let part = out_dir::part_path(path);
    // A failure to remove (no such file, a directory) is left to `create` to report.
    let _ = std::fs::remove_file(&part);
    File::create(&part).map_err(io(path))
}

/// [`create`], then `bytes` written.
pub(crate) fn write_file(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    create(path)?.write_all(bytes).map_err(io(path))
}

/// Formats seconds with enough digits for nanosecond inputs, without float noise.
pub(crate) fn secs(v: f64) -> String {
    // A sum of nothing is -0.0 in Rust; write it as 0.
    let v = if v == 0.0 { 0.0 } else { v };
    let s = format!("{v:.9}");
    let s = s.trim_end_matches('0');
    s.strip_suffix('.').unwrap_or(s).to_owned()
}

/// What the input lacks that an output would otherwise show, one sentence each with the
/// recording option that adds it: said once at the top of the console and report.html,
/// where the figures it would give are left out.
pub(crate) fn input_lacks(a: &Analysis) -> Vec<&'static str> {
    let s = &a.summary;
    let mut v = Vec::new();
    if s.peak_allocated_bytes.is_none() {
        v.push(
            "no memory data: the trace holds no allocator events (record with profile_memory=True)",
        );
    }
    if !s.flops_counted() && !a.node_stats.is_empty() {
        v.push("no FLOPs counted: the trace records no operator input shapes (record with record_shapes=True)");
    }
    if !a.node_stats.is_empty() && a.node_stats.iter().all(|n| n.module.is_none()) {
        v.push("no module paths: the trace records no nn.Module ranges (record with with_modules=True); nodes are named by phase and op alone");
    }
    v
}

/// Whether the top-node tables rank by CPU time: no node has GPU time or a kernel. One rule
/// for the console and report.html (the console had asked whether the trace held any GPU
/// event, which differs where GPU work lies outside every node).
pub(crate) fn nodes_without_gpu_time(stats: &[crate::analysis::NodeStat]) -> bool {
    stats
        .iter()
        .all(|n| n.median_run_time_s == 0.0 && n.kernels == 0)
}

/// The nodes by a time of theirs (`time`: GPU or CPU seconds), longest first, ties in
/// execution order: the console's and report.html's top-node tables.
pub(crate) fn nodes_by_time(
    stats: &[crate::analysis::NodeStat],
    time: impl Fn(&crate::analysis::NodeStat) -> f64,
) -> Vec<&crate::analysis::NodeStat> {
    let mut v: Vec<_> = stats.iter().collect();
    v.sort_by(|x, y| time(y).total_cmp(&time(x)).then(x.rank.cmp(&y.rank)));
    v
}
