//! The import against transformers: tiny random checkpoints of every family
//! (`tests/fixtures/hf`, built by its `make_fixtures.py`) with the logits and greedy
//! continuation transformers computed (eager attention, f32); and every bad input named.

use std::fs;
use std::path::{Path, PathBuf};

use crate::layers::CachePositions;
use burn::backend::NdArray;
use burn::store::{ModuleStore, SafetensorsStore};
use burn::tensor::{Int, Tensor, TensorData};

use crate::hf::{Family, HfProblem, load_decoder, parse_config};
use crate::{GenerateConfig, ModelError};

type B = NdArray;

/// f32 on the CPU against torch's f32: the same sums in other orders.
const LOGIT_TOLERANCE: f32 = 1e-4;

const FAMILIES: [&str; 5] = ["mistral", "qwen2", "gemma2", "gemma3", "llama"];

fn fixture(family: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/hf").join(family)
}

/// A tensor of `expected.safetensors` as its values and shape.
fn expected(family: &str, name: &str) -> (TensorData, Vec<usize>) {
    let mut store = SafetensorsStore::from_file(fixture(family).join("expected.safetensors"));
    let snapshot = store.get_snapshot(name).unwrap().expect("fixture tensor").clone();
    (snapshot.to_data().unwrap(), snapshot.shape.to_vec())
}

fn ids(family: &str, name: &str) -> Vec<i64> {
    expected(family, name).0.convert::<i64>().to_vec().unwrap()
}

/// The largest absolute difference of two equally long slices; a NaN counts as infinite.
pub(crate) fn max_abs(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    let error = |(x, y): (&f32, &f32)| (x - y).abs();
    // A NaN counts as an infinite error: `f32::max` would drop it.
    a.iter()
        .zip(b)
        .map(error)
        .map(|d| if d.is_nan() { f32::INFINITY } else { d })
        .fold(0.0, f32::max)
}

#[test]
fn every_family_computes_transformers_logits() {
    let device = Default::default();
    for family in FAMILIES {
        let model = load_decoder::<B>(&fixture(family), &device).unwrap();
        let (input, shape) = expected(family, "input_ids");
        let input = Tensor::<B, 2, Int>::from_data(input.convert::<i64>(), &device);
        let got: Vec<f32> = model.forward(input).unwrap().into_data().to_vec().unwrap();
        let want: Vec<f32> = expected(family, "logits").0.to_vec().unwrap();
        let error = max_abs(&got, &want);
        assert!(error <= LOGIT_TOLERANCE, "{family} {shape:?}: logits differ by {error}");
    }
}

#[test]
fn both_config_forms_read_as_one_model() {
    for family in FAMILIES {
        let read = |file: &str| {
            let text = fs::read_to_string(fixture(family).join(file)).unwrap();
            let (family, config) = parse_config(&text).unwrap();
            format!("{family:?} {config:?}")
        };
        assert_eq!(read("config.json"), read("config.transformers4.json"), "{family}");
    }
}

/// The prompt in one forward pass, then transformers' greedy tokens one step at a time: every
/// step's logits against transformers' (`greedy_logits`, eager, f32); and greedy generation
/// gives transformers' 32 tokens.
#[test]
fn prefill_and_decoding_follow_transformers_step_by_step() {
    let device = Default::default();
    for family in FAMILIES {
        let model = load_decoder::<B>(&fixture(family), &device).unwrap();
        let prompt = ids(family, "prompt_ids");
        let greedy = ids(family, "greedy_ids");
        let want: Vec<f32> = expected(family, "greedy_logits").0.to_vec().unwrap();
        let vocab = want.len() / greedy.len();
        let n = prompt.len();
        let tokens =
            Tensor::<B, 2, Int>::from_data(TensorData::new(prompt.clone(), [1, n]), &device);
        let (logits, mut cache) = model.prefill(tokens).unwrap();
        let mut got: Vec<f32> = logits.into_data().to_vec().unwrap();
        let last: Vec<f32> = expected(family, "prefill_last_logits").0.to_vec().unwrap();
        let error = max_abs(&got, &last);
        assert!(error <= LOGIT_TOLERANCE, "{family}: prefill logits differ by {error}");
        for &token in &greedy[..greedy.len() - 1] {
            let token = Tensor::<B, 1, Int>::from_data(TensorData::new(vec![token], [1]), &device);
            got.extend(model.step(token, &mut cache).into_data().to_vec::<f32>().unwrap());
        }
        for (step, (g, w)) in got.chunks(vocab).zip(want.chunks(vocab)).enumerate() {
            let error = max_abs(g, w);
            assert!(error <= LOGIT_TOLERANCE, "{family}: step {step} differs by {error}");
        }
        let config = GenerateConfig::new()
            .with_max_new_tokens(32)
            .with_temperature(0.0)
            .with_positions(CachePositions::Absolute);
        let prompt: Vec<usize> = prompt.iter().map(|&t| t as usize).collect();
        let generated = model.generate(&[prompt], &config, &device).unwrap();
        let greedy: Vec<usize> = greedy.iter().map(|&t| t as usize).collect();
        assert_eq!(generated[0], greedy, "{family}: greedy continuation");
    }
}

