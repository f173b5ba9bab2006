//! The shims: the Python one is embedded and written to a session directory at launch; the
//! C++ one must match the program's torch ABI, so it is built on first use against that torch
//! (CMake, prefix from `torch.utils.cmake_prefix_path`) and cached by torch version and source
//! hash. `cargo build` never needs libtorch.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The Python shim, imported by Python at start-up as `sitecustomize`.
pub const SITECUSTOMIZE_PY: &str = include_str!("../shim_py/sitecustomize.py");
/// The C++ shim's source.
pub const SHIM_CPP: &str = include_str!("../shim_cpp/steptrace_shim.cpp");
/// The timing phase's stopping rule, included by the C++ shim.
pub const SHIM_TIMING_H: &str = include_str!("../shim_cpp/timing_rule.h");
/// Its CMake project.
pub const SHIM_CMAKE: &str = include_str!("../shim_cpp/CMakeLists.txt");

/// FNV-1a, 64 bit: a stable hash for the cache key (std's hasher may change between releases).
pub fn fnv1a(parts: &[&str]) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for p in parts {
        for b in p.bytes() {
            h ^= b as u64;
            h = h.wrapping_mul(0x100000001b3);
        }
        h ^= 0xff;
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}

/// What the target interpreter's torch is, from a probe run.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
pub struct TorchInfo {
    /// `torch.__version__`.
    pub version: String,
    /// `torch.version.cuda`.
    pub cuda: Option<String>,
    /// `torch.utils.cmake_prefix_path`.
    pub cmake_prefix: String,
    /// Directories that may hold `nvtx3/nvToolsExt.h`.
    pub include_hints: Vec<String>,
}

const PROBE: &str = r#"
import json, os, sys
import torch, torch.utils
hints = []
for base in [os.environ.get("CUDA_HOME", ""), "/usr/local/cuda"]:
    if base:
        hints.append(os.path.join(base, "include"))
try:
    import nvidia
    for p in nvidia.__path__:
        for root, dirs, files in os.walk(p):
            if os.path.basename(root) == "nvtx3":
                hints.append(os.path.dirname(root))
except Exception:
    pass
print(json.dumps({"version": torch.__version__, "cuda": torch.version.cuda,
                  "cmake_prefix": torch.utils.cmake_prefix_path, "include_hints": hints}))
"#;

/// Asks `python` about its torch. `Err` holds a one-line reason (torch not importable, no
/// such interpreter).
pub fn probe_torch(python: &Path) -> Result<TorchInfo, String> {
    let out = Command::new(python)
        .args(["-c", PROBE])
        .env_remove(crate::env::OUT)
        .output()
        .map_err(|e| format!("could not run {}: {e}", python.display()))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let last = err
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("no error output");
        return Err(format!(
            "{} cannot import torch ({})",
            python.display(),
            last.trim()
        ));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or("");
    serde_json::from_str(line).map_err(|e| format!("unexpected torch probe output: {e}"))
}

/// The cache directory: `$STEPTRACE_CACHE`, else `$XDG_CACHE_HOME/steptrace`, else
/// `~/.cache/steptrace`.
pub fn cache_root() -> PathBuf {
    if let Some(p) = std::env::var_os("STEPTRACE_CACHE") {
        return PathBuf::from(p);
    }
    if let Some(p) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(p).join("steptrace");
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    home.join(".cache").join("steptrace")
}

/// Path the shim for `torch` is (or will be) cached at.
pub fn cached_path(cache: &Path, torch: &TorchInfo) -> PathBuf {
    let key = fnv1a(&[
        SHIM_CPP,
        SHIM_TIMING_H,
        SHIM_CMAKE,
        &torch.version,
        &torch.cmake_prefix,
    ]);
    let ver: String = torch
        .version
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    cache
        .join("shim")
        .join(format!("{ver}-{key:016x}"))
        .join("libsteptrace_shim.so")
}

/// Returns the cached shim, building it first if needed. `Err` holds a one-line reason and
/// where the build log is.
pub fn build(cache: &Path, torch: &TorchInfo) -> Result<PathBuf, String> {
    let lib = cached_path(cache, torch);
    if lib.is_file() {
        return Ok(lib);
    }
    let dir = lib
        .parent()
        .expect("cached path has a parent")
        .to_path_buf();
    let src = dir.join("src");
    let bld = dir.join("build");
    std::fs::create_dir_all(&src).map_err(|e| format!("{}: {e}", src.display()))?;
    for (name, text) in [
        ("steptrace_shim.cpp", SHIM_CPP),
        ("timing_rule.h", SHIM_TIMING_H),
        ("CMakeLists.txt", SHIM_CMAKE),
    ] {
        std::fs::write(src.join(name), text).map_err(|e| format!("{}: {e}", src.display()))?;
    }
    let log = dir.join("build.log");
    let mut configure = Command::new("cmake");
    configure
        .arg("-S")
        .arg(&src)
        .arg("-B")
        .arg(&bld)
        .arg(format!("-DCMAKE_PREFIX_PATH={}", torch.cmake_prefix))
        .arg(format!("-DNVTX_HINTS={}", torch.include_hints.join(";")))
        .arg("-DCMAKE_BUILD_TYPE=Release");
    if which("ninja") {
        configure.args(["-G", "Ninja"]);
    }
    let mut text = String::new();
    for mut cmd in [configure, {
        let mut b = Command::new("cmake");
        b.arg("--build").arg(&bld);
        b
    }] {
        let out = cmd.output().map_err(|e| {
            format!("cmake could not be run ({e}); the C++ shim needs CMake and a C++ compiler")
        })?;
        text.push_str(&String::from_utf8_lossy(&out.stdout));
        text.push_str(&String::from_utf8_lossy(&out.stderr));
        if !out.status.success() {
            let _ = std::fs::write(&log, &text);
            return Err(format!(
                "building the C++ shim failed; log in {}",
                log.display()
            ));
        }
    }
    let _ = std::fs::write(&log, &text);
    let built = bld.join("libsteptrace_shim.so");
    std::fs::copy(&built, &lib).map_err(|e| format!("{}: {e}", built.display()))?;
    Ok(lib)
}

fn which(prog: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(prog).is_file()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_key_depends_on_sources_and_torch() {
        let t = TorchInfo {
            version: "2.11.0+cu130".into(),
            cuda: Some("13.0".into()),
            cmake_prefix: "/x".into(),
            include_hints: vec![],
        };
        let a = cached_path(Path::new("/c"), &t);
        let mut t2 = t.clone();
        t2.version = "2.10.0".into();
        assert_ne!(a, cached_path(Path::new("/c"), &t2));
        assert!(a.to_string_lossy().contains("2.11.0_cu130-"));
        assert_eq!(fnv1a(&["a"]), fnv1a(&["a"]));
        assert_ne!(fnv1a(&["ab", "c"]), fnv1a(&["a", "bc"]));
    }
}
