//! Multi-process training on MPI (feature `mpi`; `.ci/run`'s MPI phase, which installs Open
//! MPI): each test launches `mpirun` on this test binary, whose copies run the test's rank side
//! (they find [`RANK_VARIABLE`] set), then checks what the ranks did against one process.
//!
//! ```sh
//! cargo test -p swa-training --features mpi --test mpi
//! ```

mod collectives;
mod runs;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use burn::backend::{Autodiff, NdArray};
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};
use swa_attention::rng::SplitMix64;
use swa_training::distributed::{Cluster, ClusterConfig};

/// The reference backend: ndarray, f32, with autodiff.
pub type Reference = Autodiff<NdArray<f32>>;

/// The environment variable that tells this test binary it runs as a rank under `mpirun`.
pub const RANK_VARIABLE: &str = "SWA_MPI_TEST_RANK";

/// The environment variable naming the folder a launching test gives its ranks.
pub const DIR_VARIABLE: &str = "SWA_MPI_TEST_DIR";

/// The environment variable setting the ranks' step timeout in seconds (default 20).
pub const STEP_TIMEOUT_VARIABLE: &str = "SWA_MPI_TEST_STEP_TIMEOUT";

/// This process's cluster when it runs as a rank under `mpirun` (with the folder its launching
/// test gave it); `None` in the launching test.
pub fn as_rank() -> Option<(Cluster, PathBuf)> {
    std::env::var(RANK_VARIABLE).ok()?;
    let dir = PathBuf::from(std::env::var(DIR_VARIABLE).expect("the launching test's folder"));
    let step = std::env::var(STEP_TIMEOUT_VARIABLE).ok().and_then(|s| s.parse().ok());
    let config =
        ClusterConfig::new().with_join_timeout_secs(60).with_step_timeout_secs(step.unwrap_or(20));
    Some((Cluster::join(&config).expect("joins the launch"), dir))
}

/// `mpirun -np {processes}` with `env` in every rank's environment, and one compute thread
/// per process. Open MPI (found by its `--version`) also gets the flags a 2-core test machine
/// needs: more processes than cores, ranks that yield when idle, and running as root where the
/// tests run as root.
pub fn mpirun(processes: usize, env: &[(&str, String)]) -> Command {
    let mut command = Command::new("mpirun");
    command.args(["-np", &processes.to_string()]);
    let env = [("RAYON_NUM_THREADS", "1".to_string()), (RANK_VARIABLE, "1".to_string())]
        .into_iter()
        .chain(env.iter().cloned());
    let version = Command::new("mpirun").arg("--version").output();
    let version = version.map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
    if !version.unwrap_or_default().contains("Open MPI") {
        // MPICH's launcher passes its own environment on.
        command.envs(env);
        return command;
    }
    command.args(["--oversubscribe", "--mca", "mpi_yield_when_idle", "1"]);
    for (key, value) in env {
        command.args(["-x", &format!("{key}={value}")]);
    }
    // SAFETY: geteuid only reads the process's user id.
    if unsafe { libc::geteuid() } == 0 {
        command.arg("--allow-run-as-root");
    }
    command
}

/// `mpirun -np {processes}` of this binary's test `name` (module path within this binary),
/// with `dir` as the ranks' folder and `env`.
pub fn rank_command(processes: usize, name: &str, dir: &Path, env: &[(&str, String)]) -> Command {
    let env: Vec<_> = [(DIR_VARIABLE, dir.display().to_string())]
        .into_iter()
        .chain(env.iter().cloned())
        .collect();
    let mut command = mpirun(processes, &env);
    command.arg(std::env::current_exe().unwrap()).args([name, "--exact", "--nocapture"]);
    command
}

/// Runs [`rank_command`] to the end; fails unless every rank succeeded.
pub fn under_mpirun(processes: usize, name: &str, dir: &Path) -> Output {
    let output = rank_command(processes, name, dir, &[]).output().unwrap();
    assert!(output.status.success(), "{}", text(&output));
    output
}

/// A process's standard output and error, one after the other.
pub fn text(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned() + &String::from_utf8_lossy(&output.stderr)
}

/// An empty folder for test `name`, unique to this test process.
pub fn run_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("swa-mpi-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A `[batch, heads, n, d]` tensor of values in [−1, 1) from `seed` (SplitMix64).
pub fn tensor<B: Backend>(seed: u64, shape: [usize; 4]) -> Tensor<B, 4> {
    let mut rng = SplitMix64::new(seed);
    let values: Vec<f32> = (0..shape.iter().product()).map(|_| rng.next_signed_f32()).collect();
    Tensor::from_data(TensorData::new(values, shape), &Default::default())
}

/// The values of a tensor, as f32.
pub fn to_vec<B: Backend, const D: usize>(t: Tensor<B, D>) -> Vec<f32> {
    t.into_data().convert::<f32>().to_vec().expect("f32 data")
}

/// The largest absolute difference of two equally long slices.
pub fn max_abs(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}
