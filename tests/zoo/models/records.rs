//! Burn records saved before a format change still load, with the outputs they had: the
//! fixture `tests/fixtures/records/pre-mixer.mpk` was saved before the attention layer's
//! weights became one `Mixer` enum, and before q|k|v and gate|up became one parameter each, with
//! the logits it gave then
//! (`pre-mixer.logits.json`; `README.md` there says how both were made).

use std::path::{Path, PathBuf};

use burn::backend::NdArray;
use burn::config::Config;
use burn::tensor::{Int, Tensor, TensorData};
use swa_zoo::models::layers::AttentionKind;
use swa_zoo::models::weights::{load_record, parameter_shapes, save_record};
use swa_zoo::models::{Decoder, DecoderConfig, ModelError};

use crate::to_vec;

fn fixture(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/records").join(file)
}

/// The fixture's configuration: a sliding-window layer, Longformer with a global position and
/// linear attention, with q/k norms.
fn config() -> DecoderConfig {
    DecoderConfig::load(fixture("pre-mixer.config.json")).unwrap()
}

/// The logits saved with the fixture and the tokens they are of.
fn expected() -> (Vec<i64>, Vec<f32>) {
    let text = std::fs::read_to_string(fixture("pre-mixer.logits.json")).unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let numbers = |key: &str| json[key].as_array().unwrap().clone();
    let tokens = numbers("tokens").iter().map(|t| t.as_i64().unwrap()).collect();
    let logits = numbers("logits").iter().map(|l| l.as_f64().unwrap() as f32).collect();
    (tokens, logits)
}

fn logits(model: &Decoder<NdArray>, tokens: &[i64]) -> Vec<f32> {
    let data = TensorData::new(tokens.to_vec(), [1, tokens.len()]);
    let tokens = Tensor::<NdArray, 2, Int>::from_data(data, &Default::default());
    to_vec(model.forward(tokens).unwrap())
}

#[test]
fn a_record_from_before_the_mixer_enum_loads_with_its_logits() {
    let device = Default::default();
    let model = load_record::<NdArray>(&config(), &fixture("pre-mixer.mpk"), &device).unwrap();
    let (tokens, expected) = expected();
    assert_eq!(logits(&model, &tokens), expected, "the same weights, the same sums");

    // Saved again, it is a record of today's format, under today's names.
    let dir = std::env::temp_dir().join(format!("swa-zoo-records-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let saved = save_record(&model, &dir.join("model")).unwrap();
    let again = load_record::<NdArray>(&config(), &saved, &device).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(logits(&again, &tokens), expected);
    let names = parameter_shapes(&again);
    for name in [
        "blocks.0.attention.mixer.Windowed.local.qkv.weight",
        "blocks.1.attention.mixer.Windowed.global.qkv.weight",
        "blocks.1.mlp.gate_up.weight",
        "blocks.1.attention.mixer.Windowed.output.weight",
        "blocks.2.attention.mixer.Linear.output.weight",
        "blocks.0.attention.query_norm.gamma",
    ] {
        assert!(names.contains_key(name), "{name} in {names:?}");
    }
}

/// The migrated record is checked as any other: its windowed layer where the configuration
/// has linear attention is an error, not Burn's panic.
#[test]
fn a_migrated_record_of_another_configuration_is_named() {
    let mut config = config();
    config.attention[0] = AttentionKind::Linear { feature_dim: 4 };
    let device = Default::default();
    match load_record::<NdArray>(&config, &fixture("pre-mixer.mpk"), &device) {
        Err(ModelError::Weights { problem, .. }) => assert!(
            problem.contains("the file has `blocks.0.attention.mixer.Windowed` weights"),
            "{problem}"
        ),
        other => panic!("expected a weights error, got {:?}", other.map(|_| ())),
    }
}
