//! Multi-process training on 127.0.0.1: two `swa-zoo train` processes and a coordinator train as
//! one process of the doubled batch, stop together when one dies, resume together, and refuse
//! bad launches with one-line errors; LongNet's sequence parallelism over two processes (this
//! test binary, run again as each process) against the one-process result.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use burn::config::Config;
use burn::tensor::Tensor;
use swa_zoo::attention::ScoreOptions;
use swa_zoo::attention::layers::longnet_attention;
use swa_zoo::training::checkpoint::last_checkpoint;
use swa_zoo::training::distributed::{Cluster, ClusterConfig, longnet_sequence_parallel};

use super::{run_dir, saved_logits, tiny_model};
use crate::{Reference, max_abs, tensor, to_vec};

/// Seconds a process waits for the others in these tests.
const TIMEOUT: u64 = 15;

/// A port `p` with `p … p + count − 1` free: the coordinator's, then one per rank.
fn free_ports(count: u16) -> u16 {
    loop {
        let base = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let free = |p: u16| TcpListener::bind(("0.0.0.0", p)).is_ok();
        if base < u16::MAX - count && (base..base + count).all(free) {
            return base;
        }
    }
}

/// A coordinator process on `port`, stopped when dropped.
struct Coordinator(Child);

impl Coordinator {
    fn start(port: u16) -> Self {
        let child = Command::new(env!("CARGO_BIN_EXE_swa-zoo"))
            .args(["coordinator", "--port", &port.to_string()])
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "the coordinator did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        Self(child)
    }
}

