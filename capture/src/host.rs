//! The machine a capture ran on: host name and NVIDIA driver version.

pub(crate) fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

/// The NVIDIA driver's version, from the kernel module's own file (instant), else nvidia-smi
/// (a process start, 0.1-0.3 s of every capture).
pub(crate) fn driver_version() -> Option<String> {
    if let Ok(text) = std::fs::read_to_string("/proc/driver/nvidia/version") {
        if let Some(v) = driver_from_proc(&text) {
            return Some(v);
        }
    }
    let out = std::process::Command::new("nvidia-smi")
        .args(["--query-gpu=driver_version", "--format=csv,noheader"])
        .output()
        .ok()?;
    let s = String::from_utf8_lossy(&out.stdout);
    s.lines()
        .next()
        .map(|l| l.trim().to_owned())
        .filter(|l| !l.is_empty())
}

/// The version in `/proc/driver/nvidia/version`'s first line ("NVRM version: NVIDIA UNIX
/// Open Kernel Module for x86_64  580.95.05  Release Build ...").
fn driver_from_proc(text: &str) -> Option<String> {
    let line = text.lines().find(|l| l.starts_with("NVRM version:"))?;
    line.split_whitespace()
        .find(|w| {
            w.split('.').count() >= 2
                && w.split('.')
                    .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        })
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_version_is_read_from_the_kernel_modules_file() {
        let text = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build  (dvs-builder@U22)  Tue Sep 23 2025\nGCC version:  gcc version 12.3.0\n";
        assert_eq!(driver_from_proc(text).as_deref(), Some("580.95.05"));
        assert_eq!(driver_from_proc("GCC version: 12.3.0\n"), None);
    }
}
