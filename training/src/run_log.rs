//! The run's `experiment.log`: the Learner's and Burn's log lines (`tracing` events and `log`
//! records, at info and above) written to the folder of the run in progress.
//!
//! A process has one global `tracing` subscriber, installed once. burn-train's file logger
//! fixes its file when installed, so every later run of the process (an example that trains
//! several models, a sweep) wrote its lines into the first run's folder. Here the subscriber
//! writes to whichever run's log is open ([`RunLog`]) and drops lines while none is. Runs in
//! one process one after another each get their own lines; runs at the same time in one
//! process (tests on threads) share the log opened last.

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, Once};

use tracing_subscriber::filter::{LevelFilter, filter_fn};
use tracing_subscriber::prelude::*;

/// The open run log: its path and file.
static CURRENT: Mutex<Option<(PathBuf, File)>> = Mutex::new(None);

/// Installs the subscriber and the panic hook, once per process.
static INSTALL: Once = Once::new();

/// The run's log file, open while this lives: the process's log lines go to `path` (appended)
/// until it is dropped or another run opens its own.
#[must_use = "the log is closed when this is dropped"]
pub(crate) struct RunLog {
    /// The file the lines go to.
    path: PathBuf,
}

impl RunLog {
    /// Opens `path` for appending (creating it) and makes it the process's log.
    pub(crate) fn open(path: &Path) -> io::Result<RunLog> {
        let file = File::options().create(true).append(true).open(path)?;
        INSTALL.call_once(install);
        *current() = Some((path.to_path_buf(), file));
        Ok(RunLog { path: path.to_path_buf() })
    }
}

impl Drop for RunLog {
    fn drop(&mut self) {
        let mut current = current();
        if current.as_ref().is_some_and(|(path, _)| *path == self.path) {
            *current = None;
        }
    }
}

/// The open log, also after a panic while it was held (a line is written whole or not at all).
fn current() -> MutexGuard<'static, Option<(PathBuf, File)>> {
    CURRENT.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Where the subscriber writes: the open run's log, or nowhere.
struct OpenRunLog;

impl Write for OpenRunLog {
    fn write(&mut self, line: &[u8]) -> io::Result<usize> {
        match current().as_mut() {
            Some((_, file)) => file.write_all(line).map(|()| line.len()),
            None => Ok(line.len()),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        current().as_mut().map_or(Ok(()), |(_, file)| file.flush())
    }
}

/// The subscriber (info and above; wgpu's own crates only from warnings, as burn-train's file
/// logger does, since they log every submission) and a panic hook that logs the panic and names
/// the log, then runs the hook it replaces. A process that already has a global subscriber
/// (its own, or burn-train's) keeps it.
fn install() {
    let layer = tracing_subscriber::fmt::layer()
        .with_ansi(false)
        .with_writer(|| OpenRunLog)
        .with_filter(LevelFilter::INFO)
        .with_filter(filter_fn(|metadata| {
            let wgpu = metadata.module_path().is_some_and(|path| path.starts_with("wgpu"));
            !wgpu || LevelFilter::WARN >= *metadata.level()
        }));
    if tracing_subscriber::registry().with(layer).try_init().is_err() {
        return;
    }
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        tracing::error!("PANIC => {info}");
        if let Some((path, _)) = current().as_ref() {
            eprintln!("The run's log, with the panic: {}", path.display());
        }
        previous(info);
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs one after another each get the lines logged while their log is open, appended;
    /// a run that ends after a later one opened leaves the later one's log open.
    #[test]
    fn each_run_gets_the_lines_logged_while_its_log_is_open() {
        let dir = std::env::temp_dir().join(format!("swa-run-log-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let [first, second] = ["first", "second"].map(|name| dir.join(format!("{name}.log")));
        let log = RunLog::open(&first).unwrap();
        tracing::info!("line 1");
        drop(log);
        tracing::info!("line 2");
        let log = RunLog::open(&second).unwrap();
        tracing::info!("line 3");
        tracing::debug!("line 4");
        drop(log);
        let log = RunLog::open(&first).unwrap();
        let later = RunLog::open(&second).unwrap();
        drop(log);
        tracing::info!("line 5");
        drop(later);
        tracing::info!("line 6");
        let lines = |path: &Path| {
            let text = std::fs::read_to_string(path).unwrap();
            let numbers = text.lines().filter_map(|line| line.rsplit_once("line "));
            numbers.map(|(_, n)| n.parse::<u32>().unwrap()).collect::<Vec<_>>()
        };
        assert_eq!((lines(&first), lines(&second)), (vec![1], vec![3, 5]));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
