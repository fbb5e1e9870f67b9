//! One process's place in a multi-process run launched by MPI (`mpirun -np N swa-zoo train
//! --mpi …`, or `srun`): its rank and the run's size come from MPI, and the collective calls
//! training needs go through MPI (`world.rs`) on host buffers of f32, in buckets of
//! bounded size, each call watched by [`super::watchdog`].
//!
//! A call that waits past its timeout ends the process with a one-line error: the Learner's
//! step cannot return an error, and a process that went on alone would train another model
//! than its peers.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use burn::config::Config;

use super::nccl::Nccl;
use super::problem::ClusterProblem;
use super::watchdog::{WatchGuard, Watchdog};
use super::world::World;
use crate::error::TrainingError;

/// How a process takes part in a multi-process run.
#[derive(Config, Debug)]
pub struct ClusterConfig {
    /// Seconds a collective call may wait for the other processes until the first training
    /// step is done: joining, sharing rank 0's weights, and a first step that may compile
    /// kernels or autotune.
    #[config(default = 600)]
    pub join_timeout_secs: u64,
    /// Seconds a collective call may wait for the other processes after the first step.
    #[config(default = 120)]
    pub step_timeout_secs: u64,
    /// Largest piece of a sum, in bytes: gradients and weights travel in pieces of at most
    /// this size, so a model of any size moves in calls of bounded size through buffers of
    /// bounded size. 4 MB keeps each piece's sums in the CPU's cache while they are copied
    /// back, which PyTorch DDP's 25 MB buckets do not (docs/benchmarks.md compares the two
    /// against a raw `MPI_Allreduce`).
    #[config(default = 4_000_000)]
    pub bucket_bytes: usize,
}

/// This process as a member of the run's collective; clones share it.
#[derive(Clone)]
pub struct Cluster {
    inner: Arc<Member>,
}

struct Member {
    world: World,
    watchdog: Watchdog,
    /// Values per piece of a sum or broadcast.
    bucket: usize,
    /// The NCCL communicator of CUDA runs, made at their first gradient average; `None` in
    /// it when a process cannot load NCCL (the gradients then go through MPI).
    nccl: std::sync::OnceLock<Option<Nccl>>,
}

impl fmt::Debug for Cluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rank {} of {}", self.rank(), self.nodes())
    }
}

impl Cluster {
    /// Joins the processes of this MPI launch (a world of one when the process was not started
    /// by an MPI launcher); fails with the problem named.
    pub fn join(config: &ClusterConfig) -> Result<Self, TrainingError> {
        let world = World::init().map_err(|problem| TrainingError::Cluster { rank: 0, problem })?;
        let rank = world.rank();
        let seconds = |s: u64| Duration::from_secs(s.max(1));
        let (join, step) = (seconds(config.join_timeout_secs), seconds(config.step_timeout_secs));
        let watchdog = Watchdog::start(rank, join, step);
        let bucket = (config.bucket_bytes / 4).clamp(1, i32::MAX as usize);
        let member = Member { world, watchdog, bucket, nccl: std::sync::OnceLock::new() };
        Ok(Self { inner: Arc::new(member) })
    }

    /// This process's rank.
    pub fn rank(&self) -> usize {
        self.inner.world.rank()
    }

    /// Processes in the run.
    pub fn nodes(&self) -> usize {
        self.inner.world.size()
    }

