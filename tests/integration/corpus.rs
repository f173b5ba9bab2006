//! Captures of public training programs that this project did not write, run unchanged on the
//! GPU machine (`sample_traces/corpus/`, provenance in `capture/corpus/README.md`): analyze
//! against what torch measured in the same run (issue 17).

use crate::common::{analyze, manifest, run_dirs};

#[test]
fn corpus_captures_match_torchs_own_peak_flops_and_the_timed_step() {
    for d in run_dirs("sample_traces/corpus", 3) {
        let m = manifest(&d);
        let r0 = &m["ranks"][0];
        let (_t, out) = analyze(&d);
        let s = &out.analysis.summary;
        assert_eq!(
            s.iterations as u64,
            m["schedule"]["active"].as_u64().unwrap(),
            "{d:?}"
        );
        // torch.cuda.max_memory_allocated() of each window step, reset at its start.
        let peaks = r0["reference"]["window_step_peaks_bytes"]
            .as_array()
            .unwrap();
        let want = peaks.iter().filter_map(|p| p.as_i64()).max();
        assert_eq!(s.peak_allocated_bytes, want, "{d:?}");
        assert!(s.peak_node.is_some(), "{d:?}");
        // FlopCounterMode over one whole step (Python programs).
        if let Some(f) = r0["reference"]["flop_counter_total"].as_u64() {
            assert_eq!(s.matmul_flops_per_iteration, f, "{d:?}");
        }
        // The step time is the one capture timed with nothing recorded, the instrumented one
        // beside it.
        let timed = m["step_time_s"].as_f64().unwrap();
        assert!(
            (s.step_time_s - timed).abs() < 1e-9,
            "{d:?}: {} vs {timed}",
            s.step_time_s
        );
        assert_eq!(s.step_time_source, "timing_phase");
        assert!(s.step_time_instrumented_s > s.step_time_s, "{d:?}");
        assert!(
            (s.profiler_overhead.unwrap() - s.step_time_instrumented_s / s.step_time_s).abs()
                < 1e-9
        );
        // A timing phase that ended at a cap, not settled, is said to be a rough figure
        // (issue 17): exactly where the manifest says so.
        let capped = matches!(r0["timing"]["stop"].as_str(), Some("step_cap" | "time_cap"));
        assert_eq!(
            out.diagnostics.count("step_time_unsettled"),
            usize::from(capped) as u64,
            "{d:?}"
        );
    }
}