impl Drop for Coordinator {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `swa-zoo train` of [`model`] for 60 steps of `batch` sequences into `out`, checkpointing every
/// 5, with `extra` flags.
fn train(dir: &Path, out: &str, batch: usize, extra: &[String]) -> Command {
    let config = dir.join("model.json");
    if !config.exists() {
        tiny_model().save(&config).unwrap();
    }
    let mut command = Command::new(env!("CARGO_BIN_EXE_swa-zoo"));
    command
        .args(["train", "--backend", "ndarray", "--config", config.to_str().unwrap()])
        .args(["--seq-len", "16", "--steps", "60", "--checkpoint-every", "5", "--warmup", "1"])
        .args(["--batch-size", &batch.to_string(), "--timeout", &TIMEOUT.to_string()])
        .args(["--out", dir.join(out).to_str().unwrap()])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// The flags of rank `rank` of a run of `nodes` at the coordinator on `port`.
fn rank_flags(port: u16, nodes: usize, rank: usize) -> Vec<String> {
    ["--nodes", &nodes.to_string(), "--node-rank", &rank.to_string()]
        .into_iter()
        .chain(["--coordinator", &format!("127.0.0.1:{port}")])
        .map(String::from)
        .collect()
}

/// Every rank of a 2-process run at the coordinator on `port`, started and waited for.
fn run_pair(dir: &Path, out: &str, port: u16, extra: &[&str]) -> [Output; 2] {
    let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
    let children: Vec<Child> = (0..2)
        .map(|rank| {
            let flags = [rank_flags(port, 2, rank), extra.clone()].concat();
            train(dir, out, 2, &flags).spawn().unwrap()
        })
        .collect();
    // Both read at once: a process whose pipe nobody drains blocks, and its peer with it.
    let readers: Vec<_> = children
        .into_iter()
        .map(|c| std::thread::spawn(move || c.wait_with_output().unwrap()))
        .collect();
    let outputs: Vec<Output> = readers.into_iter().map(|r| r.join().unwrap()).collect();
    outputs.try_into().unwrap()
}

fn text(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned() + &String::from_utf8_lossy(&output.stderr)
}

/// The line naming the final weights' fingerprint.
fn fingerprint(output: &Output) -> String {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout.lines().find(|l| l.starts_with("weights identical on all 2 processes"));
    line.unwrap_or_else(|| panic!("no fingerprint in\n{}", text(output))).to_string()
}

/// Two processes of 2 sequences end with identical weights, those of one process of 4 sequences
/// up to rounding; a run whose rank 1 is killed stops within the timeout, and the restarted run
/// resumes from its last checkpoint to the same final weights.
#[test]
fn two_processes_train_as_one_stop_together_and_resume() {
    let dir = run_dir("pair");
    let port = free_ports(3);
    let _coordinator = Coordinator::start(port);
    let pair = run_pair(&dir, "pair", port, &[]);
    for output in &pair {
        assert!(output.status.success(), "{}", text(output));
    }
    let weights = fingerprint(&pair[0]);
    assert_eq!(weights, fingerprint(&pair[1]), "the processes' weights differ");
    let single = train(&dir, "single", 4, &[]).output().unwrap();
    assert!(single.status.success(), "{}", text(&single));
    let error = max_abs(&saved_logits(&dir, "pair"), &saved_logits(&dir, "single"));
    assert!(error < 1e-3, "2 × 2 sequences vs 4 sequences: logits differ by {error}");

    let mut children: Vec<Child> = (0..2)
        .map(|rank| train(&dir, "killed", 2, &rank_flags(port, 2, rank)).spawn().unwrap())
        .collect();
    let out = dir.join("killed");
    let deadline = Instant::now() + Duration::from_secs(120);
    while last_checkpoint(&out).is_none() {
        assert!(Instant::now() < deadline, "no checkpoint written");
        std::thread::sleep(Duration::from_millis(5));
    }
    children[1].kill().unwrap();
    let killed = Instant::now();
    let survivor = children.remove(0).wait_with_output().unwrap();
    let _ = children[0].wait();
    assert!(!survivor.status.success(), "rank 0 went on alone:\n{}", text(&survivor));
    assert!(
        killed.elapsed() < Duration::from_secs(TIMEOUT + 10),
        "rank 0 took {:?}",
        killed.elapsed()
    );
    let stderr = String::from_utf8_lossy(&survivor.stderr);
    assert!(stderr.contains("error: rank 0:"), "{stderr}");
    let stopped_at = last_checkpoint(&out).unwrap();
    assert!(stopped_at < 12, "the run ended before rank 1 was killed");

    let resumed = run_pair(&dir, "killed", port, &["--resume"]);
    for output in &resumed {
        assert!(output.status.success(), "{}", text(output));
    }
    assert_eq!(last_checkpoint(&out), Some(12), "60 steps are 12 checkpoints of 5");
    assert_eq!(fingerprint(&resumed[0]), fingerprint(&resumed[1]), "the processes' weights differ");
    let error = max_abs(&saved_logits(&dir, "pair"), &saved_logits(&dir, "killed"));
    assert!(error < 1e-5, "the resumed run differs from the straight run by {error}");
    let _ = std::fs::remove_dir_all(dir);
}

/// Kills of rank 1 in the multi-process kill test.
const PAIR_KILLS: usize = 4;

/// The multi-process half of the kill test (docs/reliability.md): rank 1 killed with SIGKILL
/// while rank 0 writes a checkpoint (held open by the test hook), four times, each time both
/// resumed; rank 0 stops on losing its peer, possibly mid-write, and the run still ends with the
/// uninterrupted pair's weights.
#[test]
fn rank_1_killed_while_rank_0_writes_a_checkpoint_resumes_exactly() {
    use swa_zoo::training::checkpoint_file::WRITE_DELAY_VARIABLE;
    let dir = run_dir("pair-kills");
    let out = dir.join("killed");
    let writing = || {
        let entries = std::fs::read_dir(out.join("checkpoint")).into_iter().flatten();
        entries.flatten().any(|e| e.file_name().to_string_lossy().starts_with(".tmp-"))
    };
    let mut kills = 0;
    for attempt in 0..3 * PAIR_KILLS {
        if kills == PAIR_KILLS {
            break;
        }
        // A coordinator of its own per attempt; the processes' output goes to files, since
        // nobody reads a killed attempt's pipes (a full pipe would block it).
        let port = free_ports(3);
        let _coordinator = Coordinator::start(port);
        let resume: Vec<String> = if attempt > 0 { vec!["--resume".into()] } else { Vec::new() };
        let logs = [0, 1].map(|rank| dir.join(format!("attempt-{attempt}-rank-{rank}.log")));
        let mut children: Vec<Child> = (0..2)
            .map(|rank| {
                let flags = [rank_flags(port, 2, rank), resume.clone()].concat();
                let mut command = train(&dir, "killed", 2, &flags);
                let log = std::fs::File::create(&logs[rank]).unwrap();
                command.env(WRITE_DELAY_VARIABLE, "300").stdout(Stdio::null()).stderr(log);
                command.spawn().unwrap()
            })
            .collect();
        let deadline = Instant::now() + Duration::from_secs(120);
        let mut running = true;
        while running && !writing() {
            assert!(Instant::now() < deadline, "attempt {attempt}: rank 0 wrote no checkpoint");
            running = children.iter_mut().all(|c| c.try_wait().unwrap().is_none());
            std::thread::sleep(Duration::from_millis(2));
        }
        if !running {
            // The pair stopped before it wrote (it did not come together in time): said, and
            // tried again.
            for log in &logs {
                eprintln!(
                    "attempt {attempt} stopped early: {}",
                    std::fs::read_to_string(log).unwrap()
                );
            }
        }
        children[1].kill().unwrap();
        let survivor = children.remove(0).wait().unwrap();
        let _ = children[0].wait();
        if running {
            assert!(!survivor.success(), "attempt {attempt}: rank 0 went on alone");
            kills += 1;
        }
    }
    assert_eq!(kills, PAIR_KILLS, "rank 1 was killed mid-write only {kills} times");
    let port = free_ports(3);
    let _coordinator = Coordinator::start(port);
    let resumed = run_pair(&dir, "killed", port, &["--resume"]);
    let straight = run_pair(&dir, "straight", port, &[]);
    let texts = || format!("rank 0:\n{}\nrank 1:\n{}", text(&resumed[0]), text(&resumed[1]));
    if !resumed.iter().chain(&straight).all(|o| o.status.success()) {
        // Printed as well: an in-process Learner's panic hook hides panic messages.
        eprintln!("{}", texts());
        panic!("a pair failed:\n{}", texts());
    }
    let error = max_abs(&saved_logits(&dir, "straight"), &saved_logits(&dir, "killed"));
    eprintln!("{PAIR_KILLS} kills of rank 1, then resumed: weights differ by {error}");
    assert!(error < 1e-5, "after {PAIR_KILLS} kills the resumed pair differs by {error}");
    let _ = std::fs::remove_dir_all(dir);
}

/// A rank outside the run, a coordinator nobody serves, a missing coordinator flag, and
/// processes of different configurations each fail with one line naming the problem.
#[test]
fn bad_launches_are_one_line_errors() {
    let dir = run_dir("bad-launch");
    let port = free_ports(3);
    let one_line = |output: &Output, expected: &str| {
        assert!(!output.status.success());
        let stderr = String::from_utf8_lossy(&output.stderr);
        let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error")).collect();
        assert_eq!(errors.len(), 1, "{stderr}");
        assert!(errors[0].contains(expected), "{stderr}");
    };
    let run = |flags: Vec<String>| train(&dir, "bad", 2, &flags).output().unwrap();
    one_line(&run(rank_flags(port, 2, 2)), "below the 2 processes");
    one_line(&run(rank_flags(port, 2, 0)), "no coordinator answers at 127.0.0.1");
    one_line(&run(vec!["--nodes".into(), "2".into()]), "--coordinator");

    let _coordinator = Coordinator::start(port);
    let children: Vec<Child> = (0..2)
        .map(|rank| {
            let seed = ["--seed".to_string(), rank.to_string()];
            train(
                &dir,
                &format!("seed-{rank}"),
                2,
                &[rank_flags(port, 2, rank), seed.to_vec()].concat(),
            )
            .spawn()
            .unwrap()
        })
        .collect();
    for child in children {
        one_line(&child.wait_with_output().unwrap(), "runs with another training configuration");
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// LongNet configurations of 4 heads over 2 kv heads, 32 positions split over 2 processes
/// (pieces of 16): segments shorter than, as long as and longer than a piece.
const LONGNET: [(&[usize], &[usize]); 2] = [(&[8, 16, 32], &[1, 2, 4]), (&[4, 32], &[1, 2])];
const HEADS: usize = 4;
const KV_HEADS: usize = 2;
const N: usize = 32;
const D: usize = 8;

/// One process's share: its rows of the output and of the gradients of `q`, `k`, `v` for the
/// loss `Σ o·g`, from the whole sequence's seeded tensors.
fn longnet_piece(
    cluster: Option<&Cluster>,
    segments: &[usize],
    dilations: &[usize],
) -> Vec<Vec<f32>> {
    let (rank, nodes) = cluster.map_or((0, 1), |c| (c.rank(), c.nodes()));
    let piece = |t: Tensor<Reference, 4>| t.narrow(2, rank * N / nodes, N / nodes);
    let q = piece(tensor::<Reference>(1, [1, HEADS, N, D])).require_grad();
    let k = piece(tensor::<Reference>(2, [1, KV_HEADS, N, D])).require_grad();
    let v = piece(tensor::<Reference>(3, [1, KV_HEADS, N, D])).require_grad();
    let g = piece(tensor::<Reference>(4, [1, HEADS, N, D]));
    let opts = ScoreOptions::softmax();
    let (q2, k2, v2) = (q.clone(), k.clone(), v.clone());
    let o = match cluster {
        Some(c) => longnet_sequence_parallel(c, q2, k2, v2, segments, dilations, &opts).unwrap(),
        None => longnet_attention(q2, k2, v2, segments, dilations, &opts).unwrap(),
    };
    let grads = (o.clone() * g).sum().backward();
    let grad = |t: &Tensor<Reference, 4>| to_vec(t.grad(&grads).unwrap());
    vec![to_vec(o), grad(&q), grad(&k), grad(&v)]
}

/// Two processes (this binary again, as `SWA_ZOO_SP_RANK`) compute LongNet on their halves of a
/// sequence, forward and backward; their outputs and gradients, side by side, are the
/// one-process ones.
#[test]
fn longnet_sequence_parallel_matches_one_process() {
    if let Ok(rank) = std::env::var("SWA_ZOO_SP_RANK") {
        let coordinator = std::env::var("SWA_ZOO_SP_COORDINATOR").unwrap();
        let config =
            ClusterConfig::new(2, rank.parse().unwrap(), coordinator).with_timeout_secs(TIMEOUT);
        let cluster = Cluster::join(&config, 0).unwrap();
        let pieces: Vec<_> =
            LONGNET.iter().map(|(s, r)| longnet_piece(Some(&cluster), s, r)).collect();
        cluster.finish();
        let out = std::env::var("SWA_ZOO_SP_OUT").unwrap();
        std::fs::write(out, serde_json::to_string(&pieces).unwrap()).unwrap();
        return;
    }
    let dir = run_dir("longnet");
    let port = free_ports(3);
    let _coordinator = Coordinator::start(port);
    let name = "training::distributed::longnet_sequence_parallel_matches_one_process";
    let children: Vec<(Child, PathBuf)> = (0..2)
        .map(|rank| {
            let out = dir.join(format!("rank-{rank}.json"));
            let child = Command::new(std::env::current_exe().unwrap())
                .args([name, "--exact", "--nocapture"])
                .env("SWA_ZOO_SP_RANK", rank.to_string())
                .env("SWA_ZOO_SP_COORDINATOR", format!("127.0.0.1:{port}"))
                .env("SWA_ZOO_SP_OUT", &out)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            (child, out)
        })
        .collect();
    let halves: Vec<Vec<Vec<Vec<f32>>>> = children
        .into_iter()
        .map(|(child, out)| {
            let output = child.wait_with_output().unwrap();
            assert!(output.status.success(), "{}", text(&output));
            serde_json::from_str(&std::fs::read_to_string(out).unwrap()).unwrap()
        })
        .collect();
    for (c, (segments, dilations)) in LONGNET.iter().enumerate() {
        let whole = longnet_piece(None, segments, dilations);
        for (t, what) in ["output", "dq", "dk", "dv"].iter().enumerate() {
            // Each half is [1, heads, 16, d]: side by side along the positions.
            let heads = whole[t].len() / (N * D);
            let joined: Vec<f32> = (0..heads)
                .flat_map(|h| {
                    halves.iter().flat_map(move |half| {
                        half[c][t][h * N / 2 * D..(h + 1) * N / 2 * D].to_vec()
                    })
                })
                .collect();
            let error = max_abs(&joined, &whole[t]);
            assert!(error < 1e-5, "segments {segments:?}: {what} differs by {error}");
        }
    }
    let _ = std::fs::remove_dir_all(dir);
}
