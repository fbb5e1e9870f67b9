//! Training runs under `mpirun`, through `train_in_cluster` (what `swa-zoo train --mpi` calls):
//! 2 and 3 processes train as one process of the whole batch, a killed rank stops the run and
//! it resumes exactly, a stop request to any rank stops every rank at one checkpoint, a silent
//! rank ends the run after the step timeout, processes of different configurations refuse to
//! start, and a run folder locked by another process stops every rank before it writes.

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use burn::tensor::{Int, Tensor, TensorData};
use swa_models::DecoderConfig;
use swa_models::layers::AttentionKind;
use swa_training::checkpoint::last_checkpoint;
use swa_training::checkpoint_file::WRITE_DELAY_VARIABLE;
use swa_training::corpus::Corpus;
use swa_training::distributed::Cluster;
use swa_training::distributed::watchdog::EXIT_SILENT_PEER;
use swa_training::run_lock::RunLock;
use swa_training::train::{TrainConfig, train, train_in_cluster};

use crate::{
    Reference, STEP_TIMEOUT_VARIABLE, as_rank, max_abs, rank_command, run_dir, text, to_vec,
};

/// The run folder (in the test's folder) a rank trains into.
const OUT_VARIABLE: &str = "SWA_MPI_TEST_OUT";
/// Set: the ranks resume their run.
const RESUME_VARIABLE: &str = "SWA_MPI_TEST_RESUME";
/// Set: rank 1 trains with another seed.
const OTHER_SEED_VARIABLE: &str = "SWA_MPI_TEST_OTHER_SEED";
/// Set: the run trains this many steps instead of 60.
const STEPS_VARIABLE: &str = "SWA_MPI_TEST_STEPS";
/// Set: the run's learning rate, reached over 12 warm-up steps.
const LR_VARIABLE: &str = "SWA_MPI_TEST_LR";

/// The run of these tests: 2 layers of sliding windows of 8 keys, `d_model` 16, 2 heads, 60
/// steps of `batch` sequences of 16, a checkpoint every 5.
fn run_config(batch: usize) -> TrainConfig {
    let model = DecoderConfig::new(vec![AttentionKind::Sliding { window: 8 }])
        .with_d_model(16)
        .with_layers(2)
        .with_heads(2);
    TrainConfig::new(model, 16)
        .with_batch_size(batch)
        .with_steps(60)
        .with_checkpoint_every(5)
        .with_warmup_steps(1)
        .with_valid_batches(1)
}

/// A rank's side: trains 2 sequences per step as one process of `cluster` into the run the
/// launching test named, and says its weights' fingerprint (or its error) in one line.
fn rank_trains(cluster: &Cluster, dir: &Path) {
    let mut config = run_config(2);
    if let Some(steps) = std::env::var(STEPS_VARIABLE).ok().and_then(|s| s.parse().ok()) {
        config.steps = steps;
    }
    if let Some(lr) = std::env::var(LR_VARIABLE).ok().and_then(|s| s.parse().ok()) {
        (config.learning_rate, config.warmup_steps) = (lr, 12);
    }
    if std::env::var_os(OTHER_SEED_VARIABLE).is_some() && cluster.rank() == 1 {
        config.seed += 1;
    }
    let out = dir.join(std::env::var(OUT_VARIABLE).expect("the run's folder"));
    let resume = std::env::var_os(RESUME_VARIABLE).is_some();
    let device = Default::default();
    match train_in_cluster::<Reference>(
        &config,
        &Corpus::embedded(),
        &out,
        resume,
        &device,
        cluster,
    ) {
        // Each line in one write: the ranks share the launcher's output.
        Ok(outcome) => say(&format!(
            "weights identical on all {} processes (fingerprint {:016x})\n",
            cluster.nodes(),
            outcome.fingerprint.expect("a run of several processes has one")
        )),
        Err(error) => {
            say(&format!("error: {error}\n"));
            std::process::exit(1)
        }
    }
}

/// Writes `text` to standard error in one write, so that two ranks' lines do not interleave.
fn say(text: &str) {
    let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), text.as_bytes());
}

/// `mpirun -np {processes}` of `name`'s rank side training into `dir/out`, with `env`.
fn train_mpi(
    processes: usize,
    (name, dir, out): (&str, &Path, &str),
    env: &[(&str, String)],
) -> Command {
    let env: Vec<_> =
        [(OUT_VARIABLE, out.to_string())].into_iter().chain(env.iter().cloned()).collect();
    let mut command = rank_command(processes, name, dir, &env);
    command.stdout(Stdio::piped()).stderr(Stdio::piped());
    command
}

