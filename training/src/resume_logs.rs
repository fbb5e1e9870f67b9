//! The metric logs of a resumed run: Burn's Learner numbers a resumed run's log folders from
//! epoch 1 again, so the earlier epochs' logs are set aside while it runs and the new ones are
//! renumbered after them, so that the logs (and the loss curve) read as one run.

use std::path::Path;

/// The suffix of the folders that keep the earlier epochs' logs while the resumed run writes.
const LOGS_ASIDE: &str = ".before-resume";

/// Removes the metric logs of a run that restarts from its first step (killed before its
/// first checkpoint): the epochs they record are run again.
pub(crate) fn discard_logs(out: &Path) -> std::io::Result<()> {
    for split in ["train", "valid"] {
        for logs in [out.join(split), out.join(format!("{split}{LOGS_ASIDE}"))] {
            if logs.exists() {
                std::fs::remove_dir_all(&logs)?;
            }
        }
    }
    Ok(())
}

/// Moves the logs of the epochs before a resume aside. When logs are already aside, a resume
/// was killed before it renumbered its own: those it left are of epochs this one runs again,
/// and are dropped, so that the earlier epochs' logs survive any number of kills.
pub(crate) fn set_logs_aside(out: &Path) -> std::io::Result<()> {
    for split in ["train", "valid"] {
        let (logs, aside) = (out.join(split), out.join(format!("{split}{LOGS_ASIDE}")));
        match (aside.exists(), logs.exists()) {
            (true, true) => std::fs::remove_dir_all(&logs)?,
            (false, true) => std::fs::rename(&logs, &aside)?,
            _ => {}
        }
    }
    Ok(())
}

/// Moves the resumed run's `epoch-k` log folders to `epoch-(start+k)` among the earlier ones, so
/// the logs (and the loss curve) read as one run.
pub(crate) fn renumber_resumed_logs(out: &Path, start: usize) -> std::io::Result<()> {
    for split in ["train", "valid"] {
        let (logs, aside) = (out.join(split), out.join(format!("{split}{LOGS_ASIDE}")));
        std::fs::create_dir_all(&aside)?;
        if logs.exists() {
            for entry in std::fs::read_dir(&logs)? {
                let entry = entry?;
                let name = entry.file_name().to_string_lossy().into_owned();
                match name.strip_prefix("epoch-").and_then(|k| k.parse::<usize>().ok()) {
                    Some(k) => {
                        let target = aside.join(format!("epoch-{}", start + k));
                        if target.exists() {
                            std::fs::remove_dir_all(&target)?;
                        }
                        std::fs::rename(entry.path(), target)?;
                    }
                    None => std::fs::rename(entry.path(), aside.join(name))?,
                }
            }
            std::fs::remove_dir_all(&logs)?;
        }
        std::fs::rename(&aside, &logs)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resume_killed_before_renumbering_keeps_the_earlier_logs() {
        let out = std::env::temp_dir().join(format!("swa-resume-logs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&out);
        for epoch in [1, 2, 3] {
            std::fs::create_dir_all(out.join(format!("train/epoch-{epoch}"))).unwrap();
        }
        set_logs_aside(&out).unwrap();
        std::fs::create_dir_all(out.join("train/epoch-1")).unwrap();
        // Killed here; the next resume, from epoch 2, sets aside again and renumbers.
        set_logs_aside(&out).unwrap();
        std::fs::create_dir_all(out.join("train/epoch-1")).unwrap();
        renumber_resumed_logs(&out, 2).unwrap();
        let mut epochs: Vec<String> = std::fs::read_dir(out.join("train"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        epochs.sort();
        assert_eq!(epochs, ["epoch-1", "epoch-2", "epoch-3"]);
        std::fs::remove_dir_all(out).unwrap();
    }
}
