//! Where a block was allocated, from its stack: frames formatted and filtered as torch's
//! `_memory_viz` formats them (so that flame graphs and references line up), the innermost
//! frame of the program's own Python code and the innermost C++ frame beyond the allocator's
//! plumbing, and the kind of code (optimizer, backward, forward, ...).

use rustc_hash::FxHashMap;

use super::AliveBlock;
use crate::model::snapshot::{FrameId, Snapshot, StackId};
pub use steptrace_formats::summary::{Site, SiteKind, SITE_KINDS};

/// What a block without frames is called (torch's word).
pub const NO_STACK: &str = "<non-python>";

/// torch's `_frame_filter`: frames `_memory_viz` leaves out of its flame graphs (the
/// interpreter's and the dispatcher's plumbing).
pub fn torch_keeps_frame(name: &str, filename: &str) -> bool {
    const FUNCTIONS: [&str; 8] = [
        "unwind::unwind",
        "CapturedTraceback::gather",
        "gather_with_cpp",
        "_start",
        "__libc_start_main",
        "PyEval_",
        "PyObject_",
        "PyFunction_",
    ];
    const FILES: [&str; 10] = [
        "core/boxing",
        "/Register",
        "/Redispatch",
        "pythonrun.c",
        "Modules/main.c",
        "Objects/call.c",
        "Objects/methodobject.c",
        "pycore_ceval.h",
        "ceval.c",
        "cpython/abstract.h",
    ];
    !FUNCTIONS.iter().any(|f| name.contains(f)) && !FILES.iter().any(|f| filename.contains(f))
}

