//! Training beyond one process, on MPI (the `mpi` feature): the processes of an MPI launch
//! (`mpirun`, `srun`) train one model.
//! - [`cluster`]: a process's place in the run and its collective calls (sum, broadcast,
//!   all-gather, reduce-scatter) on host buffers, in bounded buckets, on MPI (`world`), every
//!   call watched by [`watchdog`];
//! - [`gradients`]: data parallelism's steps (rank 0's initial weights, the mean of every
//!   optimizer step's gradients, the final weight check), used by [`crate::train`] when a run
//!   has a cluster; CUDA tensors are averaged on their GPU by [`nccl`] (CUDA builds);
//! - [`gather`] and [`sequence_parallel`]: LongNet's sequence parallelism, one sequence split
//!   over the processes, forward and backward.
//!
//! Without the `mpi` feature the modules are there but no process can join a run.

pub mod cluster;
pub mod gather;
pub mod gradients;
#[cfg(feature = "cuda")]
pub mod nccl;
#[cfg(not(feature = "cuda"))]
#[path = "no_nccl.rs"]
pub mod nccl;
mod problem;
pub mod sequence_parallel;
pub mod watchdog;
#[cfg(feature = "mpi")]
mod world;
#[cfg(not(feature = "mpi"))]
#[path = "no_world.rs"]
mod world;

pub use cluster::{Cluster, ClusterConfig};
pub use problem::ClusterProblem;
pub use sequence_parallel::longnet_sequence_parallel;
