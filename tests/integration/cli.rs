//! The binary: exit codes and one-line errors naming the file.

use assert_cmd::Command;
use predicates::prelude::*;

use crate::common::root;

fn steptrace() -> Command {
    Command::cargo_bin("steptrace").unwrap()
}

fn one_line_error(stderr: &[u8], needle: &str) {
    let s = String::from_utf8_lossy(stderr);
    assert_eq!(s.trim_end().lines().count(), 1, "not one line: {s}");
    assert!(s.contains(needle), "{s:?} lacks {needle:?}");
    assert!(!s.contains("panicked"), "{s}");
}

#[test]
fn analyzes_a_sample_directory() {
    let dir = tempfile::tempdir().unwrap();
    steptrace()
        .args(["analyze", "--top", "3", "--out"])
        .arg(dir.path())
        .arg(root().join("sample_traces/resnet18"))
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "3 iterations (ProfilerStep markers)",
        ))
        .stdout(predicate::str::contains("peak allocated 283.1 MiB"));
    for f in steptrace::report::FILES {
        assert!(dir.path().join(f).is_file(), "{f}");
    }
}

#[test]
fn issue7_timings_name_every_stage_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let out = steptrace()
        .args(["analyze", "-q", "--no-plots", "--timings", "--out"])
        .arg(dir.path())
        .arg(root().join("sample_traces/resnet18"))
        .output()
        .unwrap();
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    // Issue 19: each output's completion time, indented, after the stages.
    let outputs: Vec<&str> = err
        .lines()
        .filter_map(|l| l.strip_prefix("steptrace:   "))
        .map(|l| l.split_once(": done at +").expect(l).0)
        .collect();
    for want in ["summary.json", "node_stats.parquet", "renamed into place"] {
        assert!(outputs.contains(&want), "{want} not in {outputs:?}");
    }
    let stages: Vec<&str> = err
        .lines()
        .filter(|l| !l.starts_with("steptrace:   ") && !l.starts_with("steptrace: heap: "))
        .map(|l| {
            // steptrace: STAGE: WALL s (CPU s CPU, CORES cores)
            let l = l.strip_prefix("steptrace: ").expect(l);
            let (l, cpu) = l.split_once(" (").expect(l);
            let (stage, secs) = l.rsplit_once(": ").expect(l);
            let secs = secs.strip_suffix(" s").expect(l);
            assert!(secs.parse::<f64>().is_ok_and(|v| v >= 0.0), "{l}");
            let (cpu, cores) = cpu.split_once(" s CPU, ").expect(l);
            assert!(cpu.parse::<f64>().is_ok_and(|v| v >= 0.0), "{l}");
            let cores = cores.strip_suffix(" cores)").expect(l);
            assert!(cores.parse::<f64>().is_ok_and(|v| v >= 0.0), "{l}");
            stage
        })
        .collect();
    assert_eq!(
        stages,
        [
            "reading and parsing",
            "rebuilding the step",
            "analysing",
            "writing results"
        ]
    );
}

