//! A stop request (docs/reliability.md): `SIGTERM` or `SIGINT` during `swa-zoo train` ends the
//! run after the step in flight with exit status [`EXIT_STOPPED_BY_REQUEST`] and one line
//! saying where `--resume` continues, without a `model.mpk`; resumed, the run ends with the
//! uninterrupted run's weights. A second signal ends the process at once.

use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use swa_zoo::training::checkpoint::last_checkpoint;
use swa_zoo::training::run_lock::EXIT_STOPPED_BY_REQUEST;

use super::kill::train;
use super::{run_dir, saved_logits};
use crate::max_abs;

/// Sends `signal` (`libc::SIGTERM`, `libc::SIGINT`) to `child`.
fn signal(child: &Child, signal: libc::c_int) {
    // SAFETY: kill only sends a signal to the child's process id.
    assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, signal) }, 0);
}

/// Waits until the run in `out` has a complete checkpoint (or 20 s).
fn wait_for_checkpoint(out: &Path) {
    let start = Instant::now();
    while last_checkpoint(out).is_none() && start.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_stopped_run_says_where_it_resumes_and_ends_as_the_straight_run() {
    let dir = run_dir("stop");
    let straight = train(&dir, "straight", 0, false).output().unwrap();
    assert!(straight.status.success(), "{}", String::from_utf8_lossy(&straight.stderr));
    let out = dir.join("stopped");
    let signals = [("TERM", libc::SIGTERM), ("INT", libc::SIGINT), ("TERM", libc::SIGTERM)];
    for (attempt, (name, number)) in signals.into_iter().enumerate() {
        let child = train(&dir, "stopped", 30, attempt > 0).spawn().unwrap();
        wait_for_checkpoint(&out);
        std::thread::sleep(Duration::from_millis(40 * attempt as u64));
        signal(&child, number);
        let stopped = child.wait_with_output().unwrap();
        let said = String::from_utf8_lossy(&stopped.stderr);
        assert_eq!(stopped.status.code(), Some(EXIT_STOPPED_BY_REQUEST), "SIG{name}: {said}");
        let line = said.lines().find(|l| l.starts_with("error: training stopped by SIG"));
        assert!(line.is_some_and(|l| l.contains("--resume continues")), "{said}");
        assert!(!out.join("model.mpk").exists(), "a stopped run saved its model");
        eprintln!("{}", line.unwrap());
    }
    let resumed = train(&dir, "stopped", 0, true).output().unwrap();
    assert!(resumed.status.success(), "{}", String::from_utf8_lossy(&resumed.stderr));
    let error = max_abs(&saved_logits(&dir, "straight"), &saved_logits(&dir, "stopped"));
    assert!(error < 1e-5, "after 3 stops the resumed run differs by {error}");

    // A second signal does not wait for the step: the process ends at once.
    let child = train(&dir, "twice", 30, false).spawn().unwrap();
    wait_for_checkpoint(&dir.join("twice"));
    signal(&child, libc::SIGINT);
    signal(&child, libc::SIGTERM);
    let ended = child.wait_with_output().unwrap();
    // The status a shell gives a process killed by the signal handled second (the kernel
    // chooses the order of two pending signals).
    let at_once = [128 + libc::SIGINT, 128 + libc::SIGTERM].map(Some);
    let said = String::from_utf8_lossy(&ended.stderr);
    assert!(at_once.contains(&ended.status.code()), "{:?}: {said}", ended.status);
    let _ = std::fs::remove_dir_all(dir);
}
