//! Files a later run reads, written so that a crash never leaves half of one
//! (docs/reliability.md): to a temporary file beside the target, flushed to the disk, renamed
//! over the target, and the rename itself flushed with the directory. Every writer of the
//! project's saved files goes through [`write_atomically`].

use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Writes `target` through `write`, which creates the file at the path it is given: a
/// temporary file in the target's directory (a name starting `.tmp-`), then flushed and renamed
/// over the target, so that the target holds the old contents or the new, whole, whatever
/// happens to the process. The directory must exist. On failure the target is untouched and
/// the temporary file removed; the error names what failed.
pub fn write_atomically(
    target: &Path,
    write: impl FnOnce(&Path) -> Result<(), String>,
) -> Result<(), String> {
    static SAVES: AtomicUsize = AtomicUsize::new(0);
    let dir = match target.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    if !dir.is_dir() {
        return Err(format!("directory {} does not exist", dir.display()));
    }
    let name = target.file_name().ok_or_else(|| "the path names no file".to_string())?;
    let save = SAVES.fetch_add(1, Ordering::Relaxed);
    let mut temp_name = OsString::from(format!("{TEMPORARY}{}-{save}-", std::process::id()));
    temp_name.push(name);
    let temp = dir.join(temp_name);
    let written = write(&temp)
        .and_then(|()| {
            let file = OpenOptions::new().write(true).open(&temp);
            file.and_then(|file| file.sync_all()).map_err(|e| e.to_string())
        })
        .and_then(|()| fs::rename(&temp, target).map_err(|e| e.to_string()));
    if written.is_err() {
        // The temporary file may not exist; either way the target is untouched.
        fs::remove_file(&temp).ok();
    }
    written?;
    // The rename is durable once the directory is flushed. Some systems cannot open a
    // directory for that; the file itself is already on the disk.
    if let Ok(dir) = File::open(dir) {
        dir.sync_all().ok();
    }
    Ok(())
}

/// [`write_atomically`] with `bytes` as the contents.
pub fn write_bytes_atomically(target: &Path, bytes: &[u8]) -> Result<(), String> {
    write_atomically(target, |temp| {
        let mut file = File::create(temp).map_err(|e| e.to_string())?;
        file.write_all(bytes).map_err(|e| e.to_string())
    })
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
            Err("the writer failed".into())
        });
        assert_eq!(failed.unwrap_err(), "the writer failed");
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
