//! One writer per run folder: an exclusive advisory lock on `DIR/run.lock`, taken before a
//! training run writes anything in `DIR` and held until the process ends.
//!
//! The lock is `flock(LOCK_EX | LOCK_NB)` (Rust's [`File::try_lock`]) on the lock file, which
//! holds one line naming its holder (process id, host, start time) for whoever is refused. The
//! operating system releases it when the process ends in any way, SIGKILL included, so a killed
//! run never leaves its folder locked: the file stays, the lock does not. This is what a job
//! scheduler needs when it restarts a job whose old process is still alive: the new one is
//! refused, naming the old one.
//!
//! Shared file systems: Linux's NFS client maps `flock` onto NFS byte-range locks (NLM for
//! NFSv3, the protocol's own locks for NFSv4), so the lock holds across machines, and a client
//! that dies loses it once the server's lease ends (90 s by default). Lustre honours it across
//! nodes when mounted with `-o flock`; with `-o localflock` it holds within one node only, and
//! with neither the call fails: the run then goes on unlocked, saying so in one line, since
//! refusing would stop every run on such a mount. Evaluation, generation and export read a run
//! without the lock.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{ErrorKind, Read, Write};
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use swa_models::files::WriteError;

use crate::error::TrainingError;

/// The lock file's name in a run's folder.
pub const LOCK_FILE: &str = "run.lock";

/// The exit status of `swa-zoo train` refused because another process holds the run's lock
/// (3 and 4 are the multi-process watchdog's: [`crate::distributed::watchdog`]).
pub const EXIT_RUN_LOCKED: i32 = 5;

/// The exit status of `swa-zoo train` stopped by a signal or the dashboard's quit, after the
/// step in flight (`--resume` continues it).
pub const EXIT_STOPPED_BY_REQUEST: i32 = 7;

/// The exit status of `swa-zoo train` whose loss stopped being finite: it stopped before that
/// step's update, nothing written after it (`--resume` continues from the last checkpoint).
pub const EXIT_DIVERGED: i32 = 8;

/// The exclusive lock of one run's folder, held while this value lives (and released by the
/// operating system when the process ends, however it ends).
#[derive(Debug)]
pub struct RunLock {
    /// The locked file; `None` where the file system cannot lock.
    _file: Option<File>,
}

impl RunLock {
    /// Locks the run folder `out` (which must exist) for this process and writes the holder's
    /// line into the lock file. Fails with [`TrainingError::RunLocked`], naming the holder,
    /// when another process holds it.
    pub fn take(out: &Path) -> Result<RunLock, TrainingError> {
        let path = out.join(LOCK_FILE);
        let io = |source| TrainingError::Write(WriteError { path: path.clone(), source });
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let holder = holder_of(&mut file);
                return Err(TrainingError::RunLocked { out: out.to_path_buf(), holder });
            }
            Err(TryLockError::Error(source)) if cannot_lock(&source) => {
                eprintln!(
                    "warning: {} cannot be locked on this file system ({source}); nothing stops a second process from training the same run",
                    path.display()
                );
                return Ok(RunLock { _file: None });
            }
            Err(TryLockError::Error(source)) => return Err(io(source)),
        }
        let line = format!("pid {} on {}, since {}\n", std::process::id(), host(), utc_now());
        file.set_len(0).map_err(io)?;
        file.write_all(line.as_bytes()).and_then(|()| file.sync_data()).map_err(io)?;
        Ok(RunLock { _file: Some(file) })
    }
}

/// Whether a lock call failed because the file system does not lock at all (Lustre without
/// `flock`, some FUSE mounts), rather than for a reason worth stopping for.
fn cannot_lock(error: &std::io::Error) -> bool {
    matches!(error.kind(), ErrorKind::Unsupported)
        || matches!(error.raw_os_error(), Some(libc::ENOSYS | libc::EOPNOTSUPP | libc::ENOLCK))
}

/// The holder's line of a lock file (read from the start), or what is known when it has none
/// yet: a holder that has just taken the lock writes it a moment later.
fn holder_of(file: &mut File) -> String {
    let mut text = String::new();
    let read = file.read_to_string(&mut text);
    match text.lines().next() {
        Some(line) if read.is_ok() && !line.trim().is_empty() => line.trim().to_string(),
        _ => "a process that is just starting".to_string(),
    }
}

/// This machine's name, as the kernel or the shell gives it.
fn host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|name| name.trim().to_string())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "an unnamed host".to_string())
}

/// The current time as `YYYY-MM-DD hh:mm:ss UTC`.
fn utc_now() -> String {
    let seconds = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rest) = (seconds / 86_400, seconds % 86_400);
    let (year, month, day) = civil_date(days as i64);
    let (hour, minute, second) = (rest / 3600, rest % 3600 / 60, rest % 60);
    format!("{year:04}-{month:02}-{day:02} {hour:02}:{minute:02}:{second:02} UTC")
}

/// The proleptic Gregorian date `days` after 1970-01-01: the days counted in eras of 400 years
/// (146,097 days), years starting on 1 March so that the leap day ends them.
fn civil_date(days: i64) -> (i64, u32, u32) {
    let shifted = days + 719_468;
    let era = shifted.div_euclid(146_097);
    let day_of_era = shifted.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * month_from_march + 2) / 5 + 1) as u32;
    let month = if month_from_march < 10 { month_from_march + 3 } else { month_from_march - 9 };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month as u32, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates_match_known_days() {
        assert_eq!(civil_date(0), (1970, 1, 1));
        assert_eq!(civil_date(59), (1970, 3, 1));
        assert_eq!(civil_date(11_016), (2000, 2, 29));
        assert_eq!(civil_date(20_784), (2026, 11, 27));
        assert_eq!(civil_date(-1), (1969, 12, 31));
    }

    #[test]
    fn a_second_lock_is_refused_naming_the_holder_and_allowed_after_release() {
        let out = std::env::temp_dir().join(format!("swa-run-lock-{}", std::process::id()));
        std::fs::create_dir_all(&out).unwrap();
        let first = RunLock::take(&out).unwrap();
        // flock locks belong to an open file, so a second open in this process is refused too.
        let refused = RunLock::take(&out).unwrap_err();
        let said = refused.to_string();
        assert!(said.contains(&format!("pid {}", std::process::id())), "{said}");
        assert!(said.contains("UTC"), "{said}");
        drop(first);
        RunLock::take(&out).unwrap();
        let _ = std::fs::remove_dir_all(out);
    }
}
