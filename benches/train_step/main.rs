//! The whole training step side by side with PyTorch: the same decoder, MSWA or SWAT (parameter
//! count, init rules, AdamW, warmup + cosine, per-parameter clipping, the loader's windows of the
//! embedded corpus) on `Autodiff<Flex>` (or the `--backend` asked for) and in
//! `benches/anchors/train_step.py` (eager, and under `torch.compile` with `--compile`), at five
//! sizes:
//!
//! - `default`: the `train` command's preset, `mswa-table2-mswa-tiny` (4 layers, d 64, 4 heads,
//!   sequence 128, base window 16, batch 8);
//! - `medium`: 6 layers, d 256, 8 heads, sequence 512, base window 128, batch 8;
//! - `larger`: 12 layers, d 512, 8 heads, sequence 1024, base window 256, batch 4;
//! - `table2`: MSWA's Table 2 model, `mswa-table2-mswa` (12 layers, d 512, 38.8M parameters),
//!   sequence 1024, batch 16: the GPU comparison's size;
//! - `swat-340m`: SWAT's model (24 layers, d 1024, 16 heads, sigmoid scores, balanced ALiBi and
//!   RoPE, W = 256), sequence 1024 (4W, its training length), batch 8.
//!
//! Every measurement is its own process (so its peak resident memory, VmHWM, is its own): this
//! binary runs itself with `--child SIZE` for ours, and the anchor script for PyTorch's, in
//! turn (ours, eager, compiled, ours, …), `--runs` times; each reports tokens/s over its timed
//! steps after its warm-up steps, and the seconds from its start to the end of its first step
//! (compilation and autotuning on a GPU). The medians go to a table and a CSV.
//!
//! On a GPU (`--backend cuda`, `--precision bf16`): ours trains in mixed precision (f32 master
//! weights, as `train` does), PyTorch under bf16 autocast on the same card, its windowed
//! attention by FlexAttention (block masks built once; `flex_attention` compiled alone in the
//! eager mode, the whole model with `--compile`); both report the device memory they hold
//! after the timed steps (nvidia-smi's reading of each process).
//!
//! ```sh
//! cargo bench --bench train_step -- --torch python3 --compile --threads 2 \
//!     --csv benches/results/flex/train_step.csv
//! cargo bench --features cuda --bench train_step -- --backend cuda --precision bf16 \
//!     --sizes table2 --torch python3 --compile --csv benches/results/cuda/train_step.csv
//! ```
//! Without `--torch` only ours run (no Python needed). With the `mpi` build, one measurement of
//! `P` processes (each its own batch, gradients averaged as `train --mpi` does) is
//! `mpirun -np P target/release/deps/train_step-… --child default --mpi`.

mod report;
mod sizes;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use burn::grad_clipping::GradientClippingConfig;
use burn::module::Module;
use burn::optim::lr_scheduler::LrScheduler;
use burn::optim::{AdamWConfig, Optimizer};
use burn::tensor::DType;
use burn::train::TrainStep;
use clap::Parser;
use serde_json::{Value, json};
use swa_zoo::AppError;
use swa_zoo::runtime::{BackendChoice, Job, Placement, Precision, TrainingBackend, run_on};
use swa_zoo::training::corpus::Corpus;
use swa_zoo::training::distributed::gradients::{Averaged, rank_zero_weights};
use swa_zoo::training::distributed::{Cluster, ClusterConfig};
use swa_zoo::training::language_model::LanguageModel;
use swa_zoo::training::loader::{LoaderConfig, Sampling};
use swa_zoo::training::mixed_precision::{LossScale, LossScaler, MixedPrecision};
use swa_zoo::training::schedule::WarmupCosine;
use swa_zoo::training::train::TrainConfig;

use report::{Row, report};
use sizes::{Size, size};

/// The bench's options (`cargo bench --bench train_step -- --help`).
#[derive(Parser)]
#[command(about = "The whole training step against the same model in PyTorch")]
struct Options {
    /// What `cargo bench` passes to every bench; ignored.
    #[arg(long, hide = true)]
    bench: bool,
    /// The sizes to run: default, medium, larger, table2, swat-340m.
    #[arg(long, value_delimiter = ',', default_value = "default,medium,larger")]
    sizes: Vec<String>,
    /// The backend ours trains on (PyTorch runs on the CUDA card for `cuda`, else the CPU).
    #[arg(long, value_enum, default_value_t = BackendChoice::Flex)]
    backend: BackendChoice,
    /// The float type: f32, or bf16 / f16 mixed precision on a GPU (PyTorch: autocast).
    #[arg(long, value_enum, default_value_t = Precision::F32)]
    precision: Precision,
    /// Measurements of each side at each size; the median is reported.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Untimed steps before the timed ones.
    #[arg(long, default_value_t = 3)]
    warmup: usize,
    /// Timed steps; 0 is each size's own (about 15 s of ours).
    #[arg(long, default_value_t = 0)]
    steps: usize,
    /// Threads of both sides.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// The Python that runs `benches/anchors/train_step.py`; without it only ours run.
    #[arg(long)]
    torch: Option<String>,
    /// Also run PyTorch under `torch.compile`.
    #[arg(long)]
    compile: bool,
    /// Where to write the CSV of the medians.
    #[arg(long)]
    csv: Option<PathBuf>,
    /// Run one measurement of ours at this size in this process (what the parent starts).
    #[arg(long, hide = true)]
    child: Option<String>,
    /// With --child, under `mpirun -np P` (the `mpi` build): every process trains its own
    /// batch of the size's sequences and the optimizer averages the gradients, as `train
    /// --mpi` does; rank 0 reports the tokens of all processes per second.
    #[arg(long)]
    mpi: bool,
}

