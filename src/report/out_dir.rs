//! The output directory of one run: every file is written under a temporary name beside its
//! final one and renamed when all are complete, `summary.json` last, so a run that is killed
//! or fails leaves no truncated file under a final name, and a complete-looking summary only
//! beside complete results. The list of what a run wrote (`.steptrace-outputs`)
//! lets the next run into the same directory remove what it does not write again, so stale
//! files never mix with new ones.

use std::path::{Path, PathBuf};

use super::{annotated, io, Error, ReportOptions};
use crate::model::kineto::KinetoTrace;

/// Marks a file being written: `<final name>.steptrace-part`. Parts need no writer's name:
/// only the writer holding the folder's lock ([`Writer`]) writes there, so every part in the folder is
/// its own, or a killed writer's, which the next writer removes when it takes the lock.
pub const PART: &str = ".steptrace-part";

/// The list of the files of the last complete run, relative to the directory.
pub const LIST: &str = ".steptrace-outputs";

/// Sub-directories that hold outputs (the plots).
const SUBDIRS: [&str; 1] = ["plots"];

/// Where a file is written before it is complete.
pub(crate) fn part_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(PART);
    path.with_file_name(name)
}

/// The final name of a part.
pub(crate) fn final_path(part: &Path) -> PathBuf {
    let name = part.file_name().unwrap_or_default().to_string_lossy();
    part.with_file_name(name.strip_suffix(PART).unwrap_or(&name))
}

/// Files ending in [`PART`] in `dir` and its output sub-directories.
pub(crate) fn parts(dir: &Path) -> Vec<PathBuf> {
    let mut v = Vec::new();
    for d in std::iter::once(dir.to_path_buf()).chain(SUBDIRS.iter().map(|s| dir.join(s))) {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            if e.file_name().to_string_lossy().ends_with(PART) {
                v.push(e.path());
            }
        }
    }
    v.sort();
    v
}

/// Whether a file is a run's completion mark: the analysis's `summary.json`, a rank's
/// `rank<N>.summary.parquet`. A mark is given its final name after every other file and its
/// old copy removed before any other file is replaced, so an interrupted write never leaves
/// a complete-looking mark beside old or missing files.
fn is_mark(final_path: &Path) -> bool {
    final_path.file_name().is_some_and(|n| {
        let n = n.to_string_lossy();
        n == "summary.json" || n.ends_with(".summary.parquet")
    })
}

/// A writer's hold on an output folder: the folder made if missing and locked (an advisory
/// lock on the folder itself, so no file is added to it: a second writer, another analysis
/// into the same `--out` or another rank writing its Parquet into a shared folder, waits for
/// the first to finish instead of mixing their files), and the parts a killed writer left
/// removed. [`Writer::finish`] gives the parts their final names, completion marks last.
#[derive(Debug)]
pub struct Writer {
    dir: PathBuf,
    /// The folder, open and locked; the lock goes with it when the writer is dropped (`None`
    /// where there is no lock to take: off Unix, or a file system without advisory locks).
    _lock: Option<std::fs::File>,
}

impl Writer {
    /// Takes `dir` for writing (see [`Writer`]).
    pub fn open(dir: &Path) -> Result<Writer, Error> {
        if dir.exists() && !dir.is_dir() {
            return Err(Error::NotADirectory {
                path: dir.to_path_buf(),
            });
        }
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        // An output sub-folder that is a link would take every plot wherever it points.
        for s in SUBDIRS {
            let sub = dir.join(s);
            if std::fs::symlink_metadata(&sub).is_ok_and(|m| m.file_type().is_symlink()) {
                return Err(Error::SymlinkedFolder { path: sub });
            }
        }
        let lock = lock_folder(dir);
        // Under the lock no other writer is at work here: any part is a killed writer's.
        for p in parts(dir) {
            let _ = std::fs::remove_file(p);
        }
        Ok(Writer {
            dir: dir.to_path_buf(),
            _lock: lock,
        })
    }

    /// Gives this writer's files their final names: every completion mark's old copy
    /// removed first, the other files renamed, the marks last.
    pub fn finish(self) -> Result<(), Error> {
        let parts = parts(&self.dir);
        let finals: Vec<PathBuf> = parts.iter().map(|p| final_path(p)).collect();
        nothing_in_the_way(finals.iter().map(PathBuf::as_path))?;
        let (marks, files): (Vec<PathBuf>, Vec<PathBuf>) =
            parts.into_iter().partition(|p| is_mark(&final_path(p)));
        for m in &marks {
            let fin = final_path(m);
            if std::fs::symlink_metadata(&fin).is_ok_and(|m| m.is_file()) {
                std::fs::remove_file(&fin).map_err(io(&fin))?;
            }
        }
        for p in files.iter().chain(&marks) {
            let fin = final_path(p);
            std::fs::rename(p, &fin).map_err(io(&fin))?;
        }
        Ok(())
    }
}

