//! Checking the Learner's model checkpoint before a resume: Burn's checkpointer would load a
//! record of another configuration without a word (it takes every tensor as it is) or panic on
//! a truncated file, so `--resume` first reads the file here and compares every weight's shape.

use std::path::Path;

use burn::module::Module;
use burn::record::{FullPrecisionSettings, NamedMpkFileRecorder, Recorder};
use burn::tensor::backend::Backend;
use swa_models::DecoderConfig;
use swa_models::weights::{compare_shapes, parameter_shapes, recorder_problem};

use crate::error::TrainingError;
use crate::language_model::{LanguageModel, LanguageModelRecord};

/// Whether the model checkpoint `path` (a `LanguageModel` record, as the Learner writes it)
/// holds the weights of `config`: a readable record of the same structure and shapes.
pub fn check_model_checkpoint<B: Backend>(
    config: &DecoderConfig,
    path: &Path,
    device: &B::Device,
) -> Result<(), TrainingError> {
    let fresh = LanguageModel::new(config.init::<B>(device)?);
    let record: LanguageModelRecord<B> = NamedMpkFileRecorder::<FullPrecisionSettings>::new()
        .load(path.to_path_buf(), device)
        .map_err(|e| TrainingError::CheckpointUnreadable {
            path: path.to_path_buf(),
            problem: recorder_problem(e),
        })?;
    let expected = parameter_shapes(&fresh);
    let found = parameter_shapes(&fresh.load_record(record));
    compare_shapes(&expected, &found)
        .map_err(|problem| TrainingError::CheckpointMismatch { path: path.to_path_buf(), problem })
}
