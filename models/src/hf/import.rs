//! `load_decoder`: a Hugging Face checkpoint's weights into a [`Decoder`] built from its
//! `config.json`. Every tensor's name and shape is checked against the configuration before
//! anything is loaded, so an error names the checkpoint's tensor. Then each parameter is read
//! from its file on its own ([`SafetensorsFile`]) into a model whose parameters were never
//! drawn, so loading takes the weights' memory and one tensor's more at most. A linear layer's
//! weight keeps the checkpoint's `[out, in]` storage and becomes its transposed view, the
//! `[in, out]` Burn's `Linear` expects: no transposing copy, and a decoding step's
//! one-row products then read each output's weights contiguously.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use burn::module::{Module, ModuleMapper, Param};
use burn::tensor::backend::Backend;
use burn::tensor::{DType, Tensor};
use serde_json::Value;

use crate::hf::safetensors::SafetensorsFile;
use crate::hf::{Family, HfProblem, names, read_config};
use crate::weights::parameter_shapes;
use crate::{Decoder, DecoderConfig, ModelError};

/// The float type a loaded model keeps its linear layers' weights and its embedding table in,
/// whatever the checkpoint's (`--weights`). Norms, biases, activations, caches and every sum
/// stay in the backend's float type: with bf16 or f16 weights on an f32 backend the weights are
/// the only values rounded, and the products widen them as they read them
/// ([`swa_attention::layer_ops::product`]), so a bf16 checkpoint takes its own bytes in memory
/// and per decoded token rather than twice that.
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
}

impl WeightPrecision {
    /// The weights' float type on a backend computing in `compute`.
    pub fn dtype(self, compute: DType) -> DType {
        match self {
            WeightPrecision::Compute => compute,
            WeightPrecision::F32 => DType::F32,
            WeightPrecision::Bf16 => DType::BF16,
            WeightPrecision::F16 => DType::F16,
        }
    }
}

/// The model of the Hugging Face directory `dir` (docs/semantics.md §9): `config.json`, and
/// `model.safetensors` or the shards `model.safetensors.index.json` lists, in f32, f16 or bf16,
/// cast to the backend's float type. Fails, naming the file or tensor, on a missing or corrupt
/// file, an unsupported architecture, and a missing, unexpected or misshapen tensor.
pub fn load_decoder<B: Backend>(dir: &Path, device: &B::Device) -> Result<Decoder<B>, ModelError> {
    let (family, config) = read_config(dir)?;
    load_weights(dir, family, &config, WeightPrecision::Compute, device)
}

