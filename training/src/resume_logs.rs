//! The metric logs of a resumed run: before it trains, the logs are cut back to its checkpoint,
//! so that the lines it appends continue them and the logs (and the loss curve) read as one
//! run. The checkpoint may lie inside an epoch (a stop request's, `train/step_loop.rs`): that
//! epoch's training logs keep one line per step it holds. Cutting again gives the same logs, so
//! a resume killed at any moment leaves them right for the next.

use std::fs;
use std::path::Path;

use swa_models::files::{WriteError, write_bytes_atomically};

/// Cuts the logs under `dir` (a run's or a rank's folder) back to the checkpoint at step
/// `start` of a run of `every` steps per epoch: the epochs it completed stay whole; the epoch
/// in progress keeps the first `start % every` lines of each training log and no validation
/// log; later epochs go.
pub(crate) fn cut_logs(dir: &Path, start: usize, every: usize) -> Result<(), WriteError> {
    let (complete, part) = (start / every, start % every);
    for split in ["train", "valid"] {
        let Ok(entries) = fs::read_dir(dir.join(split)) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(epoch) = name.strip_prefix("epoch-").and_then(|k| k.parse::<usize>().ok())
            else {
                continue;
            };
            let path = entry.path();
            let failed = |source| WriteError { path: path.clone(), source };
            match epoch {
                e if e <= complete => {}
                e if e == complete + 1 && split == "train" && part > 0 => {
                    keep_lines(&path, part)?;
                }
                _ => fs::remove_dir_all(&path).map_err(failed)?,
            }
        }
    }
    Ok(())
}

/// Cuts each log file in the folder `epoch` to its first `lines` lines (atomically).
fn keep_lines(epoch: &Path, lines: usize) -> Result<(), WriteError> {
    let failed = |source| WriteError { path: epoch.to_path_buf(), source };
    for entry in fs::read_dir(epoch).map_err(failed)?.flatten() {
        let path = entry.path();
        let text = fs::read_to_string(&path)
            .map_err(|source| WriteError { path: path.clone(), source })?;
        let kept: usize = text.split_inclusive('\n').take(lines).map(str::len).sum();
        if kept < text.len() {
            write_bytes_atomically(&path, &text.as_bytes()[..kept])?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lines of `dir/split/epoch-k/Loss.log`, if it exists.
    fn lines(dir: &Path, split: &str, epoch: usize) -> Option<usize> {
        let text = fs::read_to_string(dir.join(format!("{split}/epoch-{epoch}/Loss.log"))).ok()?;
        Some(text.lines().count())
    }

    #[test]
    fn logs_are_cut_back_to_a_checkpoint_inside_an_epoch() {
        let dir = std::env::temp_dir().join(format!("swa-cut-logs-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        for (split, epoch, count) in [("train", 1, 4), ("valid", 1, 1), ("train", 2, 4)] {
            let folder = dir.join(format!("{split}/epoch-{epoch}"));
            fs::create_dir_all(&folder).unwrap();
            fs::write(folder.join("Loss.log"), "x\n".repeat(count)).unwrap();
        }
        fs::create_dir_all(dir.join("valid/epoch-2")).unwrap();
        fs::create_dir_all(dir.join("train/epoch-3")).unwrap();
        for _ in 0..2 {
            // Step 6 of 4 per epoch: epoch 1 whole, 2 of epoch 2's steps; twice gives the same.
            cut_logs(&dir, 6, 4).unwrap();
            assert_eq!([lines(&dir, "train", 1), lines(&dir, "valid", 1)], [Some(4), Some(1)]);
            assert_eq!(lines(&dir, "train", 2), Some(2));
            assert!(!dir.join("valid/epoch-2").exists() && !dir.join("train/epoch-3").exists());
        }
        cut_logs(&dir, 0, 4).unwrap();
        assert!(fs::read_dir(dir.join("train")).unwrap().next().is_none());
        fs::remove_dir_all(dir).unwrap();
    }
}
