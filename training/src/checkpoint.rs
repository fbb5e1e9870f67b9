//! The Learner's checkpoints of a run: the last complete one, and checking its model before a
//! resume. Burn's checkpointer would load a record of another configuration without a word (it
//! takes every tensor as it is) or panic on a truncated file, so `--resume` first reads the file
//! here and compares every weight's shape.

use std::path::Path;

use burn::module::Module;
use burn::record::{FullPrecisionSettings, NamedMpkFileRecorder, Recorder};
use burn::tensor::backend::Backend;
use swa_models::DecoderConfig;
use swa_models::weights::{compare_shapes, parameter_shapes, recorder_problem};

use crate::error::TrainingError;
use crate::language_model::{LanguageModel, LanguageModelRecord};

/// The last epoch whose model, optimizer and schedule checkpoints all exist in `out`.
pub fn last_checkpoint(out: &Path) -> Option<usize> {
    let dir = out.join("checkpoint");
    let epochs = std::fs::read_dir(&dir).ok()?.filter_map(|entry| {
        let name = entry.ok()?.file_name().into_string().ok()?;
        name.strip_prefix("model-")?.strip_suffix(".mpk")?.parse::<usize>().ok()
    });
    let complete = |e: &usize| {
        ["optim", "scheduler"].iter().all(|part| dir.join(format!("{part}-{e}.mpk")).is_file())
    };
    epochs.filter(complete).max()
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_checkpoint_is_the_last_complete_one() {
        let out = std::env::temp_dir().join(format!("swa-last-checkpoint-{}", std::process::id()));
        let dir = out.join("checkpoint");
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(last_checkpoint(&out), None);
        for name in ["model-1", "optim-1", "scheduler-1", "model-2", "optim-2", "model-10"] {
            std::fs::write(dir.join(format!("{name}.mpk")), b"").unwrap();
        }
        assert_eq!(last_checkpoint(&out), Some(1), "epochs 2 and 10 lack a part");
        std::fs::remove_dir_all(out).unwrap();
    }
}
