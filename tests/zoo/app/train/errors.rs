//! The application's errors, each one line naming the problem: a missing or empty corpus, an
//! unknown preset or config field, a window larger than the training length (nothing written),
//! a truncated model, precisions or devices a backend does not have (half precision on a wgpu
//! device already in f32 included), and `--mpi` in a build without MPI.

use std::path::Path;
use std::process::Command;

use burn::backend::{Autodiff, NdArray};
use swa_zoo::training::corpus::Corpus;
use swa_zoo::training::train::train;

use crate::{run_dir, tiny, tiny_model};

/// `swa-zoo args…` must fail with one line on stderr containing every one of `expected`.
fn fails_with(args: &[&str], expected: &[&str]) {
    let output = Command::new(env!("CARGO_BIN_EXE_swa-zoo")).args(args).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "swa-zoo {args:?} succeeded");
    assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr}");
    for part in expected {
        assert!(stderr.contains(part), "swa-zoo {args:?}: `{part}` not in {stderr}");
    }
}

#[test]
fn corpus_preset_and_config_errors_name_the_problem() {
    let dir = run_dir("error-cli");
    let out = dir.join("run");
    let out = out.to_str().unwrap();
    let missing = dir.join("missing.txt");
    fails_with(
        &["train", "--backend", "ndarray", "--corpus", missing.to_str().unwrap(), "--out", out],
        &["cannot read corpus", "missing.txt"],
    );
    let empty = dir.join("empty.txt");
    std::fs::write(&empty, "").unwrap();
    fails_with(
        &["train", "--backend", "ndarray", "--corpus", empty.to_str().unwrap(), "--out", out],
        &["empty.txt", "too small"],
    );
    fails_with(
        &["train", "--backend", "ndarray", "--preset", "no-such-preset", "--out", out],
        &["no preset named `no-such-preset`"],
    );
    let config = dir.join("model.json");
    let text =
        tiny_model().to_string().replace("\"vocab_size\"", "\"vocab_sise\": 3, \"vocab_size\"");
    std::fs::write(&config, text).unwrap();
    fails_with(
        &["train", "--backend", "ndarray", "--config", config.to_str().unwrap(), "--out", out],
        &["model.json", "unknown field `vocab_sise`"],
    );
    fails_with(
        &["train", "--backend", "ndarray", "--seq-len", "2", "--out", out],
        &["window of", "larger than the training length 2"],
    );
    assert!(!Path::new(out).exists(), "nothing was written");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn precision_and_devices_a_backend_lacks_are_errors() {
    fails_with(
        &["train", "--backend", "ndarray", "--precision", "f16"],
        &["--precision f16", "ndarray computes in f32 only"],
    );
    fails_with(&["bench", "--backend", "ndarray", "--precision", "bf16"], &["--precision bf16"]);
    fails_with(
        &["train", "--backend", "ndarray", "--devices", "0,1"],
        &["one device", "--devices needs --backend wgpu or cuda"],
    );
}

#[test]
fn a_truncated_model_names_its_run_and_not_burns_format_note() {
    let dir = run_dir("truncated-model");
    let config = tiny(2);
    train::<Autodiff<NdArray>>(&config, &Corpus::embedded(), &dir, false, &Default::default())
        .unwrap();
    let model = dir.join("model.mpk");
    let bytes = std::fs::read(&model).unwrap();
    std::fs::write(&model, &bytes[..bytes.len() / 2]).unwrap();
    let out = dir.to_str().unwrap();
    let args = ["generate", "--backend", "ndarray", "--out", out, "--tokens", "4"];
    fails_with(&args, &["model of the run in", out, "model.mpk", "truncated or corrupt"]);
    let output = Command::new(env!("CARGO_BIN_EXE_swa-zoo")).args(args).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("0.14"), "Burn's note on old record formats: {stderr}");
    let _ = std::fs::remove_dir_all(dir);
}

