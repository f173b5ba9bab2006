//! Process-wide settings the binary makes before a command runs: the allocator's, the thread
//! pools', and the stage clock of `--timings` and the terminal's progress line.

use crate::cli;

/// Lets glibc's malloc reuse freed memory instead of unmapping it: by default an allocation of
/// more than 128 KiB (a threshold that rises up to 32 MiB, the most it can be set to) is its
/// own mapping, returned to the kernel when freed, so the parse's per-piece buffers and the
/// tables after them fault their pages in again. On the 255 MB benchmark trace, default
/// command, `perf stat -r 10`, the same two settings given through `GLIBC_TUNABLES` to the
/// build before them (this change alone): 68.6k → 52.1k page faults, CPU time 521 → 478 ms.
/// Peak RSS unchanged (302 → 304 MB): the memory freed is reused, not added to.
pub(crate) fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets allocator parameters; it is called before any other thread
    // exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
    }
}

/// Whether the command reads traces in this process (and runs no program: `capture` and
/// `sweep` start the user's, which must get the environment it was given), and not memory
/// snapshots alone: the snapshot reader's tables are large and short-lived, and on the 2-core
/// machine a 1 GB snapshot (`gen_snapshot.py --reuse-addresses`) took 9.5 s with the heap on
/// huge pages (more than half of it the kernel zeroing them) against 5.6 s without, and 7.3
/// against 4.6 s with the reader before it (one run each).
pub(crate) fn reads_traces(command: &cli::Command) -> bool {
    use cli::Command as C;
    match command {
        C::Analyze(a) => !steptrace::is_snapshot_file(&a.input.input),
        C::Compare(c) => !c.runs.iter().all(|r| steptrace::is_snapshot_file(r)),
        C::Flops(_) | C::Merge(_) | C::Plan(_) => true,
        C::Capture(_) | C::Sweep(_) => false,
    }
}

/// What [`huge_pages_for_the_heap`] gives glibc: back the heap with transparent huge pages
/// (`madvise`) and grow it 64 MiB at a time, so that its pieces are whole huge pages.
const HUGE_PAGE_TUNABLES: &str = "glibc.malloc.hugetlb=1:glibc.malloc.top_pad=67108864";

/// Runs this program again, at once, with glibc's malloc told to back its heap with transparent
/// huge pages. glibc reads `GLIBC_TUNABLES` only as a process starts, and setting the same
/// from inside (advising the heap from a global allocator) needs a single arena, which on 16
/// cores doubled the analysis stage on lock contention. nanoGPT `train.py`'s real 178 MB trace,
/// default command, alternating rounds against `glibc.malloc.hugetlb=0`: 0.207 against
/// 0.243 s on the 2-core machine (15 rounds), 0.186 against 0.213 s at 16 threads on the GPU machine's CPU (10 rounds); on the
/// 255 MB benchmark trace, page faults 41k → 5k, peak RSS 163 → 183 MB (huge pages are backed
/// whole). Not every series gains: docs/performance.md, "Process".
///
/// Some glibc versions take the tunable only now and then, so the program is run again while
/// its heap is not advised, [`HUGE_PAGE_EXECS`] times at most ([`not_taken`]).
///
/// Nothing happens where the user's `GLIBC_TUNABLES` names `glibc.malloc.hugetlb` already (set
/// `glibc.malloc.hugetlb=0` to opt out; it also keeps this from looping), where the kernel has
/// transparent huge pages off, or where the exec fails: the run goes on as it is.
pub(crate) fn huge_pages_for_the_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        use std::ffi::OsString;
        use std::os::unix::process::CommandExt;
        let current = std::env::var_os("GLIBC_TUNABLES");
        let text = current.as_ref().map(|v| v.to_string_lossy().into_owned());
        let runs = text.as_deref().map_or(0, huge_page_runs);
        let mode = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled");
        let mode = mode.as_deref().unwrap_or("[never]");
        if runs > 0 {
            if runs >= HUGE_PAGE_EXECS || !not_taken(mode) {
                return;
            }
        } else if text.is_some_and(|v| v.contains("glibc.malloc.hugetlb"))
            || mode.contains("[never]")
        {
            return;
        }
        let tunables = match current {
            Some(mut v) if !v.is_empty() => {
                v.push(":");
                v.push(HUGE_PAGE_TUNABLES);
                v
            }
            _ => OsString::from(HUGE_PAGE_TUNABLES),
        };
        let mut args = std::env::args_os();
        let Some(arg0) = args.next() else {
            return;
        };
        // Returns only if the exec failed; the run then goes on without huge pages.
        let _ = std::process::Command::new("/proc/self/exe")
            .arg0(arg0)
            .args(args)
            .env("GLIBC_TUNABLES", tunables)
            .exec();
    }
}

