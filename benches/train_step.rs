//! The whole training step side by side with PyTorch: the same MSWA decoder (parameter count,
//! init rules, AdamW, warmup + cosine, per-parameter clipping, the loader's windows of the
//! embedded corpus) on `Autodiff<Flex>` and in `benches/anchors/train_step.py` (eager, and under
//! `torch.compile` with `--compile`), at three sizes:
//!
//! - `default`: the `train` command's preset, `mswa-table2-mswa-tiny` (4 layers, d 64, 4 heads,
//!   sequence 128, base window 16, batch 8);
//! - `medium`: 6 layers, d 256, 8 heads, sequence 512, base window 128, batch 8;
//! - `larger`: 12 layers, d 512, 8 heads, sequence 1024, base window 256, batch 4.
//!
//! Every measurement is its own process (so its peak resident memory, VmHWM, is its own): this
//! binary runs itself with `--child SIZE` for ours, and the anchor script for PyTorch's, in
//! turn (ours, eager, compiled, ours, …), `--runs` times; each reports tokens/s over its timed
//! steps after its warm-up steps. The medians go to a table and a CSV.
//!
//! ```sh
//! cargo bench --bench train_step -- --torch python3 --compile --threads 2 \
//!     --csv benches/results/flex/train_step.csv
//! ```
//! Without `--torch` only ours run (no Python needed). With the `mpi` build, one measurement of
//! `P` processes (each its own batch, gradients averaged as `train --mpi` does) is
//! `mpirun -np P target/release/deps/train_step-… --child default --mpi`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use burn::backend::{Autodiff, Flex};
use burn::grad_clipping::GradientClippingConfig;
use burn::module::Module;
use burn::optim::lr_scheduler::LrScheduler;
use burn::optim::{AdamWConfig, Optimizer};
use burn::tensor::backend::Backend;
use burn::train::TrainStep;
use clap::Parser;
use serde_json::{Value, json};
use swa_zoo::models::layers::AttentionKind;
use swa_zoo::models::layers::mswa::{MswaStrategy, MswaVariant, mswa_windows};
use swa_zoo::models::{DecoderConfig, Preset};
use swa_zoo::training::corpus::Corpus;
use swa_zoo::training::distributed::gradients::{Averaged, rank_zero_weights};
use swa_zoo::training::distributed::{Cluster, ClusterConfig};
use swa_zoo::training::language_model::LanguageModel;
use swa_zoo::training::loader::{LoaderConfig, Sampling};
use swa_zoo::training::schedule::WarmupCosine;
use swa_zoo::training::train::TrainConfig;

type B = Autodiff<Flex>;

/// One model size of the comparison.
struct Size {
    name: &'static str,
    layers: usize,
    d_model: usize,
    heads: usize,
    seq_len: usize,
    window: usize,
    batch: usize,
}

const SIZES: [Size; 3] = [
    Size { name: "default", layers: 4, d_model: 64, heads: 4, seq_len: 128, window: 16, batch: 8 },
    Size { name: "medium", layers: 6, d_model: 256, heads: 8, seq_len: 512, window: 128, batch: 8 },
    Size {
        name: "larger",
        layers: 12,
        d_model: 512,
        heads: 8,
        seq_len: 1024,
        window: 256,
        batch: 4,
    },
];

/// The bench's options (`cargo bench --bench train_step -- --help`).
#[derive(Parser)]
#[command(about = "The whole training step against the same model in PyTorch")]
struct Options {
    /// What `cargo bench` passes to every bench; ignored.
    #[arg(long, hide = true)]
    bench: bool,
    /// The sizes to run: default, medium, larger.
    #[arg(long, value_delimiter = ',', default_value = "default,medium,larger")]
    sizes: Vec<String>,
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
    let options = Options::parse();
    if let Some(name) = &options.child {
        let size = size(name);
        let cluster = options.mpi.then(|| {
            Cluster::join(&ClusterConfig::new()).unwrap_or_else(|e| {
                eprintln!("train_step: {e}");
                std::process::exit(2)
            })
        });
        let run = || child(size, options.warmup, options.steps, cluster.as_ref());
        let report = swa_zoo::runtime::on_cpu_threads(run);
        if cluster.as_ref().is_none_or(|c| c.rank() == 0) {
            println!("{report}");
        }
        if let Some(cluster) = cluster {
            cluster.finish();
        }
        return;
    }
    parent(&options);
}

