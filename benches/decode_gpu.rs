//! Decoding a Hugging Face checkpoint on a GPU, side by side with transformers on the same card.
//!
//! Ours: the checkpoint loaded on `--backend` in `--precision` (`swa-zoo generate --hf` on that
//! device), `--batches` rows of the same prompt decoded greedily with the bounded caches: one
//! prefill, then single-token steps whose argmax stays on the device and feeds the next step's
//! embedding, the chosen tokens read back once at the end (a decode loop that reads each token
//! back waits for the device at every step). A first run per batch size is the cold one
//! (shader compilation, autotuning), reported apart; the median of `--runs` warm runs follows.
//! With `--torch PYTHON`, `benches/anchors/decode_mistral.py time` runs the same checkpoint and
//! prompt on the same card (`--device cuda` for the CUDA backend, else the CPU) in the same
//! precision, with transformers' dynamic cache, its static cache, and with `--compile` also
//! under `torch.compile` (CUDA graphs). Speeds are compared as ratios, and the greedy tokens of
//! the first row (identical in f32; in half precision the first divergence is reported).
//!
//! ```sh
//! python3 benches/anchors/decode_mistral.py make --out target/m1b --shape 1b --dtype bfloat16
//! cargo bench --features cuda --bench decode_gpu -- --hf target/m1b --backend cuda \
//!     --precision bf16 --batches 1,8 --torch python3 --compile \
//!     --csv benches/results/cuda/decode.csv
//! ```

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use burn::tensor::{Int, Tensor, TensorData};
use clap::Parser;
use serde_json::Value;
use swa_zoo::AppError;
use swa_zoo::attention::ModelBackend;
use swa_zoo::models::Decoder;
use swa_zoo::models::hf::{Pretrained, WeightPrecision};
use swa_zoo::runtime::{BackendChoice, Job, Placement, Precision, TrainingBackend, run_on};

/// The bench's options (`cargo bench --bench decode_gpu -- --help`).
#[derive(Parser, Clone)]
#[command(about = "Decoding a checkpoint on a GPU against transformers on the same card")]
struct Options {
    /// What `cargo bench` passes to every bench; ignored.
    #[arg(long, hide = true)]
    bench: bool,
    /// The checkpoint's directory (config.json, model.safetensors, tokenizer.json).
    #[arg(long = "hf")]
    dir: PathBuf,
    /// The backend ours runs on.
    #[arg(long, value_enum, default_value_t = BackendChoice::Cuda)]
    backend: BackendChoice,
    /// The float type of both sides (weights, activations, caches).
    #[arg(long, value_enum, default_value_t = Precision::Bf16)]
    precision: Precision,
    /// Rows decoded at once (each its own measurement).
    #[arg(long, value_delimiter = ',', default_value = "1,8")]
    batches: Vec<usize>,
    /// The prompt (`decode_mistral.py time` cuts the same text at the same length).
    #[arg(long, default_value = "In the beginning God created the heaven and the earth.")]
    prompt: String,
    /// Greedy tokens per run.
    #[arg(long, default_value_t = 128)]
    tokens: usize,
    /// Warm runs per side; the median ms per step is reported.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// The Python that runs `benches/anchors/decode_mistral.py`; without it ours alone.
    #[arg(long)]
    torch: Option<String>,
    /// Also run transformers under `torch.compile`.
    #[arg(long)]
    compile: bool,
    /// Where to write the CSV of the rows.
    #[arg(long)]
    csv: Option<PathBuf>,
}

/// One side at one batch size.
struct Row {
    batch: usize,
    side: String,
    /// Milliseconds per decoding step (all rows), the median of the warm runs.
    step_ms: f64,
    /// The best warm prefill, in milliseconds.
    prefill_ms: f64,
    /// The first run's whole time, in seconds (ours only: compilation and autotuning).
    cold_s: Option<f64>,
    /// The first row's new tokens.
    tokens: Vec<usize>,
}

