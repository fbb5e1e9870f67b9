//! Weights I/O: Burn records and safetensors reproduce the model and name their tensors as
//! documented; missing, corrupt and mismatched files are rejected with the problem named; a
//! failed save leaves the old file.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use burn::module::Module;
use burn::record::{FullPrecisionSettings, NamedMpkFileRecorder};
use burn::store::{ModuleStore, SafetensorsStore};
use burn::tensor::{Int, Tensor, TensorData};
use swa_models::layers::AttentionKind;
use swa_models::weights::{export_safetensors, import_safetensors, load_record, save_record};
use swa_models::{Decoder, DecoderConfig, ModelError};

use crate::{Reference, max_abs, to_vec};

/// A scratch directory under the system's temporary directory, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(test: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("swa-zoo-weights-{test}-{}", std::process::id()));
        fs::remove_dir_all(&dir).ok();
        fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    fn path(&self, file: &str) -> PathBuf {
        self.0.join(file)
    }

    /// The names of the files in the directory.
    fn files(&self) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(&self.0)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into())
            .collect();
        names.sort();
        names
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        fs::remove_dir_all(&self.0).ok();
    }
}

fn longformer() -> AttentionKind {
    AttentionKind::Longformer { window: 2, dilations: vec![1, 1], globals: vec![0], causal: true }
}

/// Vocabulary 32, 2 query heads and 1 kv head, one layer per attention kind.
fn config(d_model: usize, attention: Vec<AttentionKind>, tied: bool) -> DecoderConfig {
    let layers = attention.len();
    DecoderConfig::new(attention)
        .with_vocab_size(32)
        .with_d_model(d_model)
        .with_layers(layers)
        .with_heads(2)
        .with_kv_heads(Some(1))
        .with_tie_embeddings(tied)
}

/// Sliding window, Longformer with a global position, and linear attention.
fn tiny(tied: bool) -> DecoderConfig {
    let kinds = vec![
        AttentionKind::Sliding { window: 4 },
        longformer(),
        AttentionKind::Linear { feature_dim: 4 },
    ];
    config(16, kinds, tied)
}

fn logits(model: &Decoder<Reference>) -> Vec<f32> {
    let ids: Vec<i64> = (0..24).map(|i| (i * 7 + 3) % 32).collect();
    let tokens =
        Tensor::<Reference, 2, Int>::from_data(TensorData::new(ids, [2, 12]), &Default::default());
    to_vec(model.forward(tokens).unwrap())
}

fn init(config: &DecoderConfig) -> Decoder<Reference> {
    config.init(&Default::default()).unwrap()
}

/// The message of a weights error; panics on anything else.
fn problem(result: Result<Decoder<Reference>, ModelError>) -> String {
    match result {
        Err(e @ ModelError::Weights { .. }) => e.to_string(),
        Err(e) => panic!("expected a weights error, got {e}"),
        Ok(_) => panic!("expected a weights error, got a model"),
    }
}

type Load = fn(&DecoderConfig, &Path) -> Result<Decoder<Reference>, ModelError>;

fn load_mpk(config: &DecoderConfig, path: &Path) -> Result<Decoder<Reference>, ModelError> {
    load_record(config, path, &Default::default())
}

fn load_safetensors(config: &DecoderConfig, path: &Path) -> Result<Decoder<Reference>, ModelError> {
    import_safetensors(config, path, &Default::default())
}

#[test]
fn record_round_trip_reproduces_the_logits() {
    let dir = Scratch::new("record");
    for tied in [false, true] {
        let config = tiny(tied);
        let model = init(&config);
        let file = save_record(&model, &dir.path("model.bin")).unwrap();
        assert_eq!(file, dir.path("model.mpk"), "Burn's extension");
        assert!(max_abs(&logits(&init(&config)), &logits(&model)) > 0.0, "a fresh model differs");
        let loaded = load_mpk(&config, &dir.path("model")).unwrap();
        assert_eq!(max_abs(&logits(&loaded), &logits(&model)), 0.0, "tied: {tied}");
        let recorder = NamedMpkFileRecorder::<FullPrecisionSettings>::new();
        let by_burn = init(&config).load_file(file, &recorder, &Default::default()).unwrap();
        assert_eq!(max_abs(&logits(&by_burn), &logits(&model)), 0.0, "Burn's recorder reads it");
    }
}

#[test]
fn safetensors_round_trip_reproduces_the_logits() {
    let dir = Scratch::new("safetensors");
    let path = dir.path("model.safetensors");
    for tied in [false, true] {
        let config = tiny(tied);
        let model = init(&config);
        export_safetensors(&model, &path).unwrap();
        let loaded = load_safetensors(&config, &path).unwrap();
        assert_eq!(max_abs(&logits(&loaded), &logits(&model)), 0.0, "tied: {tied}");
    }
}

