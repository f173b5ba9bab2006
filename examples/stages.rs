//! Times each stage of analyze on one trace: `cargo run --release --example stages -- FILE`.
//! Used to decide where optimisation pays (docs/performance.md).

use std::time::Instant;

fn main() {
    let path = std::path::PathBuf::from(
        std::env::args()
            .nth(1)
            .expect("usage: stages TRACE | SNAPSHOT.pickle"),
    );
    if path.extension().is_some_and(|e| e == "pickle") {
        return snapshot(&path);
    }
    // An optional count repeats read + parse and reports the fastest (for A/B of the parser).
    let repeat: usize = std::env::args().nth(2).map_or(1, |n| n.parse().unwrap());
    let mut best = None;
    for _ in 1..repeat {
        let t = Instant::now();
        let src = steptrace::ingest::source::read(&path).unwrap();
        let mut d = steptrace::diagnostics::Diagnostics::default();
        let k = steptrace::ingest::kineto::from_bytes(&path, src.bytes, false, &mut d).unwrap();
        drop(k);
        let e = t.elapsed().as_secs_f64();
        best = Some(best.map_or(e, |b: f64| b.min(e)));
    }
    let t = Instant::now();
    let src = steptrace::ingest::source::read(&path).unwrap();
    let t_read = t.elapsed();
    let t = Instant::now();
    let mut d = steptrace::diagnostics::Diagnostics::default();
    let k = steptrace::ingest::kineto::from_bytes(&path, src.bytes, false, &mut d).unwrap();
    let t_parse = t.elapsed();
    if let Some(b) = best {
        println!(
            "read+parse, fastest of {repeat}: {:.3}s",
            b.min((t_read + t_parse).as_secs_f64())
        );
    }
    // A second count repeats the model and the analyses on copies of the parsed trace and
    // reports the fastest of each (for A/B of those stages without the parse's noise).
    let reps: usize = std::env::args().nth(3).map_or(1, |n| n.parse().unwrap());
    let mut t_model = std::time::Duration::MAX;
    let mut t_analysis = std::time::Duration::MAX;
    for _ in 1..reps {
        let loaded = steptrace::ingest::Loaded {
            kineto: k.clone(),
            snapshot: None,
            exec_trace: None,
            diagnostics: Default::default(),
        };
        let mut diag = steptrace::diagnostics::Diagnostics::default();
        let t = Instant::now();
        let mut tr = steptrace::model::Trace::build(loaded, &mut diag);
        t_model = t_model.min(t.elapsed());
        let t = Instant::now();
        let a =
            steptrace::analysis::run(&mut tr, &Default::default(), Default::default(), &mut diag);
        t_analysis = t_analysis.min(t.elapsed());
        drop((a, tr));
    }
    let t = Instant::now();
    let loaded = steptrace::ingest::Loaded {
        kineto: k,
        snapshot: None,
        exec_trace: None,
        diagnostics: d,
    };
    let mut diag = steptrace::diagnostics::Diagnostics::default();
    let mut tr = steptrace::model::Trace::build(loaded, &mut diag);
    let t_model = t_model.min(t.elapsed());
    let t = Instant::now();
    let step = steptrace::analysis::step::compute(&mut tr, None, &mut diag);
    let t_step = t.elapsed();
    use steptrace::analysis::{flops, liveness, memory, node_stats};
    let mut lap = Instant::now();
    let mut laps = Vec::new();
    let mut mark = |name: &'static str| {
        laps.push((name, lap.elapsed().as_secs_f64()));
        lap = Instant::now();
    };
    let replay = memory::replay(&memory::replay_input(&tr));
    let mem = memory::compute(&tr, &step, replay, &mut diag);
    mark("memory");
    let ns = node_stats::compute(&tr, &step, &mem, &mut diag);
    mark("node_stats");
    let _tl = memory::timeline(&tr, &mem);
    mark("timeline");
    let _lv = liveness::compute(&tr, &step, &mem, &ns, None);
    mark("liveness");
    let (nf, _) = flops::compute(&tr, &step);
    mark("flops");
    let _rows = flops::rows(&tr, &step, &nf, &ns, None);
    mark("flop rows");
    println!("{laps:?}");
    let t = Instant::now();
    let a = steptrace::analysis::run(&mut tr, &Default::default(), Default::default(), &mut diag);
    let t_all = t_analysis.min(t.elapsed());
    let t = Instant::now();
    let dir = std::env::temp_dir().join("stages-out");
    let mut r = steptrace::report::ReportOptions::default();
    r.no_plots = true;
    steptrace::report::write_all(&dir, &tr, &a, &diag, &r).unwrap();
    let t_write = t.elapsed();
    println!(
        "read {:.3}s parse {:.3}s model {:.3}s step {:.3}s analysis(all, incl. step) {:.3}s write {:.3}s; {} events, {} nodes",
        t_read.as_secs_f64(),
        t_parse.as_secs_f64(),
        t_model.as_secs_f64(),
        t_step.as_secs_f64(),
        t_all.as_secs_f64(),
        t_write.as_secs_f64(),
        tr.kineto.event_count,
        step.nodes.len()
    );
}

/// A snapshot on its own: read, unpickle, extract, as the file streams in (what analyze
/// does, first in a fresh process, as a user meets it).
fn snapshot(path: &std::path::Path) {
    let t = Instant::now();
    let mut d = steptrace::diagnostics::Diagnostics::default();
    // What `analyze SNAPSHOT` does: the history replayed on a thread as it is read.
    let (s, a) = steptrace::load_snapshot(path, &mut d).unwrap();
    let t_all = t.elapsed();
    println!(
        "load and replay (read+unpickle+extract, replay beside it) {:.3}s; {} trace entries, {} segments",
        t_all.as_secs_f64(),
        a.entries,
        s.segments.len(),
    );
}
