//! Checking the Learner's model checkpoint before a resume: Burn's checkpointer would load a
//! record of another configuration without a word (it takes every tensor as it is) or panic on
//! a truncated file, so `--resume` first reads the file here and compares every weight's shape.

use std::path::Path;

use burn::module::{Module, ModuleVisitor, Param};
use burn::record::{FullPrecisionSettings, NamedMpkFileRecorder, Recorder};
use burn::tensor::Tensor;
use burn::tensor::backend::Backend;
use swa_models::DecoderConfig;

use crate::language_model::{LanguageModel, LanguageModelRecord};

/// Every float weight's dotted name and shape, in visiting order.
#[derive(Default)]
struct Shapes {
    path: Vec<String>,
    found: Vec<(String, Vec<usize>)>,
}

impl<B: Backend> ModuleVisitor<B> for Shapes {
    fn enter_module(&mut self, name: &str, _container_type: &str) {
        self.path.push(name.to_string());
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.pop();
    }

    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        self.found.push((self.path.join("."), param.val().dims().to_vec()));
    }
}

fn shapes<B: Backend>(model: &LanguageModel<B>) -> Vec<(String, Vec<usize>)> {
    let mut visitor = Shapes::default();
    model.visit(&mut visitor);
    visitor.found
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
    match expected.iter().zip(&found).find(|(e, f)| e.1 != f.1) {
        Some(((name, shape), (_, got))) => Err(fail(format!(
            "weight `{name}` has shape {got:?} in the checkpoint but {shape:?} in the configuration"
        ))),
        None => Ok(()),
    }
}