#[test]
fn safetensors_names_are_the_documented_ones() {
    let dir = Scratch::new("names");
    let path = dir.path("model.safetensors");
    export_safetensors(&init(&tiny(false)), &path).unwrap();
    let mut store = SafetensorsStore::from_file(&path);
    let found: BTreeMap<String, Vec<usize>> = store
        .get_all_snapshots()
        .unwrap()
        .iter()
        .map(|(name, t)| (name.clone(), t.shape.to_vec()))
        .collect();
    // d = 16, H = 2, H_kv = 1, d_h = 8, MLP hidden 64, d_f = 4.
    let mut expected = vec![("embedding.weight".to_string(), vec![32, 16])];
    for l in 0..3 {
        let block = |name: &str, shape: &[usize]| (format!("blocks.{l}.{name}"), shape.to_vec());
        expected.push(block("attention_norm.gamma", &[16]));
        let projections = match l {
            0 => vec!["local"],
            1 => vec!["local", "global"],
            _ => vec![],
        };
        for set in projections {
            let weight = |name| format!("attention.mixer.Windowed.{set}.{name}.weight");
            expected.push(block(&weight("query"), &[16, 16]));
            expected.push(block(&weight("key"), &[16, 8]));
            expected.push(block(&weight("value"), &[16, 8]));
        }
        if l < 2 {
            expected.push(block("attention.mixer.Windowed.output.weight", &[16, 16]));
        } else {
            expected.push(block("attention.mixer.Linear.query.weight", &[16, 8]));
            expected.push(block("attention.mixer.Linear.key.weight", &[16, 8]));
            expected.push(block("attention.mixer.Linear.value.weight", &[16, 16]));
            expected.push(block("attention.mixer.Linear.output.weight", &[16, 16]));
        }
        expected.push(block("mlp_norm.gamma", &[16]));
        expected.push(block("mlp.gate.weight", &[16, 64]));
        expected.push(block("mlp.up.weight", &[16, 64]));
        expected.push(block("mlp.down.weight", &[64, 16]));
    }
    expected.push(("norm.gamma".to_string(), vec![16]));
    expected.push(("head.weight".to_string(), vec![16, 32]));
    assert_eq!(found, expected.into_iter().collect::<BTreeMap<_, _>>());

    export_safetensors(&init(&tiny(true)), &path).unwrap();
    let keys = SafetensorsStore::from_file(&path).keys().unwrap();
    assert!(!keys.contains(&"head.weight".to_string()), "tied embeddings have no head");
}

#[test]
fn missing_files_are_named() {
    let dir = Scratch::new("missing");
    let message = problem(load_mpk(&tiny(false), &dir.path("absent")));
    assert!(message.contains("absent.mpk: cannot open"), "{message}");
    let message = problem(load_safetensors(&tiny(false), &dir.path("absent.safetensors")));
    assert!(message.contains("absent.safetensors: cannot read"), "{message}");
}

