//! One writer per run folder (docs/reliability.md): while `swa-zoo train` runs, a second
//! `swa-zoo train --resume` of the same folder is refused with the holder named and exit status
//! [`EXIT_RUN_LOCKED`], and the first finishes as a run alone would; a run killed with SIGKILL
//! leaves its folder unlocked.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use swa_zoo::training::run_lock::{EXIT_RUN_LOCKED, LOCK_FILE};

use super::kill::train;
use super::saved_logits;
use crate::{max_abs, run_dir};

/// Waits until the run in `out` has written its lock file's holder line (it holds the lock
/// then) and its train.json (which a `--resume` reads first); panics after 20 s.
fn wait_for_holder(out: &Path) {
    let start = Instant::now();
    let holder = || std::fs::read_to_string(out.join(LOCK_FILE)).is_ok_and(|t| !t.is_empty());
    while !holder() || !out.join("train.json").exists() {
        assert!(start.elapsed() < Duration::from_secs(20), "no lock in {}", out.display());
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_second_writer_is_refused_naming_the_first_which_finishes_untouched() {
    let dir = run_dir("lock");
    let straight = train(&dir, "straight", 0, false).output().unwrap();
    assert!(straight.status.success(), "{}", String::from_utf8_lossy(&straight.stderr));

    // The first run, slowed by the checkpoint hook so that it is still training.
    let first = train(&dir, "shared", 40, false).stderr(Stdio::null()).spawn().unwrap();
    wait_for_holder(&dir.join("shared"));
    let second = train(&dir, "shared", 0, true).output().unwrap();
    let said = String::from_utf8_lossy(&second.stderr);
    assert_eq!(second.status.code(), Some(EXIT_RUN_LOCKED), "{said}");
    assert!(said.contains(&format!("pid {} on ", first.id())), "{said}");
    assert_eq!(said.lines().filter(|line| line.starts_with("error:")).count(), 1, "{said}");
    let first = first.wait_with_output().unwrap();
    assert!(first.status.success());
    let error = max_abs(&saved_logits(&dir, "straight"), &saved_logits(&dir, "shared"));
    assert!(error < 1e-5, "the first run, beside a refused second, differs by {error}");

    // A run killed with SIGKILL leaves no lock behind: the next one resumes it.
    let mut killed = train(&dir, "killed", 40, false).stderr(Stdio::null()).spawn().unwrap();
    wait_for_holder(&dir.join("killed"));
    killed.kill().unwrap();
    killed.wait().unwrap();
    let resumed = train(&dir, "killed", 0, true).output().unwrap();
    assert!(resumed.status.success(), "{}", String::from_utf8_lossy(&resumed.stderr));
    let error = max_abs(&saved_logits(&dir, "straight"), &saved_logits(&dir, "killed"));
    assert!(error < 1e-5, "the run resumed after a kill differs by {error}");
    let _ = std::fs::remove_dir_all(dir);
}
