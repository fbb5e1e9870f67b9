//! `load_decoder`: a Hugging Face checkpoint's weights into a [`Decoder`] built from its
//! `config.json`. Every tensor's name and shape is checked against the configuration before
//! anything is loaded, so an error names the checkpoint's tensor. Then each parameter is read
//! from its file on its own ([`SafetensorsFile`]) into a model whose parameters were never
//! drawn, so loading takes the weights' memory and one parameter's more at most (twice that
//! for a joined one). A linear layer's
//! weight keeps the checkpoint's `[out, in]` storage and becomes its transposed view, the
//! `[in, out]` Burn's `Linear` expects: no transposing copy, and a decoding step's
//! one-row products then read each output's weights contiguously. The q, k, v projections and
//! the MLP's gate and up projections are joined as they are read ([`crate::stored`]).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use burn::module::Module;
use burn::tensor::DType;
use serde_json::Value;
use swa_attention::LayerOpsBackend;
use swa_attention::packed::Packing;

use crate::gguf::{GgufCheckpoint, is_gguf};
use crate::hf::{Family, HfProblem, names, read_config};
use crate::safetensors::SafetensorsFile;
use crate::stored::{EMBEDDING, Keep, Layout, Load, LoadProblem, WeightFile, is_linear_weight};
use crate::weights::parameter_shapes;
use crate::{Decoder, DecoderConfig, ModelError};

/// How a loaded model keeps its linear layers' weights and its embedding table, whatever the
/// checkpoint's (`--weights`): in a float type, or packed in ggml's blocks
/// ([`swa_attention::packed`]). Norms, biases, activations, caches and every sum stay in the
/// backend's float type: with bf16, f16 or packed weights on an f32 backend the weights are the
/// only values rounded, and the products read them as they are
/// ([`swa_attention::layer_ops::product`]), so a bf16 checkpoint takes its own bytes in memory
/// and per decoded token rather than twice that, and a Q4_1 file its own.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum WeightPrecision {
    /// The backend's float type, as every other tensor of the model.
    #[default]
    Compute,
    /// 32-bit floats.
    F32,
    /// bfloat16: the storage of most published checkpoints.
    Bf16,
    /// IEEE half precision.
    F16,
    /// Packed in this block format (flex only): a GGUF file's tensors stored in it kept as they
    /// are, any other weight packed on load (`--weights q8_0` quantizes a bf16 checkpoint as
    /// llama.cpp's Q8_0 does).
    Packed(Packing),
    /// As the file stores each tensor: Q8_0, Q4_0 and Q4_1 kept packed (flex only; unpacked
    /// into the backend's float type elsewhere), float tensors in their own type, other
    /// quantized types (K-quants, Q5_0, Q5_1) unpacked into bf16; a joined parameter (q|k|v,
    /// gate|up) whose parts the file stores in different types in f32.
    File,
}

impl WeightPrecision {
    /// The choices a command line names (`--weights f32|bf16|f16|q8_0|q4_0|q4_1|file`);
    /// `Compute` is the flag left out.
    pub const NAMED: [WeightPrecision; 7] = [
        WeightPrecision::F32,
        WeightPrecision::Bf16,
        WeightPrecision::F16,
        WeightPrecision::Packed(Packing::Q8_0),
        WeightPrecision::Packed(Packing::Q4_0),
        WeightPrecision::Packed(Packing::Q4_1),
        WeightPrecision::File,
    ];

    /// The name of the choice: `compute`, `f32`, `bf16`, `f16`, `q8_0`, `q4_0`, `q4_1`, `file`.
    pub fn name(self) -> &'static str {
        match self {
            WeightPrecision::Compute => "compute",
            WeightPrecision::F32 => "f32",
            WeightPrecision::Bf16 => "bf16",
            WeightPrecision::F16 => "f16",
            WeightPrecision::Packed(Packing::Q8_0) => "q8_0",
            WeightPrecision::Packed(Packing::Q4_0) => "q4_0",
            WeightPrecision::Packed(Packing::Q4_1) => "q4_1",
            WeightPrecision::File => "file",
        }
    }

    /// The named choice `name`, or `None`.
    pub fn named(name: &str) -> Option<Self> {
        Self::NAMED.into_iter().find(|weights| weights.name() == name)
    }

    /// How the weights are kept on a backend computing in `compute`.
    fn keep(self, compute: DType) -> Keep {
        match self {
            WeightPrecision::Compute => Keep::Float(compute),
            WeightPrecision::F32 => Keep::Float(DType::F32),
            WeightPrecision::Bf16 => Keep::Float(DType::BF16),
            WeightPrecision::F16 => Keep::Float(DType::F16),
            WeightPrecision::Packed(packing) => Keep::Packed(packing),
            WeightPrecision::File => Keep::AsStored,
        }
    }
}

/// The model of the Hugging Face directory `dir` (docs/semantics.md §9): `config.json`, and
/// `model.safetensors` or the shards `model.safetensors.index.json` lists, in f32, f16 or bf16,
/// cast to the backend's float type. Fails, naming the file or tensor, on a missing or corrupt
/// file, an unsupported architecture, and a missing, unexpected or misshapen tensor.
pub fn load_decoder<B: LayerOpsBackend>(
    dir: &Path,
    device: &B::Device,
) -> Result<Decoder<B>, ModelError> {
    let (family, config) = read_config(dir)?;
    load_weights(dir, family, &config, WeightPrecision::Compute, device)
}