#[test]
fn corrupt_files_are_rejected() {
    let dir = Scratch::new("corrupt");
    let config = tiny(false);
    let model = init(&config);
    let noise: Vec<u8> =
        (0..4096u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
    let record = save_record(&model, &dir.path("model")).unwrap();
    let safetensors = dir.path("model.safetensors");
    export_safetensors(&model, &safetensors).unwrap();
    for (file, load) in [(record, load_mpk as Load), (safetensors, load_safetensors)] {
        let bytes = fs::read(&file).unwrap();
        for corrupt in [noise.clone(), bytes[..bytes.len() / 2].to_vec(), bytes[..5].to_vec()] {
            fs::write(&file, corrupt).unwrap();
            let error = load(&config, &file).expect_err("a corrupt file fails");
            assert!(
                std::error::Error::source(&error).is_some(),
                "the reader's error is kept as the source: {error}"
            );
            let message = problem(Err(error));
            assert!(message.contains("not a readable"), "{message}");
        }
    }
}

#[test]
fn weights_of_another_shape_are_named() {
    let dir = Scratch::new("shape");
    let model = init(&tiny(false));
    let record = save_record(&model, &dir.path("model")).unwrap();
    let safetensors = dir.path("model.safetensors");
    export_safetensors(&model, &safetensors).unwrap();
    let wider = DecoderConfig { d_model: 32, ..tiny(false) };
    for message in
        [problem(load_mpk(&wider, &record)), problem(load_safetensors(&wider, &safetensors))]
    {
        let named = "weight `blocks.0.attention.mixer.Windowed.local.key.weight` has shape [16, 8] \
                     in the file but [32, 16]";
        assert!(message.contains(named), "{message}");
    }
}

/// The messages of loading a model of `saved` as one of `loaded`, from a record and from
/// safetensors.
fn mismatch(dir: &Scratch, saved: &DecoderConfig, loaded: &DecoderConfig) -> [String; 2] {
    let model = init(saved);
    let record = save_record(&model, &dir.path("model")).unwrap();
    let safetensors = dir.path("model.safetensors");
    export_safetensors(&model, &safetensors).unwrap();
    [problem(load_mpk(loaded, &record)), problem(load_safetensors(loaded, &safetensors))]
}

#[test]
fn other_structures_are_named() {
    let dir = Scratch::new("structure");
    let kinds = vec![AttentionKind::Sliding { window: 4 }, longformer()];
    let (untied, tied) = (config(16, kinds.clone(), false), config(16, kinds.clone(), true));

    let [record, safetensors] = mismatch(&dir, &untied, &config(16, kinds[..1].to_vec(), false));
    assert!(
        record.contains("the file has 2 blocks; the configuration has `layers` = 1"),
        "{record}"
    );
    assert!(safetensors.contains("the file has weight `blocks.1."), "{safetensors}");

    for message in mismatch(&dir, &tied, &untied) {
        assert!(message.contains("weight `head.weight` is missing from the file"), "{message}");
    }
    let [record, safetensors] = mismatch(&dir, &untied, &tied);
    assert!(record.contains("the file has `head` weights"), "{record}");
    assert!(safetensors.contains("the file has weight `head.weight`"), "{safetensors}");

    let no_globals = config(16, vec![AttentionKind::Sliding { window: 4 }; 2], false);
    let [record, safetensors] = mismatch(&dir, &untied, &no_globals);
    assert!(record.contains("the file has `blocks.1.attention.mixer.Longformer`"), "{record}");
    let part = "the file has weight `blocks.1.attention.mixer.Windowed.global";
    assert!(safetensors.contains(part), "{safetensors}");
}

/// A layer's mixer of another variant (windowed weights where the configuration has linear
/// attention, and the reverse) is an error naming the file's part, not Burn's panic.
#[test]
fn a_mixer_of_another_kind_is_named() {
    let dir = Scratch::new("mixer");
    let sliding = AttentionKind::Sliding { window: 4 };
    let linear = AttentionKind::Linear { feature_dim: 4 };
    let windowed = config(16, vec![sliding.clone(), sliding.clone()], false);
    let mixed = config(16, vec![sliding, linear], false);
    let [record, safetensors] = mismatch(&dir, &windowed, &mixed);
    let part = "the file has `blocks.1.attention.mixer.Windowed` weights";
    assert!(record.contains(part), "{record}");
    assert!(safetensors.contains("blocks.1.attention.mixer."), "{safetensors}");
    let [record, safetensors] = mismatch(&dir, &mixed, &windowed);
    let part = "the file has `blocks.1.attention.mixer.Linear` weights";
    assert!(record.contains(part), "{record}");
    assert!(safetensors.contains("blocks.1.attention.mixer."), "{safetensors}");
}

#[test]
fn a_failed_save_leaves_the_old_file() {
    let dir = Scratch::new("atomic");
    let (one, two) = (init(&tiny(false)), init(&tiny(false)));
    let nowhere = dir.path("absent").join("model.safetensors");
    let message = export_safetensors(&one, &nowhere).unwrap_err().to_string();
    assert!(message.contains("does not exist"), "{message}");
    assert!(save_record(&one, &nowhere).is_err());
    assert!(dir.files().is_empty(), "nothing is created");

    // The temporary file's name is longer than the target's, so creating it fails when the
    // target's name is near the file-system limit of 255 bytes.
    let record = dir.path(&format!("{}.mpk", "w".repeat(246)));
    let safetensors = dir.path(&format!("{}.safetensors", "w".repeat(238)));
    for file in [&record, &safetensors] {
        fs::write(file, b"old weights").unwrap();
    }
    assert!(save_record(&one, &record).is_err());
    assert!(export_safetensors(&one, &safetensors).is_err());
    for file in [&record, &safetensors] {
        assert_eq!(fs::read(file).unwrap(), b"old weights");
    }
    assert_eq!(dir.files().len(), 2, "no temporary file is left: {:?}", dir.files());

    let (record, safetensors) = (dir.path("model.mpk"), dir.path("model.safetensors"));
    for model in [&one, &two] {
        save_record(model, &record).unwrap();
        export_safetensors(model, &safetensors).unwrap();
    }
    let config = tiny(false);
    assert!(max_abs(&logits(&one), &logits(&two)) > 0.0, "the two models differ");
    for loaded in
        [load_mpk(&config, &record).unwrap(), load_safetensors(&config, &safetensors).unwrap()]
    {
        assert_eq!(
            max_abs(&logits(&loaded), &logits(&two)),
            0.0,
            "the second save replaced the first"
        );
    }
    assert_eq!(dir.files().len(), 4, "no temporary file is left: {:?}", dir.files());
}
