//! Programs whose steps leave the usual shape (issue 74), captured unchanged on the GPU machine
//! by `capture/corpus/edges.sh` (provenance in `capture/corpus/README.md`): each figure against
//! what torch measured in the same run, or a warning naming the figure.

use steptrace::analysis::step::{Node, Phase};
use steptrace::AnalyzeProps;

use crate::common::{analyze, json, manifest, root};

fn corpus(name: &str) -> std::path::PathBuf {
    root().join("sample_traces/corpus").join(name)
}

fn warned(out: &steptrace::Outcome, kind: &str) -> bool {
    out.diagnostics.count(kind) > 0
}

/// timm's ViT-B/16 under `torch.compile(mode="reduce-overhead")`: the forward and backward run
/// as CUDA graph replays. The backward graph's replay (launched under
/// `CompiledFunctionBackward`, where no aten op runs) is a node with every kernel of the graph;
/// every GPU microsecond of an iteration lands on a node; FLOPs are FlopCounterMode's on the
/// same model run eagerly (its `--reference` run), counted by capture while the graphs were
/// recorded; the graphs' private pool is named with the bytes Python's pickle reads from the
/// same snapshot, and is never called free memory or fragmentation.
#[test]
fn cuda_graph_replays_are_nodes_with_their_kernels_flops_and_pools() {
    let d = corpus("vit_cudagraphs");
    let (_t, out) = analyze(&d);
    let a = &out.analysis;
    let eager = json(&d.join("reference_eager.json"));
    assert_eq!(
        a.summary.matmul_flops_per_iteration,
        eager["flops_step"].as_u64().unwrap(),
        "FLOPs of the step against FlopCounterMode on the eager model"
    );
    assert!(!warned(&out, "flops_leave_out_cuda_graphs"));
    for it in &a.step.iterations {
        let nodes: &[Node] = &a.step.nodes[it.nodes.clone()];
        assert_eq!(it.gpu_unattributed, 0, "{}", it.label);
        let on_nodes: i64 = nodes.iter().map(|n| n.gpu_time).sum();
        assert_eq!(on_nodes, it.gpu_time, "{}", it.label);
        let replay: Vec<&Node> = nodes
            .iter()
            .filter(|n| n.phase == Phase::Backward && n.name.contains("cudaGraphLaunch"))
            .collect();
        assert_eq!(replay.len(), 1, "{}", it.label);
        // The backward graph: 12.9 ms of GPU work a step, hundreds of kernels.
        assert!(
            replay[0].gpu_time > 10_000_000 && replay[0].kernels > 400,
            "{:?}",
            replay[0]
        );
    }
    let g = a.summary.cuda_graphs.as_ref().expect("graphs found");
    assert_eq!(g.replays_per_iteration, 2.0, "forward and backward graphs");
    assert!(g.flops_counted);
    assert!(g.share_of_gpu_time_pct > 90.0, "{g:?}");
    let py = json(&d.join("pools_python.json"));
    assert_eq!(g.reserved_bytes, py["reserved_bytes"].as_u64());
    assert_eq!(g.private_pools.len(), 1);
    let pool = &g.private_pools[0];
    assert_eq!(pool.id, "0,1");
    assert_eq!(
        Some(pool.reserved_bytes),
        py["pools"]["0,1"]["reserved_bytes"].as_u64()
    );
    assert!(warned(&out, "peak_leaves_out_graph_pools"));
    assert!(
        out.console
            .contains("private pools reserved: pool 0,1 4.6 GiB"),
        "{}",
        out.console
    );
    // The peak is torch's allocated figure all the same (max_memory_allocated per step).
    let peaks = manifest(&d)["ranks"][0]["reference"]["window_step_peaks_bytes"].clone();
    assert_eq!(
        a.summary.peak_allocated_bytes,
        peaks
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|p| p.as_i64())
            .max()
    );
    // The snapshot alone: the pool's free blocks are neither free memory nor fragmentation.
    let snap = steptrace::analyze_snapshot(&AnalyzeProps {
        input: d.join("snapshot.pickle.gz"),
        out: Some(tempfile::tempdir().unwrap().keep()),
        ..Default::default()
    })
    .unwrap();
    let segs = &snap.analysis.segments;
    let default_pool = &py["pools"]["0,0"];
    assert_eq!(
        segs.free_internal_bytes + segs.free_external_bytes + segs.allocated_bytes,
        default_pool["reserved_bytes"].as_u64().unwrap(),
        "free bytes are the default pool's alone"
    );
    assert_eq!(snap.analysis.private_pools, g.private_pools);
    assert!(
        snap.console
            .contains("private pool 0,1 (a CUDA graph's): 4.6 GiB reserved"),
        "{}",
        snap.console
    );
    let summary = json(&snap.out_dir.join("summary.json"));
    assert_eq!(
        summary["private_pools"][0]["reserved_bytes"],
        py["pools"]["0,1"]["reserved_bytes"]
    );
}

