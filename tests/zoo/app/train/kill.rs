//! The kill test (docs/reliability.md): `swa-zoo train` killed with SIGKILL at many moments,
//! half of them while it writes a checkpoint (held open by the test hook
//! [`swa_zoo::training::checkpoint_file::WRITE_DELAY_VARIABLE`]), each time resumed with
//! `--resume`, ends with the uninterrupted run's weights.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use burn::config::Config;
use swa_zoo::training::checkpoint_file::WRITE_DELAY_VARIABLE;

use super::saved_logits;
use crate::{max_abs, run_dir, tiny_model};

/// Kills of the single-process run.
const KILLS: usize = 16;

/// `swa-zoo train` of the tiny model in `dir/out`: 64 steps, a checkpoint every 2, each
/// record's write held open `delay_ms` milliseconds.
pub(super) fn train(dir: &Path, out: &str, delay_ms: u64, resume: bool) -> Command {
    train_steps(dir, out, (64, 2), delay_ms, resume)
}

/// [`train`] of `steps` steps with a checkpoint every `every`.
pub(super) fn train_steps(
    dir: &Path,
    out: &str,
    (steps, every): (usize, usize),
    delay_ms: u64,
    resume: bool,
) -> Command {
    let config = dir.join("model.json");
    if !config.exists() {
        tiny_model().save(&config).unwrap();
    }
    let mut command = Command::new(env!("CARGO_BIN_EXE_swa-zoo"));
    command
        .args(["train", "--backend", "ndarray", "--config", config.to_str().unwrap()])
        .args(["--seq-len", "16", "--warmup", "1"])
        .args(["--steps", &steps.to_string(), "--checkpoint-every", &every.to_string()])
        .args(["--batch-size", "2", "--out", dir.join(out).to_str().unwrap()])
        .env(WRITE_DELAY_VARIABLE, delay_ms.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if resume {
        command.arg("--resume");
    }
    command
}

/// Whether a record of `out`'s checkpoints is being written: a temporary file, or a record
/// without its sidecar yet.
fn writing(out: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(out.join("checkpoint")) else {
        return false;
    };
    let names: Vec<String> =
        entries.filter_map(|e| Some(e.ok()?.file_name().to_string_lossy().into_owned())).collect();
    names.iter().any(|name| {
        name.starts_with(".tmp-")
            || (name.ends_with(".mpk") && !names.contains(&format!("{name}.check")))
    })
}

/// Kills `child` with SIGKILL once `ready` holds or `deadline` passes; whether it was still
/// running then.
fn kill_when(mut child: Child, deadline: Duration, ready: impl Fn() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < deadline && !ready() {
        if child.try_wait().unwrap().is_some() {
            return false;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let running = child.try_wait().unwrap().is_none();
    child.kill().unwrap();
    child.wait().unwrap();
    running
}

#[test]
fn a_run_killed_at_many_moments_and_resumed_ends_as_the_uninterrupted_run() {
    let dir = run_dir("kill");
    let straight = train(&dir, "straight", 0, false).output().unwrap();
    assert!(straight.status.success(), "{}", String::from_utf8_lossy(&straight.stderr));
    let out = dir.join("killed");
    let mut kills = 0;
    for attempt in 0..4 * KILLS {
        if kills == KILLS {
            break;
        }
        // Nobody reads a killed attempt's output: a full pipe would block it.
        let child = train(&dir, "killed", 150, attempt > 0).stderr(Stdio::null()).spawn().unwrap();
        // Even attempts die mid-write; odd ones after a time that moves through the run.
        let killed = match attempt % 2 {
            0 => kill_when(child, Duration::from_secs(20), || writing(&out)),
            _ => kill_when(child, Duration::from_millis(100 + 97 * attempt as u64 % 900), || false),
        };
        kills += usize::from(killed);
    }
    assert_eq!(kills, KILLS, "the run finished before it was killed {KILLS} times");
    let resumed = train(&dir, "killed", 0, true).output().unwrap();
    assert!(resumed.status.success(), "{}", String::from_utf8_lossy(&resumed.stderr));
    let error = max_abs(&saved_logits(&dir, "straight"), &saved_logits(&dir, "killed"));
    eprintln!("{KILLS} kills, then resumed: the weights differ from the straight run's by {error}");
    assert!(error < 1e-5, "after {KILLS} kills the resumed run differs by {error}");
    let _ = std::fs::remove_dir_all(dir);
}