/// How many times at most the program runs itself for the heap's huge pages. glibc 2.36
/// (Debian 12's) checks the kernel's mode (`__malloc_thp_mode`) by comparing the 23 bytes it
/// read from `/sys/kernel/mm/transparent_hugepage/enabled` as a string it never ended, so the
/// byte after them on the stack decides, and it moves with address randomisation: on the
/// 2-core machine the tunable took in 13 of 40 runs of one build and 17 of 20 of
/// the next. Later glibc ends the string (2.39 on the GPU machine took it in 20 of 20). At 13
/// in 40, one run in 110 is left without it after 12 tries. Each try is an exec: a command
/// that fails at once took 3.9 ms with one and 2.2 ms with none (`perf stat -r 30`), and 5.7-6.7
/// ms with the tries (2.1 ms with none; two series of `perf stat -r 40`).
const HUGE_PAGE_EXECS: usize = 12;

/// How many times [`huge_pages_for_the_heap`] has run the program: the copies of its tunables
/// in `GLIBC_TUNABLES` (glibc reads them in order, so a repeat changes nothing).
fn huge_page_runs(tunables: &str) -> usize {
    tunables.matches(HUGE_PAGE_TUNABLES).count()
}

/// Whether glibc left the tunable untaken where the kernel gives huge pages on request
/// (`[madvise]`): then the heap, grown 64 MiB before `main`, is not advised (`hg` missing
/// from the `VmFlags` of `[heap]` in `/proc/self/smaps`). `false` where that cannot be told.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn not_taken(mode: &str) -> bool {
    if !mode.contains("[madvise]") {
        return false;
    }
    let Ok(maps) = std::fs::read_to_string("/proc/self/smaps") else {
        return false;
    };
    heap_advised(&maps) == Some(false)
}

/// One mapping of a `/proc/PID/smaps` text: its name (empty where it has none), its size in
/// KiB, and whether it is advised for huge pages (`MADV_HUGEPAGE`: the `hg` of its `VmFlags`).
struct Mapping<'a> {
    name: &'a str,
    kib: u64,
    advised: bool,
}

/// The mappings of a `/proc/PID/smaps` text, in order; `None` where a `Size` does not read.
fn mappings(smaps: &str) -> Option<Vec<Mapping<'_>>> {
    let (mut out, mut name, mut kib) = (Vec::new(), "", 0);
    for l in smaps.lines() {
        let mut words = l.split_whitespace();
        match words.next() {
            Some("Size:") => kib = words.next()?.parse().ok()?,
            Some("VmFlags:") => out.push(Mapping {
                name,
                kib,
                advised: words.any(|f| f == "hg"),
            }),
            // A mapping's first line (range, permissions, offset, device, inode, name):
            // every other line starts with a field name and a colon.
            Some(w) if !w.ends_with(':') => name = words.nth(4).unwrap_or(""),
            _ => {}
        }
    }
    Some(out)
}

/// Whether the `[heap]` mapping of a `/proc/PID/smaps` text is advised for huge pages; `None`
/// where the text has no `[heap]` with its flags.
#[cfg_attr(not(all(target_os = "linux", target_env = "gnu")), allow(dead_code))]
fn heap_advised(smaps: &str) -> Option<bool> {
    let heap = mappings(smaps)?.into_iter().find(|m| m.name == "[heap]")?;
    Some(heap.advised)
}