/// The size called `name`; exits with a one-line error naming the sizes otherwise.
fn size(name: &str) -> &'static Size {
    SIZES.iter().find(|s| s.name == name).unwrap_or_else(|| {
        eprintln!("train_step: no size {name}; the sizes are default, medium, larger");
        std::process::exit(2)
    })
}

impl Size {
    /// The model: the `train` command's preset for `default`, else MSWA's geometric windows
    /// over every layer and head (docs/semantics.md §3).
    fn config(&self) -> DecoderConfig {
        if self.name == "default" {
            return Preset::by_name("mswa-table2-mswa-tiny", 256).expect("a preset").config;
        }
        let windows = mswa_windows(
            MswaVariant::Both,
            MswaStrategy::Geometric,
            self.window,
            self.layers,
            self.heads,
        )
        .expect("four groups of layers and heads");
        let kinds = windows.into_iter().map(|windows| AttentionKind::MultiScale { windows });
        DecoderConfig::new(kinds.collect())
            .with_d_model(self.d_model)
            .with_layers(self.layers)
            .with_heads(self.heads)
    }

    /// Timed steps when none are asked for: about 15 s of ours at each size.
    fn default_steps(&self) -> usize {
        match self.name {
            "default" => 200,
            "medium" => 20,
            _ => 6,
        }
    }

    /// The run as the anchor script reads it (`benches/anchors/train_step.py`).
    fn spec(&self, config: &DecoderConfig) -> Value {
        let train = TrainConfig::new(config.clone(), self.seq_len).with_batch_size(self.batch);
        let windows: Vec<Vec<usize>> = (0..self.layers)
            .map(|l| config.kind_of(l).windows().expect("MSWA layers").to_vec())
            .collect();
        json!({
            "name": self.name, "vocab": config.vocab_size, "d_model": config.d_model,
            "layers": config.layers, "heads": config.heads, "kv_heads": config.kv_heads(),
            "mlp_hidden": config.mlp().hidden_width(), "windows": windows,
            "seq_len": self.seq_len, "batch": self.batch, "lr": train.learning_rate,
            "min_lr_ratio": train.min_lr_ratio, "warmup_steps": train.warmup_steps,
            "total_steps": train.steps, "weight_decay": train.weight_decay,
            "grad_clip": train.grad_clip, "adam_eps": 1e-5, "beta1": 0.9, "beta2": 0.999,
            "norm_eps": 1e-6, "rope_base": config.rope_base, "seed": train.seed,
            "checkpoint_every": train.checkpoint_every, "valid_batches": train.valid_batches,
            "corpus": "training/data/genesis.txt", "params": params(config),
        })
    }
}

/// Parameters of the model `config` builds.
fn params(config: &DecoderConfig) -> usize {
    config.init::<Flex>(&Default::default()).expect("a valid model").num_params()
}