/// The fingerprint every rank printed: fails unless all `processes` printed the same one.
fn fingerprint(output: &Output, processes: usize) -> String {
    // The ranks' test harnesses write to the same output, so a line may start mid-line.
    let all = text(output);
    let prefix = format!("weights identical on all {processes} processes (fingerprint ");
    let prints: Vec<&str> =
        all.split(&prefix).skip(1).map(|rest| rest.get(..16).unwrap_or(rest)).collect();
    assert_eq!(prints.len(), processes, "one fingerprint per rank in\n{all}");
    assert!(prints.iter().all(|p| *p == prints[0]), "the ranks' weights differ:\n{prints:?}");
    format!("{prefix}{})", prints[0])
}

/// The logits, on 12 fixed tokens, of the model a run saved in `dir/out`.
fn saved_logits(dir: &Path, out: &str) -> Vec<f32> {
    let path = dir.join(out).join("model.mpk");
    let device = Default::default();
    let model = swa_models::weights::load_record::<burn::backend::NdArray>(
        &run_config(2).model,
        &path,
        &device,
    )
    .unwrap();
    let tokens: Vec<i64> = (0..12).map(|i| (i * 37 % 256) as i64).collect();
    let tokens = Tensor::<burn::backend::NdArray, 2, Int>::from_data(
        TensorData::new(tokens, [1, 12]),
        &device,
    );
    to_vec(model.forward(tokens).unwrap())
}