/// Opens `dir` and takes an exclusive advisory lock on it, waiting for another writer's. A
/// folder whose file system keeps no such locks (some network file systems answer ENOLCK) is
/// written without one, as before locks were taken: the lock guards against a second writer,
/// it is not needed to write.
fn lock_folder(dir: &Path) -> Option<std::fs::File> {
    #[cfg(unix)]
    {
        let f = std::fs::File::open(dir).ok()?;
        f.lock().is_ok().then_some(f)
    }
    #[cfg(not(unix))]
    {
        let _ = dir;
        None
    }
}

/// Whether two paths name the same file (the same inode: hard links and symlinks included).
/// False when either cannot be read, or off Unix, where nothing here depends on it but the
/// protections that then stay off.
fn same_file(a: &Path, b: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        match (std::fs::metadata(a), std::fs::metadata(b)) {
            (Ok(x), Ok(y)) => (x.dev(), x.ino()) == (y.dev(), y.ino()),
            _ => false,
        }
    }
    #[cfg(not(unix))]
    {
        let _ = (a, b);
        false
    }
}

/// A file's number of hard links, where the platform says.
fn links(m: &std::fs::Metadata) -> Option<u64> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        Some(m.nlink())
    }
    #[cfg(not(unix))]
    {
        let _ = m;
        None
    }
}

