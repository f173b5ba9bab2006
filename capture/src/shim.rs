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

/// Where the interpreter finds torch, without importing it (a bare interpreter start, tens of
/// ms, against seconds for `import torch`): torch's `__init__.py` and the modification times
/// of it and `version.py`, which change whenever torch is reinstalled.
const LOCATE: &str = r#"
import importlib.util, os
s = importlib.util.find_spec("torch")
o = s.origin if s and s.origin else ""
d = os.path.dirname(o)
print(o, *(os.stat(p).st_mtime_ns if os.path.exists(p) else 0 for p in (o, os.path.join(d, "version.py"))))
"#;

/// [`probe_torch`], kept in `cache/probe/` under a key made of the interpreter, where its
/// torch lives (with modification times) and `CUDA_HOME`: a native capture asks every run,
/// and `import torch` took 3-3.5 s of each C++ capture on the H100 machine, more than the
/// rest of capture's work. A torch that cannot be located is probed afresh.
pub fn probe_torch_cached(python: &Path, cache: &Path) -> Result<TorchInfo, String> {
    let located = Command::new(python)
        .args(["-c", LOCATE])
        .env_remove(crate::env::OUT)
        .output()
        .ok()
        .filter(|o| o.status.success())
        // No torch found prints " 0 0": an empty origin.
        .map(|o| String::from_utf8_lossy(&o.stdout).trim_end().to_owned())
        .filter(|l| !l.is_empty() && !l.starts_with(' '));
    let Some(located) = located else {
        return probe_torch(python);
    };
    let cuda_home = std::env::var("CUDA_HOME").unwrap_or_default();
    let key = fnv1a(&[&python.to_string_lossy(), &located, &cuda_home, PROBE]);
    let file = cache.join("probe").join(format!("{key:016x}.json"));
    if let Some(info) = std::fs::read(&file)
        .ok()
        .and_then(|b| serde_json::from_slice::<TorchInfo>(&b).ok())
    {
        return Ok(info);
    }
    let info = probe_torch(python)?;
    // A cache that cannot be written only costs the next run the probe again.
    if std::fs::create_dir_all(file.parent().expect("has a parent")).is_ok() {
        let tmp = file.with_extension(format!("tmp{}", std::process::id()));
        if std::fs::write(&tmp, serde_json::to_vec(&info).expect("serialises")).is_ok() {
            let _ = std::fs::rename(&tmp, &file);
        }
    }
    Ok(info)
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

    /// A stand-in torch on its own path, and an interpreter wrapper that finds it: every
    /// `import torch` appends a line to `imports`.
    fn fake_torch(dir: &Path) -> PathBuf {
        let pkg = dir.join("site").join("torch");
        std::fs::create_dir_all(pkg.join("utils")).unwrap();
        let log = dir.join("imports");
        std::fs::write(
            pkg.join("__init__.py"),
            format!(
                "open({:?}, 'a').write('x\\n')\n__version__ = '9.9.0'\nfrom . import version, utils\n",
                log.display().to_string()
            ),
        )
        .unwrap();
        std::fs::write(pkg.join("version.py"), "cuda = '13.0'\n").unwrap();
        std::fs::write(
            pkg.join("utils").join("__init__.py"),
            "cmake_prefix_path = '/opt/x'\n",
        )
        .unwrap();
        let py = dir.join("python");
        std::fs::write(
            &py,
            format!(
                "#!/bin/sh\nPYTHONPATH={:?} exec python3 \"$@\"\n",
                dir.join("site").display().to_string()
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&py, std::fs::Permissions::from_mode(0o755)).unwrap();
        py
    }

    /// Whole-run slowdown: a native capture asks which torch it builds against on
    /// every run; the answer is kept, and asked again when torch changes on disk.
    #[test]
    fn issue17_the_torch_probe_is_kept_until_torch_changes() {
        if Command::new("python3").arg("-V").output().is_err() {
            panic!("python3 is needed for this test");
        }
        let dir = tempfile::tempdir().unwrap();
        let py = fake_torch(dir.path());
        let cache = dir.path().join("cache");
        let imports = || {
            std::fs::read_to_string(dir.path().join("imports"))
                .unwrap_or_default()
                .lines()
                .count()
        };
        let first = probe_torch_cached(&py, &cache).unwrap();
        assert_eq!(first.version, "9.9.0");
        assert_eq!(first.cmake_prefix, "/opt/x");
        assert_eq!(imports(), 1);
        assert_eq!(probe_torch_cached(&py, &cache).unwrap(), first);
        assert_eq!(imports(), 1, "the second run is answered from the cache");
        // A reinstalled torch has new files: probed again.
        let v = dir.path().join("site").join("torch").join("version.py");
        let f = std::fs::File::options().write(true).open(&v).unwrap();
        f.set_modified(std::time::SystemTime::now() + std::time::Duration::from_secs(5))
            .unwrap();
        assert_eq!(probe_torch_cached(&py, &cache).unwrap(), first);
        assert_eq!(imports(), 2);
    }

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
