//! Checking the Learner's model checkpoint before a resume: Burn's checkpointer would load a
//! record of another configuration without a word (it takes every tensor as it is) or panic on
//! a truncated file, so `--resume` first reads the file here and compares every weight's shape.

use std::collections::BTreeMap;
use std::path::Path;

use burn::module::{Module, ModuleVisitor, ParamId};
use burn::record::{FullPrecisionSettings, NamedMpkFileRecorder, Recorder};
use burn::tensor::Tensor;
use burn::tensor::backend::Backend;
use swa_models::DecoderConfig;

use crate::language_model::{LanguageModel, LanguageModelRecord};

/// Every float weight's dotted name and shape.
#[derive(Default)]
struct Shapes(BTreeMap<String, Vec<usize>>);

impl<B: Backend> ModuleVisitor<B> for Shapes {
    fn visit_float_with_path<const D: usize>(&mut self, path: &[String], _id: ParamId, tensor: &Tensor<B, D>) {
        self.0.insert(path.join("."), tensor.dims().to_vec());
    }
}

fn shapes<B: Backend>(model: &LanguageModel<B>) -> BTreeMap<String, Vec<usize>> {
    let mut visitor = Shapes::default();
    model.visit(&mut visitor);
    visitor.0
}

/// Whether the model checkpoint `path` (a `LanguageModel` record, as the Learner writes it)
/// holds the weights of `config`: a readable record of the same structure and shapes.
pub fn check_model_checkpoint<B: Backend>(config: &DecoderConfig, path: &Path, device: &B::Device) -> Result<(), String> {
    let fail = |problem: String| format!("{}: {problem}", path.display());
    let fresh = LanguageModel { decoder: config.init::<B>(device).map_err(|e| e.to_string())? };
    let record: LanguageModelRecord<B> = NamedMpkFileRecorder::<FullPrecisionSettings>::new()
        .load(path.to_path_buf(), device)
        .map_err(|e| fail(format!("not a readable checkpoint of this model: {e}")))?;
    let expected = shapes(&fresh);
    let found = shapes(&fresh.load_record(record));
    match expected.iter().find(|(name, shape)| found.get(*name) != Some(shape)) {
        Some((name, shape)) => Err(fail(match found.get(name) {
            Some(got) => format!("weight `{name}` has shape {got:?} in the checkpoint but {shape:?} in the configuration"),
            None => format!("weight `{name}` of the configuration is missing from the checkpoint"),
        })),
        None => Ok(()),
    }
}
