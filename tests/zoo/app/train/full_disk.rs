//! Runs whose writes fail (docs/reliability.md). As root (`.ci/run`'s full-disk phase, the
//! ignored test): `swa-zoo train` into a small tmpfs, at sizes that make each kind of write
//! fail in turn (the lock file, train.json, metric logs, checkpoint records and sidecars), ends
//! with exit status 6 and one line naming the file and "No space left on device", never a
//! panic; the file system then grows and `--resume` ends as the straight run (or, where
//! train.json could not be written, the run starts again); a read-only file system gives
//! "Read-only file system". Without root: a file standing where the checkpoint folder goes.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use swa_zoo::models::files::EXIT_WRITE_FAILED;

use super::kill::train;
use super::saved_logits;
use crate::{max_abs, run_dir};

/// Runs `mount` (or `umount`) with `args`; fails the test with its output otherwise.
fn mount(program: &str, args: &[&str]) {
    let output = Command::new(program).args(args).output().unwrap();
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{program} {args:?} (needs root): {said}");
}

/// The file a one-line write error names (`…: cannot write PATH: reason`), its checkpoint number
/// dropped (`model-3.mpk` → `model.mpk`).
fn failed_file(line: &str) -> String {
    let path = line.split("cannot write ").nth(1).and_then(|rest| rest.split(": ").next());
    let name = Path::new(path.unwrap_or(line)).file_name().unwrap().to_string_lossy().into_owned();
    match name.split_once('.') {
        Some((stem, extension)) => {
            let stem = stem.trim_end_matches(|c: char| c.is_ascii_digit());
            format!("{}.{extension}", stem.strip_suffix('-').unwrap_or(stem))
        }
        None => name,
    }
}

#[test]
#[ignore = "needs root to mount a tmpfs: .ci/run's full-disk phase"]
fn a_full_disk_ends_the_run_with_one_line_and_it_resumes_once_there_is_space() {
    let dir = run_dir("full-disk");
    let straight = train(&dir, "straight", 0, false).output().unwrap();
    assert!(straight.status.success(), "{}", String::from_utf8_lossy(&straight.stderr));
    let disk = dir.join("disk");
    std::fs::create_dir_all(&disk).unwrap();
    let mut failed = BTreeSet::new();
    // Every 4 KiB to 64 (the lock, train.json, each metric log and the first checkpoint's
    // records fail in turn), then every 8 KiB (later checkpoints and their sidecars).
    for kib in (4..=64).step_by(4).chain((68..=240).step_by(8)) {
        let size = format!("size={kib}k");
        mount("mount", &["-t", "tmpfs", "-o", &size, "tmpfs", disk.to_str().unwrap()]);
        let run = train(&disk, "run", 0, false).output().unwrap();
        let said = String::from_utf8_lossy(&run.stderr).into_owned();
        assert!(!said.contains("panicked"), "{kib} KiB: a panic:\n{said}");
        if !run.status.success() {
            assert_eq!(run.status.code(), Some(EXIT_WRITE_FAILED), "{kib} KiB:\n{said}");
            let errors: Vec<&str> = said.lines().filter(|l| l.starts_with("error:")).collect();
            assert_eq!(errors.len(), 1, "{kib} KiB: one error line:\n{said}");
            assert!(errors[0].contains("No space left on device"), "{kib} KiB: {}", errors[0]);
            failed.insert(failed_file(errors[0]));
            mount("mount", &["-o", "remount,size=64m", disk.to_str().unwrap()]);
            // A run that could not write its train.json never started: it starts again.
            let started = disk.join("run").join("train.json").exists();
            let resumed = train(&disk, "run", 0, started).output().unwrap();
            let said = String::from_utf8_lossy(&resumed.stderr);
            assert!(resumed.status.success(), "{kib} KiB, resumed:\n{said}");
        }
        let error = max_abs(&saved_logits(&dir, "straight"), &saved_logits(&disk, "run"));
        assert!(error < 1e-5, "{kib} KiB: the resumed run differs by {error}");
        mount("umount", &[disk.to_str().unwrap()]);
    }
    eprintln!("writes that failed for want of space, each resumed: {failed:?}");
    assert!(failed.len() >= 8, "too few kinds of write met a full disk: {failed:?}");
    // A read-only file system: the same one line, with the system's reason.
    let read_only = dir.join("read-only");
    std::fs::create_dir_all(&read_only).unwrap();
    mount("mount", &["-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", read_only.to_str().unwrap()]);
    let run = train(&dir, "read-only/run", 0, false).output().unwrap();
    let said = String::from_utf8_lossy(&run.stderr).into_owned();
    mount("umount", &[read_only.to_str().unwrap()]);
    assert_eq!(run.status.code(), Some(EXIT_WRITE_FAILED), "read-only:\n{said}");
    let errors: Vec<&str> = said.lines().filter(|l| l.starts_with("error:")).collect();
    assert!(errors.len() == 1 && errors[0].contains("Read-only file system"), "{said}");
    eprintln!("read-only: {}", errors[0]);
    let _ = std::fs::remove_dir_all(dir);
}

/// Without root: a run whose checkpoint folder cannot be made (a file stands where it goes, as
/// when a folder is replaced under a run) stops at its first checkpoint with exit status 6 and
/// one line naming the record and the system's reason, and writes no model.mpk.
#[test]
fn a_checkpoint_that_cannot_be_written_ends_the_run_with_one_line() {
    let dir = run_dir("unwritable");
    let out = dir.join("run");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("checkpoint"), b"not a folder").unwrap();
    let run = train(&dir, "run", 0, false).output().unwrap();
    let said = String::from_utf8_lossy(&run.stderr).into_owned();
    assert_eq!(run.status.code(), Some(EXIT_WRITE_FAILED), "{said}");
    let errors: Vec<&str> = said.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "{said}");
    assert!(errors[0].contains("cannot write") && errors[0].contains("checkpoint"), "{said}");
    assert!(!said.contains("panicked") && !out.join("model.mpk").exists(), "{said}");
    eprintln!("{}", errors[0]);
    let _ = std::fs::remove_dir_all(dir);
}