/// Which pages the heap is on, for `--timings`: whether [`huge_pages_for_the_heap`] ran this
/// process again (its own `GLIBC_TUNABLES`), and what the kernel says it maps in huge pages
/// now (`AnonHugePages` of `/proc/self/smaps_rollup`), so the setting is seen to take.
pub(crate) fn heap_pages() -> String {
    let runs =
        std::env::var_os("GLIBC_TUNABLES").map_or(0, |v| huge_page_runs(&v.to_string_lossy()));
    let asked = match runs {
        0 => "the allocator's default pages".to_owned(),
        1 => "transparent huge pages asked for (GLIBC_TUNABLES)".to_owned(),
        n => format!("transparent huge pages asked for (GLIBC_TUNABLES, {n} tries)"),
    };
    let mapped = std::fs::read_to_string("/proc/self/smaps_rollup")
        .ok()
        .and_then(|t| {
            let line = t.lines().find(|l| l.starts_with("AnonHugePages:"))?;
            line.split_whitespace().nth(1)?.parse::<u64>().ok()
        });
    let advised = advised_kib().map_or_else(|| "unknown".to_owned(), |k| format!("{k} KiB"));
    match mapped {
        Some(kib) => {
            format!("{asked}; advised for huge pages: {advised}; huge pages mapped: {kib} KiB")
        }
        None => format!("{asked}; advised for huge pages: {advised}; huge pages mapped: unknown"),
    }
}

/// KiB of this process's mappings advised for huge pages (`MADV_HUGEPAGE`: the `hg` flag of
/// `/proc/self/smaps`): what glibc asked the kernel for, whether or not the kernel had huge
/// pages at hand to give.
fn advised_kib() -> Option<u64> {
    let t = std::fs::read_to_string("/proc/self/smaps").ok()?;
    Some(
        mappings(&t)?
            .iter()
            .filter(|m| m.advised)
            .map(|m| m.kib)
            .sum(),
    )
}

/// `--threads N`: rayon's pool, and the pool polars starts for the Parquet copies, which would
/// otherwise take every core. Called before any other thread exists (polars reads its variable
/// when it first starts its pool); a limit the user set for polars is kept.
pub(crate) fn limit_threads(n: usize) -> anyhow::Result<()> {
    let n = clamp_threads(
        n,
        std::thread::available_parallelism().map_or(1, |c| c.get()),
    );
    if let Some(warning) = n.1 {
        eprintln!("steptrace: warning: {warning}");
    }
    let n = n.0;
    if std::env::var_os("POLARS_MAX_THREADS").is_none() {
        std::env::set_var("POLARS_MAX_THREADS", n.to_string());
    }
    rayon::ThreadPoolBuilder::new()
        .num_threads(n)
        .build_global()?;
    Ok(())
}

/// `-j N` within `1..=cores`: more threads than cores only cost memory and start-up
/// (`-j 10000` was still starting threads after 32 s), with a warning when clamped.
fn clamp_threads(n: usize, cores: usize) -> (usize, Option<String>) {
    let cores = cores.max(1);
    if n > cores {
        (
            cores,
            Some(format!(
                "-j {n} is more than the {cores} cores here: using {cores}"
            )),
        )
    } else {
        (n.max(1), None)
    }
}

/// Stage progress on a terminal: the stage and the time since the first one, on one line.
pub(crate) fn progress(stage: &str) {
    use std::sync::OnceLock;
    static START: OnceLock<std::time::Instant> = OnceLock::new();
    let t0 = START.get_or_init(std::time::Instant::now);
    eprint!(
        "\r\x1b[2Ksteptrace: {stage}... ({:.1} s)",
        t0.elapsed().as_secs_f64()
    );
}