/// pytorch/examples cpp/dcgan: three backward passes and two optimizers a step (the
/// discriminator on real and fake images, then the generator). Capture counted the passes per
/// step; the iterations are the program's steps (the schedule's three active steps), and every
/// node is in every one. Without the count, each pass was an iteration (9 for 3 steps).
#[test]
fn several_backward_passes_a_step_make_one_iteration() {
    let d = corpus("cpp_dcgan");
    let m = manifest(&d);
    assert_eq!(
        m["ranks"][0]["timing"]["after_window"]["passes_per_step"],
        3
    );
    let (_t, out) = analyze(&d);
    let s = &out.analysis.summary;
    assert_eq!(
        s.iterations as u64,
        m["schedule"]["active"].as_u64().unwrap()
    );
    assert!(!warned(&out, "nodes_missing_in_some_iterations"));
    let backward = |it: &steptrace::analysis::step::Iteration| {
        out.analysis.step.nodes[it.nodes.clone()]
            .iter()
            .filter(|n| n.name == "backward:aten::convolution_backward#0")
            .count()
    };
    for it in &out.analysis.step.iterations {
        assert_eq!(backward(it), 1, "{}", it.label);
    }
    // The passes of one step are distinct nodes: the discriminator's first convolution is
    // differentiated in each of the three passes.
    let convs = out
        .analysis
        .node_stats
        .iter()
        .filter(|n| {
            n.node_name
                .starts_with("backward:aten::convolution_backward#")
        })
        .count();
    assert!(convs >= 9, "{convs}");
}

/// prabhuomkar/pytorch-cpp's LSTM language model reads its loss (`loss.item()`) before its
/// backward pass, and capture's boundary falls at `clip_grad_norm_`: the window's last step
/// has its forward and backward but not its optimizer. That step is left out, once, by name;
/// the other two are whole and every node is in both.
#[test]
fn a_step_cut_by_the_windows_end_is_left_out_and_said_once() {
    let d = corpus("cpp_lm");
    let (_t, out) = analyze(&d);
    assert_eq!(out.analysis.summary.iterations, 2);
    assert_eq!(out.diagnostics.count("last_iteration_cut_short"), 1);
    let lines = out.diagnostics.lines();
    let w = lines
        .iter()
        .find(|w| w.starts_with("last_iteration_cut_short"))
        .unwrap();
    assert!(w.contains("no optimizer work"), "{w}");
    assert!(!warned(&out, "nodes_missing_in_some_iterations"));
    assert!(out
        .analysis
        .node_stats
        .iter()
        .all(|n| n.iterations_present == 2));
}

/// HuggingFace's BertForMaskedLM makes `CrossEntropyLoss()` in every forward call, so torch
/// numbers each micro-batch's loss module anew (`CrossEntropyLoss_0` … `_11`). The loss nodes
/// are named by the module's place, the same in every step: no node is missing or extra but
/// the logging step's read of the loss, and the loss's FLOPs are FlopCounterMode's.
#[test]
fn a_module_made_in_every_call_is_the_same_node_every_step() {
    let d = corpus("hf_bert_accum");
    let (_t, out) = analyze(&d);
    let a = &out.analysis;
    let numbered = a
        .node_stats
        .iter()
        .filter(|n| {
            n.node_name.split('/').any(|p| {
                p.strip_prefix("CrossEntropyLoss_")
                    .is_some_and(|k| k.starts_with(|c: char| c.is_ascii_digit()))
            })
        })
        .count();
    assert_eq!(numbered, 0);
    let loss: Vec<_> = a
        .node_stats
        .iter()
        .filter(|n| n.node_name.contains("CrossEntropyLoss_*/"))
        .collect();
    assert!(loss.len() >= 8, "{}", loss.len());
    assert!(loss
        .iter()
        .all(|n| n.iterations_present as usize == a.summary.iterations));
    assert!(!warned(&out, "nodes_missing_in_some_iterations"));
    // What runs in one iteration only is the Trainer's logging (a loss read every 10 steps).
    assert!(out.diagnostics.count("extra_work_in_some_iterations") <= 2);
    assert!(warned(&out, "modules_made_per_call"));
    // Issue 76: the accumulation is said (the Trainer's gradient_accumulation_steps=4).
    assert_eq!(a.summary.backward_passes_per_iteration, Some(4));
    let r = &manifest(&d)["ranks"][0]["reference"];
    assert_eq!(
        a.summary.matmul_flops_per_iteration,
        r["flop_counter_total"].as_u64().unwrap()
    );
}

