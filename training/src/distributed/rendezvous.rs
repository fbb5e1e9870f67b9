//! How the processes of a run find each other: each tells the coordinator its rank, the run's
//! size, the address it serves tensors on and the fingerprint of its configuration; once all
//! `nodes` ranks have come, the coordinator answers each with every rank's address (or with
//! the reason the run cannot start), and forgets the run, ready for the next (a restart). A
//! rank that comes again before the run is complete replaces the earlier process of that rank
//! (which stopped, or will stop at its timeout).
//!
//! Messages are JSON over burn-communication's WebSocket channels, route `/join`.

use std::sync::{Arc, Mutex};

use burn_communication::websocket::{WsClient, WsServer};
use burn_communication::{Address, CommunicationChannel, Message, ProtocolClient, ProtocolServer};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

/// What a process tells the coordinator.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Join {
    rank: usize,
    nodes: usize,
    address: String,
    fingerprint: u64,
    /// Tells this process from an earlier one of the same rank.
    nonce: u64,
}

/// The coordinator's answer.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) enum Answer {
    /// Every rank's address, in rank order.
    Ready(Vec<String>),
    /// Another process of the gathering run claims `nodes` processes.
    Nodes(usize),
    /// Rank `other` has another configuration fingerprint.
    Mismatch(usize),
}

/// The run being gathered: who has come, and the answer once it is known.
#[derive(Default)]
struct Gathering {
    joined: Vec<Option<Join>>,
    answered: usize,
}

/// The coordinator's state: the gathering, and the run once it is complete.
#[derive(Clone)]
struct Coordinator {
    gathering: Arc<Mutex<Gathering>>,
    complete: watch::Sender<Option<Vec<Join>>>,
}

impl Coordinator {
    /// One process's request: wait for the run to be complete, then answer.
    async fn serve(self, mut channel: impl CommunicationChannel) {
        let Ok(Some(message)) = channel.recv().await else { return };
        let Ok(join) = serde_json::from_slice::<Join>(&message.data) else { return };
        let mut complete = self.complete.subscribe();
        let refused = self.arrive(join.clone());
        let answer = match refused {
            Some(answer) => answer,
            None => loop {
                if let Some(run) = complete.borrow_and_update().clone()
                    && run.get(join.rank).is_some_and(|j| j.nonce == join.nonce)
                {
                    break answer_for(&run, &join);
                }
                if complete.changed().await.is_err() {
                    return;
                }
            },
        };
        let bytes = serde_json::to_vec(&answer).expect("an answer serializes");
        let _ = channel.send(Message::new(bytes.into())).await;
        if !matches!(answer, Answer::Nodes(_)) {
            let mut gathering = self.gathering.lock().expect("not poisoned");
            gathering.answered += 1;
            if gathering.answered == gathering.joined.len() {
                *gathering = Gathering::default();
                self.complete.send_replace(None);
            }
        }
    }

    /// Records `join`; `Some` refuses it at once.
    fn arrive(&self, join: Join) -> Option<Answer> {
        let mut gathering = self.gathering.lock().expect("not poisoned");
        if gathering.joined.is_empty() {
            gathering.joined = vec![None; join.nodes];
        }
        if gathering.joined.len() != join.nodes {
            return Some(Answer::Nodes(gathering.joined.len()));
        }
        let Some(slot) = gathering.joined.get_mut(join.rank) else {
            return Some(Answer::Nodes(join.nodes));
        };
        *slot = Some(join);
        if gathering.joined.iter().all(Option::is_some) {
            let run = gathering.joined.iter().flatten().cloned().collect();
            self.complete.send_replace(Some(run));
        }
        None
    }
}

/// The answer to `join` in the complete run `run`.
fn answer_for(run: &[Join], join: &Join) -> Answer {
    match run.iter().position(|other| other.fingerprint != join.fingerprint) {
        Some(other) => Answer::Mismatch(other),
        None => Answer::Ready(run.iter().map(|j| j.address.clone()).collect()),
    }
}

/// Serves the coordinator on `port` until Ctrl-C.
pub(crate) async fn serve_coordinator(port: u16) -> Result<(), std::io::Error> {
    let (complete, _) = watch::channel(None);
    let coordinator = Coordinator { gathering: Arc::default(), complete };
    let server = WsServer::new(port).route("/join", move |channel| coordinator.serve(channel));
    let stop = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    server.serve(stop).await.map_err(|e| std::io::Error::other(format!("{e:?}")))
}

/// Joins the run at `coordinator` (a `ws://` address); `None` when the coordinator cannot be
/// reached or closes the channel.
pub(crate) async fn join(
    coordinator: Address,
    rank: usize,
    nodes: usize,
    address: String,
    fingerprint: u64,
) -> Option<Answer> {
    let mut channel = WsClient::connect(coordinator, "join").await?;
    let nonce = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |t| t.as_nanos() as u64)
        ^ ((std::process::id() as u64) << 32);
    let join = Join { rank, nodes, address, fingerprint, nonce };
    let bytes = serde_json::to_vec(&join).expect("a join serializes");
    channel.send(Message::new(bytes.into())).await.ok()?;
    let answer = channel.recv().await.ok()??;
    serde_json::from_slice(&answer.data).ok()
}
