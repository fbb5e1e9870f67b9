//! `load_decoder`: a Hugging Face checkpoint's weights into a [`Decoder`] built from its
//! `config.json`, through burn-store's `SafetensorsStore` (key remapping from [`names`], the
//! PyTorch adapter transposing linear weights, and a cast to the model's float type). Every
//! tensor's name and shape is checked against the configuration before anything is loaded, so
//! an error names the checkpoint's tensor.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use burn::module::Module;
use burn::store::{ModuleSnapshot, ModuleStore, SafetensorsStore};
use burn::tensor::DType;
use burn::tensor::backend::Backend;
use burn_store::{ChainAdapter, ModuleAdapter, PyTorchToBurnAdapter, TensorSnapshot};
use serde_json::Value;

use crate::hf::{HfProblem, names, read_config};
use crate::weights::parameter_shapes;
use crate::{Decoder, ModelError};

/// The model of the Hugging Face directory `dir` (docs/semantics.md §9): `config.json`, and
/// `model.safetensors` or the shards `model.safetensors.index.json` lists, in f32, f16 or bf16,
/// cast to the backend's float type. Fails, naming the file or tensor, on a missing or corrupt
/// file, an unsupported architecture, and a missing, unexpected or misshapen tensor.
pub fn load_decoder<B: Backend>(dir: &Path, device: &B::Device) -> Result<Decoder<B>, ModelError> {
    let fail = |problem| ModelError::Checkpoint { dir: dir.to_path_buf(), problem };
    let (family, config) = read_config(dir)?;
    let mut model = config.init::<B>(device)?;
    let expected = parameter_shapes(&model);
    let files = weight_files(dir).map_err(fail)?;
    let corrupt = |file: &Path, problem: String| {
        let file = file.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        fail(HfProblem::CorruptFile { file, problem })
    };
    let mut found = BTreeMap::new();
    for file in &files {
        let mut store = SafetensorsStore::from_file(file);
        let snapshots = store.get_all_snapshots().map_err(|e| corrupt(file, e.to_string()))?;
        for (tensor, snapshot) in snapshots {
            found.insert(tensor.clone(), snapshot.shape.to_vec());
        }
    }
    check_tensors(&expected, &found, family).map_err(fail)?;
    let dtype = model_dtype(&model);
    for file in &files {
        let mut store = SafetensorsStore::from_file(file)
            .with_from_adapter(ChainAdapter::new(PyTorchToBurnAdapter, ToDtype(dtype)))
            .allow_partial(true);
        for (from, to) in names::remappings(family, false) {
            store = store.with_key_remapping(from, to);
        }
        let result = model.load_from(&mut store).map_err(|e| corrupt(file, e.to_string()))?;
        if let Some(error) = result.errors.first() {
            return Err(corrupt(file, format!("{error:?}")));
        }
    }
    Ok(model)
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
    family: crate::hf::Family,
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

/// The float type of the model's parameters (the backend's default, or the one it was told).
fn model_dtype<B: Backend>(model: &Decoder<B>) -> DType {
    struct First(Option<DType>);
    impl<B: Backend> burn::module::ModuleVisitor<B> for First {
        fn visit_float<const D: usize>(
            &mut self,
            param: &burn::module::Param<burn::tensor::Tensor<B, D>>,
        ) {
            self.0.get_or_insert(param.val().dtype());
        }
    }
    let mut first = First(None);
    model.visit(&mut first);
    first.0.unwrap_or(DType::F32)
}

/// Casts every tensor to the model's float type as it is read (a bf16 or f16 checkpoint into
/// an f32 model), lazily like the store itself.
#[derive(Clone)]
struct ToDtype(DType);

impl ModuleAdapter for ToDtype {
    fn adapt(&self, snapshot: &TensorSnapshot) -> TensorSnapshot {
        if snapshot.dtype == self.0 {
            return snapshot.clone();
        }
        let (data, dtype) = (snapshot.clone_data_fn(), self.0);
        TensorSnapshot::from_closure(
            Rc::new(move || Ok(data()?.convert_dtype(dtype))),
            dtype,
            snapshot.shape.clone(),
            snapshot.path_stack.clone().unwrap_or_default(),
            snapshot.container_stack.clone().unwrap_or_default(),
            snapshot.tensor_id.unwrap_or_default(),
        )
    }

    fn clone_box(&self) -> Box<dyn ModuleAdapter> {
        Box::new(self.clone())
    }
}
