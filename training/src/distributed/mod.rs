//! Training beyond one process, on Burn's communication layer (burn-communication):
//! - [`cluster`]: a process joins a run of `nodes` processes through a coordinator
//!   ([`coordinator`], `rendezvous`) and sums or gathers tensors with the others, every call
//!   watched by [`watchdog`];
//! - [`gradients`]: data parallelism's steps (rank 0's initial weights, the mean of every
//!   step's gradients), used by [`crate::train`] when a run has a cluster;
//! - [`gather`] and [`sequence_parallel`]: LongNet's sequence parallelism, one sequence split
//!   over the processes, forward and backward.

pub mod cluster;
pub mod coordinator;
pub mod gather;
pub mod gradients;
mod rendezvous;
pub mod sequence_parallel;
pub mod watchdog;

pub use cluster::{Cluster, ClusterConfig, ClusterProblem};
pub use coordinator::run_coordinator;
pub use sequence_parallel::longnet_sequence_parallel;
