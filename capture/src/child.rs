//! Running the child: signal forwarding and exit codes.
//!
//! SIGINT and SIGTERM sent to the launcher with `kill` are passed on to the child. A Ctrl-C
//! typed at a terminal already reaches the child (same process group); forwarding it again would
//! interrupt the child's clean-up, so signals raised by the kernel for a terminal are not
//! forwarded (told apart by `si_code`).

use std::ffi::OsString;
use std::process::{Command, ExitStatus};
use std::sync::atomic::{AtomicI32, Ordering};
pub use steptrace_formats::manifest::Exit;

static CHILD: AtomicI32 = AtomicI32::new(0);
static LAST_SIGNAL: AtomicI32 = AtomicI32::new(0);
/// A signal that arrived before the child's pid was known (between `spawn` and storing it):
/// forwarded as soon as it is. A child that signalled its parent at once lost it otherwise.
static PENDING: AtomicI32 = AtomicI32::new(0);

extern "C" fn forward(sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    // SAFETY: errno is thread-local; kill may set it, and the interrupted code must see its own.
    let saved_errno = unsafe { *libc::__errno_location() };
    LAST_SIGNAL.store(sig, Ordering::SeqCst);
    // SAFETY: the kernel passes a valid siginfo_t to an SA_SIGINFO handler.
    let code = unsafe { (*info).si_code };
    if code != libc::SI_KERNEL {
        // Pending first, then the pid: whichever of this and `run` comes second forwards it.
        PENDING.store(sig, Ordering::SeqCst);
        let pid = CHILD.load(Ordering::SeqCst);
        if pid > 0 && PENDING.swap(0, Ordering::SeqCst) != 0 {
            // SAFETY: kill is async-signal-safe.
            unsafe {
                libc::kill(pid, sig);
            }
        }
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = saved_errno };
}

/// Installs the forwarding handler; returns the previous disposition.
fn install(sig: libc::c_int) -> std::io::Result<libc::sigaction> {
    // SAFETY: a zeroed sigaction is a valid starting point; the handler only touches atomics,
    // errno and kill, all async-signal-safe.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        let mut old: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = forward as *const () as usize;
        sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        if libc::sigaction(sig, &sa, &mut old) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(old)
    }
}

fn restore(sig: libc::c_int, old: &libc::sigaction) {
    // SAFETY: puts back the disposition `install` replaced.
    unsafe {
        libc::sigaction(sig, old, std::ptr::null_mut());
    }
}

/// How long a child may keep running once its work is reported finished (every shim wrote its
/// clean exit), and how that is known. On the H100, nanoGPT's bench.py under capture printed its
/// result, its shim wrote its files and its clean exit, and the process then did not end for
/// 7 minutes, in some runs and not others (capture/corpus/exit_hang.sh).
pub struct Linger<'a> {
    /// Whether the child's work is finished; asked every `LINGER_POLL`.
    pub finished: &'a dyn Fn() -> bool,
    /// Grace after `finished` first says so, before SIGTERM (then SIGKILL 5 s on).
    pub grace: std::time::Duration,
}

/// How often [`Linger::finished`] is asked.
const LINGER_POLL: std::time::Duration = std::time::Duration::from_millis(250);

/// How a child that ended with `st` ended.
fn exit_from_status(st: ExitStatus) -> Exit {
    {
        use std::os::unix::process::ExitStatusExt;
        let last = LAST_SIGNAL.swap(0, Ordering::SeqCst);
        let forwarded_signal = (last != 0).then_some(last);
        match (st.code(), st.signal()) {
            (Some(c), _) => Exit {
                code: c,
                signal: None,
                forwarded_signal,
                ended_lingering_s: None,
            },
            (None, Some(s)) => Exit {
                code: 128 + s,
                signal: Some(s),
                forwarded_signal,
                ended_lingering_s: None,
            },
            _ => Exit {
                code: 1,
                signal: None,
                forwarded_signal,
                ended_lingering_s: None,
            },
        }
    }
}

/// Runs `argv` with `env` added, forwarding SIGINT/SIGTERM, and waits for it; with `linger`,
/// ends it once it has run on past its finished work for the grace.
pub fn run(
    argv: &[OsString],
    env: &[(String, String)],
    linger: Option<Linger<'_>>,
) -> std::io::Result<Exit> {
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..]);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let old_int = install(libc::SIGINT)?;
    let old_term = match install(libc::SIGTERM) {
        Ok(o) => o,
        Err(e) => {
            restore(libc::SIGINT, &old_int);
            return Err(e);
        }
    };
    let result = (|| {
        PENDING.store(0, Ordering::SeqCst);
        let mut child = cmd.spawn()?;
        CHILD.store(child.id() as i32, Ordering::SeqCst);
        let pending = PENDING.swap(0, Ordering::SeqCst);
        if pending != 0 {
            // SAFETY: kill reads no memory; the child is ours and not yet reaped.
            unsafe { libc::kill(child.id() as libc::pid_t, pending) };
        }
        let st = match &linger {
            None => child.wait().map(|st| (st, None)),
            Some(l) => wait_lingering(&mut child, l),
        };
        CHILD.store(0, Ordering::SeqCst);
        st
    })();
    restore(libc::SIGINT, &old_int);
    restore(libc::SIGTERM, &old_term);
    result.map(|(st, lingered)| Exit {
        ended_lingering_s: lingered,
        ..exit_from_status(st)
    })
}

/// Waits for `child`, asking `l.finished` as it runs; a child still running `l.grace` after
/// that is sent SIGTERM, and SIGKILL 5 s later. Returns its status and, when it was ended so,
/// how many seconds it lingered.
fn wait_lingering(
    child: &mut std::process::Child,
    l: &Linger<'_>,
) -> std::io::Result<(ExitStatus, Option<u64>)> {
    use std::time::{Duration, Instant};
    let mut last_poll = Instant::now();
    let mut finished_at: Option<Instant> = None;
    let mut termed_at: Option<Instant> = None;
    let pid = child.id() as libc::pid_t;
    loop {
        if let Some(st) = child.try_wait()? {
            let lingered = termed_at
                .zip(finished_at)
                .map(|(_, f)| f.elapsed().as_secs());
            return Ok((st, lingered));
        }
        let now = Instant::now();
        if finished_at.is_none() && now - last_poll >= LINGER_POLL {
            last_poll = now;
            if (l.finished)() {
                finished_at = Some(now);
            }
        }
        match (finished_at, termed_at) {
            (Some(f), None) if now - f >= l.grace => {
                // SAFETY: kill reads no memory; `pid` is our child, not yet reaped.
                unsafe { libc::kill(pid, libc::SIGTERM) };
                termed_at = Some(now);
            }
            (_, Some(t)) if now - t >= Duration::from_secs(5) => {
                // SAFETY: as above.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            _ => {}
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