    /// Watches `what`, a call of several collectives, until the guard is dropped.
    pub(crate) fn watch(&self, what: &str) -> WatchGuard<'_> {
        self.inner.watchdog.watch(what)
    }

    /// The first training step is done: later calls wait at most the step timeout.
    pub fn stepped(&self) {
        self.inner.watchdog.stepped();
    }

    /// Every piece replaced by its element-wise sum over the processes times `scale` (every
    /// process passes pieces of the same lengths, in the same order), in buckets: a piece of
    /// at least a bucket is summed from its own memory, a bucket at a time; shorter ones are
    /// packed together into buckets. The scaling is done while the sums are copied back.
    /// `what` names the call in a failure.
    pub fn sum_pieces(&self, pieces: &mut [&mut [f32]], scale: f32, what: &str) {
        if self.nodes() == 1 {
            if scale != 1.0 {
                pieces.iter_mut().for_each(|p| p.iter_mut().for_each(|v| *v *= scale));
            }
            return;
        }
        let _waiting = self.inner.watchdog.watch(what);
        let bucket = self.inner.bucket;
        let longest = pieces.iter().map(|p| p.len()).max().unwrap_or(0);
        let mut sums = vec![0.0; bucket.min(longest)];
        let mut pack = Vec::with_capacity(bucket.min(pieces.iter().map(|p| p.len()).sum()));
        let mut packed = Vec::new();
        for i in 0..pieces.len() {
            let len = pieces[i].len();
            if len >= bucket {
                for chunk in pieces[i].chunks_mut(bucket) {
                    self.sum_bucket(chunk, &mut sums, scale);
                }
                continue;
            }
            if pack.len() + len > bucket {
                self.sum_pack((&mut pack, &mut packed), pieces, &mut sums, scale);
            }
            pack.extend_from_slice(pieces[i]);
            packed.push(i);
        }
        self.sum_pack((&mut pack, &mut packed), pieces, &mut sums, scale);
    }

    /// `values` replaced by their element-wise sum over the processes times `scale`, through
    /// `sums`.
    fn sum_bucket(&self, values: &mut [f32], sums: &mut [f32], scale: f32) {
        let sums = &mut sums[..values.len()];
        self.inner.world.sum(values, sums);
        if scale == 1.0 {
            values.copy_from_slice(sums);
        } else {
            values.iter_mut().zip(sums.iter()).for_each(|(v, s)| *v = s * scale);
        }
    }

    /// Sums `pack`, the pieces `packed` one after the other, and copies the sums times
    /// `scale` back into them; empties both.
    fn sum_pack(
        &self,
        (pack, packed): (&mut Vec<f32>, &mut Vec<usize>),
        pieces: &mut [&mut [f32]],
        sums: &mut Vec<f32>,
        scale: f32,
    ) {
        if pack.is_empty() {
            return;
        }
        if sums.len() < pack.len() {
            sums.resize(pack.len(), 0.0);
        }
        self.sum_bucket(pack, sums, scale);
        let mut at = 0;
        for &i in packed.iter() {
            let len = pieces[i].len();
            pieces[i].copy_from_slice(&pack[at..at + len]);
            at += len;
        }
        pack.clear();
        packed.clear();
    }

    /// One `MPI_Allreduce` of `send` into `recv` (the same length, below 2³¹ values), as MPI
    /// does it: no buckets, no copies, unwatched. The anchor that the all-reduce benchmark
    /// (`benches/all_reduce.rs`) measures [`Cluster::sum_pieces`] against.
    pub fn raw_sum(&self, send: &[f32], recv: &mut [f32]) {
        self.inner.world.sum(send, recv);
    }

    /// `values` replaced by rank 0's, bucket by bucket.
    pub fn broadcast(&self, values: &mut [f32], what: &str) {
        if self.nodes() == 1 {
            return;
        }
        let _waiting = self.inner.watchdog.watch(what);
        for bucket in values.chunks_mut(self.inner.bucket) {
            self.inner.world.broadcast(bucket);
        }
    }

    /// Every process's `piece` (the same length everywhere) one after the other, in rank
    /// order.
    pub fn all_gather(&self, piece: &[f32], what: &str) -> Vec<f32> {
        if self.nodes() == 1 {
            return piece.to_vec();
        }
        let _waiting = self.inner.watchdog.watch(what);
        let mut whole = vec![0.0; piece.len() * self.nodes()];
        self.inner.world.all_gather(piece, &mut whole);
        whole
    }

    /// Block `rank` of the sum over the processes of `whole`, `nodes` blocks of equal length.
    pub fn reduce_scatter(&self, whole: &[f32], what: &str) -> Vec<f32> {
        if self.nodes() == 1 {
            return whole.to_vec();
        }
        let _waiting = self.inner.watchdog.watch(what);
        let mut own = vec![0.0; whole.len() / self.nodes()];
        self.inner.world.reduce_scatter(whole, &mut own);
        own
    }

    /// Whether `flag` holds in any process (one float summed over them); `what` names the call
    /// in a failure.
    pub fn any(&self, flag: bool, what: &str) -> bool {
        let mut value = [f32::from(u8::from(flag))];
        self.sum_pieces(&mut [&mut value[..]], 1.0, what);
        value[0] > 0.0
    }

    /// Checks that every process holds this process's `value` of `what`.
    pub fn agree(&self, value: u64, what: &'static str) -> Result<(), ClusterProblem> {
        let all = {
            let _waiting = self.inner.watchdog.watch(format!("comparing the {what}"));
            self.inner.world.all_gather_u64(value)
        };
        match all.iter().position(|&other| other != value) {
            Some(other) => Err(ClusterProblem::Mismatch { what, other }),
            None => Ok(()),
        }
    }

    /// The NCCL communicator of the processes on CUDA device `device`, made at the first call
    /// (a collective call: rank 0 makes the id and sends it over MPI); `None` when a process
    /// cannot load NCCL's library, said once, so that the gradients go through MPI instead.
    pub fn nccl(&self, device: usize) -> Result<Option<&Nccl>, ClusterProblem> {
        if let Some(nccl) = self.inner.nccl.get() {
            return Ok(nccl.as_ref());
        }
        let _waiting = self.inner.watchdog.watch("setting up NCCL");
        let everywhere = self.agree(u64::from(Nccl::available()), "NCCL availability");
        let nccl = match (everywhere, Nccl::available()) {
            (Ok(()), true) => {
                let mut id = match self.rank() {
                    0 => Nccl::unique_id()?,
                    _ => [0; 128],
                };
                self.inner.world.broadcast_bytes(&mut id);
                Some(Nccl::join(id, self.rank(), self.nodes(), device)?)
            }
            _ => {
                eprintln!(
                    "rank {}: NCCL cannot be loaded in every process ({}); the gradients go \
                     through MPI on the host",
                    self.rank(),
                    ClusterProblem::NoNccl
                );
                None
            }
        };
        Ok(self.inner.nccl.get_or_init(|| nccl).as_ref())
    }

    /// Leaves the run once every process has come here (`MPI_Finalize`); no call may follow.
    pub fn finish(&self) {
        let _waiting = self.inner.watchdog.watch("leaving the run");
        self.inner.world.finalize();
    }
}