/// [`load_decoder`] with the configuration already read from `dir` by
/// [`read_config`](crate::hf::read_config), and the weights kept in `weights`: the weights of
/// `dir` into the decoder of `config`. Each tensor goes from its file's type straight to its
/// own, so a bf16 checkpoint loaded with bf16 weights is never widened.
pub fn load_weights<B: LayerOpsBackend>(
    dir: &Path,
    family: Family,
    config: &DecoderConfig,
    weights: WeightPrecision,
    device: &B::Device,
) -> Result<Decoder<B>, ModelError> {
    let fail = |problem| ModelError::Checkpoint { dir: dir.to_path_buf(), problem };
    config.validate()?;
    let float: DType = burn::tensor::get_device_settings::<B>(device).float_dtype.into();
    let weights = weights.keep(float);
    match weights {
        Keep::Float(dtype) if !B::supports_dtype(device, dtype) => {
            return Err(ModelError::WeightType { dtype });
        }
        Keep::Packed(packing) if !B::packs_weights() => {
            return Err(ModelError::PackedWeights { packing: packing.name() });
        }
        _ => {}
    }
    let mut files = Vec::new();
    let mut found = BTreeMap::new();
    let mut holder = BTreeMap::new();
    for (path, file) in weight_files(dir).map_err(fail)? {
        for (name, shape) in file.shapes() {
            holder.insert(name.clone(), files.len());
            found.insert(name, shape);
        }
        files.push((path, file));
    }
    // The sizes of config.json against the weights, before the model is built: a file's
    // length bounds the checkpoint's, so nothing past it is allocated.
    let held: usize = found.values().map(|shape| shape.iter().product::<usize>()).sum();
    let needed = config.min_weights().unwrap_or(usize::MAX);
    if needed > held {
        let problem = format!("asks for at least {needed} weights; the checkpoint holds {held}");
        return Err(fail(HfProblem::BadField { field: "sizes", problem }));
    }
    let model = config.init_lazy::<B>(device)?;
    let heads = (config.heads, config.kv_heads());
    let name = |part: &str| names::to_checkpoint(part, family);
    let layout = Layout { name: &name, transposed: true };
    let expected = layout.file_shapes(&parameter_shapes(&model), heads);
    check_tensors(&expected, &found).map_err(fail)?;
    // A file's packed tensors are unpacked where the backend keeps none (`--weights file`).
    let weights = match weights {
        Keep::AsStored if !B::packs_weights() => Keep::Float(float),
        weights => weights,
    };
    let keep =
        |path: &str, shape: &[usize]| match is_linear_weight(path, shape) || path == EMBEDDING {
            true => weights,
            false => Keep::Float(float),
        };
    let mut load = Load {
        files,
        holder,
        layout,
        heads,
        keep: &keep,
        pack: B::pack,
        path: Vec::new(),
        error: None,
    };
    let model = model.map(&mut load);
    match load.error {
        None => Ok(model),
        Some(LoadProblem::Missing(name)) => Err(fail(HfProblem::MissingTensor { name })),
        Some(LoadProblem::Unreadable(file, problem)) => Err(fail(corrupt(&file, problem))),
        Some(LoadProblem::Packed) => Err(ModelError::PackedWeights { packing: "packed" }),
    }
}

/// A file's problem as [`HfProblem::CorruptFile`], naming the file.
fn corrupt(file: &Path, problem: String) -> HfProblem {
    let file = file.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    HfProblem::CorruptFile { file, problem }
}

/// The weight files of `dir`, opened: `model.safetensors`, or every shard its index lists; or
/// the GGUF file `dir` is.
fn weight_files(dir: &Path) -> Result<Vec<(PathBuf, WeightFile)>, HfProblem> {
    if is_gguf(dir) {
        let file = WeightFile::Gguf(Box::new(GgufCheckpoint::open(dir)?));
        return Ok(vec![(dir.to_path_buf(), file)]);
    }
    let open = |path: PathBuf| match SafetensorsFile::open(&path) {
        Ok(file) => Ok((path, WeightFile::Safetensors(file))),
        Err(problem) => Err(corrupt(&path, problem)),
    };
    let single = dir.join("model.safetensors");
    if single.is_file() {
        return Ok(vec![open(single)?]);
    }
    let index = "model.safetensors.index.json";
    let Ok(text) = fs::read_to_string(dir.join(index)) else {
        return Err(HfProblem::NoWeights);
    };
    let corrupt = |problem: String| HfProblem::CorruptFile { file: index.into(), problem };
    let json: Value = serde_json::from_str(&text).map_err(|e| corrupt(e.to_string()))?;
    let map = json["weight_map"].as_object().ok_or_else(|| corrupt("no `weight_map`".into()))?;
    let shards: BTreeSet<&str> = map.values().filter_map(Value::as_str).collect();
    shards
        .into_iter()
        .map(|shard| {
            let path = dir.join(shard);
            match path.is_file() {
                true => open(path),
                false => Err(HfProblem::MissingShard { shard: shard.into() }),
            }
        })
        .collect()
}

/// Checks the checkpoint's tensors (`found`) against those the model's parameters make
/// (`expected`), both by the checkpoint's names with shapes in its `[out, in]` layout: the first
/// missing, unexpected or misshapen tensor.
fn check_tensors(
    expected: &BTreeMap<String, Vec<usize>>,
    found: &BTreeMap<String, Vec<usize>>,
) -> Result<(), HfProblem> {
    for (name, shape) in found.iter().filter(|(name, _)| !names::is_ignored(name)) {
        let want = expected.get(name).ok_or(HfProblem::UnexpectedTensor { name: name.clone() })?;
        if shape != want {
            let (file, expected) = (shape.clone(), want.clone());
            return Err(HfProblem::ShapeMismatch { name: name.clone(), file, expected });
        }
    }
    match expected.keys().find(|name| !found.contains_key(*name)) {
        Some(name) => Err(HfProblem::MissingTensor { name: name.clone() }),
        None => Ok(()),
    }
}
