//! A stop request (docs/reliability.md): `SIGTERM` or `SIGINT` during `swa-zoo train` ends the
//! run after the step in flight with a checkpoint of that step, exit status
//! [`EXIT_STOPPED_BY_REQUEST`] and one line saying where `--resume` continues, without a
//! `model.mpk`; stopped at many moments and resumed each time, the run ends with the
//! uninterrupted run's weights and logs. A second signal ends the process at once.

use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use swa_zoo::training::checkpoint::last_checkpoint;
use swa_zoo::training::run_lock::EXIT_STOPPED_BY_REQUEST;

use super::kill::train_steps;
use super::saved_logits;
use crate::{max_abs, run_dir};

/// Stops of the run.
const STOPS: usize = 10;

/// The run stopped: 160 steps (room for the 10 stops, which train about 10 steps each), a
/// checkpoint every 16, so that most stops fall inside an epoch.
const RUN: (usize, usize) = (160, 16);

/// Sends `signal` (`libc::SIGTERM`, `libc::SIGINT`) to `child`.
fn signal(child: &Child, signal: libc::c_int) {
    // SAFETY: kill only sends a signal to the child's process id.
    assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, signal) }, 0);
}

/// The lines of every training log of metric `Loss` in the run `out`, by epoch.
fn loss_lines(out: &Path) -> Vec<(String, usize)> {
    let Ok(entries) = std::fs::read_dir(out.join("train")) else {
        return Vec::new();
    };
    let mut lines: Vec<(String, usize)> = entries
        .flatten()
        .map(|epoch| {
            let text = std::fs::read_to_string(epoch.path().join("Loss.log")).unwrap_or_default();
            (epoch.file_name().to_string_lossy().into_owned(), text.lines().count())
        })
        .collect();
    lines.sort();
    lines
}

/// Waits until the run in `out` has logged a step beyond `logged` (or 20 s, or `child` ended).
fn wait_for_a_step(child: &mut Child, out: &Path, logged: usize) {
    let start = Instant::now();
    let total = || loss_lines(out).iter().map(|(_, n)| n).sum::<usize>();
    while total() <= logged && start.elapsed() < Duration::from_secs(20) {
        if child.try_wait().unwrap().is_some() {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn a_run_stopped_at_many_moments_and_resumed_ends_as_the_straight_run() {
    let dir = run_dir("stop");
    let straight = train_steps(&dir, "straight", RUN, 0, false).output().unwrap();
    assert!(straight.status.success(), "{}", String::from_utf8_lossy(&straight.stderr));
    let out = dir.join("stopped");
    let mut checkpoints = Vec::new();
    for attempt in 0..STOPS {
        let (name, number) = match attempt % 2 {
            0 => ("TERM", libc::SIGTERM),
            _ => ("INT", libc::SIGINT),
        };
        let logged = checkpoints.last().copied().unwrap_or(0);
        let mut child = train_steps(&dir, "stopped", RUN, 0, attempt > 0).spawn().unwrap();
        wait_for_a_step(&mut child, &out, logged);
        // A moment that moves through the step: 0 to 12 ms after the first logged one.
        std::thread::sleep(Duration::from_micros(1300 * (attempt as u64 * 7 % 10)));
        signal(&child, number);
        let stopped = child.wait_with_output().unwrap();
        let said = String::from_utf8_lossy(&stopped.stderr);
        assert_eq!(stopped.status.code(), Some(EXIT_STOPPED_BY_REQUEST), "SIG{name}: {said}");
        let line = said.lines().find(|l| l.starts_with("error: training stopped by SIG"));
        assert!(line.is_some_and(|l| l.contains("--resume continues")), "{said}");
        assert!(!out.join("model.mpk").exists(), "a stopped run saved its model");
        let checkpoint = last_checkpoint(&out).expect("a stop leaves a checkpoint");
        let named = format!("continues from checkpoint {checkpoint} ");
        assert!(line.unwrap().contains(&named), "the line names checkpoint {checkpoint}: {said}");
        assert!(checkpoint > logged, "attempt {attempt} trained no step: {said}");
        checkpoints.push(checkpoint);
    }
    eprintln!("{STOPS} stops, at the checkpoints of steps {checkpoints:?}");
    let inside = checkpoints.iter().filter(|&&c| c % RUN.1 != 0).count();
    assert!(inside >= STOPS / 2, "most stops fall inside an epoch: {checkpoints:?}");
    let resumed = train_steps(&dir, "stopped", RUN, 0, true).output().unwrap();
    assert!(resumed.status.success(), "{}", String::from_utf8_lossy(&resumed.stderr));
    let error = max_abs(&saved_logits(&dir, "straight"), &saved_logits(&dir, "stopped"));
    eprintln!("stopped {STOPS} times and resumed: the weights differ by {error}");
    assert!(error < 1e-5, "after {STOPS} stops the resumed run differs by {error}");
    let straight_logs = loss_lines(&dir.join("straight"));
    assert_eq!(loss_lines(&out), straight_logs, "the logs hold each step once, by epoch");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_second_signal_ends_the_run_at_once() {
    let dir = run_dir("stop-twice");
    // Each checkpoint record's write held 30 ms: the run is still going when signalled.
    let mut child = train_steps(&dir, "twice", RUN, 30, false).spawn().unwrap();
    wait_for_a_step(&mut child, &dir.join("twice"), 0);
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