/// `mpirun -np 2` and `-np 3` of 2 sequences per rank end with one fingerprint on every rank
/// and the logits of one process of 4 and 6 sequences, to rounding.
#[test]
fn runs_of_2_and_3_processes_train_as_one_process() {
    if let Some((cluster, dir)) = as_rank() {
        return rank_trains(&cluster, &dir);
    }
    let name = "runs::runs_of_2_and_3_processes_train_as_one_process";
    let dir = run_dir("equivalence");
    for processes in [2, 3] {
        let out = format!("mpi-{processes}");
        let output = train_mpi(processes, (name, &dir, &out), &[]).output().unwrap();
        assert!(output.status.success(), "{}", text(&output));
        fingerprint(&output, processes);
        let single = format!("single-{processes}");
        let config = run_config(2 * processes);
        let device = Default::default();
        train::<Reference>(&config, &Corpus::embedded(), &dir.join(&single), false, &device)
            .unwrap();
        let error = max_abs(&saved_logits(&dir, &out), &saved_logits(&dir, &single));
        let whole = 2 * processes;
        eprintln!("{processes} × 2 vs {whole} sequences: logits within {error:e}");
        assert!(error < 1e-3, "{processes} × 2 vs {whole} sequences: logits differ by {error}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// The process id of rank `rank` among the children of `launcher` (Open MPI's `mpirun` starts
/// its local ranks itself, each with `OMPI_COMM_WORLD_RANK` in its environment).
fn rank_pid(launcher: u32, rank: usize) -> Option<u32> {
    let children = std::fs::read_to_string(format!("/proc/{launcher}/task/{launcher}/children"));
    children.ok()?.split_whitespace().filter_map(|p| p.parse::<u32>().ok()).find(|pid| {
        let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        let wanted = format!("OMPI_COMM_WORLD_RANK={rank}");
        environ.split(|&b| b == 0).any(|entry| entry == wanted.as_bytes())
    })
}

/// Sends `signal` to rank `rank` of the run `launcher` (an `mpirun` this test started).
fn signal_rank(launcher: &Child, rank: usize, signal: libc::c_int) {
    let pid = rank_pid(launcher.id(), rank).expect("the rank among mpirun's children");
    // SAFETY: signals a process this test started, through mpirun.
    unsafe { libc::kill(pid as i32, signal) };
}

/// Starts `command` with its output in the file `log` (a killed run's pipes would fill), and
/// waits (at most 2 minutes, while it runs) until `ready`.
fn spawn_until(mut command: Command, log: &Path, ready: impl Fn() -> bool) -> Child {
    let file = std::fs::File::create(log).unwrap();
    command.stdout(file.try_clone().unwrap()).stderr(file);
    let mut launcher = command.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while !ready() {
        assert!(Instant::now() < deadline, "not ready in 2 minutes:\n{}", read(log));
        assert!(launcher.try_wait().unwrap().is_none(), "it ended:\n{}", read(log));
        std::thread::sleep(Duration::from_millis(2));
    }
    launcher
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Rank 1 killed (SIGKILL) while rank 0 writes a checkpoint, twice: the launcher stops rank 0
/// within seconds, saying which process died, and the run resumed ends with the uninterrupted
/// pair's weights.
#[test]
fn a_killed_rank_stops_the_run_and_it_resumes_exactly() {
    if let Some((cluster, dir)) = as_rank() {
        return rank_trains(&cluster, &dir);
    }
    let name = "runs::a_killed_rank_stops_the_run_and_it_resumes_exactly";
    let dir = run_dir("kill");
    let out = dir.join("killed");
    let writing = || {
        let entries = std::fs::read_dir(out.join("checkpoint")).into_iter().flatten();
        entries.flatten().any(|e| e.file_name().to_string_lossy().starts_with(".tmp-"))
    };
    let resume = (RESUME_VARIABLE, "1".to_string());
    for attempt in 0..2 {
        let mut env = vec![(WRITE_DELAY_VARIABLE, "300".to_string())];
        env.extend((attempt > 0).then(|| resume.clone()));
        let log = dir.join(format!("attempt-{attempt}.log"));
        let mut launcher = spawn_until(train_mpi(2, (name, &dir, "killed"), &env), &log, writing);
        signal_rank(&launcher, 1, libc::SIGKILL);
        let killed = Instant::now();
        let status = launcher.wait().unwrap();
        let log = read(&log);
        assert!(!status.success(), "attempt {attempt}: the run went on:\n{log}");
        assert!(killed.elapsed() < Duration::from_secs(30), "stopping took {:?}", killed.elapsed());
        // Rank 0 takes the launcher's SIGTERM as a stop request that rank 1 cannot agree on:
        // it ends after the step timeout (saying so) unless the launcher kills it first.
        let line = log.lines().find(|l| {
            l.starts_with("error: rank 0: stopped by the MPI launcher")
                || l.contains("noticed that process rank 1")
        });
        eprintln!(
            "attempt {attempt}, mpirun {status}: {}",
            line.unwrap_or_else(|| panic!("{log}"))
        );
        assert!(last_checkpoint(&out).unwrap_or(0) < 60, "the run ended before the kill");
    }
    let resumed = train_mpi(2, (name, &dir, "killed"), &[resume]).output().unwrap();
    assert!(resumed.status.success(), "{}", text(&resumed));
    assert_eq!(last_checkpoint(&out), Some(60), "the last checkpoint is of step 60");
    fingerprint(&resumed, 2);
    let straight = train_mpi(2, (name, &dir, "straight"), &[]).output().unwrap();
    assert!(straight.status.success(), "{}", text(&straight));
    let error = max_abs(&saved_logits(&dir, "straight"), &saved_logits(&dir, "killed"));
    eprintln!("killed twice and resumed: logits within {error:e} of the straight run");
    assert!(error < 1e-5, "the resumed run differs from the straight run by {error}");
    let _ = std::fs::remove_dir_all(dir);
}

/// Rank 1 stopped (SIGSTOP) after the first checkpoint: rank 0 waits the step timeout (4 s
/// here), then ends the run with one line naming the call, and the launcher returns
/// [`EXIT_SILENT_PEER`].
#[test]
fn a_silent_rank_ends_the_run_after_the_step_timeout() {
    if let Some((cluster, dir)) = as_rank() {
        return rank_trains(&cluster, &dir);
    }
    let name = "runs::a_silent_rank_ends_the_run_after_the_step_timeout";
    let dir = run_dir("silent");
    let out = dir.join("silent");
    let log = dir.join("silent.log");
    let timeout = [(STEP_TIMEOUT_VARIABLE, "4".to_string())];
    let checkpointed = || last_checkpoint(&out).is_some();
    let mut launcher =
        spawn_until(train_mpi(2, (name, &dir, "silent"), &timeout), &log, checkpointed);
    signal_rank(&launcher, 1, libc::SIGSTOP);
    let stopped = Instant::now();
    let status = launcher.wait().unwrap();
    let log = read(&log);
    assert_eq!(status.code(), Some(EXIT_SILENT_PEER), "{log}");
    let waited = stopped.elapsed();
    assert!(waited > Duration::from_secs(3) && waited < Duration::from_secs(30), "{waited:?}");
    // Which collective waits depends on where rank 1 stopped: the gradient's all-reduce, or
    // the divergence check's after a validation.
    let line = log
        .lines()
        .find(|l| l.starts_with("error: rank 0: the ") && l.contains("all-reduce got no answer"));
    eprintln!("mpirun {status} after {waited:?}: {}", line.unwrap_or_else(|| panic!("{log}")));
    let _ = std::fs::remove_dir_all(dir);
}

/// Processes of different configurations (rank 1 with another seed) stop before training,
/// with one line naming the problem.
#[test]
fn processes_of_different_configurations_refuse_to_start() {
    if let Some((cluster, dir)) = as_rank() {
        return rank_trains(&cluster, &dir);
    }
    let name = "runs::processes_of_different_configurations_refuse_to_start";
    let dir = run_dir("mismatch");
    let other_seed = [(OTHER_SEED_VARIABLE, "1".to_string())];
    let output = train_mpi(2, (name, &dir, "mismatch"), &other_seed).output().unwrap();
    assert!(!output.status.success());
    let errors = text(&output);
    let line = errors.lines().find(|l| l.contains("runs with another training configuration"));
    eprintln!("mpirun {}: {}", output.status, line.unwrap_or_else(|| panic!("{errors}")));
    assert!(last_checkpoint(&dir.join("mismatch")).is_none(), "a refused run trained");
    let _ = std::fs::remove_dir_all(dir);
}

/// A run of `mpirun -np 2` into a folder whose lock another process holds (the launching test)
/// stops before training: rank 0 names the holder, and rank 1 has written nothing (no
/// `rank-1` folder).
#[test]
fn a_locked_run_folder_stops_every_rank_before_it_writes() {
    if let Some((cluster, dir)) = as_rank() {
        return rank_trains(&cluster, &dir);
    }
    let name = "runs::a_locked_run_folder_stops_every_rank_before_it_writes";
    let dir = run_dir("locked");
    let out = dir.join("locked");
    std::fs::create_dir_all(&out).unwrap();
    let _held = RunLock::take(&out).unwrap();
    let output = train_mpi(2, (name, &dir, "locked"), &[]).output().unwrap();
    assert!(!output.status.success());
    let errors = text(&output);
    let holder = format!("is being trained by another process (pid {} on ", std::process::id());
    let line = errors.lines().find(|l| l.contains(&holder));
    eprintln!("mpirun {}: {}", output.status, line.unwrap_or_else(|| panic!("{errors}")));
    assert!(!out.join("rank-1").exists(), "rank 1 wrote its logs:\n{errors}");
    assert!(!out.join("train.json").exists(), "the refused run wrote train.json");
    let _ = std::fs::remove_dir_all(dir);
}

/// A run whose loss turns NaN (a learning rate of 100) stops on every rank at one step, each
/// rank's line naming it, with nothing written after it: the last checkpoint is before it, and
/// no `model.mpk`.
#[test]
fn a_diverging_run_stops_every_rank_at_one_step() {
    if let Some((cluster, dir)) = as_rank() {
        return rank_trains(&cluster, &dir);
    }
    let name = "runs::a_diverging_run_stops_every_rank_at_one_step";
    let dir = run_dir("diverging");
    let env = [(LR_VARIABLE, "100".to_string()), (STEPS_VARIABLE, "40".to_string())];
    let output = train_mpi(2, (name, &dir, "diverging"), &env).output().unwrap();
    let errors = text(&output);
    assert!(!output.status.success(), "{errors}");
    let steps: Vec<usize> = errors
        .split("error: training diverged at step ")
        .skip(1)
        .map(|rest| rest.split(':').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(steps.len(), 2, "one line per rank:\n{errors}");
    assert_eq!(steps[0], steps[1], "the ranks stopped at different steps:\n{errors}");
    let out = dir.join("diverging");
    let last = last_checkpoint(&out).expect("a checkpoint before the divergence");
    assert!(last < steps[0], "checkpoint {last} written at or after step {}", steps[0]);
    assert!(!out.join("model.mpk").exists());
    eprintln!("both ranks diverged at step {}; last checkpoint {last}", steps[0]);
    let _ = std::fs::remove_dir_all(dir);
}

/// Stops of the multi-process run.
const STOPS: usize = 10;

/// The lines of rank 0's training log of metric `Loss` in the run `out`, by epoch.
fn loss_lines(out: &Path) -> Vec<(String, usize)> {
    let Ok(entries) = std::fs::read_dir(out.join("train")) else {
        return Vec::new();
    };
    let mut lines: Vec<(String, usize)> = entries
        .flatten()
        .map(|epoch| {
            let text = std::fs::read_to_string(epoch.path().join("Loss.log")).unwrap_or_default();
            (epoch.file_name().to_string_lossy().into_owned(), text.lines().count())
        })
        .collect();
    lines.sort();
    lines
}

/// `SIGTERM` to rank 0, rank 1 or both (as `scancel` sends it), 10 times at moments that move
/// through a run of 100 steps (the stops train about 5 each): the request travels with the next step's all-reduce, so both ranks stop at
/// the same step, which rank 0 checkpoints, each saying so in one line; resumed, the run ends
/// with the straight pair's weights and logs.
#[test]
fn a_stop_request_to_any_rank_stops_every_rank_at_one_checkpoint() {
    if let Some((cluster, dir)) = as_rank() {
        return rank_trains(&cluster, &dir);
    }
    let name = "runs::a_stop_request_to_any_rank_stops_every_rank_at_one_checkpoint";
    let dir = run_dir("stop");
    let out = dir.join("stopped");
    let resume = (RESUME_VARIABLE, "1".to_string());
    let steps = (STEPS_VARIABLE, "100".to_string());
    let mut checkpoints = Vec::new();
    for attempt in 0..STOPS {
        let logged = checkpoints.last().copied().unwrap_or(0);
        let env: Vec<_> =
            [steps.clone()].into_iter().chain((attempt > 0).then(|| resume.clone())).collect();
        let log = dir.join(format!("attempt-{attempt}.log"));
        let stepped = || loss_lines(&out).iter().map(|(_, n)| n).sum::<usize>() > logged;
        let mut launcher = spawn_until(train_mpi(2, (name, &dir, "stopped"), &env), &log, stepped);
        std::thread::sleep(Duration::from_micros(600 * (attempt as u64 * 7 % 10)));
        let ranks: &[usize] = match attempt % 3 {
            0 => &[0, 1],
            1 => &[1],
            _ => &[0],
        };
        for &rank in ranks {
            signal_rank(&launcher, rank, libc::SIGTERM);
        }
        let status = launcher.wait().unwrap();
        let log = read(&log);
        assert!(!status.success(), "attempt {attempt}: the run went on:\n{log}");
        let checkpoint = last_checkpoint(&out).expect("a stop leaves a checkpoint");
        let named = format!("--resume continues from checkpoint {checkpoint} ");
        // The ranks share the log, and their lines may interleave.
        let said = log.matches("training stopped by").count();
        assert_eq!(said, 2, "attempt {attempt}: one line per rank:\n{log}");
        assert_eq!(log.matches(&named).count(), 2, "both name checkpoint {checkpoint}:\n{log}");
        assert!(checkpoint > logged, "attempt {attempt} trained no step:\n{log}");
        let line = log.lines().find(|l| l.contains(&named)).unwrap_or_default();
        eprintln!("attempt {attempt}, SIGTERM to ranks {ranks:?}: {line}");
        checkpoints.push(checkpoint);
    }
    let inside = checkpoints.iter().filter(|&&c| c % 5 != 0).count();
    eprintln!("{STOPS} stops at steps {checkpoints:?}, {inside} inside an epoch");
    let resumed = train_mpi(2, (name, &dir, "stopped"), &[resume, steps.clone()]).output().unwrap();
    assert!(resumed.status.success(), "{}", text(&resumed));
    fingerprint(&resumed, 2);
    let straight = train_mpi(2, (name, &dir, "straight"), &[steps]).output().unwrap();
    assert!(straight.status.success(), "{}", text(&straight));
    let error = max_abs(&saved_logits(&dir, "straight"), &saved_logits(&dir, "stopped"));
    eprintln!("stopped {STOPS} times and resumed: logits within {error:e} of the straight run");
    assert!(error < 1e-5, "the resumed run differs from the straight run by {error}");
    let straight_logs = loss_lines(&dir.join("straight"));
    assert_eq!(loss_lines(&out), straight_logs, "the logs hold each step once, by epoch");
    let _ = std::fs::remove_dir_all(dir);
}
