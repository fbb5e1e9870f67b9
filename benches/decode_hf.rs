//! Decoding a Hugging Face checkpoint on the CPU against the machine's memory-bandwidth bound
//! and, optionally, against transformers on the same checkpoint.
//!
//! A decode step reads every weight but the input embedding table once, so at best it takes
//! (those bytes) ÷ (the machine's read bandwidth). This bench times greedy decoding with the
//! bounded caches on flex, on the CPU pool's threads as `swa-zoo generate` runs: one prefill
//! of the prompt, then single-token steps. A first run gives the peak resident memory (VmHWM)
//! against the weights' bytes, before the bandwidth probe's buffer exists, and the most heap it
//! held above the loaded model (a counting allocator: what the run itself needs, where the
//! resident peak also counts the allocator's slack and the loading). Then `--runs` timed
//! runs (median ms/token), each between two readings of the read bandwidth (two threads
//! summing a 1 GiB buffer, best of 5), and the ratio to the bound is the median of each run's
//! against the reading before it, over the runs whose two readings agree within 10%: the
//! machine's bandwidth drifts, and switches state within seconds.
//! With `--torch PYTHON` it runs `benches/anchors/decode_mistral.py time` on the same
//! checkpoint and prompt, and with `--gguf FILE` `benches/anchors/decode_llamacpp.py time` (the
//! checkpoint converted to GGUF in the same precision) on the prompt's token ids, once right
//! after each of our runs, so that each pair shares the machine's state; it compares speeds
//! (llama.cpp's as the median of the pairs' ratios) and the greedy tokens.
//!
//! With `--seven-b DIR`, the checkpoint is instead a 7B-shaped Mistral (Mistral 7B's sizes)
//! whose random bf16 weights the bench writes tensor by tensor into DIR, beside `--hf`'s config
//! and tokenizer with the sizes changed: transformers would build such a model in f32 (29 GB)
//! before saving it. DIR is removed afterwards.
//!
//! ```sh
//! python3 benches/anchors/decode_mistral.py make --out target/mistral-rand --dtype bfloat16
//! cargo bench --bench decode_hf -- --hf target/mistral-rand --weights bf16 --torch python3
//! cargo bench --bench decode_hf -- --hf target/mistral-rand --weights bf16 --seven-b target/m7b
//! ```

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use burn::backend::Flex;
use burn::backend::flex::FlexDevice;
use burn::tensor::{Int, Tensor, TensorData, bf16};
use clap::Parser;
use serde_json::Value;
use swa_zoo::attention::rng::SplitMix64;
use swa_zoo::bench::heap::{self, CountingAllocator};
use swa_zoo::choice::weights_flag;
use swa_zoo::models::Decoder;
use swa_zoo::models::hf::{self, WeightPrecision};

type B = Flex;

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

/// How far apart the bandwidth readings before and after a run may be for the run to count.
const STEADY: f64 = 0.1;

/// Bytes the bandwidth probe reads per pass.
const PROBE_BYTES: usize = 1 << 30;

/// The bench's options (`cargo bench --bench decode_hf -- --help`).
#[derive(Parser)]
#[command(
    about = "Decoding a Hugging Face checkpoint against the bandwidth bound and transformers"
)]
struct Options {
    /// What `cargo bench` passes to every bench; ignored.
    #[arg(long, hide = true)]
    bench: bool,
    /// The checkpoint's directory (config.json, model.safetensors, tokenizer.json).
    #[arg(long = "hf")]
    dir: PathBuf,
    /// The prompt (`decode_mistral.py time` prints a 64-token one for its model).
    #[arg(long, default_value = "In the beginning God created the heaven and the earth.")]
    prompt: String,
    /// Greedy tokens per run.
    #[arg(long, default_value_t = 256)]
    tokens: usize,
    /// Runs; the median ms/token is reported.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Threads of the bandwidth probe and of transformers.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// The Python that runs `benches/anchors/decode_mistral.py`; without it ours alone.
    #[arg(long)]
    torch: Option<String>,
    /// The float type the linear weights and the embedding table are kept in (`--weights` of
    /// the commands); the computation is f32.
    #[arg(long, value_parser = weights_flag(), default_value = "f32")]
    weights: WeightPrecision,
    /// llama.cpp's anchor on this GGUF file (the checkpoint converted by
    /// `benches/anchors/decode_llamacpp.py convert`), beside ours on the same prompt ids.
    #[arg(long)]
    gguf: Option<PathBuf>,
    /// The Python that runs `benches/anchors/decode_llamacpp.py` (with llama-cpp-python).
    #[arg(long, default_value = "python3")]
    llama_cpp: String,
    /// Decode a 7B-shaped Mistral with random bf16 weights written into this directory (then
    /// removed), with `--hf`'s tokenizer and the rest of its config.
    #[arg(long)]
    seven_b: Option<PathBuf>,
}

