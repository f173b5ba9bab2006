//! Process-wide settings the binary makes before a command runs: the allocator's, the thread
//! pools', and the stage clock of `--timings` and the terminal's progress line.

/// The allocator, where the binary is built with the `jemalloc` feature (the default):
/// jemalloc, told as it starts (`malloc_conf`, compiled in) to advise every extent onto
/// transparent huge pages before it is touched. This is in the process itself, so it holds
/// for every command and never changes what a program `capture` starts is given. Against
/// glibc's malloc on the 255 MB benchmark trace, default command, 2 cores, alternating runs:
/// wall 0.625 → 0.58 s, page faults 37.5k → 6.8k, peak RSS 135 → 179 MB; on a 400 MB memory
/// snapshot 1.01 → 0.79 s (docs/performance.md, "Process").
#[cfg(feature = "jemalloc")]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's settings: the symbol it reads them from as it starts (the `_rjem_` prefix is
/// the crate's). `metadata_thp` puts its own tables on huge pages as well.
#[cfg(feature = "jemalloc")]
#[export_name = "_rjem_malloc_conf"]
static MALLOC_CONF: &u8 = &b"thp:always,metadata_thp:always\0"[0];

/// Lets glibc's malloc reuse freed memory instead of unmapping it, where the binary is built
/// without jemalloc: by default an allocation of more than 128 KiB (a threshold that rises up
/// to 32 MiB, the most it can be set to) is its own mapping, returned to the kernel when
/// freed, so the parse's per-piece buffers and the tables after them fault their pages in
/// again (255 MB benchmark trace: 68.6k → 52.1k page faults, CPU time 521 → 478 ms).
pub(crate) fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu", not(feature = "jemalloc")))]
    // SAFETY: mallopt only sets allocator parameters; it is called before any other thread
    // exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
    }
}

/// One mapping of a `/proc/PID/smaps` text: its size in KiB, and whether it is advised for
/// huge pages (`MADV_HUGEPAGE`: the `hg` of its `VmFlags`).
struct Mapping {
    kib: u64,
    advised: bool,
}

/// The mappings of a `/proc/PID/smaps` text, in order; `None` where a `Size` does not read.
fn mappings(smaps: &str) -> Option<Vec<Mapping>> {
    let (mut out, mut kib) = (Vec::new(), 0);
    for l in smaps.lines() {
        let mut words = l.split_whitespace();
        match words.next() {
            Some("Size:") => kib = words.next()?.parse().ok()?,
            Some("VmFlags:") => out.push(Mapping {
                kib,
                advised: words.any(|f| f == "hg"),
            }),
            _ => {}
        }
    }
    Some(out)
}

/// Which pages the heap is on, for `--timings`: the allocator and what it asks for, what this
/// process has advised for huge pages, and what the kernel maps in huge pages now
/// (`AnonHugePages` of `/proc/self/smaps_rollup`), so the setting is seen to take.
pub(crate) fn heap_pages() -> String {
    let asked = if cfg!(feature = "jemalloc") {
        "jemalloc, transparent huge pages asked for (thp:always)"
    } else {
        "the system allocator's default pages"
    };
    let mapped = std::fs::read_to_string("/proc/self/smaps_rollup")
        .ok()
        .and_then(|t| {
            let line = t.lines().find(|l| l.starts_with("AnonHugePages:"))?;
            line.split_whitespace().nth(1)?.parse::<u64>().ok()
        });
    let advised = advised_kib().map_or_else(|| "unknown".to_owned(), |k| format!("{k} KiB"));
    let mapped = mapped.map_or_else(|| "unknown".to_owned(), |k| format!("{k} KiB"));
    format!("{asked}; advised for huge pages: {advised}; huge pages mapped: {mapped}")
}

/// KiB of this process's mappings advised for huge pages (`MADV_HUGEPAGE`: the `hg` flag of
/// `/proc/self/smaps`): what the allocator asked the kernel for, whether or not the kernel
/// had huge pages at hand to give.
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

    /// Every mapping is read with its size and advice (unnamed mappings have five fields,
    /// and a colon in their device), and a size that does not read is none.
    #[test]
    fn mappings_are_read_with_their_size_and_huge_page_advice() {
        let smaps = "5589b8377000-5589b8398000 r--p 00000000 fe:01 123 /usr/bin/steptrace\n\
                     Size:                132 kB\n\
                     VmFlags: rd mr mw me sd hg\n\
                     55d97167b000-55d97587b000 rw-p 00000000 00:00 0                  [heap]\n\
                     Size:              67584 kB\n\
                     AnonHugePages:         0 kB\n\
                     VmFlags: rd wr mr mw me ac sd\n\
                     7f14b0000000-7f14b4000000 rw-p 00000000 00:00 0 \n\
                     Size:              65536 kB\n\
                     VmFlags: rd wr mr mw me nr hg\n";
        let maps = mappings(smaps).unwrap();
        let read: Vec<(u64, bool)> = maps.iter().map(|m| (m.kib, m.advised)).collect();
        assert_eq!(read, [(132, true), (67584, false), (65536, true)]);
        assert!(mappings(&smaps.replace("67584 kB", "many kB")).is_none());
    }
}
