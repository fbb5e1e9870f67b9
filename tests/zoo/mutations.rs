//! Mutation tests of every input the project reads (docs/reliability.md): valid files
//! (`config.json`, `model.safetensors` header and data, a sharded checkpoint's index,
//! `tokenizer.json`, a GGUF file, `train.json`, a
//! training checkpoint's records, an `eval-choice` tasks file, a corpus), each mutated many
//! times with byte flips, truncations, insertions and JSON field changes, seeded so that a
//! failure reproduces. Every mutated input must end in a result or an error: a panic fails the
//! test naming the input and its seed, and an input that takes longer than [`DEADLINE`] is a
//! hang. Sizes read from a file are checked before anything is allocated, so no input may
//! abort the process on an allocation either (the test would die).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use burn::backend::NdArray;
use serde_json::Value;
use swa_zoo::attention::rng::SplitMix64;
use swa_zoo::models::hf::{load_decoder, load_tokenizer, read_config};

/// The longest one input may take.
const DEADLINE: Duration = Duration::from_secs(10);

/// A seeded mutation of `bytes`: one of flipping a few bytes, truncating, inserting random
/// bytes, repeating a span, or (for JSON) changing one field's value or removing it.
fn mutate(bytes: &[u8], json: bool, rng: &mut SplitMix64) -> Vec<u8> {
    let mut out = bytes.to_vec();
    let len = out.len().max(1);
    match rng.below(if json { 6 } else { 5 }) {
        0 => {
            for _ in 0..1 + rng.below(4) {
                let at = rng.below(len).min(out.len().saturating_sub(1));
                if let Some(byte) = out.get_mut(at) {
                    *byte ^= 1 << rng.below(8);
                }
            }
        }
        1 => out.truncate(rng.below(len)),
        2 => {
            let at = rng.below(len + 1).min(out.len());
            let junk: Vec<u8> = (0..1 + rng.below(16)).map(|_| rng.next_u64() as u8).collect();
            out.splice(at..at, junk);
        }
        3 => {
            let (from, span) = (rng.below(len).min(out.len()), 1 + rng.below(64));
            let piece = out[from..(from + span).min(out.len())].to_vec();
            out.splice(from..from, piece);
        }
        4 => {
            let at = rng.below(len).min(out.len().saturating_sub(1));
            if let Some(byte) = out.get_mut(at) {
                *byte = [b'0', b'9', b'-', b'"', b'{', b'}', b'[', 0xFF][rng.below(8)];
            }
        }
        _ => return mutate_json(bytes, rng).unwrap_or(out),
    }
    out
}

/// One value of the JSON document `bytes` (any field or item, at any depth) replaced by an
/// awkward one, or a field removed.
fn mutate_json(bytes: &[u8], rng: &mut SplitMix64) -> Option<Vec<u8>> {
    let mut value: Value = serde_json::from_slice(bytes).ok()?;
    let mut pointers = Vec::new();
    collect_pointers(&value, String::new(), &mut pointers);
    let pointer = &pointers[rng.below(pointers.len())];
    let (parent, key) = pointer.rsplit_once('/').unwrap_or(("", ""));
    if let (Some(Value::Object(map)), true) = (value.pointer_mut(parent), rng.below(8) == 0) {
        map.remove(key);
    } else if let Some(node) = value.pointer_mut(pointer) {
        let awkward = [
            Value::from(0),
            Value::from(-1),
            Value::from(1_000_000_000_000u64),
            Value::from(u64::MAX),
            Value::from(1e300),
            Value::from(0.5),
            Value::from("x"),
            Value::Null,
            Value::from(true),
            Value::Array(Vec::new()),
            Value::Object(Default::default()),
        ];
        *node = awkward[rng.below(awkward.len())].clone();
    }
    serde_json::to_vec(&value).ok()
}

