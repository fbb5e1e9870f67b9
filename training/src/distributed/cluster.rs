//! One process's place in a multi-process run, and the collective calls training needs: a sum
//! over the processes, and a gather of every process's piece built on it.
//!
//! The processes meet through the coordinator (`super::rendezvous`), then exchange tensors
//! directly through burn-communication's tensor data service over WebSocket: for call `k`,
//! each process offers its tensor under transfer id `k` and downloads every other process's,
//! and every process adds them in rank order, so all get the same bits. burn-collective 0.21,
//! the layer Burn builds on that transport, completes only the first global all-reduce of a
//! run (its node sync keeps the peers of one sync for the next, so the second never
//! completes), which is why the sum is written here. A gather is a sum of tensors holding each
//! process's piece in its own slot and zeros elsewhere.
//!
//! A call that fails, or waits past the timeout (see [`super::watchdog`]), ends the process
//! with a one-line error: the Learner's step cannot return an error, and a process that went
//! on alone would train another model than its peers.

use std::fmt;
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use burn::backend::NdArray;
use burn::config::Config;
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};
use burn_communication::data_service::{TensorDataServer, TensorDataService, TensorTransferId};
use burn_communication::websocket::{WebSocket, WsServer};
use burn_communication::{Address, ProtocolServer};
use tokio::runtime::Runtime;
use tokio_util::sync::CancellationToken;

use super::rendezvous::{self, Answer};
use super::watchdog::{EXIT_TIMEOUT, Watchdog};
use crate::error::TrainingError;

/// Where a process stands in a multi-process run.
#[derive(Config, Debug)]
pub struct ClusterConfig {
    /// Processes in the run, one device each.
    pub nodes: usize,
    /// This process's rank, `0 ≤ rank < nodes`; rank 0 writes the run's files.
    pub rank: usize,
    /// `HOST:PORT` of the coordinator (`swa-zoo coordinator`).
    pub coordinator: String,
    /// `HOST:PORT` this process serves tensors on, reachable by the others. `None`: when the
    /// coordinator is on this machine's loopback, the coordinator's port + 1 + rank.
    #[config(default = "None")]
    pub listen: Option<String>,
    /// Seconds a collective call may wait for the other processes before this one stops.
    #[config(default = 60)]
    pub timeout_secs: u64,
}

/// Why a process could not take its place in a run.
#[derive(Debug)]
#[non_exhaustive]
pub enum ClusterProblem {
    /// A run of no processes.
    NoProcesses,
    /// A rank outside `0 … nodes − 1`.
    RankOutOfRange {
        /// Processes in the run.
        nodes: usize,
    },
    /// An address that is not `HOST:PORT`.
    BadAddress {
        /// The flag or field that gave it.
        what: &'static str,
        /// The address.
        address: String,
    },
    /// No `listen` address, and the coordinator is on another machine.
    ListenNeeded,
    /// This process cannot serve tensors at its address.
    ListenUnavailable {
        /// The address.
        address: String,
        /// Why.
        source: std::io::Error,
    },
    /// The coordinator is gathering a run of another size.
    NodesMismatch {
        /// The size of the run the coordinator is gathering.
        gathering: usize,
    },
    /// Nothing answers at the coordinator's address.
    CoordinatorUnreachable {
        /// The address.
        address: String,
        /// The connection error.
        source: std::io::Error,
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
            ClusterProblem::NoProcesses => write!(f, "a run needs at least 1 process (--nodes)"),
            ClusterProblem::RankOutOfRange { nodes } => {
                write!(f, "the rank must be below the {nodes} processes of the run (--node-rank)")
            }
            ClusterProblem::BadAddress { what, address } => {
                write!(f, "{what}: `{address}` is not HOST:PORT")
            }
            ClusterProblem::ListenNeeded => write!(
                f,
                "the coordinator is on another machine: give --listen HOST:PORT, the address \
                 the other processes reach this one at"
            ),
            ClusterProblem::CoordinatorUnreachable { address, source } => write!(
                f,
                "no coordinator answers at {address} ({source}); start one with `swa-zoo \
                 coordinator --port PORT`"
            ),
            ClusterProblem::Mismatch { what, other } => {
                write!(f, "rank {other} runs with another {what} than this process")
            }
            ClusterProblem::ListenUnavailable { address, source } => {
                write!(f, "cannot serve tensors at {address} (--listen): {source}")
            }
            ClusterProblem::NodesMismatch { gathering } => write!(
                f,
                "the coordinator is gathering a run of {gathering} processes (--nodes differs)"
            ),
        }
    }
}

