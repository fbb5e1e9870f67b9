//! How a multi-process run ends when a process stops taking part. MPI's collectives have no
//! time limit, and MPI ends every process of a launch when one of them dies; each such end
//! prints one line naming this process's rank and what happened, and exits with its own code:
//!
//! - [`EXIT_SILENT_PEER`]: a collective call waited longer than its timeout, the join timeout
//!   until the first training step is done (joining, sharing weights, and a first step that may
//!   compile kernels or autotune), the step timeout after it;
//! - [`EXIT_STOPPED`]: the launcher stopped this process (`SIGTERM`), because another process
//!   of the run ended (it died, or failed with its own message), or because the run was
//!   interrupted. While it trains, a stop signal is a stop request that the processes agree on
//!   at the next step (`train/step_loop.rs`); a process that cannot agree within the step
//!   timeout (another one ended) exits so.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The exit status of a process whose collective call waited past its timeout.
pub const EXIT_SILENT_PEER: i32 = 3;

/// The exit status of a process stopped by the launcher (another process ended).
pub const EXIT_STOPPED: i32 = 4;

/// What the watching thread reads: the call in progress and since when, and whether the first
/// step is done.
#[derive(Default)]
struct State {
    pending: Option<(Instant, String)>,
    stepped: bool,
}

/// A thread that watches one process's collective calls.
#[derive(Clone)]
pub struct Watchdog {
    state: Arc<Mutex<State>>,
}

impl Watchdog {
    /// Starts watching process `rank`'s calls: one that waits longer than `join` (before the
    /// first step is done) or `step` (after) ends the process with [`EXIT_SILENT_PEER`].
    pub fn start(rank: usize, join: Duration, step: Duration) -> Self {
        let state: Arc<Mutex<State>> = Arc::default();
        let watched = state.clone();
        std::thread::spawn(move || {
            // Until the process's cluster is gone (the thread holds the last reference).
            while Arc::strong_count(&watched) > 1 {
                std::thread::sleep(Duration::from_millis(100));
                let late = watched.lock().ok().and_then(|state| {
                    let limit = if state.stepped { step } else { join };
                    let late = state.pending.as_ref().filter(|(since, _)| since.elapsed() > limit);
                    late.map(|(_, what)| (what.clone(), limit))
                });
                if let Some((what, limit)) = late {
                    if crate::stop::received().is_some() {
                        stopped_by_the_launcher(rank);
                    }
                    eprintln!(
                        "error: rank {rank}: {what} got no answer from the other processes \
                         within {} s (one of them hangs, or is far slower: see --join-timeout \
                         and --step-timeout); stopping",
                        limit.as_secs_f64()
                    );
                    std::process::exit(EXIT_SILENT_PEER);
                }
            }
        });
        stop_message(rank);
        Self { state }
    }

    /// Starts the clock on `what` until the returned guard is dropped; a call watched inside
    /// another gives the outer one back its clock when it ends.
    pub fn watch(&self, what: impl Into<String>) -> WatchGuard<'_> {
        let outer = self
            .state
            .lock()
            .ok()
            .and_then(|mut state| state.pending.replace((Instant::now(), what.into())));
        WatchGuard { state: &self.state, outer }
    }

    /// The first training step is done: later calls have the step timeout.
    pub fn stepped(&self) {
        if let Ok(mut state) = self.state.lock() {
            state.stepped = true;
        }
    }
}

/// A call being watched; dropping it stops the clock (or restarts the outer call's).
pub struct WatchGuard<'a> {
    state: &'a Mutex<State>,
    outer: Option<(Instant, String)>,
}

impl Drop for WatchGuard<'_> {
    fn drop(&mut self) {
        if let Ok(mut state) = self.state.lock() {
            state.pending = self.outer.take();
        }
    }
}

/// Ends a process that received a stop signal and could not agree on it with the others, as
/// one stopped by the launcher.
fn stopped_by_the_launcher(rank: usize) -> ! {
    eprint!("{}", stopped_line(rank));
    std::process::exit(EXIT_STOPPED)
}

/// The line of a process stopped by the launcher.
fn stopped_line(rank: usize) -> String {
    format!(
        "error: rank {rank}: stopped by the MPI launcher: another process of the run ended \
         (its own message says why), or the run was interrupted\n"
    )
}

/// The line a process stopped by the launcher prints (set once, before the handler exists).
#[cfg(feature = "mpi")]
static STOPPED_LINE: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Makes `SIGTERM` (the launcher stopping the run) print one line naming `rank`, then exit
/// with [`EXIT_STOPPED`].
#[cfg(feature = "mpi")]
fn stop_message(rank: usize) {
    if STOPPED_LINE.set(stopped_line(rank)).is_ok() {
        // SAFETY: installs a handler that only reads an initialized static and calls
        // async-signal-safe functions (`write`, `_exit`).
        unsafe { libc::signal(libc::SIGTERM, on_stop as *const () as libc::sighandler_t) };
    }
}

/// Without MPI no launcher stops the process.
#[cfg(not(feature = "mpi"))]
fn stop_message(_: usize) {}

/// The `SIGTERM` handler of [`stop_message`].
#[cfg(feature = "mpi")]
extern "C" fn on_stop(_: libc::c_int) {
    if let Some(line) = STOPPED_LINE.get() {
        // SAFETY: writes an initialized buffer to standard error; exits without unwinding.
        unsafe { libc::write(2, line.as_ptr().cast(), line.len()) };
    }
    // SAFETY: `_exit` is async-signal-safe and never returns.
    unsafe { libc::_exit(EXIT_STOPPED) }
}