/// The JSON pointers of `value` and of everything inside it.
fn collect_pointers(value: &Value, at: String, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                let escaped = key.replace('~', "~0").replace('/', "~1");
                collect_pointers(child, format!("{at}/{escaped}"), out);
            }
        }
        Value::Array(items) => {
            for (index, child) in items.iter().enumerate() {
                collect_pointers(child, format!("{at}/{index}"), out);
            }
        }
        _ => {}
    }
    out.push(at);
}

/// One kind of input: the file it mutates in a folder, whether it is JSON, how many mutated
/// copies to try, and the reader a user's command would run on the folder.
struct Target {
    name: &'static str,
    file: &'static str,
    json: bool,
    count: usize,
    read: fn(&Path) -> Result<(), String>,
}

/// A Hugging Face checkpoint folder as `generate --hf` reads it: the configuration, the
/// weights against it, the tokenizer, and a round trip of a text through it.
fn read_hf(dir: &Path) -> Result<(), String> {
    let device = Default::default();
    let (_, config) = read_config(dir).map_err(|e| e.to_string())?;
    load_decoder::<NdArray>(dir, &device).map_err(|e| e.to_string())?;
    let tokenizer = load_tokenizer(dir, config.vocab_size).map_err(|e| e.to_string())?;
    let ids = tokenizer.encode("In the beginning", true).map_err(|e| e.to_string())?;
    tokenizer.decode(&ids).map(|_| ()).map_err(|e| e.to_string())
}

/// A GGUF checkpoint (`model.gguf` of `dir`) as `generate --hf FILE` reads it.
fn read_gguf(dir: &Path) -> Result<(), String> {
    read_hf(&dir.join("model.gguf"))
}

/// A training run's folder as `train --resume` reads it, up to the Learner: `train.json`, the
/// model record checked against it, and the search for a complete checkpoint.
fn read_run(dir: &Path) -> Result<(), String> {
    use swa_zoo::training::checkpoint::{check_model_checkpoint, find_checkpoint};
    use swa_zoo::training::train::TrainConfig;
    let config: TrainConfig =
        swa_zoo::training::config_file::load(&dir.join("train.json")).map_err(|e| e.to_string())?;
    // The record is read even when its sidecar rejects it: the reader beneath must hold too.
    let model = dir.join("checkpoint").join("model-2.mpk");
    let checked = check_model_checkpoint::<NdArray>(&config, &model, &Default::default());
    find_checkpoint(dir).found.ok_or("no complete checkpoint")?;
    checked.map_err(|e| e.to_string())
}

/// An `eval-choice` tasks file.
fn read_tasks(dir: &Path) -> Result<(), String> {
    swa_zoo::cli::eval_choice::read_questions(&dir.join("tasks.jsonl"))
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// A corpus, read as bytes and as words.
fn read_corpus(dir: &Path) -> Result<(), String> {
    use swa_zoo::training::corpus::Corpus;
    let path = dir.join("corpus.txt");
    Corpus::bytes_from_file(&path).map_err(|e| e.to_string())?;
    Corpus::words_from_file(&path, 1).map(|_| ()).map_err(|e| e.to_string())
}

/// Copies every file of `from` into `to`.
fn copy_folder(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_dir() {
            copy_folder(&entry.path(), &to.join(entry.file_name()));
        } else {
            std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
        }
    }
}

/// A folder holding a finished tiny training run (`train.json` and its checkpoints).
fn training_run(root: &Path) -> PathBuf {
    use burn::backend::Autodiff;
    use swa_zoo::models::DecoderConfig;
    use swa_zoo::models::layers::AttentionKind;
    use swa_zoo::training::corpus::Corpus;
    use swa_zoo::training::train::{TrainConfig, train};
    let model = DecoderConfig::new(vec![AttentionKind::Sliding { window: 4 }])
        .with_d_model(16)
        .with_layers(1)
        .with_heads(2);
    let config = TrainConfig::new(model, 8)
        .with_batch_size(1)
        .with_steps(2)
        .with_checkpoint_every(2)
        .with_warmup_steps(1)
        .with_valid_batches(1);
    let out = root.join("run");
    train::<Autodiff<NdArray>>(&config, &Corpus::embedded(), &out, false, &Default::default())
        .unwrap();
    out
}

