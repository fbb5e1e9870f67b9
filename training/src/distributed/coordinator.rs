//! The coordinator of multi-process runs: it introduces the processes of a run to each other
//! when they join (`super::rendezvous`); their tensors then travel between the processes
//! directly. It serves one run after another until it is stopped (Ctrl-C).

use std::net::TcpListener;

use crate::error::TrainingError;

/// Serves as the coordinator on `port` (every interface) until the process is stopped.
pub fn run_coordinator(port: u16) -> Result<(), TrainingError> {
    let fail = |source| TrainingError::Coordinator { port, source };
    // The server binds every interface; say here when the port is taken.
    drop(TcpListener::bind(("0.0.0.0", port)).map_err(fail)?);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(fail)?;
    runtime.block_on(super::rendezvous::serve_coordinator(port)).map_err(fail)
}