fn main() {
    let began = Instant::now();
    let options = Options::parse();
    if let Some(name) = &options.child {
        let size = size(name);
        let cluster = options.mpi.then(|| {
            Cluster::join(&ClusterConfig::new()).unwrap_or_else(|e| {
                eprintln!("train_step: {e}");
                std::process::exit(2)
            })
        });
        let placement =
            Placement { backend: options.backend, devices: vec![0], precision: options.precision };
        let job = Child { size, options: &options, cluster: cluster.as_ref(), began };
        if let Err(e) = run_on(&placement, job) {
            eprintln!("train_step: {e}");
            std::process::exit(2);
        }
        if let Some(cluster) = cluster {
            cluster.finish();
        }
        return;
    }
    parent(&options);
}

/// One measurement of ours, on the backend and precision `run_on` sets up.
struct Child<'a> {
    size: &'static Size,
    options: &'a Options,
    cluster: Option<&'a Cluster>,
    /// When the process started.
    began: Instant,
}

impl Job for Child<'_> {
    fn run<B: TrainingBackend>(self, device: B::Device) -> Result<(), AppError> {
        let report = child::<B>(&self, &device);
        if self.cluster.is_none_or(|c| c.rank() == 0) {
            println!("{report}");
        }
        Ok(())
    }
}

/// Ours in this process: the warm-up and then the timed training steps of the job's size
/// (forward, backward, per-parameter clipping and AdamW, as `train` runs them: on f32 master
/// weights with loss scaling when the device computes in half precision; as one process of the
/// job's cluster, its gradients averaged over the processes) → the report line.
fn child<B: TrainingBackend>(job: &Child<'_>, device: &B::Device) -> Value {
    swa_zoo::runtime::keep_large_buffers_on_the_heap();
    let size = job.size;
    let config = size.config();
    let train = TrainConfig::new(config.clone(), size.seq_len).with_batch_size(size.batch);
    B::seed(device, train.seed);
    let mut decoder = config.init::<B>(device).expect("a valid model");
    if let Some(cluster) = job.cluster {
        decoder = rank_zero_weights(cluster, decoder);
    }
    let model = LanguageModel::new(decoder);
    let adamw = AdamWConfig::new().with_weight_decay(train.weight_decay);
    let clipping = GradientClippingConfig::Norm(train.grad_clip);
    let cluster = job.cluster.cloned();
    let float: DType = burn::tensor::get_device_settings::<B>(device).float_dtype.into();
    match float {
        DType::F32 => {
            let inner = adamw.with_grad_clipping(Some(clipping)).init::<B, LanguageModel<B>>();
            timed_steps(job, &train, model, Averaged { cluster, inner }, device)
        }
        half => {
            let scale = LossScale::new(LossScaler::for_dtype(half));
            let inner = MixedPrecision::new(adamw.build(), Some(clipping.init()), scale.clone());
            let model = LanguageModel { loss_scale: Some(scale), ..model };
            timed_steps(job, &train, model, Averaged { cluster, inner }, device)
        }
    }
}

