//! The deadline of every collective call. A download from a peer that hangs (rather than
//! closing its connection) has no time limit in burn-communication, so a process that hung
//! would leave the others waiting forever; the watchdog ends the waiting process with a
//! one-line error once a call has waited longer than the timeout.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The exit status of a process stopped by the watchdog.
pub const EXIT_TIMEOUT: i32 = 3;

/// The call in progress and since when; `None` between calls.
type Pending = Arc<Mutex<Option<(Instant, String)>>>;

/// A thread that watches one process's collective calls.
#[derive(Clone, Debug)]
pub struct Watchdog {
    pending: Pending,
}

impl Watchdog {
    /// Starts watching: a call of this process (rank `rank`) that waits longer than `timeout`
    /// ends the process with [`EXIT_TIMEOUT`] and a message naming the call.
    pub fn start(rank: usize, timeout: Duration) -> Self {
        let pending: Pending = Arc::default();
        let watched = pending.clone();
        std::thread::spawn(move || {
            // Until the process's cluster is gone (the thread holds the last reference).
            while Arc::strong_count(&watched) > 1 {
                std::thread::sleep(Duration::from_millis(100).min(timeout));
                let late = watched.lock().ok().and_then(|pending| {
                    pending.as_ref().filter(|(since, _)| since.elapsed() > timeout).cloned()
                });
                if let Some((_, what)) = late {
                    eprintln!(
                        "error: rank {rank}: {what} got no answer from the other processes \
                         within {} s (a process stopped, or the network failed); stopping",
                        timeout.as_secs_f64()
                    );
                    std::process::exit(EXIT_TIMEOUT);
                }
            }
        });
        Self { pending }
    }

    /// Starts the clock on `what` until the returned guard is dropped.
    pub fn watch(&self, what: impl Into<String>) -> WatchGuard<'_> {
        if let Ok(mut pending) = self.pending.lock() {
            *pending = Some((Instant::now(), what.into()));
        }
        WatchGuard { pending: &self.pending }
    }
}

/// A call being watched; dropping it stops the clock.
pub struct WatchGuard<'a> {
    pending: &'a Pending,
}

impl Drop for WatchGuard<'_> {
    fn drop(&mut self) {
        if let Ok(mut pending) = self.pending.lock() {
            *pending = None;
        }
    }
}