/// A copy of a fixture in a fresh temporary directory, to damage.
fn scratch(family: &str, tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("swa-zoo-hf-{tag}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    for entry in fs::read_dir(fixture(family)).unwrap() {
        let path = entry.unwrap().path();
        fs::copy(&path, dir.join(path.file_name().unwrap())).unwrap();
    }
    dir
}

/// The checkpoint problem of loading `dir`, and its one-line message.
fn problem(dir: &Path) -> (HfProblem, String) {
    match load_decoder::<B>(dir, &Default::default()) {
        Err(error @ ModelError::Checkpoint { .. }) => {
            let message = error.to_string();
            let ModelError::Checkpoint { problem, .. } = error else { unreachable!() };
            (problem, message)
        }
        Err(other) => panic!("expected a checkpoint error, got {other}"),
        Ok(_) => panic!("expected an error"),
    }
}

/// Rewrites `config.json` of `dir` through `edit`.
fn edit_config(dir: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    edit_json(&dir.join("config.json"), edit);
}

/// Rewrites the JSON file `path` through `edit`.
fn edit_json(path: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let mut json: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(path).unwrap()).unwrap();
    edit(&mut json);
    fs::write(path, json.to_string()).unwrap();
}

#[test]
fn bad_checkpoints_are_named_one_line_errors() {
    let dir = scratch("mistral", "config");
    fs::remove_file(dir.join("config.json")).unwrap();
    assert!(matches!(problem(&dir).0, HfProblem::NoConfig));

    let dir = scratch("mistral", "model-type");
    edit_config(&dir, |json| json["model_type"] = "gpt2".into());
    let (found, message) = problem(&dir);
    assert!(matches!(found, HfProblem::UnsupportedModelType { .. }), "{message}");
    assert!(message.contains("gpt2") && message.contains(Family::SUPPORTED), "{message}");

    let dir = scratch("mistral", "shape");
    edit_config(&dir, |json| json["intermediate_size"] = 96.into());
    let (found, message) = problem(&dir);
    assert!(matches!(found, HfProblem::ShapeMismatch { .. }), "{message}");
    assert!(message.contains("mlp.down_proj.weight") && message.contains("[64, 128]"), "{message}");
    assert!(message.contains("[64, 96]"), "{message}");

    let dir = scratch("mistral", "missing");
    edit_config(&dir, |json| json["tie_word_embeddings"] = false.into());
    edit_config(&dir, |json| json["num_hidden_layers"] = 4.into());
    let (found, message) = problem(&dir);
    assert!(matches!(found, HfProblem::MissingTensor { .. }), "{message}");
    assert!(message.contains("model.layers.3."), "{message}");

    let dir = scratch("mistral", "unexpected");
    edit_config(&dir, |json| json["num_hidden_layers"] = 2.into());
    let (found, message) = problem(&dir);
    assert!(matches!(found, HfProblem::UnexpectedTensor { .. }), "{message}");
    assert!(message.contains("model.layers.2."), "{message}");

    let dir = scratch("qwen2", "shard");
    fs::remove_file(dir.join("model-00003-of-00007.safetensors")).unwrap();
    let (found, message) = problem(&dir);
    assert!(matches!(found, HfProblem::MissingShard { .. }), "{message}");
    assert!(message.contains("model-00003-of-00007.safetensors"), "{message}");

    let dir = scratch("mistral", "truncated");
    let weights = dir.join("model.safetensors");
    let bytes = fs::read(&weights).unwrap();
    fs::write(&weights, &bytes[..bytes.len() / 2]).unwrap();
    let (found, message) = problem(&dir);
    assert!(matches!(found, HfProblem::CorruptFile { .. }), "{message}");
    assert!(message.contains("model.safetensors is truncated or corrupt"), "{message}");
    assert!(!message.contains('\n'), "one line: {message}");

    let dir = scratch("mistral", "weights");
    fs::remove_file(dir.join("model.safetensors")).unwrap();
    assert!(matches!(problem(&dir).0, HfProblem::NoWeights));

    let dir = scratch("mistral", "vocab");
    edit_config(&dir, |json| json["vocab_size"] = 300.into());
    let config = crate::hf::read_config(&dir).unwrap().1;
    match crate::hf::load_tokenizer(&dir, config.vocab_size) {
        Err(ModelError::Checkpoint {
            problem: HfProblem::TokenizerVocab { tokenizer, model },
            ..
        }) => {
            assert_eq!((tokenizer, model), (512, 300));
        }
        other => panic!("expected a vocabulary mismatch, got {:?}", other.err()),
    }
    for tag in [
        "config",
        "model-type",
        "shape",
        "missing",
        "unexpected",
        "shard",
        "truncated",
        "weights",
        "vocab",
    ] {
        let _ = fs::remove_dir_all(
            std::env::temp_dir().join(format!("swa-zoo-hf-{tag}-{}", std::process::id())),
        );
    }
}

