//! The processes of an MPI launch (`mpirun`, `srun`), and the MPI collectives the run uses, on
//! host buffers: a sum over the processes, a broadcast from rank 0, an all-gather and a
//! reduce-scatter of f32 values, and an all-gather of one `u64` each. Built with the `mpi`
//! feature, on the system's MPI library (Open MPI or MPICH) through the `mpi` crate; without
//! it, `no_world.rs` stands in and no process can join.
//!
//! Every call is made under one lock, so MPI needs only `MPI_THREAD_SERIALIZED`. Each call's
//! element count must fit MPI's `int`: the callers cut their buffers into buckets.

use std::sync::Mutex;

use mpi::collective::SystemOperation;
use mpi::environment::Universe;
use mpi::topology::SimpleCommunicator;
use mpi::traits::{Communicator, CommunicatorCollectives, Root};

use super::problem::ClusterProblem;

/// This process's place among the processes of the launch.
pub(crate) struct World {
    /// `MPI_COMM_WORLD`, and the universe whose drop finalizes MPI (`None` once finalized).
    mpi: Mutex<Option<(Universe, SimpleCommunicator)>>,
    rank: usize,
    size: usize,
}

// SAFETY: the communicator is a handle to MPI's library state, used only under the lock, and
// MPI was initialized with at least `MPI_THREAD_SERIALIZED`, so any one thread at a time may
// call it.
unsafe impl Send for World {}
// SAFETY: as for `Send`: every use of the handle takes the lock.
unsafe impl Sync for World {}

impl World {
    /// Initializes MPI: the processes of the launch, or a world of one when the process was
    /// not started by an MPI launcher.
    pub(crate) fn init() -> Result<Self, ClusterProblem> {
        let (universe, threading) = mpi::initialize_with_threading(mpi::Threading::Serialized)
            .ok_or(ClusterProblem::AlreadyJoined)?;
        if threading < mpi::Threading::Serialized {
            return Err(ClusterProblem::Threading);
        }
        let world = universe.world();
        let (rank, size) = (world.rank() as usize, world.size() as usize);
        Ok(Self { mpi: Mutex::new(Some((universe, world))), rank, size })
    }

    /// This process's rank, `0 ≤ rank < size`.
    pub(crate) fn rank(&self) -> usize {
        self.rank
    }

    /// Processes in the launch.
    pub(crate) fn size(&self) -> usize {
        self.size
    }

    /// Runs `call` on the communicator. After [`World::finalize`] there is none: that is a
    /// bug of the caller, which ends the run.
    fn with<T>(&self, call: impl FnOnce(&SimpleCommunicator) -> T) -> T {
        let mpi = self.mpi.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let (_, world) = mpi.as_ref().expect("an MPI call after the run left MPI");
        call(world)
    }

    /// `recv` = the element-wise sum of every process's `send` (same length everywhere).
    pub(crate) fn sum(&self, send: &[f32], recv: &mut [f32]) {
        self.with(|world| world.all_reduce_into(send, recv, SystemOperation::sum()));
    }

    /// `values` = rank 0's `values` in every process.
    pub(crate) fn broadcast(&self, values: &mut [f32]) {
        self.with(|world| world.process_at_rank(0).broadcast_into(values));
    }

    /// `bytes` = rank 0's `bytes` in every process.
    pub(crate) fn broadcast_bytes(&self, bytes: &mut [u8]) {
        self.with(|world| world.process_at_rank(0).broadcast_into(bytes));
    }

    /// `recv` = every process's `send` in rank order (`recv` is `size` times `send`).
    pub(crate) fn all_gather(&self, send: &[f32], recv: &mut [f32]) {
        self.with(|world| world.all_gather_into(send, recv));
    }

    /// `recv` = block `rank` of the element-wise sum of every process's `send` (`send` is `size`
    /// blocks of `recv`'s length).
    pub(crate) fn reduce_scatter(&self, send: &[f32], recv: &mut [f32]) {
        self.with(|world| world.reduce_scatter_block_into(send, recv, SystemOperation::sum()));
    }

    /// Every process's `value`, in rank order.
    pub(crate) fn all_gather_u64(&self, value: u64) -> Vec<u64> {
        let mut all = vec![0u64; self.size];
        self.with(|world| world.all_gather_into(&value, &mut all[..]));
        all
    }

    /// Waits for every process, then leaves MPI (`MPI_Finalize`); later calls are refused.
    pub(crate) fn finalize(&self) {
        let mut mpi = self.mpi.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some((universe, world)) = mpi.take() {
            world.barrier();
            drop(world);
            drop(universe);
        }
    }
}
