//! The stand-in for `world.rs` in a build without the `mpi` feature: no process can join a
//! run ([`World::init`] says which feature is missing), so no `World` ever exists and its
//! calls cannot be reached.

use super::problem::ClusterProblem;

/// A world that cannot exist in this build.
pub(crate) enum World {}

impl World {
    /// Refuses: this build has no MPI.
    pub(crate) fn init() -> Result<Self, ClusterProblem> {
        Err(ClusterProblem::NoMpi)
    }

    pub(crate) fn rank(&self) -> usize {
        match *self {}
    }

    pub(crate) fn size(&self) -> usize {
        match *self {}
    }

    pub(crate) fn sum(&self, _: &[f32], _: &mut [f32]) {
        match *self {}
    }

    pub(crate) fn broadcast(&self, _: &mut [f32]) {
        match *self {}
    }

    pub(crate) fn broadcast_bytes(&self, _: &mut [u8]) {
        match *self {}
    }

    pub(crate) fn all_gather(&self, _: &[f32], _: &mut [f32]) {
        match *self {}
    }

    pub(crate) fn reduce_scatter(&self, _: &[f32], _: &mut [f32]) {
        match *self {}
    }

    pub(crate) fn all_gather_u64(&self, _: u64) -> Vec<u64> {
        match *self {}
    }

    pub(crate) fn finalize(&self) {
        match *self {}
    }
}