/// This process as a peer of the run's collective. Its calls take tensors of the backend it
/// joined with (the inner backend when training with autodiff: gradients live there).
#[derive(Clone, Debug)]
pub struct Cluster {
    inner: Arc<Member>,
}

struct Member {
    rank: usize,
    /// Every rank's `ws://` address, in rank order.
    addresses: Vec<Address>,
    watchdog: Watchdog,
    /// Calls so far: the next call's transfer id.
    calls: AtomicU64,
    /// The tensors this process offers (their values travel as `TensorData`, whatever the
    /// backend; the type parameter only fixes the service's type).
    service: Arc<TensorDataService<NdArray, WebSocket>>,
    /// Stops the server at the end of the run.
    stop: CancellationToken,
    runtime: Runtime,
}

impl fmt::Debug for Member {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rank {} of {}", self.rank, self.addresses.len())
    }
}

/// `address` resolved to its first socket address.
fn socket_address(what: &'static str, address: &str) -> Result<SocketAddr, ClusterProblem> {
    let bad = || ClusterProblem::BadAddress { what, address: address.to_string() };
    address.to_socket_addrs().map_err(|_| bad())?.next().ok_or_else(bad)
}

impl Cluster {
    /// Joins the run described by `config`, whose processes must all hold the same
    /// `fingerprint` (of their configuration); returns once every process has joined, or fails
    /// with the problem named (within the timeout when processes are missing).
    pub fn join(config: &ClusterConfig, fingerprint: u64) -> Result<Self, TrainingError> {
        let rank = config.rank;
        let fail = |problem| TrainingError::Cluster { rank, problem };
        if config.nodes == 0 {
            return Err(fail(ClusterProblem::NoProcesses));
        }
        if rank >= config.nodes {
            return Err(fail(ClusterProblem::RankOutOfRange { nodes: config.nodes }));
        }
        let coordinator = socket_address("--coordinator", &config.coordinator).map_err(fail)?;
        let listen = match &config.listen {
            Some(listen) => socket_address("--listen", listen).map_err(fail)?,
            None if coordinator.ip().is_loopback() => {
                let port = coordinator.port() as usize + 1 + rank;
                let port = u16::try_from(port).map_err(|_| {
                    fail(ClusterProblem::BadAddress {
                        what: "--listen (the coordinator's port + 1 + rank)",
                        address: format!("{}:{port}", coordinator.ip()),
                    })
                })?;
                SocketAddr::new(coordinator.ip(), port)
            }
            None => return Err(fail(ClusterProblem::ListenNeeded)),
        };
        let timeout = Duration::from_secs(config.timeout_secs.max(1));
        TcpStream::connect_timeout(&coordinator, timeout.min(Duration::from_secs(5))).map_err(
            |source| {
                fail(ClusterProblem::CoordinatorUnreachable {
                    address: config.coordinator.clone(),
                    source,
                })
            },
        )?;
        // The server binds every interface; say here, not in its log, when the port is taken.
        let unavailable = |source| {
            fail(ClusterProblem::ListenUnavailable { address: listen.to_string(), source })
        };
        drop(TcpListener::bind(("0.0.0.0", listen.port())).map_err(unavailable)?);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .map_err(unavailable)?;
        let stop = CancellationToken::new();
        let service = Arc::new(TensorDataService::new(stop.clone()));
        let server = WsServer::new(listen.port()).route_tensor_data_service(service.clone());
        let stopped = stop.clone();
        runtime.spawn(server.serve(async move { stopped.cancelled().await }));
        let ws = |address: String| -> Address {
            format!("ws://{address}").parse().expect("any text parses")
        };
        let watchdog = Watchdog::start(rank, timeout);
        let answer = {
            let _waiting = watchdog.watch(format!(
                "joining the {} processes at coordinator {}",
                config.nodes, config.coordinator
            ));
            let me = listen.to_string();
            let join =
                rendezvous::join(ws(coordinator.to_string()), rank, config.nodes, me, fingerprint);
            runtime.block_on(join)
        };
        let addresses = match answer {
            Some(Answer::Ready(addresses)) => addresses.into_iter().map(ws).collect(),
            Some(Answer::Nodes(gathering)) => {
                return Err(fail(ClusterProblem::NodesMismatch { gathering }));
            }
            Some(Answer::Mismatch(other)) => {
                let what = "training configuration or checkpoint";
                return Err(fail(ClusterProblem::Mismatch { what, other }));
            }
            None => {
                return Err(fail(ClusterProblem::CoordinatorUnreachable {
                    address: config.coordinator.clone(),
                    source: std::io::Error::other("it closed the connection"),
                }));
            }
        };
        let calls = AtomicU64::new(0);
        let inner = Arc::new(Member { rank, addresses, watchdog, calls, service, stop, runtime });
        Ok(Self { inner })
    }