#[test]
fn an_exported_model_reads_back_with_its_logits() {
    use crate::layers::AttentionKind;
    use crate::{Architecture, DecoderConfig};
    use swa_attention::RopeScaling;

    let device = Default::default();
    let scaled = Architecture {
        head_dim: Some(6),
        rope_scaling: Some(RopeScaling::Linear { factor: 2.0 }),
        ..Architecture::default()
    };
    let configs = [
        (
            DecoderConfig::new(vec![AttentionKind::Sliding { window: 3 }])
                .with_vocab_size(40)
                .with_d_model(16)
                .with_layers(2)
                .with_kv_heads(Some(2)),
            Family::Mistral,
        ),
        (
            DecoderConfig::new(vec![AttentionKind::Full])
                .with_vocab_size(40)
                .with_d_model(16)
                .with_layers(2)
                .with_kv_heads(Some(1))
                .with_tie_embeddings(true)
                .with_rope_base(5e5)
                .with_architecture(Some(scaled)),
            Family::Llama,
        ),
    ];
    let n = 9;
    let ids: Vec<i64> = (0..n as i64).map(|i| (i * 7 + 3) % 40).collect();
    for (k, (config, family)) in configs.iter().enumerate() {
        let model = config.init::<B>(&device).unwrap();
        let dir = std::env::temp_dir().join(format!("swa-zoo-export-{k}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        assert_eq!(crate::hf::export_decoder(&model, config, &dir).unwrap(), *family);
        let again = crate::hf::export_decoder(&model, config, &dir);
        assert!(matches!(
            again,
            Err(ModelError::Checkpoint { problem: HfProblem::WouldOverwrite { .. }, .. })
        ));
        let back = load_decoder::<B>(&dir, &device).unwrap();
        let tokens =
            || Tensor::<B, 2, Int>::from_data(TensorData::new(ids.clone(), [1, n]), &device);
        let want: Vec<f32> = model.forward(tokens()).unwrap().into_data().to_vec().unwrap();
        let got: Vec<f32> = back.forward(tokens()).unwrap().into_data().to_vec().unwrap();
        assert_eq!(got, want, "{family:?}: the round trip changes the logits");
        let _ = fs::remove_dir_all(&dir);
    }
    let mswa = DecoderConfig::new(vec![AttentionKind::MultiScale { windows: vec![1, 2, 3, 4] }])
        .with_vocab_size(40)
        .with_d_model(16)
        .with_layers(2)
        .with_kv_heads(Some(2));
    let model = mswa.init::<B>(&device).unwrap();
    let dir = std::env::temp_dir().join(format!("swa-zoo-export-mswa-{}", std::process::id()));
    match crate::hf::export_decoder(&model, &mswa, &dir) {
        Err(ModelError::Checkpoint { problem: HfProblem::NotExportable { reason }, .. }) => {
            assert!(reason.contains("MultiScale"), "{reason}");
        }
        other => panic!("expected NotExportable, got {:?}", other.err()),
    }
    assert!(!dir.exists(), "a refused export writes nothing");
}

/// The fixtures' tokenizer puts `<bos>` (id 1) before a text, as transformers reads it
/// (`make_fixtures.py` checks that side); without its post-processor it adds no BOS.
#[test]
fn the_bos_is_the_token_the_tokenizer_puts_first() {
    let dir = fixture("llama");
    let tokenizer = crate::hf::load_tokenizer(&dir, 512).unwrap();
    assert_eq!(tokenizer.bos(), Some(1));
    let plain = scratch("llama", "no-bos");
    edit_json(&plain.join("tokenizer.json"), |json| {
        json["post_processor"] = serde_json::Value::Null
    });
    assert_eq!(crate::hf::load_tokenizer(&plain, 512).unwrap().bos(), None);
    fs::remove_dir_all(plain).unwrap();
}