fn main() {
    let options = Options::parse();
    let placement =
        Placement { backend: options.backend, devices: vec![0], precision: options.precision };
    if let Err(e) = run_on(&placement, DecodeJob(options)) {
        eprintln!("decode_gpu: {e}");
        std::process::exit(2);
    }
}

/// The measurement, generic over the backend `run_on` picks.
struct DecodeJob(Options);

impl Job for DecodeJob {
    fn run<B: TrainingBackend>(self, device: B::Device) -> Result<(), AppError> {
        measure::<B::InnerBackend>(&self.0, &device)
    }
}

/// Loads the checkpoint, runs every batch size on both sides and reports.
fn measure<B: ModelBackend>(options: &Options, device: &B::Device) -> Result<(), AppError> {
    let loading = Instant::now();
    let run = Pretrained::<B>::load_with(&options.dir, WeightPrecision::Compute, device)?;
    println!("loaded {} in {:.1} s", options.dir.display(), loading.elapsed().as_secs_f64());
    let prompt = run.encode(&options.prompt, true)?;
    let mut rows = Vec::new();
    for &batch in &options.batches {
        eprintln!("batch {batch}: ours, a cold run and {} warm ones", options.runs);
        let cold = Instant::now();
        greedy(&run.model, &prompt, batch, options.tokens, device)?;
        let cold_s = cold.elapsed().as_secs_f64();
        let warm = (0..options.runs.max(1))
            .map(|_| greedy(&run.model, &prompt, batch, options.tokens, device))
            .collect::<Result<Vec<_>, _>>()?;
        rows.push(Row {
            batch,
            side: "swa-zoo".into(),
            step_ms: swa_zoo::bench::median(warm.iter().map(|g| g.step_ms).collect()),
            prefill_ms: warm.iter().map(|g| g.prefill_ms).fold(f64::INFINITY, f64::min),
            cold_s: Some(cold_s),
            tokens: warm[0].tokens.clone(),
        });
        if let Some(python) = &options.torch {
            let modes = ["dynamic", "static", "compile"];
            for mode in modes.into_iter().filter(|&m| m != "compile" || options.compile) {
                eprintln!("batch {batch}: transformers, {mode}");
                rows.push(transformers(python, options, prompt.len(), batch, mode)?);
            }
        }
    }
    report(&rows, options);
    Ok(())
}

/// What one greedy run measured.
struct Greedy {
    prefill_ms: f64,
    step_ms: f64,
    tokens: Vec<usize>,
}

/// `batch` copies of `prompt` decoded greedily for `new` tokens, the argmax kept on the device
/// and the tokens read back once at the end.
fn greedy<B: ModelBackend>(
    model: &Decoder<B>,
    prompt: &[usize],
    batch: usize,
    new: usize,
    device: &B::Device,
) -> Result<Greedy, AppError> {
    let n = prompt.len();
    let ids: Vec<i64> = (0..batch).flat_map(|_| prompt.iter().map(|&t| t as i64)).collect();
    let input = Tensor::<B, 2, Int>::from_data(TensorData::new(ids, [batch, n]), device);
    let start = Instant::now();
    let (logits, mut cache) = model.prefill(input)?;
    let mut next: Tensor<B, 1, Int> = logits.argmax(1).reshape([batch]);
    // Reading the first token waits for the prefill.
    next.clone().into_data();
    let prefill_ms = start.elapsed().as_secs_f64() * 1e3;
    let stepping = Instant::now();
    let mut chosen = vec![next.clone()];
    for _ in 1..new {
        next = model.step(next, &mut cache).argmax(1).reshape([batch]);
        chosen.push(next.clone());
    }
    let tokens = Tensor::stack::<2>(chosen, 1).into_data().convert::<i64>();
    let step_ms = stepping.elapsed().as_secs_f64() * 1e3 / new.saturating_sub(1).max(1) as f64;
    let tokens = tokens.to_vec::<i64>().unwrap_or_default();
    Ok(Greedy { prefill_ms, step_ms, tokens: tokens[..new].iter().map(|&t| t as usize).collect() })
}

