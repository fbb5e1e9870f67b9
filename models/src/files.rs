//! Files a later run reads, written so that a crash never leaves half of one
//! (docs/reliability.md): to a temporary file beside the target, flushed to the disk, renamed
//! over the target, and the rename itself flushed with the directory. Every writer of the
//! project's saved files goes through [`write_atomically`], and its failure is a
//! [`WriteError`]: the file and the operating system's reason (`No space left on device`).

use std::ffi::OsString;
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The exit status of a command that stopped because a file could not be written
/// (docs/reliability.md, "Exit statuses").
pub const EXIT_WRITE_FAILED: i32 = 6;

/// A file that could not be written, and why: the operating system's error where it gave one
/// (its kind kept: `StorageFull`, `PermissionDenied`, `ReadOnlyFilesystem`, …), or the writing
/// library's message as an error of kind `Other`.
#[derive(Debug)]
pub struct WriteError {
    /// The file that was being written.
    pub path: PathBuf,
    /// Why it could not be.
    pub source: io::Error,
}

impl fmt::Display for WriteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot write {}: {}", self.path.display(), self.source)
    }
}

impl std::error::Error for WriteError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// Writes `target` through `write`, which creates the file at the path it is given: a
/// temporary file in the target's directory (a name starting `.tmp-`), then flushed and renamed
/// over the target, so that the target holds the old contents or the new, whole, whatever
/// happens to the process. The directory must exist. On failure the target is untouched and
/// the temporary file removed; the error names the target and the reason.
pub fn write_atomically(
    target: &Path,
    write: impl FnOnce(&Path) -> io::Result<()>,
) -> Result<(), WriteError> {
    static SAVES: AtomicUsize = AtomicUsize::new(0);
    let fail = |source| WriteError { path: target.to_path_buf(), source };
    let dir = match target.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    if !dir.is_dir() {
        let (kind, what) = match dir.exists() {
            true => (ErrorKind::NotADirectory, "is not a folder"),
            false => (ErrorKind::NotFound, "does not exist"),
        };
        return Err(fail(io::Error::new(kind, format!("its folder {} {what}", dir.display()))));
    }
    let name =
        target.file_name().ok_or_else(|| fail(io::Error::other("the path names no file")))?;
    let save = SAVES.fetch_add(1, Ordering::Relaxed);
    let mut temp_name = OsString::from(format!("{TEMPORARY}{}-{save}-", std::process::id()));
    temp_name.push(name);
    let temp = dir.join(temp_name);
    let written = write(&temp)
        .and_then(|()| OpenOptions::new().write(true).open(&temp)?.sync_all())
        .and_then(|()| fs::rename(&temp, target));
    if written.is_err() {
        // The temporary file may not exist; either way the target is untouched.
        fs::remove_file(&temp).ok();
    }
    written.map_err(fail)?;
    // The rename is durable once the directory is flushed. Some systems cannot open a
    // directory for that; the file itself is already on the disk.
    if let Ok(dir) = File::open(dir) {
        dir.sync_all().ok();
    }
    Ok(())
}

/// [`write_atomically`] with `bytes` as the contents.
pub fn write_bytes_atomically(target: &Path, bytes: &[u8]) -> Result<(), WriteError> {
    write_atomically(target, |temp| File::create(temp)?.write_all(bytes))
}

/// How the temporary files of [`write_atomically`] begin: a folder's leftovers from a killed
/// writer are the files named so ([`remove_leftovers`]).
pub const TEMPORARY: &str = ".tmp-";

/// Removes the temporary files a killed writer left in `dir`; returns how many.
pub fn remove_leftovers(dir: &Path) -> usize {
    let Ok(entries) = fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(|entry| entry.ok())
        .filter(|entry| entry.file_name().to_string_lossy().starts_with(TEMPORARY))
        .filter(|entry| fs::remove_file(entry.path()).is_ok())
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_write_leaves_the_target_and_no_temporary_file() {
        let dir = std::env::temp_dir().join(format!("swa-files-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let target = dir.join("saved.json");
        write_bytes_atomically(&target, b"old").unwrap();
        let failed = write_atomically(&target, |temp| {
            fs::write(temp, b"half").unwrap();
            Err(io::Error::from(ErrorKind::StorageFull))
        });
        let failed = failed.unwrap_err();
        assert_eq!(
            (failed.path.as_path(), failed.source.kind()),
            (target.as_path(), ErrorKind::StorageFull)
        );
        assert_eq!(fs::read(&target).unwrap(), b"old");
        write_bytes_atomically(&target, b"new").unwrap();
        assert_eq!(fs::read(&target).unwrap(), b"new");
        fs::write(dir.join(format!("{TEMPORARY}1-2-saved.json")), b"cut").unwrap();
        assert_eq!(remove_leftovers(&dir), 1);
        let names: Vec<_> = fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, ["saved.json"]);
        fs::remove_dir_all(dir).unwrap();
    }
}
