//! Why a run stops before its last step: the first file it could not write, or a stop request
//! (`SIGTERM`, `SIGINT`, the dashboard's quit).
//!
//! A run that cannot save is not worth continuing, so the writers that burn-train calls on its
//! own threads (the checkpointer's recorder, the metric logger) record their failure here and
//! ask the Learner to stop; the run reads it back once the Learner returns and ends with that
//! error ([`TrainingError::Write`](crate::TrainingError::Write)), its last complete checkpoint
//! intact. A stop request ends the Learner after the step in flight; the run then ends with
//! [`TrainingError::Stopped`](crate::TrainingError::Stopped) instead of saving `model.mpk`, and
//! `--resume` trains again from the last checkpoint. A second signal ends the process at once.
//! A step whose loss is not finite ends the run before its update, with
//! [`TrainingError::Diverged`](crate::TrainingError::Diverged) and no file written after it.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use burn::train::Interrupter;
use swa_models::files::WriteError;

/// Where a run diverged: the first value found not finite.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Divergence {
    /// The step (counted from 1 over the whole run).
    pub step: usize,
    /// What was not finite: `the loss` (checked before the step's update), `the validation
    /// loss` or `a weight` (checked before a checkpoint is written).
    pub what: &'static str,
    /// Its value in this process (finite when another process's was not).
    pub value: f64,
}

/// The run's stop request and the failure behind it, shared by the Learner's writers.
#[derive(Clone, Default)]
pub struct RunStop {
    interrupter: Interrupter,
    failure: Arc<Mutex<Option<WriteError>>>,
    /// The step a stop request ended training at (its checkpoint's number).
    stopped_at: Arc<OnceLock<usize>>,
    /// The step at which a value was not finite, what it was and its value
    /// ([`RunStop::diverged_at`]).
    diverged: Arc<OnceLock<Divergence>>,
}

impl RunStop {
    /// A stop that asks the Learner holding `interrupter` to stop.
    pub fn new(interrupter: Interrupter) -> Self {
        let (failure, stopped_at, diverged) = Default::default();
        Self { interrupter, failure, stopped_at, diverged }
    }

    /// Records a write that failed (the first one is kept: later ones follow from it) and asks
    /// the Learner to stop after the step in progress.
    pub fn write_failed(&self, error: WriteError) {
        let mut failure = self.failure.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if failure.is_none() {
            self.interrupter.stop(Some(&error.to_string()));
            *failure = Some(error);
        }
    }

    /// Whether a write has failed.
    pub fn has_failed(&self) -> bool {
        self.failure.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).is_some()
    }

    /// Whether the Learner was asked to stop for another reason than a failed write: a signal
    /// or the dashboard's quit.
    pub fn was_stopped(&self) -> bool {
        self.interrupter.should_stop() && !self.has_failed()
    }

    /// Training ended at step `step` for a stop request, before its last step.
    pub fn stopped_at(&self, step: usize) {
        let _ = self.stopped_at.set(step);
    }

    /// Training diverged at step `step` (a value not finite here, or under MPI in another
    /// process): it stopped there, and nothing after it is saved.
    pub fn diverged_at(&self, step: usize, what: &'static str, value: f64) {
        let _ = self.diverged.set(Divergence { step, what, value });
    }

    /// Where training diverged, if it did.
    pub fn divergence(&self) -> Option<Divergence> {
        self.diverged.get().copied()
    }

    /// The step a stop request ended training at, if one did.
    pub fn stop_step(&self) -> Option<usize> {
        self.stopped_at.get().copied()
    }

    /// The first write that failed, taken out.
    pub fn take_failure(&self) -> Option<WriteError> {
        self.failure.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).take()
    }
}

/// The first stop signal received while a [`SignalStop`] is installed; 0 for none.
static SIGNAL: AtomicI32 = AtomicI32::new(0);

/// The signal handler: records the first signal, ends the process at once on the second (with
/// the status a shell reports for a process killed by that signal). Only async-signal-safe
/// calls: an atomic swap and `_exit`.
extern "C" fn on_signal(signal: libc::c_int) {
    if SIGNAL.swap(signal, Ordering::SeqCst) != 0 {
        // SAFETY: `_exit` is async-signal-safe and ends the process without running anything.
        unsafe { libc::_exit(128 + signal) }
    }
}

/// The runs of this process that listen for stop signals, and the dispositions the first one
/// replaced (restored when the last one ends): runs may overlap (tests, a library user's
/// threads), and a host program's own handlers come back afterwards.
static LISTENERS: Mutex<(usize, [libc::sighandler_t; 2])> = Mutex::new((0, [0; 2]));

/// The signals that ask a run to stop.
const STOP_SIGNALS: [libc::c_int; 2] = [libc::SIGTERM, libc::SIGINT];

/// `SIGTERM` and `SIGINT` turned into a stop request of a run while this value lives; the
/// process's previous handling comes back when the last such value is dropped.
#[derive(Debug)]
pub struct SignalStop {
    watcher: Option<std::thread::JoinHandle<()>>,
    done: Arc<AtomicBool>,
}

impl SignalStop {
    /// Installs the handlers (for the first run listening), and a thread that passes a received
    /// signal on to `stop`'s Learner (the handler itself may not take the Interrupter's lock).
    pub fn install(stop: &RunStop) -> Self {
        let mut listeners = LISTENERS.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if listeners.0 == 0 {
            SIGNAL.store(0, Ordering::SeqCst);
            let handler = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            for (previous, signal) in listeners.1.iter_mut().zip(STOP_SIGNALS) {
                // SAFETY: the handler only touches an atomic and calls `_exit`.
                *previous = unsafe { libc::signal(signal, handler) };
            }
        }
        listeners.0 += 1;
        let done = Arc::new(AtomicBool::new(false));
        let (interrupter, finished) = (stop.interrupter.clone(), done.clone());
        let watcher = std::thread::spawn(move || {
            while !finished.load(Ordering::SeqCst) {
                if let Some(name) = received() {
                    interrupter.stop(Some(name));
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        Self { watcher: Some(watcher), done }
    }
}

impl Drop for SignalStop {
    fn drop(&mut self) {
        self.done.store(true, Ordering::SeqCst);
        if let Some(watcher) = self.watcher.take() {
            let _ = watcher.join();
        }
        let mut listeners = LISTENERS.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        listeners.0 -= 1;
        if listeners.0 == 0 {
            for (previous, signal) in listeners.1.into_iter().zip(STOP_SIGNALS) {
                // SAFETY: puts back the disposition `install` replaced.
                unsafe { libc::signal(signal, previous) };
            }
        }
    }
}

/// Ignores `SIGTERM` and `SIGINT` from now on: for a process of a multi-process run that has
/// stopped on a request and is about to exit, whose peers' exits make the launcher signal it.
pub fn ignore_stop_signals() {
    for signal in STOP_SIGNALS {
        // SAFETY: sets the disposition of a signal to "ignore"; no handler runs.
        unsafe { libc::signal(signal, libc::SIG_IGN) };
    }
}

/// The name of the stop signal received since the handlers were installed, if any.
pub fn received() -> Option<&'static str> {
    match SIGNAL.load(Ordering::SeqCst) {
        0 => None,
        libc::SIGTERM => Some("SIGTERM"),
        libc::SIGINT => Some("SIGINT"),
        _ => Some("a signal"),
    }
}

impl fmt::Debug for RunStop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunStop").field("stopped", &self.interrupter.should_stop()).finish()
    }
}
