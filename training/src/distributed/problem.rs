//! Why a process could not take its place in a run or keep in step with it: the one problem
//! type of the collective's layers (MPI's world, NCCL, the cluster), which each of them returns.

use std::fmt;

/// Why a process could not take its place in a run.
#[derive(Debug)]
#[non_exhaustive]
pub enum ClusterProblem {
    /// This build has no MPI.
    NoMpi,
    /// MPI was already initialized in this process: one process joins one run.
    AlreadyJoined,
    /// The MPI library cannot be called from the training threads.
    Threading,
    /// NCCL's library (`libnccl.so.2`) cannot be loaded.
    NoNccl,
    /// An NCCL or CUDA call failed.
    Nccl {
        /// The call.
        call: &'static str,
        /// What it reported.
        problem: String,
    },
    /// Another process's value of `what` differs from this one's.
    Mismatch {
        /// What was compared: `the training configuration`, …
        what: &'static str,
        /// The first rank that differs.
        other: usize,
    },
}

impl fmt::Display for ClusterProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClusterProblem::NoMpi => write!(
                f,
                "this build has no MPI: multi-process runs need the `mpi` feature (`cargo \
                 build --release --features mpi`, with an MPI library installed)"
            ),
            ClusterProblem::AlreadyJoined => {
                write!(f, "MPI is already initialized in this process: a process joins one run")
            }
            ClusterProblem::Threading => write!(
                f,
                "the MPI library does not support MPI_THREAD_SERIALIZED (calls from the \
                 training threads)"
            ),
            ClusterProblem::NoNccl => write!(
                f,
                "NCCL's library (libnccl.so.2) cannot be loaded: install NCCL, or put the \
                 `nvidia/nccl/lib` folder of NVIDIA's `nvidia-nccl-cu12` wheel on \
                 LD_LIBRARY_PATH"
            ),
            ClusterProblem::Nccl { call, problem } => write!(f, "{call} failed: {problem}"),
            ClusterProblem::Mismatch { what, other } => {
                write!(f, "rank {other} runs with another {what} than this process")
            }
        }
    }
}