/// `--precision f16` on a wgpu device that already computes in f32 is refused, naming the
/// type it computes in, and the job never runs (Burn 0.21 fixes a device's float type at its
/// first tensor; `runtime::run_on` sets it before the job or refuses).
#[test]
fn half_precision_is_refused_on_a_device_already_in_f32() {
    #[cfg(feature = "wgpu")]
    {
        use burn::backend::Wgpu;
        use burn::backend::wgpu::WgpuDevice;
        use burn::tensor::backend::Backend;
        use burn::tensor::{DType, Tensor};
        use swa_zoo::AppError;
        use swa_zoo::runtime::{BackendChoice, Job, Placement, Precision, run_on};
        use swa_zoo::training::TrainingBackend;

        struct MustNotRun;
        impl Job for MustNotRun {
            fn run<B: TrainingBackend>(self, _device: B::Device) -> Result<(), AppError> {
                panic!("the job ran on a device in the wrong precision")
            }
        }
        if crate::wgpu_devices().is_none() {
            return;
        }
        let device = WgpuDevice::DefaultDevice;
        let dtype = Tensor::<Wgpu, 1>::zeros([1], &device).dtype();
        assert_eq!(dtype, DType::F32, "the default device computes in f32");
        let place =
            Placement { backend: BackendChoice::Wgpu, devices: vec![0], precision: Precision::F16 };
        let error = run_on(&place, MustNotRun).expect_err("f16 on a device in f32");
        let expected = match <Wgpu as Backend>::supports_dtype(&device, DType::F16) {
            true => "--precision f16: the device already computes in F32",
            false => "--precision f16: ",
        };
        assert!(error.to_string().starts_with(expected), "{error}");
    }
    #[cfg(not(feature = "wgpu"))]
    eprintln!("skipped: built without the `wgpu` feature");
}

/// A build without the `mpi` feature refuses `train --mpi` in one line naming the feature, and
/// `--devices` with `--mpi` (one device per process) in one line naming the flag.
#[cfg(not(feature = "mpi"))]
#[test]
fn train_with_mpi_needs_the_mpi_build() {
    let dir = run_dir("no-mpi");
    let out = dir.join("run");
    let args = ["train", "--mpi", "--steps", "1", "--out", out.to_str().unwrap()];
    fails_with(&args, &["rank 0", "this build has no MPI", "`mpi` feature"]);
    let args = ["train", "--mpi", "--devices", "0,1", "--out", out.to_str().unwrap()];
    fails_with(&args, &["--devices", "one device"]);
    assert!(!out.join("train.json").exists(), "a refused run wrote its configuration");
    let _ = std::fs::remove_dir_all(dir);
}

/// `train` at a learning rate that turns the loss NaN (the user's `--lr 1000`) stops at the
/// first NaN step with [`EXIT_DIVERGED`] and a line naming the step and where `--resume`
/// continues; no `model.mpk`, no checkpoint after the step.
#[test]
fn a_diverging_run_stops_with_its_exit_status_and_one_line() {
    use swa_zoo::training::checkpoint::last_checkpoint;
    use swa_zoo::training::run_lock::EXIT_DIVERGED;
    let dir = run_dir("diverging-cli");
    let (config, out) = (dir.join("model.json"), dir.join("run"));
    std::fs::write(&config, tiny_model().to_string()).unwrap();
    let args = [
        "train",
        "--backend",
        "ndarray",
        "--config",
        config.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--seq-len",
        "16",
        "--batch-size",
        "2",
        "--lr",
        "1000",
        "--warmup",
        "12",
        "--steps",
        "200",
        "--checkpoint-every",
        "2",
    ];
    let output = Command::new(env!("CARGO_BIN_EXE_swa-zoo")).args(args).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(EXIT_DIVERGED), "{stderr}");
    let line = stderr.lines().last().unwrap_or_default();
    assert!(line.starts_with("error: training diverged at step "), "{stderr}");
    let step: usize = line["error: training diverged at step ".len()..]
        .split(':')
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap();
    let last = last_checkpoint(&out).expect("a checkpoint before the divergence");
    assert!(last < step && line.contains(&format!("checkpoint {last}")), "{line}");
    assert!(!out.join("model.mpk").exists());
    let _ = std::fs::remove_dir_all(dir);
}
