//! The GGUF reader against the gguf package and transformers, on `tests/fixtures/gguf/tiny`
//! (built by its `make_fixture.py`): a tiny llama model with every tensor type read, and every
//! bad file named in one line.

use std::fs;
use std::path::{Path, PathBuf};

use burn::backend::NdArray;
use burn::store::{ModuleStore, SafetensorsStore};
use burn::tensor::{DType, Int, Tensor, TensorData};

use super::{GgmlType, GgufFile};
use crate::ModelError;
use crate::hf::tests::max_abs;
use crate::hf::{HfProblem, Pretrained};

type B = NdArray;

/// Logits against transformers' from the same file: both dequantize to the same f32 weights,
/// then sum in other orders.
const LOGIT_TOLERANCE: f32 = 1e-4;

/// Dequantized values against the gguf package's: the same f32 products and sums, in an order
/// that may round the last bit otherwise (values are below 1).
const DEQUANT_TOLERANCE: f32 = 1e-7;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/gguf/tiny")
}

/// The tensor `name` of `expected.safetensors`, if there is one.
fn stored(name: &str) -> Option<TensorData> {
    let mut store = SafetensorsStore::from_file(fixture().join("expected.safetensors"));
    Some(store.get_snapshot(name).unwrap()?.clone().to_data().unwrap())
}

/// The tensor `name` of `expected.safetensors`.
fn expected(name: &str) -> TensorData {
    stored(name).expect("fixture tensor")
}

#[test]
fn every_tensor_type_dequantizes_as_the_gguf_package_does() {
    let mut file = GgufFile::open(&fixture().join("model.gguf")).unwrap();
    let mut kinds = std::collections::BTreeSet::new();
    for (name, tensor) in file.tensors.clone() {
        kinds.insert(tensor.kind.name());
        // The norms are F32 as written; each linear weight's first values were dequantized.
        let Some(want) = stored(&format!("dequant.{name}")) else {
            continue;
        };
        let want: Vec<f32> = want.to_vec().unwrap();
        let got: Vec<f32> = file.read(&name, DType::F32).unwrap().to_vec().unwrap();
        let error = max_abs(&got[..want.len()], &want);
        assert!(error <= DEQUANT_TOLERANCE, "{name} ({}): off by {error}", tensor.kind.name());
    }
    let every =
        ["BF16", "F16", "F32", "Q4_0", "Q4_1", "Q4_K", "Q5_0", "Q5_1", "Q5_K", "Q6_K", "Q8_0"];
    assert_eq!(kinds.into_iter().collect::<Vec<_>>(), every);
}

#[test]
fn the_tiny_model_computes_transformers_logits() {
    let device = Default::default();
    let run = Pretrained::<B>::load(fixture().join("model.gguf"), &device).unwrap();
    let input = Tensor::<B, 2, Int>::from_data(expected("input_ids").convert::<i64>(), &device);
    let got: Vec<f32> = run.model.forward(input).unwrap().into_data().to_vec().unwrap();
    let want: Vec<f32> = expected("logits").to_vec().unwrap();
    let error = max_abs(&got, &want);
    assert!(error <= LOGIT_TOLERANCE, "logits differ by {error}");
    assert_eq!(run.tokenizer.bos(), Some(1), "the file asks for a BOS");
    assert_eq!(run.encode("In the beginning", true).unwrap()[0], 1);
}

/// The fixture's bytes, damaged by `damage`, in a file of their own.
fn damaged(tag: &str, damage: impl FnOnce(&mut Vec<u8>)) -> PathBuf {
    let mut bytes = fs::read(fixture().join("model.gguf")).unwrap();
    damage(&mut bytes);
    let path = std::env::temp_dir().join(format!("swa-zoo-gguf-{tag}-{}.gguf", std::process::id()));
    fs::write(&path, bytes).unwrap();
    path
}

/// Replaces the first `from` in `bytes` by `to`, of the same length.
fn replace(bytes: &mut [u8], from: &[u8], to: &[u8]) {
    let at = bytes.windows(from.len()).position(|w| w == from).expect("in the fixture");
    bytes[at..at + to.len()].copy_from_slice(to);
}

/// Loading `path`'s one-line error, then the file removed.
fn load_error(path: PathBuf) -> (HfProblem, String) {
    let result = Pretrained::<B>::load(&path, &Default::default());
    fs::remove_file(&path).unwrap();
    match result {
        Err(error @ ModelError::Checkpoint { .. }) => {
            let message = error.to_string();
            assert!(!message.contains('\n'), "{message}");
            let ModelError::Checkpoint { problem, .. } = error else { unreachable!() };
            (problem, message)
        }
        Err(other) => panic!("expected a checkpoint error, got {other}"),
        Ok(_) => panic!("expected an error"),
    }
}

#[test]
fn bad_gguf_files_are_named_one_line_errors() {
    let truncated = damaged("truncated", |bytes| bytes.truncate(bytes.len() / 2));
    let (problem, message) = load_error(truncated);
    assert!(matches!(problem, HfProblem::CorruptFile { .. }), "{message}");
    assert!(message.contains("runs past the end of the file"), "{message}");

    let header = damaged("header", |bytes| bytes.truncate(64));
    let (problem, message) = load_error(header);
    assert!(matches!(problem, HfProblem::CorruptFile { .. }), "{message}");

    let not_gguf = damaged("magic", |bytes| bytes[..4].copy_from_slice(b"GGML"));
    assert!(load_error(not_gguf).1.contains("not a GGUF file"));

    let architecture = damaged("architecture", |bytes| replace(bytes, b"llama", b"bloom"));
    let (problem, message) = load_error(architecture);
    assert!(matches!(problem, HfProblem::Gguf { .. }), "{message}");
    assert!(message.contains("architecture `bloom` is not supported (llama, qwen2"), "{message}");

    // `output_norm.weight` is F32 (type 0) with one dimension: its type id after its name, its
    // dimension count and its dimension.
    let tensor_type = damaged("type", |bytes| {
        let name = b"output_norm.weight";
        let at = bytes.windows(name.len()).position(|w| w == name).unwrap() + name.len() + 4 + 8;
        bytes[at..at + 4].copy_from_slice(&10u32.to_le_bytes());
    });
    let (problem, message) = load_error(tensor_type);
    assert!(matches!(problem, HfProblem::Gguf { .. }), "{message}");
    assert!(message.contains("tensor type Q2_K (ggml type 10) is not supported"), "{message}");

    let tokenizer = damaged("tokenizer", |bytes| replace(bytes, b"gpt2", b"bert"));
    let (problem, message) = load_error(tokenizer);
    assert!(matches!(problem, HfProblem::Tokenizer { .. }), "{message}");
    assert!(message.contains("tokenizer model `bert` is not supported"), "{message}");
}

#[test]
fn type_ids_name_what_is_not_read() {
    assert_eq!(GgmlType::from_id(12), Ok(GgmlType::Q4K));
    let error = GgmlType::from_id(23).unwrap_err();
    assert!(error.starts_with("tensor type IQ4_XS (ggml type 23) is not supported (F32, F16"));
    assert!(GgmlType::from_id(999).unwrap_err().contains("unknown (ggml type 999)"));
}
