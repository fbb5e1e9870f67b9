//! `coordinator`: the meeting point of a multi-process run (`train --nodes N`). Start it once,
//! on a machine every process can reach, before the processes.

use clap::Args;
use swa_training::distributed::run_coordinator;

use crate::error::AppError;

/// Flags of `coordinator`.
#[derive(Args, Debug)]
pub struct CoordinatorArgs {
    /// Port to serve on, on every interface; the processes' `--coordinator HOST:PORT`.
    #[arg(long, default_value_t = 7117)]
    port: u16,
}

/// `coordinator`: serves until stopped (Ctrl-C).
pub fn coordinator(args: CoordinatorArgs) -> Result<(), AppError> {
    println!("coordinator of multi-process runs on port {} (Ctrl-C stops it)", args.port);
    run_coordinator(args.port)?;
    Ok(())
}