/// Runs `target.count` mutations of its file in `dir` through its reader; returns how many
/// ended in a result and how many in an error. Panics (naming the seed) on a reader's panic or
/// an input past the deadline.
fn run_target(target: &Target, dir: &Path, seed: u64) -> (usize, usize) {
    let path = dir.join(target.file);
    let original = std::fs::read(&path).unwrap();
    let mut rng = SplitMix64::new(seed);
    let (mut read, mut refused) = (0, 0);
    for index in 0..target.count {
        let mutated = mutate(&original, target.json, &mut rng);
        std::fs::write(&path, &mutated).unwrap();
        let start = Instant::now();
        let outcome = std::panic::catch_unwind(|| (target.read)(dir));
        let took = start.elapsed();
        let Ok(result) = outcome else {
            std::fs::write(dir.join("panicked-input"), &mutated).unwrap();
            panic!("{}: mutation {index} (seed {seed}) panicked", target.name);
        };
        assert!(took < DEADLINE, "{}: mutation {index} (seed {seed}) took {took:?}", target.name);
        match result {
            Ok(()) => read += 1,
            Err(_) => refused += 1,
        }
    }
    std::fs::write(&path, &original).unwrap();
    (read, refused)
}

#[test]
fn mutated_inputs_end_in_a_result_or_an_error() {
    let root = std::env::temp_dir().join(format!("swa-mutations-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hf");
    let (hf, sharded) = (root.join("hf"), root.join("sharded"));
    copy_folder(&fixtures.join("mistral"), &hf);
    copy_folder(&fixtures.join("qwen2"), &sharded);
    let gguf = root.join("gguf");
    copy_folder(&fixtures.join("../gguf/tiny"), &gguf);
    let run = training_run(&root);
    let files = root.join("files");
    std::fs::create_dir_all(&files).unwrap();
    std::fs::copy(fixtures.join("choice/tasks.jsonl"), files.join("tasks.jsonl")).unwrap();
    std::fs::copy(fixtures.join("corpus.txt"), files.join("corpus.txt")).unwrap();
    let json = |name, count, read| Target { name, file: name, json: true, count, read };
    let bytes = |name, file, count, read| Target { name, file, json: false, count, read };
    let targets = [
        (json("config.json", 5000, read_hf), &hf),
        (bytes("model.safetensors", "model.safetensors", 1200, read_hf), &hf),
        (json("tokenizer.json", 1800, read_hf), &hf),
        (json("model.safetensors.index.json", 1000, read_hf), &sharded),
        (bytes("model.gguf", "model.gguf", 800, read_gguf), &gguf),
        (json("train.json", 4000, read_run), &run),
        (bytes("model checkpoint", "checkpoint/model-2.mpk", 2000, read_run), &run),
        (bytes("tasks.jsonl", "tasks.jsonl", 3000, read_tasks), &files),
        (bytes("corpus", "corpus.txt", 3000, read_corpus), &files),
    ];
    let start = Instant::now();
    let mut total = 0;
    for (seed, (target, dir)) in targets.iter().enumerate() {
        let begun = Instant::now();
        let (read, refused) = run_target(target, dir, 0x5EED_0000 + seed as u64);
        total += read + refused;
        eprintln!(
            "{}: {} mutations, {read} read, {refused} refused with an error, {:.1} s",
            target.name,
            read + refused,
            begun.elapsed().as_secs_f64()
        );
    }
    eprintln!(
        "{total} mutated inputs, no panic, no hang, in {:.1} s",
        start.elapsed().as_secs_f64()
    );
    assert!(total >= 20_000);
    let _ = std::fs::remove_dir_all(root);
}
