//! Running the child: signal forwarding and exit codes.
//!
//! SIGINT and SIGTERM sent to the launcher with `kill` are passed on to the child. A Ctrl-C
//! typed at a terminal already reaches the child (same process group); forwarding it again would
//! interrupt the child's clean-up, so signals raised by the kernel for a terminal are not
//! forwarded (told apart by `si_code`).

use std::ffi::OsString;
use std::process::{Command, ExitStatus};
use std::sync::atomic::{AtomicI32, Ordering};

static CHILD: AtomicI32 = AtomicI32::new(0);
static LAST_SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn forward(sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    // SAFETY: errno is thread-local; kill may set it, and the interrupted code must see its own.
    let saved_errno = unsafe { *libc::__errno_location() };
    LAST_SIGNAL.store(sig, Ordering::SeqCst);
    // SAFETY: the kernel passes a valid siginfo_t to an SA_SIGINFO handler.
    let code = unsafe { (*info).si_code };
    let pid = CHILD.load(Ordering::SeqCst);
    if pid > 0 && code != libc::SI_KERNEL {
        // SAFETY: kill is async-signal-safe.
        unsafe {
            libc::kill(pid, sig);
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

/// How the child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Exit {
    /// The exit code to return: the child's, or 128+N when killed by signal N.
    pub code: i32,
    /// The signal that killed it.
    pub signal: Option<i32>,
    /// A signal the launcher received and forwarded while the child ran.
    pub forwarded_signal: Option<i32>,
}

impl Exit {
    fn from_status(st: ExitStatus) -> Exit {
        use std::os::unix::process::ExitStatusExt;
        let last = LAST_SIGNAL.swap(0, Ordering::SeqCst);
        let forwarded_signal = (last != 0).then_some(last);
        match (st.code(), st.signal()) {
            (Some(c), _) => Exit {
                code: c,
                signal: None,
                forwarded_signal,
            },
            (None, Some(s)) => Exit {
                code: 128 + s,
                signal: Some(s),
                forwarded_signal,
            },
            _ => Exit {
                code: 1,
                signal: None,
                forwarded_signal,
            },
        }
    }
}

/// Runs `argv` with `env` added, forwarding SIGINT/SIGTERM, and waits for it.
pub fn run(argv: &[OsString], env: &[(String, String)]) -> std::io::Result<Exit> {
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
        let mut child = cmd.spawn()?;
        CHILD.store(child.id() as i32, Ordering::SeqCst);
        let st = child.wait();
        CHILD.store(0, Ordering::SeqCst);
        st
    })();
    restore(libc::SIGINT, &old_int);
    restore(libc::SIGTERM, &old_term);
    result.map(Exit::from_status)
}