/// Ours in this process: `warmup` untimed and then the timed training steps of `size` (forward,
/// backward, per-parameter clipping and AdamW, as `train` runs them; as one process of
/// `cluster`, its gradients averaged over the processes) → the report line.
fn child(size: &Size, warmup: usize, steps: usize, cluster: Option<&Cluster>) -> Value {
    swa_zoo::runtime::keep_large_buffers_on_the_heap();
    let steps = if steps == 0 { size.default_steps() } else { steps };
    let config = size.config();
    let train = TrainConfig::new(config.clone(), size.seq_len).with_batch_size(size.batch);
    let device = Default::default();
    B::seed(&device, train.seed);
    let mut decoder = config.init::<B>(&device).expect("a valid model");
    let (rank, processes) = cluster.map_or((0, 1), |c| (c.rank(), c.nodes()));
    if let Some(cluster) = cluster {
        decoder = rank_zero_weights(cluster, decoder);
    }
    let mut model = LanguageModel::new(decoder);
    let clipping = GradientClippingConfig::Norm(train.grad_clip);
    let inner = AdamWConfig::new()
        .with_weight_decay(train.weight_decay)
        .with_grad_clipping(Some(clipping))
        .init::<B, LanguageModel<B>>();
    let mut optimizer = Averaged { cluster: cluster.cloned(), inner };
    let peak = train.learning_rate;
    let mut schedule =
        WarmupCosine::new(peak, peak * train.min_lr_ratio, train.warmup_steps, train.steps);
    let sampling = Sampling::Random { seed: train.seed };
    let tokens = Corpus::embedded().train();
    let loader = LoaderConfig::new(size.seq_len, size.batch)
        .with_steps(train.steps)
        .with_sampling(sampling)
        .with_shard(rank, processes)
        .init_text::<B>(tokens, &device)
        .expect("the corpus is long enough");
    let mut start = Instant::now();
    for step in 0..warmup + steps {
        if step == warmup {
            start = Instant::now();
        }
        let output = model.step(loader.batch(0, step));
        model = optimizer.step(schedule.step(), model, output.grads);
    }
    let seconds = start.elapsed().as_secs_f64();
    let tokens = (size.batch * size.seq_len * steps * processes) as f64;
    json!({
        "name": size.name, "mode": "swa-zoo", "params": model.num_params(), "processes": processes,
        "tokens_per_s": tokens / seconds, "ms_per_step": seconds * 1e3 / steps as f64,
        "vmhwm_kib": swa_zoo::bench::heap::peak_rss_kib(),
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
            c.args(["--child", size.name]);
            c
        }
        (_, Some(python)) => {
            let mut c = Command::new(python);
            c.arg("benches/anchors/train_step.py").arg("--spec").arg(spec);
            c.args(["--threads", &options.threads.to_string()]);
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

/// The median measurement of one side at one size.
struct Row {
    size: &'static str,
    mode: String,
    params: u64,
    tokens_per_s: f64,
    ms_per_step: f64,
    vmhwm_mib: f64,
}

impl Row {
    fn median(size: &'static str, mode: &str, results: &[Value]) -> Row {
        let field = |key: &str| {
            let values = results.iter().map(|r| r[key].as_f64().unwrap_or(f64::NAN)).collect();
            swa_zoo::bench::median(values)
        };
        Row {
            size,
            mode: mode.to_string(),
            params: results[0]["params"].as_u64().unwrap_or(0),
            tokens_per_s: field("tokens_per_s"),
            ms_per_step: field("ms_per_step"),
            vmhwm_mib: field("vmhwm_kib") / 1024.0,
        }
    }
}

/// The table on stdout (with each side's tokens/s as a ratio to ours) and the CSV.
fn report(rows: &[Row], options: &Options) {
    let ours = |size: &str| rows.iter().find(|r| r.size == size && r.mode == "swa-zoo");
    let mut csv =
        String::from("size,side,params,tokens_per_s,ms_per_step,vmhwm_mib,ours_over_side\n");
    println!(
        "{:<8} {:<14} {:>10} {:>10} {:>9} {:>9} {:>8}",
        "size", "side", "params", "tokens/s", "ms/step", "VmHWM MiB", "ours/it"
    );
    for r in rows {
        let ratio = ours(r.size).map_or(f64::NAN, |o| o.tokens_per_s / r.tokens_per_s);
        println!(
            "{:<8} {:<14} {:>10} {:>10.0} {:>9.1} {:>9.0} {:>8.2}",
            r.size, r.mode, r.params, r.tokens_per_s, r.ms_per_step, r.vmhwm_mib, ratio
        );
        csv += &format!(
            "{},{},{},{:.1},{:.2},{:.1},{:.3}\n",
            r.size, r.mode, r.params, r.tokens_per_s, r.ms_per_step, r.vmhwm_mib, ratio
        );
    }
    println!("(median of {} runs each, {} threads)", options.runs, options.threads);
    if let Some(path) = &options.csv {
        swa_zoo::models::support::files::write_bytes_atomically(path, csv.as_bytes())
            .expect("the CSV is writable");
        println!("CSV: {}", path.display());
    }
}