/// transformers' run of the same prompt and batch in `mode` (dynamic, static or compile).
fn transformers(
    python: &str,
    options: &Options,
    prompt_tokens: usize,
    batch: usize,
    mode: &str,
) -> Result<Row, AppError> {
    let mut command = Command::new(python);
    command.arg("benches/anchors/decode_mistral.py").arg("time").arg("--model").arg(&options.dir);
    command.args(["--prompt", &options.prompt, "--prompt-tokens", &prompt_tokens.to_string()]);
    let device = if options.backend == BackendChoice::Cuda { "cuda" } else { "cpu" };
    let dtype = match options.precision {
        Precision::Bf16 => "bfloat16",
        _ => "float32",
    };
    command.args(["--device", device, "--dtype", dtype, "--batch", &batch.to_string()]);
    match mode {
        "compile" => command.arg("--compile"),
        cache => command.args(["--cache", cache]),
    };
    command.args(["--new-tokens", &options.tokens.to_string()]);
    command.args(["--runs", &options.runs.max(1).to_string()]);
    let output = command.output().map_err(|e| anchor_error(format!("does not start: {e}")))?;
    if !output.status.success() {
        return Err(anchor_error(String::from_utf8_lossy(&output.stderr).into_owned()));
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line: Value = serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .map_err(|e| anchor_error(format!("its JSON line: {e}")))?;
    let number = |key: &str| line[key].as_f64().unwrap_or(f64::NAN);
    let tokens = line["tokens"].as_array().cloned().unwrap_or_default();
    Ok(Row {
        batch,
        side: format!("transformers {mode}"),
        step_ms: number("decode_ms_per_token"),
        prefill_ms: number("prefill_ms"),
        cold_s: None,
        tokens: tokens.iter().filter_map(Value::as_u64).map(|t| t as usize).collect(),
    })
}

/// The anchor's failure as the bench's error.
fn anchor_error(problem: String) -> AppError {
    AppError::Anchor { script: "benches/anchors/decode_mistral.py".into(), problem }
}

/// The table on stdout (each side's step time as a ratio to ours, and where its tokens first
/// differ from ours) and the CSV.
fn report(rows: &[Row], options: &Options) {
    let ours = |batch: usize| rows.iter().find(|r| r.batch == batch && r.side == "swa-zoo");
    let mut csv = String::from(
        "backend,precision,batch,side,ms_per_step,prefill_ms,cold_s,side_over_ours,same_tokens\n",
    );
    println!(
        "{:>5} {:<22} {:>8} {:>10} {:>7} {:>8} {:>12}",
        "batch", "side", "ms/step", "prefill ms", "cold s", "ms/ours", "same tokens"
    );
    for r in rows {
        let base = ours(r.batch);
        let ratio = base.map_or(f64::NAN, |o| r.step_ms / o.step_ms);
        let same =
            base.map_or(0, |o| o.tokens.iter().zip(&r.tokens).take_while(|(a, b)| a == b).count());
        let cold = r.cold_s.map_or("-".into(), |s| format!("{s:.1}"));
        let same_text = format!("{same}/{}", r.tokens.len());
        println!(
            "{:>5} {:<22} {:>8.2} {:>10.1} {:>7} {:>8.2} {:>12}",
            r.batch, r.side, r.step_ms, r.prefill_ms, cold, ratio, same_text
        );
        csv += &format!(
            "{},{:?},{},{},{:.3},{:.2},{},{:.3},{}\n",
            options.backend.name(),
            options.precision,
            r.batch,
            r.side,
            r.step_ms,
            r.prefill_ms,
            r.cold_s.map_or(String::new(), |s| format!("{s:.2}")),
            ratio,
            same
        );
    }
    println!(
        "({} tokens per run, median of {} warm runs; ms/ours > 1: ours is faster)",
        options.tokens, options.runs
    );
    if let Some(path) = &options.csv {
        swa_zoo::models::files::write_bytes_atomically(path, csv.as_bytes())
            .expect("the CSV is writable");
        println!("CSV: {}", path.display());
    }
}