/// [`load_decoder`] with the configuration already read from `dir` by
/// [`read_config`](crate::hf::read_config), and the weights kept in `weights`: the weights of
/// `dir` into the decoder of `config`. Each tensor goes from its file's type straight to its
/// own, so a bf16 checkpoint loaded with bf16 weights is never widened.
pub fn load_weights<B: Backend>(
    dir: &Path,
    family: Family,
    config: &DecoderConfig,
    weights: WeightPrecision,
    device: &B::Device,
) -> Result<Decoder<B>, ModelError> {
    let fail = |problem| ModelError::Checkpoint { dir: dir.to_path_buf(), problem };
    config.validate()?;
    let float: DType = burn::tensor::get_device_settings::<B>(device).float_dtype.into();
    let weights = weights.dtype(float);
    if !B::supports_dtype(device, weights) {
        return Err(ModelError::WeightType { dtype: weights });
    }
    let mut files = Vec::new();
    let mut found = BTreeMap::new();
    let mut holder = BTreeMap::new();
    for path in weight_files(dir).map_err(fail)? {
        let file = SafetensorsFile::open(&path).map_err(|problem| fail(corrupt(&path, problem)))?;
        for (name, entry) in &file.tensors {
            found.insert(name.clone(), entry.shape.clone());
            holder.insert(name.clone(), files.len());
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
    let expected = parameter_shapes(&model);
    check_tensors(&expected, &found, family).map_err(fail)?;
    let mut load = Load { files, holder, family, float, weights, path: Vec::new(), error: None };
    let model = model.map(&mut load);
    match load.error {
        Some(problem) => Err(fail(problem)),
        None => Ok(model),
    }
}

/// A file's problem as [`HfProblem::CorruptFile`], naming the file.
fn corrupt(file: &Path, problem: String) -> HfProblem {
    let file = file.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    HfProblem::CorruptFile { file, problem }
}

/// Replaces every float parameter by its checkpoint tensor, read when it is reached. The first
/// failure is kept and the parameters after it are left as they are.
struct Load {
    /// The weight files, each with its path.
    files: Vec<(PathBuf, SafetensorsFile)>,
    /// The index in `files` of the file holding each checkpoint tensor.
    holder: BTreeMap<String, usize>,
    family: Family,
    /// The model's float type.
    float: DType,
    /// The float type of the linear layers' weights and the embedding table.
    weights: DType,
    /// The module path being visited.
    path: Vec<String>,
    error: Option<HfProblem>,
}

impl Load {
    /// The checkpoint's tensor for the parameter at `path` of shape `shape`, on `device`.
    fn tensor<B: Backend, const D: usize>(
        &mut self,
        path: &str,
        shape: &[usize],
        device: &B::Device,
    ) -> Result<Tensor<B, D>, HfProblem> {
        let missing = || HfProblem::MissingTensor { name: path.to_string() };
        let name = names::to_checkpoint(path, self.family).ok_or_else(missing)?;
        let (file, reader) = &mut self.files[*self.holder.get(&name).ok_or_else(missing)?];
        let data = reader.read(&name).map_err(|problem| corrupt(file, problem))?;
        let linear = names::is_linear_weight(path, shape);
        let dtype = match linear || path == names::EMBEDDING {
            true => self.weights,
            false => self.float,
        };
        let tensor = Tensor::<B, D>::from_data(data, (device, dtype));
        Ok(match linear {
            true => tensor.transpose(),
            false => tensor,
        })
    }
}

impl<B: Backend> ModuleMapper<B> for Load {
    fn enter_module(&mut self, name: &str, _container_type: &str) {
        self.path.push(name.to_string());
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.pop();
    }

    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        if self.error.is_some() {
            return param;
        }
        let (path, shape) = (self.path.join("."), param.lazy_shape().to_vec());
        match self.tensor::<B, D>(&path, &shape, &param.lazy_device()) {
            Ok(tensor) => {
                let id = param.id;
                param.transform_for_load(tensor, id)
            }
            Err(problem) => {
                self.error = Some(problem);
                param
            }
        }
    }
}

/// The safetensors files of `dir`: `model.safetensors`, or every shard its index lists.
fn weight_files(dir: &Path) -> Result<Vec<PathBuf>, HfProblem> {
    let single = dir.join("model.safetensors");
    if single.is_file() {
        return Ok(vec![single]);
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
                true => Ok(path),
                false => Err(HfProblem::MissingShard { shard: shard.into() }),
            }
        })
        .collect()
}

/// Checks the checkpoint's tensors (`found`, by name, with their shapes) against the model's
/// parameters (`expected`, by path): the first missing, unexpected or misshapen tensor, named
/// as the checkpoint names it, with shapes in the checkpoint's layout.
fn check_tensors(
    expected: &BTreeMap<String, Vec<usize>>,
    found: &BTreeMap<String, Vec<usize>>,
    family: Family,
) -> Result<(), HfProblem> {
    let mut seen = BTreeSet::new();
    for (name, shape) in found.iter().filter(|(name, _)| !names::is_ignored(name)) {
        let unexpected = || HfProblem::UnexpectedTensor { name: name.clone() };
        let path = names::to_model(name, family).ok_or_else(unexpected)?;
        let ours = expected.get(&path).ok_or_else(unexpected)?;
        let mut want = ours.clone();
        if names::is_linear_weight(&path, ours) {
            want.reverse();
        }
        if *shape != want {
            let (file, expected) = (shape.clone(), want);
            return Err(HfProblem::ShapeMismatch { name: name.clone(), file, expected });
        }
        seen.insert(path);
    }
    match expected.keys().find(|path| !seen.contains(*path)) {
        Some(path) => {
            let name = names::to_checkpoint(path, family).unwrap_or_else(|| path.clone());
            Err(HfProblem::MissingTensor { name })
        }
        None => Ok(()),
    }
}