/// torch's `_frame_fmt`: `file:line:function`, the file without its folder; control
/// characters written as escapes (`\n`), so a name holding a newline cannot start a line of
/// its own in the flame-graph text, nor an escape sequence reach a terminal through a CSV.
pub fn format_frame(s: &Snapshot, f: FrameId) -> String {
    let fr = &s.frames[f.0 as usize];
    let file = s.str(fr.filename);
    let file = file.rsplit('/').next().unwrap_or(file);
    let text = format!("{file}:{}:{}", fr.line, s.str(fr.name));
    if !text.chars().any(char::is_control) {
        return text;
    }
    text.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// The longest text of one frame in a stack's line, bytes: past it the frame is cut (`…`).
pub const FRAME_TEXT_MAX: usize = 2 << 10;

/// The longest stack line, bytes: past it the remaining frames are counted, not written. A
/// pickle can name one frame of 64 KiB a hundred thousand times in a stack for a few bytes
/// each (its memo), which made one line of 6.5 GB; real stacks come nowhere near this (a
/// deep Python stack with C++ frames: a few KiB).
pub const STACK_TEXT_MAX: usize = 16 << 10;

/// A stack as torch's flame-graph lines give it: kept frames, outermost first, `;`-joined
/// ([`NO_STACK`] for none); bounded by [`FRAME_TEXT_MAX`] and [`STACK_TEXT_MAX`], with what
/// was left out said (`…(+N frames)`).
pub fn fragment(s: &Snapshot, stack: StackId) -> String {
    let frames = s.stack(stack);
    if frames.is_empty() {
        return NO_STACK.to_owned();
    }
    let (kept, left) = bounded_frames(s, frames.iter().rev().copied());
    let mut out = kept.join(";");
    if left > 0 {
        out.push_str(&format!(";…(+{left} frames)"));
    }
    out
}

/// The frames torch keeps of `frames` (in the order given), each written and cut at
/// [`FRAME_TEXT_MAX`], until their text passes [`STACK_TEXT_MAX`]; and how many kept frames
/// were left out past it (counted, not written: a pickle's memo can repeat one long frame a
/// hundred thousand times for a few bytes each).
pub fn bounded_frames(s: &Snapshot, frames: impl Iterator<Item = FrameId>) -> (Vec<String>, usize) {
    // Each distinct frame looked at once: a stack that repeats one long frame (through the
    // pickle's memo) would otherwise have every repeat searched and written again.
    let mut seen: FxHashMap<FrameId, Option<String>> = FxHashMap::default();
    let mut look = |f: FrameId| -> Option<String> {
        seen.entry(f)
            .or_insert_with(|| {
                let fr = &s.frames[f.0 as usize];
                torch_keeps_frame(s.str(fr.name), s.str(fr.filename)).then(|| {
                    let mut text = format_frame(s, f);
                    if text.len() > FRAME_TEXT_MAX {
                        let mut end = FRAME_TEXT_MAX;
                        while !text.is_char_boundary(end) {
                            end -= 1;
                        }
                        text.truncate(end);
                        text.push('…');
                    }
                    text
                })
            })
            .clone()
    };
    let mut kept = Vec::new();
    let mut total = 0;
    let mut frames = frames;
    for f in frames.by_ref() {
        let Some(text) = look(f) else { continue };
        total += text.len() + 1;
        kept.push(text);
        if total > STACK_TEXT_MAX {
            break;
        }
    }
    let left = frames.filter(|&f| look(f).is_some()).count();
    (kept, left)
}

/// One flame-graph line for an active block: `stream_N;active_allocated;frames`.
pub fn collapsed_line(s: &Snapshot, stream: i64, stack: StackId) -> String {
    format!("stream_{stream};active_allocated;{}", fragment(s, stack))
}

/// Bytes by flame-graph line, most first (ties by line).
pub(super) fn collapsed(
    s: &Snapshot,
    blocks: impl Iterator<Item = (i64, StackId, u64)>,
) -> Vec<(String, u64)> {
    let mut by_key: FxHashMap<(i64, StackId), u64> = FxHashMap::default();
    for (stream, stack, size) in blocks {
        *by_key.entry((stream, stack)).or_default() += size;
    }
    // Distinct stacks can format alike (frames torch leaves out): summed by line.
    let mut by_line: FxHashMap<String, u64> = FxHashMap::default();
    for ((stream, stack), size) in by_key {
        *by_line.entry(collapsed_line(s, stream, stack)).or_default() += size;
    }
    super::sorted(by_line)
}

fn is_python(file: &str) -> bool {
    file.ends_with(".py")
}

/// torch's own files, by the package's folder.
fn in_torch(file: &str) -> bool {
    file.contains("/torch/") || file.starts_with("torch/")
}

/// The innermost Python frame of the program (outside torch), else the innermost Python frame.
pub fn python_site(s: &Snapshot, frames: &[FrameId]) -> Option<String> {
    let file = |f: &FrameId| s.str(s.frames[f.0 as usize].filename);
    let py = || frames.iter().filter(|f| is_python(file(f)));
    py().find(|f| !in_torch(file(f)))
        .or_else(|| py().next())
        .map(|&f| format_frame(s, f))
}

/// The innermost C++ frame that is not the allocator's, the dispatcher's or the
/// interpreter's plumbing.
pub fn cpp_site(s: &Snapshot, frames: &[FrameId]) -> Option<String> {
    const PLUMBING: [&str; 14] = [
        "CachingAllocator",
        "c10::",
        "at::detail::",
        "empty",
        "_ops::",
        "wrapper",
        "Dispatch",
        "dispatch",
        "boxed",
        "Boxed",
        "make_tensor",
        "at::TensorBase",
        "THPVariable",
        "torch::autograd::python",
    ];
    frames
        .iter()
        .find(|&&f| {
            let fr = &s.frames[f.0 as usize];
            let (name, file) = (s.str(fr.name), s.str(fr.filename));
            !is_python(file)
                && name != "??"
                && torch_keeps_frame(name, file)
                && !PLUMBING.iter().any(|p| name.contains(p))
        })
        .map(|&f| {
            let fr = &s.frames[f.0 as usize];
            // C++ names run to hundreds of characters of template arguments: cut at the
            // argument list.
            let name = s.str(fr.name);
            let short = name.split('(').next().unwrap_or(name);
            short.to_owned()
        })
}

/// The kind of code that made a block, from its frames (innermost first).
pub fn kind(s: &Snapshot, frames: &[FrameId]) -> SiteKind {
    if frames.is_empty() {
        return SiteKind::NoStack;
    }
    // C++ stacks (libtorch, or `stacks="all"`) name the workspace's own allocation, wherever
    // it sits in the stack.
    if frames.iter().any(|f| {
        let name = s.str(s.frames[f.0 as usize].name);
        name.contains("setWorkspaceForHandle")
            || name.contains("getCUDABlasLtWorkspace")
            || name.contains("getNewWorkspace")
    }) {
        return SiteKind::Workspace;
    }
    let mut in_forward = false;
    let mut python = false;
    for f in frames {
        let fr = &s.frames[f.0 as usize];
        let (name, file) = (s.str(fr.name), s.str(fr.filename));
        python |= is_python(file);
        // A module's forward inside an optimizer's step is a closure's forward (LBFGS,
        // Lightning's training step): not the optimizer's.
        in_forward |= file.ends_with("nn/modules/module.py")
            && matches!(name, "_call_impl" | "_wrapped_call_impl" | "inner");
        if (file.contains("/optim/") || name.contains("torch::optim::")) && !in_forward {
            return SiteKind::Optimizer;
        }
        if file.contains("utils/data/") {
            return SiteKind::DataLoading;
        }
        if (file.ends_with("nn/modules/module.py")
            && matches!(name, "_apply" | "cuda" | "to" | "<lambda>"))
            || name.contains("torch::nn::Module::to")
            || (file.contains("/nn/modules/") && name == "__init__")
        {
            return SiteKind::ModelSetup;
        }
        if name.contains("torch::autograd::Engine")
            || (file.contains("autograd/") && name == "backward")
            || (file.ends_with("_tensor.py") && name == "backward")
        {
            return SiteKind::Backward;
        }
    }
    if in_forward {
        SiteKind::ModuleForward
    } else if python {
        SiteKind::Program
    } else {
        SiteKind::Other
    }
}

/// Bytes alive by site, most first (every site: outputs keep the top ones, a comparison needs
/// them all); blocks without a site are listed as [`NO_STACK`].
pub(super) fn top_sites(
    s: &Snapshot,
    alive: &[AliveBlock],
    site_of: fn(&Snapshot, &[FrameId]) -> Option<String>,
) -> Vec<Site> {
    let mut by_stack: FxHashMap<StackId, Option<String>> = FxHashMap::default();
    let mut by_site: FxHashMap<String, (u64, usize, FxHashMap<SiteKind, u64>)> =
        FxHashMap::default();
    for b in alive {
        let site = by_stack
            .entry(b.stack)
            .or_insert_with(|| site_of(s, s.stack(b.stack)))
            .clone()
            .unwrap_or_else(|| NO_STACK.to_owned());
        let e = by_site.entry(site).or_default();
        e.0 += b.size;
        e.1 += 1;
        *e.2.entry(b.kind).or_default() += b.size;
    }
    let mut v: Vec<Site> = by_site
        .into_iter()
        .map(|(site, (bytes, blocks, kinds))| Site {
            site,
            kind: kinds
                .into_iter()
                .max_by_key(|&(k, b)| (b, std::cmp::Reverse(k)))
                .map_or(SiteKind::Other, |(k, _)| k),
            bytes,
            blocks,
        })
        .collect();
    v.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.site.cmp(&b.site)));
    v
}