/// The steps of [`child`] with `optimizer`, timed, → the report line.
fn timed_steps<B: TrainingBackend, O: Optimizer<LanguageModel<B>, B>>(
    job: &Child<'_>,
    train: &TrainConfig,
    mut model: LanguageModel<B>,
    mut optimizer: O,
    device: &B::Device,
) -> Value {
    let (size, options) = (job.size, job.options);
    let steps = if options.steps == 0 { size.default_steps() } else { options.steps };
    let (rank, processes) = job.cluster.map_or((0, 1), |c| (c.rank(), c.nodes()));
    let peak = train.learning_rate;
    let mut schedule =
        WarmupCosine::new(peak, peak * train.min_lr_ratio, train.warmup_steps, train.steps);
    let sampling = Sampling::Random { seed: train.seed };
    let tokens = Corpus::embedded().train();
    let loader = LoaderConfig::new(size.seq_len, size.batch)
        .with_steps(train.steps)
        .with_sampling(sampling)
        .with_shard(rank, processes)
        .init_text::<B>(tokens, device)
        .expect("the corpus is long enough");
    let (mut start, mut first_step_s) = (Instant::now(), 0.0);
    for step in 0..options.warmup + steps {
        if step == options.warmup {
            B::sync(device).expect("the device syncs");
            start = Instant::now();
        }
        let output = model.step(loader.batch(0, step));
        model = optimizer.step(schedule.step(), model, output.grads);
        if step == 0 {
            B::sync(device).expect("the device syncs");
            first_step_s = job.began.elapsed().as_secs_f64();
        }
    }
    B::sync(device).expect("the device syncs");
    let seconds = start.elapsed().as_secs_f64();
    let tokens = (size.batch * size.seq_len * steps * processes) as f64;
    json!({
        "name": size.name, "mode": "swa-zoo", "params": model.num_params(), "processes": processes,
        "tokens_per_s": tokens / seconds, "ms_per_step": seconds * 1e3 / steps as f64,
        "vmhwm_kib": swa_zoo::bench::heap::peak_rss_kib(), "first_step_s": first_step_s,
        "gpu_mib": gpu_used_mib(),
    })
}

/// Device memory this process holds now, in MiB, as nvidia-smi lists it (CubeCL's memory
/// pools and the CUDA context), the reading the anchor takes too; `None` without nvidia-smi or
/// a listing of this process (wgpu's devices, the CPU).
fn gpu_used_mib() -> Option<f64> {
    let output = Command::new("nvidia-smi")
        .args(["--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"])
        .output()
        .ok()?;
    let pid = std::process::id().to_string();
    String::from_utf8_lossy(&output.stdout).lines().find_map(|line| {
        let (id, used) = line.split_once(',')?;
        (id.trim() == pid).then(|| used.trim().parse().ok()).flatten()
    })
}

/// Runs every size's measurements in turn, then prints and writes the medians.
fn parent(options: &Options) {
    let mut rows = Vec::new();
    for size in options.sizes.iter().map(|name| size(name)) {
        let config = size.config();
        let spec_path = std::env::temp_dir().join(format!("swa-train-step-{}.json", size.name));
        std::fs::write(&spec_path, size.spec(&config).to_string()).expect("a temporary file");
        let mut modes: Vec<(&str, Vec<Value>)> = vec![("swa-zoo", Vec::new())];
        if options.torch.is_some() {
            modes.push(("torch eager", Vec::new()));
            if options.compile {
                modes.push(("torch.compile", Vec::new()));
            }
        }
        for run in 0..options.runs {
            for (mode, results) in &mut modes {
                eprintln!("{} run {}/{}: {mode}", size.name, run + 1, options.runs);
                results.push(measure(options, size, mode, &spec_path));
            }
        }
        for (mode, results) in modes {
            rows.push(Row::median(size.name, mode, &results));
        }
    }
    report(&rows, options);
}

/// One measurement in its own process: ours (`--child`) or the anchor script.
fn measure(options: &Options, size: &Size, mode: &str, spec: &Path) -> Value {
    let steps = match options.steps {
        0 => size.default_steps(),
        n => n,
    };
    let mut command = match (mode, &options.torch) {
        ("swa-zoo", _) => {
            let mut c = Command::new(std::env::current_exe().expect("this binary"));
            c.args(["--child", size.name, "--backend", options.backend.name()]);
            c.args(["--precision", options.precision.name()]);
            c
        }
        (_, Some(python)) => {
            let mut c = Command::new(python);
            c.arg("benches/anchors/train_step.py").arg("--spec").arg(spec);
            c.args(["--threads", &options.threads.to_string()]);
            if options.backend == BackendChoice::Cuda {
                c.args(["--device", "cuda", "--attention", "flex"]);
            }
            let dtype = match options.precision {
                Precision::F32 => "float32",
                Precision::Bf16 => "bfloat16",
                Precision::F16 => "float16",
            };
            c.args(["--dtype", dtype]);
            if mode == "torch.compile" {
                c.arg("--compile");
            }
            c
        }
        _ => unreachable!("torch modes run only with --torch"),
    };
    command.args(["--warmup", &options.warmup.to_string(), "--steps", &steps.to_string()]);
    command.env("RAYON_NUM_THREADS", options.threads.to_string());
    let output = command.output().expect("the measurement starts");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{mode} at {} failed: {}",
        size.name,
        String::from_utf8_lossy(&output.stderr)
    );
    let line = stdout.lines().last().expect("one report line");
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{mode}: {e}: {line}"))
}