/// Issue 19 and 77: the binary's allocator asks for transparent huge pages in the process
/// itself (jemalloc's `thp:always`, no run of the command line again), and `capture` leaves
/// the user's program the environment it was given.
#[test]
fn issue77_the_heap_asks_for_huge_pages_in_process_and_capture_leaves_the_env() {
    let dir = tempfile::tempdir().unwrap();
    let out = steptrace()
        .args([
            "analyze",
            "-q",
            "--no-plots",
            "--no-annotated-trace",
            "--timings",
            "--out",
        ])
        .arg(dir.path())
        .arg(root().join("sample_traces/resnet18"))
        .env_remove("GLIBC_TUNABLES")
        .output()
        .unwrap();
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let line = err
        .lines()
        .find_map(|l| l.strip_prefix("steptrace: heap: "))
        .expect("a heap line");
    let (asked, rest) = line.split_once("; advised for huge pages: ").expect(line);
    let (advised, mapped) = rest.split_once("; huge pages mapped: ").expect(line);
    assert_eq!(
        asked,
        "jemalloc, transparent huge pages asked for (thp:always)"
    );
    let mode = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled");
    let mode = mode.as_deref().unwrap_or("");
    if cfg!(target_os = "linux") && !mode.is_empty() && !mode.contains("[never]") {
        // Asked for: the allocator's extents are advised. What the kernel then maps depends on
        // the huge pages it has at hand, so it is printed, not checked.
        let kib: u64 = advised
            .strip_suffix(" KiB")
            .expect(line)
            .parse()
            .expect(line);
        assert!(kib >= 2048, "{line}");
        eprintln!("huge pages mapped at the end: {mapped}");
    }
    // Nothing is run again: one process, so the allocator's figures are this run's.
    assert!(!err.contains("GLIBC_TUNABLES"), "{err}");

    // The child of `capture` sees no tunables it was not given.
    let dir = tempfile::tempdir().unwrap();
    let seen = dir.path().join("tunables");
    let script = format!("printf '%s' \"$GLIBC_TUNABLES\" > '{}'", seen.display());
    let out = steptrace()
        .args(["capture", "--no-nvtx", "--out"])
        .arg(dir.path().join("run"))
        .args(["--", "sh", "-c", &script])
        .env_remove("GLIBC_TUNABLES")
        .env("STEPTRACE_CACHE", dir.path().join("cache"))
        .output()
        .unwrap();
    assert!(seen.exists(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read_to_string(&seen).unwrap(), "");
}

#[test]
fn missing_file_exits_2_naming_it() {
    let out = steptrace()
        .args(["analyze", "/nonexistent/trace.json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    one_line_error(&out.stderr, "/nonexistent/trace.json");
}

#[test]
fn bad_inputs_exit_2_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&str, &[u8], &str); 4] = [
        ("notjson.json", b"hello, world", "not a JSON object"),
        ("object.json", br#"{"a": [1, 2]}"#, "traceEvents"),
        ("empty.json", b"", "empty"),
        (
            "badgz.json.gz",
            &[0x1f, 0x8b, 0x08, 0x00, 0xff, 0xff],
            "gzip",
        ),
    ];
    for (name, content, needle) in cases {
        let p = dir.path().join(name);
        std::fs::write(&p, content).unwrap();
        let out = steptrace()
            .arg("analyze")
            .arg(&p)
            .arg("--out")
            .arg(dir.path().join("o"))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{name}");
        one_line_error(&out.stderr, needle);
        one_line_error(&out.stderr, name);
    }
}

#[test]
fn hostile_pickle_is_refused_not_run() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("pwned");
    let evil = format!("cposix\nsystem\n(S'touch {}'\ntR.", marker.display());
    let p = dir.path().join("evil.pickle");
    std::fs::write(&p, evil).unwrap();
    let out = steptrace()
        .arg("analyze")
        .arg(root().join("sample_traces/libtorch_cnn/trace.json.gz"))
        .arg(&p)
        .arg("--out")
        .arg(dir.path().join("o"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    one_line_error(&out.stderr, "GLOBAL");
    assert!(!marker.exists());
}

#[test]
fn directory_without_trace_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let out = steptrace().arg("analyze").arg(dir.path()).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    one_line_error(&out.stderr, "the directory has no files");
    // A folder of folders (HolisticTraceAnalysis's `critical_path` test data): they are named.
    for sub in ["simple_add", "alexnet"] {
        std::fs::create_dir(dir.path().join(sub)).unwrap();
    }
    let out = steptrace().arg("analyze").arg(dir.path()).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    one_line_error(
        &out.stderr,
        "holds no files, only 2 folder(s): alexnet, simple_add (give one of them)",
    );
}

#[test]
fn usage_errors_exit_2() {
    steptrace().arg("analyze").assert().code(2);
    steptrace().arg("frobnicate").assert().code(2);
    steptrace().arg("--help").assert().success();
}

#[test]
fn flops_prints_the_graph_profile_and_comparison() {
    let s = root().join("sample_traces/resnet18");
    steptrace()
        .args(["flops", "--top", "3", "--compare"])
        .arg(s.join("reference.json"))
        .arg(&s)
        .assert()
        .success()
        .stdout(predicate::str::contains("GRAPH PROFILE: resnet18"))
        .stdout(predicate::str::contains("Layer Details (Top 3 by FLOPs)"))
        .stdout(predicate::str::contains("aten.convolution_backward"))
        .stdout(predicate::str::contains("100.0%"));
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("ref.json");
    std::fs::write(&bad, r#"{"nothing": 1}"#).unwrap();
    let out = steptrace()
        .args(["flops", "--compare"])
        .arg(&bad)
        .arg(&s)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    one_line_error(&out.stderr, "no FLOP total");
}

/// Output files are written as parallel tasks; when several fail, the error must still be the
/// same one-line message (the earliest file in the fixed task order) whatever the threads.
#[test]
fn unwritable_outputs_give_one_deterministic_error() {
    // As many threads as cores: more would be clamped, with a warning line (issue 22).
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    for threads in ["1".to_string(), cores.to_string()] {
        let threads = threads.as_str();
        let dir = tempfile::tempdir().unwrap();
        // Directories where the files are first written (under their part names) make those
        // two writes fail.
        std::fs::create_dir(dir.path().join("summary.json.steptrace-part")).unwrap();
        std::fs::create_dir(dir.path().join("memory_timeline.csv.steptrace-part")).unwrap();
        let out = steptrace()
            .args(["analyze", "--no-plots", "-j", threads, "--out"])
            .arg(dir.path())
            .arg(root().join("sample_traces/resnet18"))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "threads {threads}");
        one_line_error(&out.stderr, "summary.json");
        assert!(
            !String::from_utf8_lossy(&out.stderr).contains("memory_timeline"),
            "threads {threads}"
        );
    }
}

/// `--out` naming a file is one line saying so, exit 2 (bad usage, as README says), and the
/// OS text is not printed twice.
#[test]
fn issue19_out_naming_a_file_says_not_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("results");
    std::fs::write(&file, "mine").unwrap();
    let out = steptrace()
        .args(["analyze", "--no-plots", "--out"])
        .arg(&file)
        .arg(root().join("sample_traces/resnet18"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    one_line_error(&out.stderr, "results: not a directory");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "mine");
}

/// Issue 19: an input error's OS text is printed once.
#[test]
fn issue19_os_error_text_is_printed_once() {
    let out = steptrace()
        .args(["analyze", "/nonexistent/steptrace/trace.json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let s = String::from_utf8_lossy(&out.stderr);
    one_line_error(&out.stderr, "/nonexistent/steptrace/trace.json");
    assert_eq!(s.matches("os error 2").count(), 1, "{s}");
}

/// Issue 18: `merge` over a directory with no rank results, or with a damaged one, says so in
/// one line naming it. A folder holding no results is nothing to merge (exit 1); a damaged or
/// unreadable one is an unreadable input (exit 2, as README's exit codes say for any input).
#[test]
fn merge_without_or_with_damaged_rank_results_says_which() {
    let dir = tempfile::tempdir().unwrap();
    let merge = |input: &std::path::Path, code: i32| {
        let out = steptrace()
            .arg("merge")
            .arg(input)
            .arg("--out")
            .arg(dir.path().join("m"))
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(code),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stderr
    };
    one_line_error(&merge(dir.path(), 1), "no rank results");
    one_line_error(&merge(&dir.path().join("absent"), 2), "absent");
    std::fs::write(dir.path().join("rank3.summary.parquet"), b"PAR1 not really").unwrap();
    one_line_error(&merge(dir.path(), 2), "rank3.summary.parquet");
}

/// Issue 80, item 9: a FIFO named like a rank table made `merge` wait for a writer that never
/// came. It is refused in one line naming it (exit 2); the command is killed, and the test
/// fails, if it waits 30 s.
#[cfg(unix)]
#[test]
fn merge_refuses_a_fifo_named_like_a_rank_table() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("rank0.summary.parquet");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("steptrace"))
        .arg("merge")
        .arg(dir.path())
        .arg("--out")
        .arg(dir.path().join("m"))
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed().as_secs() > 30 {
            let _ = child.kill();
            panic!("merge still waiting on the FIFO after 30 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let mut err = Vec::new();
    std::io::Read::read_to_end(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(2), "{}", String::from_utf8_lossy(&err));
    one_line_error(&err, "rank0.summary.parquet");
}

/// `merge` counts each rank once: a folder given twice, or a rank's results copied under
/// another rank's name, is one line naming the file, not a run of twice the ranks.
#[test]
fn merge_refuses_a_rank_twice_or_under_another_name() {
    let dir = tempfile::tempdir().unwrap();
    let ranks = dir.path().join("ranks");
    let o = steptrace()
        .args([
            "analyze",
            "-q",
            "--no-plots",
            "--rank",
            "0",
            "--rank-output",
        ])
        .arg(&ranks)
        .arg("--out")
        .arg(dir.path().join("a0"))
        .arg(root().join("sample_traces/ddp_mlp"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let merge = |dirs: &[&std::path::Path]| {
        let mut c = steptrace();
        c.arg("merge");
        for d in dirs {
            c.arg(d);
        }
        c.arg("--out").arg(dir.path().join("m")).output().unwrap()
    };
    assert!(merge(&[&ranks]).status.success());
    let twice = merge(&[&ranks, &ranks]);
    assert_eq!(twice.status.code(), Some(2));
    one_line_error(&twice.stderr, "rank 0 again");
    // rank 0's files copied as rank 1's.
    let copy = dir.path().join("copy");
    std::fs::create_dir(&copy).unwrap();
    for e in std::fs::read_dir(&ranks).unwrap() {
        let n = e.unwrap().file_name().to_string_lossy().into_owned();
        if let Some(rest) = n.strip_prefix("rank0.") {
            std::fs::copy(ranks.join(&n), copy.join(format!("rank1.{rest}"))).unwrap();
        }
    }
    let renamed = merge(&[&ranks, &copy]);
    assert_eq!(renamed.status.code(), Some(2));
    one_line_error(&renamed.stderr, "holds rank 0, not the rank its name says");
}

/// `plan` then `compare` of a run holding the plan it applied (issue 20): the plan's files are
/// written under their final names, and compare prints the prediction beside the measurement.
/// A budget that is not a size is bad usage (exit 2).
#[test]
fn issue20_plan_writes_its_files_and_compare_sets_prediction_beside_measurement() {
    let tmp = tempfile::tempdir().unwrap();
    let src = crate::common::root().join("sample_traces/plan/gpt");
    let run = tmp.path().join("gpt_planned");
    std::fs::create_dir(&run).unwrap();
    for e in std::fs::read_dir(&src).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), run.join(e.file_name())).unwrap();
    }
    let out = tmp.path().join("p");
    let o = steptrace()
        .args(["plan", src.to_str().unwrap(), "--budget", "70%", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("predicted: peak"), "{text}");
    let mut names: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "plan.csv",
            "plan.json",
            "plan_budget_curve.png",
            "plan_budget_curve.svg",
            "plan_memory_timeline.csv",
            "plan_memory_timeline.png",
            "plan_memory_timeline.svg"
        ]
    );
    // The timeline's data: its highest point with the plan is the predicted peak and without
    // it the measured one (the plan's own figures; MiB to six decimals).
    let plan: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("plan.json")).unwrap()).unwrap();
    let csv = std::fs::read_to_string(out.join("plan_memory_timeline.csv")).unwrap();
    let top = |series: &str| {
        csv.lines()
            .skip(1)
            .filter(|l| l.split(',').nth(1) == Some(series))
            .map(|l| l.rsplit(',').next().unwrap().parse::<f64>().unwrap())
            .fold(f64::MIN, f64::max)
    };
    let mib = |k: &str| plan[k].as_f64().unwrap() / (1u64 << 20) as f64;
    assert!(
        (top("with_plan") - mib("predicted_peak_bytes")).abs() < 1e-5,
        "{csv:.300}"
    );
    assert!(
        (top("measured") - mib("measured_peak_bytes")).abs() < 1e-5,
        "{csv:.300}"
    );
    std::fs::copy(out.join("plan.json"), run.join("plan.json")).unwrap();
    let o = steptrace()
        .args([
            "compare",
            src.to_str().unwrap(),
            run.to_str().unwrap(),
            "--out",
        ])
        .arg(tmp.path().join("cmp"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("gpt_planned: plan of") && text.contains("peak predicted"),
        "{text}"
    );
    let o = steptrace()
        .args(["plan", src.to_str().unwrap(), "--budget", "lots"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    one_line_error(&o.stderr, "lots");
}

/// A JSON file given where the snapshot goes (a manifest as the second argument) is named as
/// such, in one line, exit 2: not "unknown pickle opcode 0x7b".
#[test]
fn a_json_file_given_as_the_snapshot_is_said_to_be_json() {
    let dir = tempfile::tempdir().unwrap();
    let out = steptrace()
        .args(["analyze", "--no-plots", "--out"])
        .arg(dir.path().join("o"))
        .arg(root().join("sample_traces/resnet18/trace.json.gz"))
        .arg(root().join("sample_traces/resnet18/manifest.json"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    one_line_error(
        &out.stderr,
        "manifest.json: not a memory snapshot pickle: it starts with '{'",
    );
}

/// A budget the plan cannot reach says by how much, in figures that tell them apart: at one
/// decimal of GiB the 80% budget (1,675 MiB) and the least the Trainer's plan reaches
/// (1,730 MiB) both read "1.7 GiB".
#[test]
fn an_unreachable_budget_names_it_and_the_smallest_reached_to_a_tenth_of_a_mib() {
    let dir = tempfile::tempdir().unwrap();
    let o = steptrace()
        .args([
            "plan",
            "sample_traces/plan/hf_trainer_small",
            "--budget",
            "80%",
        ])
        .args(["--no-plots", "--out"])
        .arg(dir.path().join("p"))
        .current_dir(crate::common::root())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("over the budget of 1675.4 MiB, 80.0% of the peak; the smallest this order reaches is 1729.7 MiB, 82.6%"),
        "{text}"
    );
}

/// Issue 80 (low): `--out` set to the input's own folder, the input named as the annotated
/// trace, replaced the input without a word. Refused in one line naming it; the input is kept
/// byte for byte.
#[test]
fn an_output_that_would_replace_its_input_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("annotated.pt.trace.json.gz");
    let bytes = std::fs::read(root().join("sample_traces/resnet18/trace.json.gz")).unwrap();
    std::fs::write(&input, &bytes).unwrap();
    let out = steptrace()
        .args(["analyze", "-q", "--no-plots"])
        .arg(&input)
        .arg("--out")
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    one_line_error(&out.stderr, "the input itself");
    assert_eq!(std::fs::read(&input).unwrap(), bytes);
}

/// Issue 80 (low): a folder where `summary.json`, `.steptrace-outputs` or another output goes
/// failed the run after its analysis, exit 1 with the OS's words. It is refused as bad usage
/// naming it (exit 2), before anything is renamed, and the folder is kept.
#[test]
fn a_folder_where_an_output_goes_is_refused_naming_it() {
    for name in ["summary.json", ".steptrace-outputs", "node_stats.csv"] {
        let dir = tempfile::tempdir().unwrap();
        let out_dir = dir.path().join("out");
        std::fs::create_dir_all(out_dir.join(name).join("keep")).unwrap();
        let out = steptrace()
            .args(["analyze", "-q", "--no-plots"])
            .arg(root().join("sample_traces/resnet18/trace.json.gz"))
            .arg("--out")
            .arg(&out_dir)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{name}");
        one_line_error(&out.stderr, &format!("{name}: not a file"));
        assert!(out_dir.join(name).join("keep").is_dir(), "{name}");
        // Nothing was given its final name beside it.
        let names: Vec<_> = std::fs::read_dir(&out_dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names, [name], "{name}");
    }
}