/// Lightning, 16-mixed, accumulation 2, a DataLoader without pin_memory: each micro-batch's
/// copy to the GPU is data loading with its GPU time (before, the first read "other" and the
/// second "forward"), and the step says the copies read pageable memory.
#[test]
fn the_batchs_copy_to_the_device_is_data_loading_with_a_pinning_hint() {
    let d = corpus("pl_resnet50_accum");
    let (_t, out) = analyze(&d);
    let a = &out.analysis;
    for it in &a.step.iterations {
        let copies: Vec<&Node> = a.step.nodes[it.nodes.clone()]
            .iter()
            .filter(|n| n.gpu_time > 500_000 && n.name.contains("aten::to#"))
            .collect();
        assert_eq!(
            copies.len(),
            2,
            "{}: one image batch per micro-batch",
            it.label
        );
        assert!(
            copies.iter().all(|n| n.phase == Phase::DataLoading),
            "{copies:?}"
        );
    }
    assert_eq!(
        a.summary.backward_passes_per_iteration,
        Some(2),
        "accumulate_grad_batches=2"
    );
    let dl = &a.summary.time_by_phase[&steptrace::analysis::Phase::DataLoading];
    assert!(dl.gpu_s > 1e-3, "{dl:?}");
    assert!(warned(&out, "input_copy_from_pageable_memory"));
    // A libtorch loop's few token ids copied from pageable memory are not worth the hint.
    let (_t2, lm) = analyze(&corpus("cpp_lm"));
    assert!(!warned(&lm, "input_copy_from_pageable_memory"));
}

/// People arrange runs with symbolic links: a folder whose trace is a link, and a link to a
/// run folder, are read as what they point to. A `rank<N>` link inside `--out` is never
/// written through (issue 80, item 5).
#[cfg(unix)]
#[test]
fn linked_inputs_are_read_and_a_linked_rank_folder_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let src = root().join("sample_traces/resnet18/trace.json.gz");
    let runs = tmp.path().join("runs");
    std::fs::create_dir(&runs).unwrap();
    std::os::unix::fs::symlink(&src, runs.join("rank-0.json.gz")).unwrap();
    let out = steptrace::analyze(&AnalyzeProps {
        input: runs.clone(),
        out: Some(tmp.path().join("out")),
        ..Default::default()
    })
    .expect("a folder whose trace is a link");
    assert_eq!(out.analysis.summary.iterations, 3);
    let linked_dir = tmp.path().join("linked");
    std::os::unix::fs::symlink(&runs, &linked_dir).unwrap();
    steptrace::analyze(&AnalyzeProps {
        input: linked_dir,
        out: Some(tmp.path().join("out2")),
        ..Default::default()
    })
    .expect("a link to a run folder");
    // Two ranks; rank1's output folder is a link to elsewhere.
    let ddp = root().join("sample_traces/ddp_mlp");
    let out3 = tmp.path().join("out3");
    let elsewhere = tmp.path().join("elsewhere");
    std::fs::create_dir_all(&out3).unwrap();
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, out3.join("rank1")).unwrap();
    let props = AnalyzeProps {
        input: ddp,
        out: Some(out3.clone()),
        ..Default::default()
    };
    let run = steptrace::distributed_run(&props).expect("a distributed run");
    let r = steptrace::analyze_ranks(&props, &run);
    let text = match r {
        Ok(o) => format!("{:?}", o.ranks.not_analysed),
        Err(e) => e.to_string(),
    };
    assert!(text.contains("symbolic link"), "{text}");
    assert_eq!(
        std::fs::read_dir(&elsewhere).unwrap().count(),
        0,
        "nothing written through it"
    );
}

/// The same ViT trace as a program profiled without capture would have it (no ranges around
/// the replays): the replays' GPU time still lands on their nodes, and the FLOPs, which then
/// leave the replays out, carry a warning naming the share of GPU time they miss.
#[test]
fn replays_whose_flops_were_not_counted_are_warned_of() {
    use std::io::{Read, Write};
    let d = corpus("vit_cudagraphs");
    let mut text = String::new();
    flate2::read::MultiGzDecoder::new(std::fs::File::open(d.join("trace.json.gz")).unwrap())
        .read_to_string(&mut text)
        .unwrap();
    assert!(text.contains("steptrace::cuda_graph#"));
    let text = text.replace("steptrace::cuda_graph#", "program::range#");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("trace.json.gz");
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(text.as_bytes()).unwrap();
    std::fs::write(&path, gz.finish().unwrap()).unwrap();
    let (_t, out) = analyze(&path);
    let g = out
        .analysis
        .summary
        .cuda_graphs
        .as_ref()
        .expect("graphs found");
    assert!(!g.flops_counted);
    assert!(warned(&out, "flops_leave_out_cuda_graphs"));
    let eager = json(&d.join("reference_eager.json"))["flops_step"]
        .as_u64()
        .unwrap();
    assert!(out.analysis.summary.matmul_flops_per_iteration < eager / 100);
    for it in &out.analysis.step.iterations {
        assert_eq!(it.gpu_unattributed, 0, "{}", it.label);
    }
}