    /// This process's rank.
    pub fn rank(&self) -> usize {
        self.inner.rank
    }

    /// Processes in the run.
    pub fn nodes(&self) -> usize {
        self.inner.addresses.len()
    }

    /// `x` summed over the processes (every process passes a tensor of the same shape); `what`
    /// names the call in a failure.
    pub fn sum<B: Backend, const D: usize>(&self, x: Tensor<B, D>, what: &str) -> Tensor<B, D> {
        if self.nodes() == 1 {
            return x;
        }
        let _waiting = self.inner.watchdog.watch(what);
        let (device, dtype) = (x.device(), x.dtype());
        let id = TensorTransferId::from(self.inner.calls.fetch_add(1, Ordering::SeqCst));
        let (rank, service) = (self.rank(), self.inner.service.clone());
        let peers = self.inner.addresses.clone();
        let mine = x.clone().into_data();
        let downloaded = self.inner.runtime.block_on(async move {
            service.expose_data(mine, peers.len() as u32 - 1, id).await;
            let mut downloads = Vec::new();
            for (peer, address) in peers.into_iter().enumerate().filter(|(p, _)| *p != rank) {
                let service = service.clone();
                let download =
                    tokio::spawn(async move { service.download_tensor(address, id).await });
                downloads.push((peer, download));
            }
            let mut others = Vec::new();
            for (peer, download) in downloads {
                match download.await {
                    Ok(Some(data)) => others.push(data),
                    _ => return Err(peer),
                }
            }
            Ok(others)
        });
        let others = downloaded.unwrap_or_else(|peer| self.stop(what, peer));
        // Rank order in every process, this one's own tensor in its place: the same sum to
        // the bit.
        let tensor =
            |data: TensorData| Tensor::<B, D>::from_data(data.convert_dtype(dtype), &device);
        let mut terms: Vec<_> = others.into_iter().map(tensor).collect();
        terms.insert(rank, x);
        let mut terms = terms.into_iter();
        let first = terms.next().expect("this process's own tensor");
        terms.fold(first, |sum, term| sum + term)
    }

    /// Every process's `x` concatenated along `dim` in rank order (every process passes the
    /// same shape).
    pub fn gather<B: Backend, const D: usize>(
        &self,
        x: Tensor<B, D>,
        dim: usize,
        what: &str,
    ) -> Tensor<B, D> {
        let (dims, piece) = (x.dims(), x.dims()[dim]);
        let mut whole = dims;
        whole[dim] = piece * self.nodes();
        let slot = core::array::from_fn::<_, D, _>(|i| match i == dim {
            true => self.rank() * piece..(self.rank() + 1) * piece,
            false => 0..dims[i],
        });
        let slots = Tensor::zeros(whole, &x.device()).slice_assign(slot, x);
        self.sum(slots, what)
    }

    /// This process's slot of `whole`, a tensor of every process's piece along `dim`.
    pub fn own_piece<B: Backend, const D: usize>(
        &self,
        whole: Tensor<B, D>,
        dim: usize,
    ) -> Tensor<B, D> {
        let piece = whole.dims()[dim] / self.nodes();
        whole.narrow(dim, self.rank() * piece, piece)
    }

    /// Leaves the run: waits until the other processes have taken every tensor this one
    /// offered, closes its channels to them, then stops serving.
    pub fn finish(&self) {
        let _waiting = self.inner.watchdog.watch("leaving the run");
        let service = self.inner.service.clone();
        self.inner.runtime.block_on(async move {
            while !service.exposed_tensors.lock().await.is_empty() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            // A peer that left first makes the close fail; nothing is lost then.
            let _ = tokio::spawn(async move { service.close().await }).await;
        });
        self.inner.stop.cancel();
    }

    /// Ends the process after a failed call (see the module's documentation).
    fn stop(&self, what: &str, peer: usize) -> ! {
        eprintln!(
            "error: rank {}: {what}: rank {peer} did not answer (it stopped, or the network \
             failed); stopping",
            self.rank()
        );
        std::process::exit(EXIT_TIMEOUT)
    }
}
