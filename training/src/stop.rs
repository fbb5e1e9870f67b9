//! Why a run stops before its last step: the first file it could not write. A run that cannot
//! save is not worth continuing, so the writers that burn-train calls on its own threads (the
//! checkpointer's recorder, the metric logger) record their failure here and ask the Learner
//! to stop; the run reads it back once the Learner returns and ends with that error
//! ([`TrainingError::Write`](crate::TrainingError::Write)), its last complete checkpoint intact.

use std::fmt;
use std::sync::{Arc, Mutex};

use burn::train::Interrupter;
use swa_models::files::WriteError;

/// The run's stop request and the failure behind it, shared by the Learner's writers.
#[derive(Clone, Default)]
pub struct RunStop {
    interrupter: Interrupter,
    failure: Arc<Mutex<Option<WriteError>>>,
}

impl RunStop {
    /// A stop that asks the Learner holding `interrupter` to stop.
    pub fn new(interrupter: Interrupter) -> Self {
        Self { interrupter, failure: Arc::default() }
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
        self.failure.lock().map_or(true, |failure| failure.is_some())
    }

    /// The first write that failed, taken out.
    pub fn take_failure(&self) -> Option<WriteError> {
        self.failure.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).take()
    }
}

impl fmt::Debug for RunStop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunStop").field("stopped", &self.interrupter.should_stop()).finish()
    }
}