/// `--timings`: each stage's wall time, printed when the next one starts (an empty name ends
/// the last).
pub(crate) fn timing(stage: &str) {
    use std::sync::Mutex;
    static LAST: Mutex<Option<(String, std::time::Instant, f64)>> = Mutex::new(None);
    let mut last = LAST.lock().unwrap_or_else(|e| e.into_inner());
    let now = std::time::Instant::now();
    let cpu = process_cpu_seconds();
    if let Some((name, t, c)) = last.take() {
        let wall = (now - t).as_secs_f64();
        // CPU time over wall time: how many cores the stage kept busy.
        eprintln!(
            "steptrace: {name}: {wall:.3} s ({:.3} s CPU, {:.2} cores)",
            cpu - c,
            (cpu - c) / wall.max(1e-9)
        );
    }
    if !stage.is_empty() {
        *last = Some((stage.to_owned(), now, cpu));
    }
}

/// CPU time of the whole process (all threads, user and system) so far.
#[cfg(unix)]
fn process_cpu_seconds() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant the C library
    // knows.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0.0;
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

#[cfg(not(unix))]
fn process_cpu_seconds() -> f64 {
    0.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issue22_threads_are_clamped_to_the_cores() {
        assert_eq!(clamp_threads(10_000, 2).0, 2);
        assert!(clamp_threads(10_000, 2).1.unwrap().contains("-j 10000"));
        assert_eq!(clamp_threads(0, 8), (1, None));
        assert_eq!(clamp_threads(4, 8), (4, None));
    }

    /// The `[heap]` mapping's flags are found among others (unnamed mappings have five
    /// fields, and a colon in their device), and a text without one tells nothing; every
    /// mapping is read with its name, size and advice, and a size that does not read is none.
    #[test]
    fn the_heaps_huge_page_advice_is_read_from_its_own_mapping() {
        let smaps = |heap_flags: &str| {
            format!(
                "5589b8377000-5589b8398000 r--p 00000000 fe:01 123 /usr/bin/steptrace\n\
                 Size:                132 kB\n\
                 VmFlags: rd mr mw me sd hg\n\
                 55d97167b000-55d97587b000 rw-p 00000000 00:00 0                  [heap]\n\
                 Size:              67584 kB\n\
                 AnonHugePages:         0 kB\n\
                 VmFlags: {heap_flags}\n\
                 7f14b0000000-7f14b4000000 rw-p 00000000 00:00 0 \n\
                 Size:              65536 kB\n\
                 VmFlags: rd wr mr mw me nr hg\n"
            )
        };
        assert_eq!(heap_advised(&smaps("rd wr mr mw me ac sd hg")), Some(true));
        assert_eq!(heap_advised(&smaps("rd wr mr mw me ac sd")), Some(false));
        assert_eq!(
            heap_advised(&smaps("rd wr mr mw me ac sd").replace("[heap]", "")),
            None
        );
        assert_eq!(heap_advised(""), None);
        // The same walk gives `--timings` its advised KiB.
        let text = smaps("rd wr mr mw me ac sd");
        let maps = mappings(&text).unwrap();
        let named: Vec<(&str, u64, bool)> =
            maps.iter().map(|m| (m.name, m.kib, m.advised)).collect();
        assert_eq!(
            named,
            [
                ("/usr/bin/steptrace", 132, true),
                ("[heap]", 67584, false),
                ("", 65536, true)
            ]
        );
        assert!(mappings(&smaps("hg").replace("67584 kB", "many kB")).is_none());
    }

    /// Each run again adds one copy of the tunables, which is how the runs are counted.
    #[test]
    fn runs_for_huge_pages_are_counted_by_the_tunables_copies() {
        assert_eq!(huge_page_runs("glibc.malloc.hugetlb=0"), 0);
        assert_eq!(huge_page_runs(HUGE_PAGE_TUNABLES), 1);
        let three = format!("glibc.malloc.tcache_count=0:{HUGE_PAGE_TUNABLES}:{HUGE_PAGE_TUNABLES}:{HUGE_PAGE_TUNABLES}");
        assert_eq!(huge_page_runs(&three), 3);
    }
}