fn main() {
    let options = Options::parse();
    swa_zoo::runtime::on_cpu_threads(|| run(&options));
}

fn run(options: &Options) {
    swa_zoo::runtime::keep_large_buffers_on_the_heap();
    let device = Default::default();
    let dir = match &options.seven_b {
        Some(dir) => {
            write_seven_b(&options.dir, dir).unwrap_or_else(|e| fail(e));
            dir.clone()
        }
        None => options.dir.clone(),
    };
    let loading = Instant::now();
    let (family, config) = hf::read_config(&dir).unwrap_or_else(|e| fail(e));
    let precision = options.weights;
    let model = hf::load_weights::<B>(&dir, family, &config, precision, &device)
        .unwrap_or_else(|e| fail(e));
    let loaded_s = loading.elapsed().as_secs_f64();
    let tokenizer = hf::load_tokenizer(&options.dir, config.vocab_size).unwrap_or_else(|e| fail(e));
    let prompt = tokenizer.encode(&options.prompt, true).unwrap_or_else(|e| fail(format!("{e:?}")));
    let weights = model.weight_bytes();
    let per_token = match config.tie_embeddings {
        true => weights,
        false => weights - model.embedding_bytes(),
    };
    // A first run before the bandwidth probe's buffer exists: the peak resident memory of
    // loading and decoding.
    let ((mut prefill, _, mut tokens), heap) =
        heap::peak_during(|| greedy(&model, &prompt, options.tokens, &device));
    let peak = heap::peak_rss_kib().unwrap_or(0) as f64 * 1024.0;
    let heap = heap.unwrap_or(0) as f64;
    // Then each timed run between two bandwidth readings, against the first of which it is
    // compared: the machine's bandwidth drifts (42–68 GB/s, switching within seconds here), so
    // a run counts only where the readings around it agree.
    let probe: Vec<u64> = (0..PROBE_BYTES / 8).map(|i| i as u64).collect();
    let (mut decode, mut bandwidths, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    let (mut llama_cpp, mut steady) = (Vec::new(), Vec::new());
    for _ in 0..options.runs {
        let bandwidth = read_bandwidth(&probe, options.threads);
        let (prefill_ms, step_ms, run_tokens) = greedy(&model, &prompt, options.tokens, &device);
        prefill = prefill.min(prefill_ms);
        ratios.push(step_ms / (per_token as f64 / bandwidth * 1e3));
        decode.push(step_ms);
        bandwidths.push(bandwidth / 1e9);
        tokens = run_tokens;
        // llama.cpp right after each of ours, so that each pair shares the machine's state.
        if let Some(gguf) = &options.gguf {
            llama_cpp.push(run_llama_cpp(&options.llama_cpp, gguf, &prompt, options));
        }
        let after = read_bandwidth(&probe, options.threads);
        steady.push((after / bandwidth - 1.0).abs() <= STEADY);
    }
    let ms = swa_zoo::bench::median(decode.clone());
    let bandwidth = swa_zoo::bench::median(bandwidths.clone());
    let bound_ms = per_token as f64 / (bandwidth * 1e9) * 1e3;
    println!("checkpoint        {}, weights in {}", dir.display(), options.weights.name());
    println!("loaded in         {loaded_s:.1} s");
    println!("prompt            {} tokens, prefill {prefill:.1} ms", prompt.len());
    println!(
        "read bandwidth    {bandwidth:.1} GB/s (median; before each run {bandwidths:.1?}; {} threads, best of 5 over 1 GiB)",
        options.threads
    );
    println!("weights per token {:.1} MB -> bound {bound_ms:.2} ms/token", per_token as f64 / 1e6);
    let kept = steady.iter().filter(|&&s| s).count();
    println!(
        "decode            {ms:.2} ms/token (runs {decode:.2?}) = {:.2}x the bound (median over the {kept} of {} runs whose readings before and after agree within {:.0}%; each run against its reading {ratios:.2?})",
        steady_median(&ratios, &steady),
        options.runs,
        STEADY * 100.0
    );
    println!(
        "peak RSS          {:.0} MB = {:.2}x the weights' {:.0} MB; the first run's heap peaked {:.0} MB above the loaded model's",
        peak / 1e6,
        peak / weights as f64,
        weights as f64 / 1e6,
        heap / 1e6
    );
    if let Some(python) = &options.torch {
        compare(python, options, ms, &tokens);
    }
    if !llama_cpp.is_empty() {
        report_pairs("llama.cpp", &llama_cpp, (&decode, &steady), &tokens);
    }
    if options.seven_b.is_some() {
        std::fs::remove_dir_all(&dir).unwrap_or_else(|e| fail(format!("{}: {e}", dir.display())));
    }
}

/// Mistral 7B's sizes, over the template's config.
const SEVEN_B: [(&str, usize); 6] = [
    ("hidden_size", 4096),
    ("intermediate_size", 14336),
    ("num_hidden_layers", 32),
    ("num_attention_heads", 32),
    ("num_key_value_heads", 8),
    ("head_dim", 128),
];

/// A 7B-shaped Mistral in `dir`: the config of `template` with [`SEVEN_B`]'s sizes, its
/// tokenizer, and random bf16 weights (uniform with standard deviation 0.05, norms 1) written
/// to `model.safetensors` a slice at a time, never whole in memory.
fn write_seven_b(template: &Path, dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    for file in ["tokenizer.json", "tokenizer_config.json"] {
        std::fs::copy(template.join(file), dir.join(file))?;
    }
    let mut config: Value =
        serde_json::from_str(&std::fs::read_to_string(template.join("config.json"))?)?;
    for (field, size) in SEVEN_B {
        config[field] = size.into();
    }
    std::fs::write(dir.join("config.json"), serde_json::to_string_pretty(&config)?)?;
    let size = |field: &str| config[field].as_u64().unwrap_or(0) as usize;
    let (d, mlp, vocab) = (size("hidden_size"), size("intermediate_size"), size("vocab_size"));
    let head = size("head_dim");
    let (q, kv) = (size("num_attention_heads") * head, size("num_key_value_heads") * head);
    let mut tensors = vec![("model.embed_tokens.weight".to_string(), vec![vocab, d])];
    for l in 0..size("num_hidden_layers") {
        let name = |part: &str| format!("model.layers.{l}.{part}.weight");
        tensors.extend([
            (name("input_layernorm"), vec![d]),
            (name("self_attn.q_proj"), vec![q, d]),
            (name("self_attn.k_proj"), vec![kv, d]),
            (name("self_attn.v_proj"), vec![kv, d]),
            (name("self_attn.o_proj"), vec![d, q]),
            (name("post_attention_layernorm"), vec![d]),
            (name("mlp.gate_proj"), vec![mlp, d]),
            (name("mlp.up_proj"), vec![mlp, d]),
            (name("mlp.down_proj"), vec![d, mlp]),
        ]);
    }
    tensors.push(("model.norm.weight".into(), vec![d]));
    tensors.push(("lm_head.weight".into(), vec![vocab, d]));
    let mut header = serde_json::Map::new();
    let mut offset = 0;
    for (name, shape) in &tensors {
        let bytes = 2 * shape.iter().product::<usize>();
        let entry = serde_json::json!({"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + bytes]});
        header.insert(name.clone(), entry);
        offset += bytes;
    }
    let mut header = serde_json::to_string(&header)?.into_bytes();
    header.resize(header.len().next_multiple_of(8), b' ');
    let mut out = std::io::BufWriter::new(std::fs::File::create(dir.join("model.safetensors"))?);
    out.write_all(&(header.len() as u64).to_le_bytes())?;
    out.write_all(&header)?;
    let mut rng = SplitMix64::new(7);
    let scale = 0.05 * 3f32.sqrt();
    for (name, shape) in &tensors {
        let n: usize = shape.iter().product();
        let norm = name.ends_with("norm.weight");
        let mut left = n;
        while left > 0 {
            let chunk: Vec<u8> = (0..left.min(1 << 20))
                .flat_map(|_| {
                    let value = if norm { 1.0 } else { scale * rng.next_signed_f32() };
                    bf16::from_f32(value).to_bits().to_le_bytes()
                })
                .collect();
            left -= chunk.len() / 2;
            out.write_all(&chunk)?;
        }
    }
    out.flush()?;
    println!("wrote             {} ({:.1} GB of bf16 weights)", dir.display(), offset as f64 / 1e9);
    Ok(())
}

/// Ends the bench with a one-line error.
fn fail(problem: impl std::fmt::Display) -> ! {
    eprintln!("decode_hf: {problem}");
    std::process::exit(2)
}

/// One greedy generation of `new` tokens after `prompt`: (prefill ms, median ms per decode
/// step, the tokens).
fn greedy(
    model: &Decoder<B>,
    prompt: &[usize],
    new: usize,
    device: &FlexDevice,
) -> (f64, f64, Vec<usize>) {
    let argmax = |logits: Tensor<B, 2>| -> usize {
        logits.argmax(1).into_data().convert::<i64>().to_vec::<i64>().expect("ids")[0] as usize
    };
    let start = Instant::now();
    let ids: Vec<i64> = prompt.iter().map(|&t| t as i64).collect();
    let input = Tensor::<B, 2, Int>::from_data(TensorData::new(ids, [1, prompt.len()]), device);
    let (logits, mut cache) = model.prefill(input).expect("the prompt fits the model");
    let mut tokens = vec![argmax(logits)];
    let prefill_ms = start.elapsed().as_secs_f64() * 1e3;
    let mut steps = Vec::with_capacity(new);
    for _ in 1..new {
        let step = Instant::now();
        let last = *tokens.last().expect("one token at least") as i64;
        let input = Tensor::<B, 1, Int>::from_data(TensorData::new(vec![last], [1]), device);
        tokens.push(argmax(model.step(input, &mut cache)));
        steps.push(step.elapsed().as_secs_f64() * 1e3);
    }
    (prefill_ms, swa_zoo::bench::median(steps), tokens)
}

/// Bytes per second that `threads` threads read from memory: each sums its share of a 1 GiB
/// buffer; the best of 5 passes.
fn read_bandwidth(buffer: &[u64], threads: usize) -> f64 {
    let share = buffer.len().div_ceil(threads.max(1));
    let mut best = f64::INFINITY;
    for _ in 0..5 {
        let start = Instant::now();
        let sums: u64 = std::thread::scope(|scope| {
            let handles: Vec<_> = buffer
                .chunks(share)
                .map(|chunk| {
                    scope.spawn(move || chunk.iter().fold(0u64, |a, &x| a.wrapping_add(x)))
                })
                .collect();
            handles.into_iter().map(|h| h.join().expect("a reader")).fold(0, u64::wrapping_add)
        });
        std::hint::black_box(sums);
        best = best.min(start.elapsed().as_secs_f64());
    }
    std::mem::size_of_val(buffer) as f64 / best
}

/// transformers on the same checkpoint and prompt: its ms/token against ours, and the tokens.
fn compare(python: &str, options: &Options, ours_ms: f64, ours: &[usize]) {
    let mut command = Command::new(python);
    command.arg("benches/anchors/decode_mistral.py").arg("time").arg("--model").arg(&options.dir);
    command.args(["--prompt", &options.prompt]);
    report("transformers", run_anchor(command, options, options.runs), ours_ms, ours);
}

/// One run of llama.cpp on `gguf`, the same checkpoint converted by `decode_llamacpp.py
/// convert`, fed the prompt's token ids: its JSON line.
fn run_llama_cpp(python: &str, gguf: &Path, prompt: &[usize], options: &Options) -> Value {
    let ids: Vec<String> = prompt.iter().map(usize::to_string).collect();
    let mut command = Command::new(python);
    command.arg("benches/anchors/decode_llamacpp.py").arg("time").arg("--gguf").arg(gguf);
    command.args(["--ids", &ids.join(",")]);
    run_anchor(command, options, 1)
}

/// The JSON line an anchor prints, run with the bench's tokens and threads, `runs` times.
fn run_anchor(mut command: Command, options: &Options, runs: usize) -> Value {
    command.args(["--new-tokens", &options.tokens.to_string()]);
    command.args(["--threads", &options.threads.to_string()]);
    let output = command.args(["--runs", &runs.to_string()]).output();
    let output = output.unwrap_or_else(|e| fail(format!("the anchor does not start: {e}")));
    if !output.status.success() {
        fail(format!("anchor: {}", String::from_utf8_lossy(&output.stderr)));
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| fail(format!("the anchor's JSON line: {e}")))
}

/// An anchor run once after each of our runs (`runs`, beside our ms/token `ours_ms` and whether
/// the machine's bandwidth held steady over the pair): its median ms/token, and ours against it
/// as the median of the steady pairs' ratios.
fn report_pairs(name: &str, runs: &[Value], (ours_ms, steady): (&[f64], &[bool]), ours: &[usize]) {
    let ms: Vec<f64> =
        runs.iter().map(|r| r["decode_ms_per_token"].as_f64().unwrap_or(f64::NAN)).collect();
    let pairs: Vec<f64> = ms.iter().zip(ours_ms).map(|(theirs, ours)| theirs / ours).collect();
    let theirs = anchor_tokens(runs.last().expect("a run"));
    let prefill =
        runs.iter().filter_map(|r| r["prefill_ms"].as_f64()).fold(f64::INFINITY, f64::min);
    let peak = runs.iter().filter_map(|r| r["vmhwm_kib"].as_f64()).fold(0.0, f64::max);
    println!(
        "{name:<17} {:.2} ms/token (runs {ms:.2?}), prefill {prefill:.1} ms, peak RSS {:.0} MB; ours is {:.2}x its speed (median of the steady pairs; all pairs {pairs:.2?})",
        swa_zoo::bench::median(ms.clone()),
        peak / 1e3 * 1.024,
        steady_median(&pairs, steady),
    );
    print_agreement(name, &theirs, ours);
}

/// The median of the `values` of steady runs, or of all where none was.
fn steady_median(values: &[f64], steady: &[bool]) -> f64 {
    let kept: Vec<f64> = values.iter().zip(steady).filter(|(_, s)| **s).map(|(v, _)| *v).collect();
    swa_zoo::bench::median(if kept.is_empty() { values.to_vec() } else { kept })
}

/// An anchor's speed and peak memory against ours, and how many greedy tokens agree.
fn report(name: &str, report: Value, ours_ms: f64, ours: &[usize]) {
    let theirs_ms = report["decode_ms_per_token"].as_f64().unwrap_or(f64::NAN);
    let theirs = anchor_tokens(&report);
    println!(
        "{name:<17} {theirs_ms:.2} ms/token, prefill {:.1} ms, peak RSS {:.0} MB; ours is {:.2}x its speed",
        report["prefill_ms"].as_f64().unwrap_or(f64::NAN),
        report["vmhwm_kib"].as_f64().unwrap_or(0.0) / 1e3 * 1.024,
        theirs_ms / ours_ms
    );
    print_agreement(name, &theirs, ours);
}

/// The greedy tokens of an anchor's JSON line.
fn anchor_tokens(report: &Value) -> Vec<usize> {
    let tokens = report["tokens"].as_array();
    tokens
        .map(|t| t.iter().filter_map(Value::as_u64).map(|t| t as usize).collect())
        .unwrap_or_default()
}

/// How many of the first greedy tokens an anchor and we agree on.
fn print_agreement(name: &str, theirs: &[usize], ours: &[usize]) {
    let same = theirs.iter().zip(ours).take_while(|(a, b)| a == b).count();
    println!(
        "greedy tokens     {same} of {} identical with {name}'s",
        ours.len().min(theirs.len())
    );
}
