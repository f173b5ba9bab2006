use super::*;

/// A step drawn by hand (µs): the host launches k1 (GPU idle: 8 µs of launch delay) and k2
/// behind it; `.item()` copies on stream 7 behind k2 and waits; after it the host launches k4
/// on stream 8 and k5 on stream 7, which waits for k4 (an event) and ends after the host.
///
/// ```text
///  host  mm 10-20 [launch 12]  add 22-30 [launch 25]  item 160-260 [copy 162, sync 170-226]
///        relu 260-300 [launch k3 290]  mul 300-310 [launch k4 302, k5 312]  step ends 500
///  s7    k1 20-120  k2 120-220  copy 222-224  k3 295-305  k5 402-520
///  s8    k4 306-400
/// ```
/// The path, walked back from k5's end: k5, its wait for k4 (2), k4, its launch delay (4), the
/// host from the sync's end to k4's launch (76), the sync's return after the copy (2), the
/// copy, its gap behind k2 (2), k2, k1, k1's launch delay (8), the host before it (12).
const EVENTS: &str = r#"
{"ph":"X","cat":"user_annotation","name":"ProfilerStep#1","pid":1,"tid":1,"ts":0,"dur":500},
{"ph":"X","cat":"cpu_op","name":"aten::mm","pid":1,"tid":1,"ts":10,"dur":10},
{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":12,"dur":2,"args":{"correlation":1}},
{"ph":"X","cat":"kernel","name":"k1","pid":0,"tid":7,"ts":20,"dur":100,"args":{"stream":7,"device":0,"correlation":1}},
{"ph":"X","cat":"cpu_op","name":"aten::add","pid":1,"tid":1,"ts":22,"dur":8},
{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":25,"dur":2,"args":{"correlation":2}},
{"ph":"X","cat":"kernel","name":"k2","pid":0,"tid":7,"ts":120,"dur":100,"args":{"stream":7,"device":0,"correlation":2}},
{"ph":"X","cat":"cpu_op","name":"aten::item","pid":1,"tid":1,"ts":160,"dur":100},
{"ph":"X","cat":"cuda_runtime","name":"cudaMemcpyAsync","pid":1,"tid":1,"ts":162,"dur":3,"args":{"correlation":3}},
{"ph":"X","cat":"gpu_memcpy","name":"Memcpy DtoH (Device -> Pageable)","pid":0,"tid":7,"ts":222,"dur":2,"args":{"stream":7,"device":0,"correlation":3,"bytes":4}},
{"ph":"X","cat":"cuda_runtime","name":"cudaStreamSynchronize","pid":1,"tid":1,"ts":170,"dur":56},
{"ph":"X","cat":"cpu_op","name":"aten::relu","pid":1,"tid":1,"ts":260,"dur":40},
{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":290,"dur":2,"args":{"correlation":4}},
{"ph":"X","cat":"kernel","name":"k3","pid":0,"tid":7,"ts":295,"dur":10,"args":{"stream":7,"device":0,"correlation":4}},
{"ph":"X","cat":"cpu_op","name":"aten::mul","pid":1,"tid":1,"ts":300,"dur":20},
{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":302,"dur":2,"args":{"correlation":5}},
{"ph":"X","cat":"kernel","name":"k4","pid":0,"tid":8,"ts":306,"dur":94,"args":{"stream":8,"device":0,"correlation":5}},
{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":312,"dur":2,"args":{"correlation":6}},
{"ph":"X","cat":"kernel","name":"k5","pid":0,"tid":7,"ts":402,"dur":118,"args":{"stream":7,"device":0,"correlation":6}}
"#;

fn path(events: &str) -> (Trace, Step, CriticalPath) {
    let mut t = crate::model::from_events(events);
    let mut d = crate::diagnostics::Diagnostics::default();
    let step = super::super::step::compute(&mut t, None, &mut d);
    let calls = crate::model::launch_calls(&t.kineto);
    let p = compute(&t, &step, &calls);
    (t, step, p)
}

fn us(p: &IterPath, k: PathKind) -> i64 {
    p.by_kind()[k.index()] / 1000
}

#[test]
fn the_path_drawn_by_hand() {
    let (t, step, p) = path(EVENTS);
    assert_eq!(p.iterations.len(), 1);
    let it = &p.iterations[0];
    // The stretches tile the step, its start to k5's end.
    assert_eq!(it.length() / 1000, 520);
    for w in it.segments.windows(2) {
        assert_eq!(w[0].end, w[1].start, "{:?}", it.segments);
    }
    assert_eq!(us(it, PathKind::Host), 88);
    assert_eq!(us(it, PathKind::LaunchDelay), 12);
    assert_eq!(us(it, PathKind::Kernel), 412);
    assert_eq!(us(it, PathKind::Memcpy), 2);
    assert_eq!(us(it, PathKind::StreamGap), 2);
    assert_eq!(us(it, PathKind::Sync), 2);
    assert_eq!(us(it, PathKind::CrossStream), 2);
    assert_eq!(us(it, PathKind::Memset), 0);
    // k3 ran off the path; k1, k2, the copy, k4 and k5 on it, in that order.
    let gpus: Vec<&str> = it
        .segments
        .iter()
        .filter(|s| s.kind.is_gpu_work())
        .map(|s| t.kineto.str(t.kineto.gpu[s.gpu.unwrap() as usize].name))
        .collect();
    assert_eq!(
        gpus,
        ["k1", "k2", "Memcpy DtoH (Device -> Pageable)", "k4", "k5"]
    );
    // The host's stretches are named by the node they fall in: item's wait after the sync's
    // return (226-260), relu (260-300) and mul up to k4's launch (300-302).
    let mut host: Vec<(String, i64)> = Vec::new();
    for s in it.segments.iter().filter(|s| s.kind == PathKind::Host) {
        let name = s
            .node
            .map_or("-".to_string(), |n| step.nodes[n as usize].name.clone());
        host.push((name, (s.end - s.start) / 1000));
    }
    let names: Vec<(&str, i64)> = host.iter().map(|(n, d)| (n.as_str(), *d)).collect();
    assert_eq!(
        names,
        [
            ("-", 10),
            ("forward:aten::mm#0", 2),
            ("other:aten::item#0", 34),
            ("forward:aten::relu#0", 40),
            ("forward:aten::mul#0", 2),
        ]
    );
}

#[test]
fn a_step_whose_host_ends_last_is_host_from_its_last_wait() {
    // k5 shortened to end at 450, before the host's 500: the path is the host's from the
    // sync's return to the step's end, then the same wait and GPU work before it.
    let events = EVENTS.replace(r#""ts":402,"dur":118"#, r#""ts":402,"dur":48"#);
    let (_, _, p) = path(&events);
    let it = &p.iterations[0];
    assert_eq!(it.length() / 1000, 500);
    assert_eq!(us(it, PathKind::Host), 10 + 2 + 274);
    assert_eq!(us(it, PathKind::Kernel), 200);
    assert_eq!(us(it, PathKind::CrossStream), 0);
}

#[test]
fn no_gpu_work_no_path() {
    let events = r#"
{"ph":"X","cat":"user_annotation","name":"ProfilerStep#1","pid":1,"tid":1,"ts":0,"dur":100},
{"ph":"X","cat":"cpu_op","name":"aten::mm","pid":1,"tid":1,"ts":10,"dur":10}
"#;
    assert!(path(events).2.iterations.is_empty());
}
