//! Criterion benches of analyze's stages, with byte throughput: `cargo bench --bench stages`.
//!
//! Inputs are the bundled ResNet-18 sample (its trace inflated in memory, and the same text
//! repeated with shifted ids is what `benches/gen_trace.py` makes for the end-to-end table in
//! `benches/bench.py`). Stage numbers go in docs/performance.md.

use std::path::Path;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use steptrace::diagnostics::Diagnostics;
use steptrace::ingest::{kineto, snapshot, source};

fn sample(rel: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

fn stages(c: &mut Criterion) {
    let trace_gz = sample("sample_traces/resnet18/trace.json.gz");
    let gz = std::fs::read(&trace_gz).unwrap();
    let text = source::read(&trace_gz).unwrap().bytes.to_vec();
    let snap = source::read(&sample("sample_traces/resnet18/snapshot.pickle.gz"))
        .unwrap()
        .bytes
        .to_vec();

    let mut g = c.benchmark_group("ingest");
    g.sample_size(20);
    g.throughput(Throughput::Bytes(gz.len() as u64));
    g.bench_function("read + inflate trace.json.gz", |b| {
        b.iter(|| source::read(&trace_gz).unwrap())
    });
    g.throughput(Throughput::Bytes(text.len() as u64));
    g.bench_function("parse trace (all threads)", |b| {
        b.iter_batched(
            || text.clone(),
            |t| kineto::from_bytes(Path::new("t.json"), t, false, &mut Diagnostics::default()),
            BatchSize::LargeInput,
        )
    });
    g.throughput(Throughput::Bytes(snap.len() as u64));
    g.bench_function("snapshot unpickle + extract", |b| {
        b.iter(|| snapshot::from_bytes(Path::new("s.pickle"), &snap, &mut Diagnostics::default()))
    });
    g.finish();

    // One typical operator event: the hand-written reader against serde_json.
    let event = br#"{"ph": "X", "cat": "cpu_op", "name": "aten::nll_loss_backward", "pid": 600, "tid": 625, "ts": 4451161997353.046, "dur": 178.315, "args": {"External id": 515, "Record function id": 380, "Concrete Inputs": ["", "", "", "", "1", "-100", ""], "Input type": ["float", "float", "long int", "", "Scalar", "Scalar", "float"], "Input Strides": [[], [10, 1], [1], [], [], [], []], "Input Dims": [[], [8, 10], [8], [], [], [], []], "Ev Idx": 2}}"#;
    let mut g = c.benchmark_group("event");
    g.throughput(Throughput::Bytes(event.len() as u64));
    g.bench_function("fast reader", |b| b.iter(|| kineto::fast_event_end(event)));
    g.bench_function("serde_json", |b| b.iter(|| kineto::serde_event_end(event)));
    g.finish();

    let loaded = || {
        let mut d = Diagnostics::default();
        steptrace::ingest::Loaded {
            kineto: kineto::from_bytes(Path::new("t.json"), text.clone(), false, &mut d).unwrap(),
            snapshot: None,
            exec_trace: None,
            diagnostics: d,
        }
    };
    let mut g = c.benchmark_group("step");
    g.sample_size(20);
    g.throughput(Throughput::Bytes(text.len() as u64));
    g.bench_function("model build", |b| {
        b.iter_batched(
            loaded,
            |l| steptrace::model::Trace::build(l, &mut Diagnostics::default()),
            BatchSize::LargeInput,
        )
    });
    g.bench_function("all analyses", |b| {
        b.iter_batched(
            || steptrace::model::Trace::build(loaded(), &mut Diagnostics::default()),
            |mut t| {
                steptrace::analysis::run(
                    &mut t,
                    &Default::default(),
                    Default::default(),
                    &mut Diagnostics::default(),
                )
            },
            BatchSize::LargeInput,
        )
    });
    g.finish();
}

criterion_group!(benches, stages);
criterion_main!(benches);