/// The previous run's list of its files: only names directly in the folder or in one of its
/// output sub-folders ([`SUBDIRS`]), read as data (a list naming `v/precious.txt`, or `..`,
/// is not followed). A list that is not a small regular file is ignored.
fn read_list(dir: &Path) -> Vec<PathBuf> {
    /// Far more than any run writes (about 40 names).
    const MAX_LIST_BYTES: u64 = 1 << 20;
    let path = dir.join(LIST);
    let regular =
        std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_file() && m.len() <= MAX_LIST_BYTES);
    if !regular {
        return Vec::new();
    }
    std::fs::read_to_string(&path)
        .map(|s| {
            s.lines()
                .map(PathBuf::from)
                .filter(|p| {
                    let names: Vec<_> = p.components().collect();
                    let normal = names
                        .iter()
                        .all(|c| matches!(c, std::path::Component::Normal(_)));
                    normal
                        && match names.as_slice() {
                            [_] => true,
                            [sub, _] => SUBDIRS.iter().any(|s| sub.as_os_str() == *s),
                            _ => false,
                        }
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Removes `path` (inside `dir`) only if it is a regular file reached through real folders:
/// never through a link, never a folder.
fn remove_own_file(dir: &Path, path: &Path) {
    let Ok(rel) = path.strip_prefix(dir) else {
        return;
    };
    let mut at = dir.to_path_buf();
    let mut names = rel.components().peekable();
    while let Some(c) = names.next() {
        at.push(c);
        let Ok(m) = std::fs::symlink_metadata(&at) else {
            return;
        };
        let last = names.peek().is_none();
        let ok = if last { m.is_file() } else { m.is_dir() };
        if !ok {
            return;
        }
    }
    let _ = std::fs::remove_file(at);
}

/// Refuses when any of `paths` exists as something other than a regular file or a link (a
/// folder, a FIFO): renaming an output there fails, or would replace what the user keeps
/// there; checked before anything is renamed, so that nothing is half given its name.
fn nothing_in_the_way<'a>(paths: impl IntoIterator<Item = &'a Path>) -> Result<(), Error> {
    for p in paths {
        let Ok(m) = std::fs::symlink_metadata(p) else {
            continue;
        };
        if !(m.is_file() || m.file_type().is_symlink()) {
            return Err(Error::InTheWay {
                path: p.to_path_buf(),
            });
        }
    }
    Ok(())
}

/// An output directory being written.
#[derive(Debug)]
pub struct OutDir {
    dir: PathBuf,
    /// Files of the previous complete run (from its list), relative.
    previous: Vec<PathBuf>,
    /// The plain annotated trace's head, copied while the analysis runs.
    pub(super) head: Option<annotated::HeadCopy>,
    committed: bool,
    /// Whether this run made the directory (removed again, if empty, when the run fails).
    created: bool,
    /// The folder's lock, held until the run is committed or dropped.
    _writer: Writer,
}

impl OutDir {
    /// Creates `dir` if needed and removes what a killed run left half-written in it.
    pub fn prepare(dir: &Path) -> Result<OutDir, Error> {
        let created = !dir.exists();
        let writer = Writer::open(dir)?;
        // Every run writes these two: a folder in their place is refused before the analysis,
        // not after it.
        nothing_in_the_way([dir.join(LIST).as_path(), &dir.join("summary.json")])?;
        let previous = read_list(dir);
        Ok(OutDir {
            dir: dir.to_path_buf(),
            previous,
            head: None,
            committed: false,
            created,
            _writer: writer,
        })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Starts copying the annotated trace's original text now, on a thread of its own, when
    /// the trace is a plain file (the copy is kernel work that the analysis does not wait
    /// for); a gzip trace's annotated copy is made with the other outputs.
    pub fn start_annotated(&mut self, k: &KinetoTrace, opts: &ReportOptions) {
        if opts.annotated_trace && !opts.compact && !k.gzipped && self.head.is_none() {
            let dest = self.dir.join(annotated::file_name_for(k.gzipped));
            let reuse = self.reuse_previous(&dest, &k.path);
            self.head = annotated::HeadCopy::start(&k.path, dest, k.events_span.insert_at, reuse);
        }
    }

    /// Whether the previous run's `dest` is taken over as this run's part file, to be written
    /// over in place: a rerun into the same directory then neither unlinks the old annotated
    /// trace nor allocates the new one's blocks (255 MB: 0.036 s of kernel time against
    /// 0.062 s for unlink, allocate and copy). Only a plain file of the previous run's list
    /// with no other link and not the trace being read (analysing `out/annotated…` into `out`
    /// must not write over its own input); the old name is gone from then on, as it would be
    /// once the run removed it.
    fn reuse_previous(&mut self, dest: &Path, input: &Path) -> bool {
        let Some(i) = self.previous.iter().position(|p| self.dir.join(p) == dest) else {
            return false;
        };
        let Ok(old) = std::fs::symlink_metadata(dest) else {
            return false;
        };
        if !old.is_file() || links(&old) != Some(1) || same_file(dest, input) {
            return false;
        }
        if std::fs::rename(dest, part_path(dest)).is_err() {
            return false;
        }
        self.previous.remove(i);
        true
    }

    /// Removes the previous run's files, on a thread of its own: unlinking a large file whose
    /// pages are cached is tens of milliseconds of kernel work. The trace being read is kept
    /// even when it is one of them (the previous run's annotated trace analysed into the same
    /// directory): its end is still to be copied, and the commit replaces it anyway.
    pub(super) fn clear_previous(&mut self, input: &Path) -> Option<std::thread::JoinHandle<()>> {
        let (marks, old): (Vec<PathBuf>, Vec<PathBuf>) = self
            .previous
            .drain(..)
            .map(|p| self.dir.join(p))
            .filter(|p| !same_file(p, input))
            .partition(|p| is_mark(p));
        // The previous run's completion mark goes first, here: a run killed while the rest
        // is removed must not leave it beside missing files.
        for p in &marks {
            remove_own_file(&self.dir, p);
        }
        if old.is_empty() {
            return None;
        }
        let dir = self.dir.clone();
        std::thread::Builder::new()
            .name("steptrace-clear".into())
            .spawn({
                let (old, dir) = (old.clone(), dir.clone());
                move || {
                    for p in old {
                        remove_own_file(&dir, &p);
                    }
                }
            })
            .ok()
            .or_else(|| {
                for p in old {
                    remove_own_file(&dir, &p);
                }
                None
            })
    }

    /// Gives every written file its final name, `summary.json` last, and records the list.
    pub(super) fn commit(mut self) -> Result<(), Error> {
        let mut written = Vec::new();
        let mut summary = None;
        let parts = parts(&self.dir);
        let finals: Vec<PathBuf> = parts.iter().map(|p| final_path(p)).collect();
        nothing_in_the_way(finals.iter().map(PathBuf::as_path))?;
        for p in parts {
            let fin = final_path(&p);
            if fin.file_name().is_some_and(|n| n == "summary.json")
                && fin.parent() == Some(&self.dir)
            {
                summary = Some((p, fin));
                continue;
            }
            std::fs::rename(&p, &fin).map_err(io(&fin))?;
            written.push(fin);
        }
        if let Some((_, fin)) = &summary {
            written.push(fin.clone());
        }
        let mut list = String::new();
        for w in &written {
            if let Ok(rel) = w.strip_prefix(&self.dir) {
                list.push_str(&rel.to_string_lossy());
                list.push('\n');
            }
        }
        let list_path = self.dir.join(LIST);
        let part = part_path(&list_path);
        std::fs::write(&part, list).map_err(io(&part))?;
        std::fs::rename(&part, &list_path).map_err(io(&list_path))?;
        if let Some((p, fin)) = summary {
            std::fs::rename(&p, &fin).map_err(io(&fin))?;
        }
        self.committed = true;
        Ok(())
    }
}

impl Drop for OutDir {
    /// A run that did not complete leaves no part behind.
    fn drop(&mut self) {
        if self.committed {
            return;
        }
        if let Some(h) = self.head.take() {
            h.abandon();
        }
        for p in parts(&self.dir) {
            let _ = std::fs::remove_file(p);
        }
        if self.created {
            for s in SUBDIRS {
                let _ = std::fs::remove_dir(self.dir.join(s));
            }
            // Only an empty directory is removed.
            let _ = std::fs::remove_dir(&self.dir);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn part_names_sit_beside_the_final_ones() {
        let part = part_path(Path::new("o/plots/a.png"));
        assert_eq!(part, PathBuf::from("o/plots/a.png.steptrace-part"));
        assert_eq!(final_path(&part), PathBuf::from("o/plots/a.png"));
    }

    /// Two writers into one folder take turns: while one holds it, the folder is locked;
    /// once it is done, the next one gets it, and the folder holds no file of the lock's.
    #[test]
    fn a_second_writer_into_a_folder_waits_for_the_first() {
        let dir = tempfile::tempdir().unwrap();
        let first = Writer::open(dir.path()).unwrap();
        let probe = std::fs::File::open(dir.path()).unwrap();
        assert!(matches!(
            probe.try_lock(),
            Err(std::fs::TryLockError::WouldBlock)
        ));
        first.finish().unwrap();
        probe.try_lock().unwrap();
        probe.unlock().unwrap();
        let again = std::thread::spawn({
            let d = dir.path().to_path_buf();
            move || Writer::open(&d).map(drop).is_ok()
        });
        assert!(again.join().unwrap());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    /// A writer killed mid-write leaves its part: the next writer removes it when it takes the
    /// folder and never gives it a final name (a 0-byte part renamed by another rank made
    /// `merge` fail).
    #[test]
    fn a_killed_writers_parts_are_removed_not_renamed() {
        let dir = tempfile::tempdir().unwrap();
        let dead = dir.path().join(format!("rank3.summary.parquet{PART}"));
        std::fs::write(&dead, b"").unwrap();
        let w = Writer::open(dir.path()).unwrap();
        assert!(!dead.exists());
        std::fs::write(part_path(&dir.path().join("rank0.summary.parquet")), b"0").unwrap();
        w.finish().unwrap();
        assert!(dir.path().join("rank0.summary.parquet").is_file());
        assert!(!dir.path().join("rank3.summary.parquet").exists());
    }

    /// The completion mark's old copy goes before anything is replaced and the new one comes
    /// last: a write that fails half-way (here a rename refused) leaves no mark at all, never
    /// the old mark beside new files.
    #[test]
    fn an_interrupted_write_leaves_no_completion_mark() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join("rank0.summary.parquet"), b"old").unwrap();
        let w = Writer::open(d).unwrap();
        std::fs::write(part_path(&d.join("rank0.summary.parquet")), b"new").unwrap();
        // The nodes table's part a folder, its final name a file: that rename fails (a
        // folder where an output goes is refused before any rename, below).
        std::fs::create_dir_all(part_path(&d.join("rank0.nodes.parquet")).join("x")).unwrap();
        std::fs::write(d.join("rank0.nodes.parquet"), b"old").unwrap();
        assert!(w.finish().is_err());
        assert!(!d.join("rank0.summary.parquet").exists());
    }

    /// A folder where an output goes is refused before anything is renamed or removed: the
    /// previous run's files stay whole, the folder is kept.
    #[test]
    fn a_folder_in_the_way_is_refused_before_any_rename() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join("rank0.summary.parquet"), b"old").unwrap();
        let w = Writer::open(d).unwrap();
        std::fs::write(part_path(&d.join("rank0.summary.parquet")), b"new").unwrap();
        std::fs::write(part_path(&d.join("rank0.nodes.parquet")), b"new").unwrap();
        std::fs::create_dir_all(d.join("rank0.nodes.parquet").join("x")).unwrap();
        assert!(matches!(w.finish(), Err(Error::InTheWay { .. })));
        assert_eq!(
            std::fs::read(d.join("rank0.summary.parquet")).unwrap(),
            b"old"
        );
        assert!(d.join("rank0.nodes.parquet").join("x").is_dir());
    }
}
