//! The Learner's checkpoints of a run: the newest complete one, and checking its model before a
//! resume. The files themselves are `crate::checkpoint_file`'s: a checkpoint is complete when its
//! three records agree with their sidecars. Burn's checkpointer would load a record of another
//! configuration without a word (it takes every tensor as it is), so `--resume` first reads the
//! model here and compares every weight's shape.

use std::path::Path;

use burn::module::Module;
use burn::record::Recorder;
use swa_models::panics::without_panics;
use swa_models::records::MpkRecorder;
use swa_models::weights::{
    check_record_structure, compare_shapes, parameter_shapes, recorder_problem,
};

use crate::checkpoint_file::{steps, verify};
use crate::error::TrainingError;
use crate::language_model::{LanguageModel, LanguageModelRecord};
use crate::train_config::TrainConfig;

/// What a resume finds in a run's `checkpoint/` folder.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CheckpointSearch {
    /// The newest complete checkpoint (every record present and matching its sidecar's size
    /// and checksum), if any.
    pub found: Option<usize>,
    /// The newer checkpoints skipped, each as `checkpoint N: what is wrong with it`.
    pub skipped: Vec<String>,
    /// Whether a skipped checkpoint was damaged after it was written whole, rather than left
    /// unfinished by a killed run ([`crate::checkpoint_file::Unusable::damaged`]).
    pub damaged: bool,
}

/// The newest complete checkpoint of the run in `out`, and why each newer one was skipped.
pub fn find_checkpoint(out: &Path) -> CheckpointSearch {
    let dir = out.join("checkpoint");
    let mut search = CheckpointSearch::default();
    for step in steps(&dir) {
        match verify(&dir, step, true) {
            Ok(()) => {
                search.found = Some(step);
                break;
            }
            Err(unusable) => {
                search.skipped.push(format!("checkpoint {step}: {}", unusable.problem));
                search.damaged |= unusable.damaged;
            }
        }
    }
    search
}

/// The newest complete checkpoint of the run in `out`.
pub fn last_checkpoint(out: &Path) -> Option<usize> {
    find_checkpoint(out).found
}

/// Whether the model checkpoint `path` (a `LanguageModel` record, as the Learner writes it)
/// holds the weights of `config`'s model (with its LoRA adapters): a readable record of the same structure and shapes. The
/// structure is checked before Burn's `load_record`, which panics on some mismatches (another
/// number of blocks, a layer's mixer of another variant).
pub fn check_model_checkpoint<B: swa_attention::LayerOpsBackend>(
    config: &TrainConfig,
    path: &Path,
    device: &B::Device,
) -> Result<(), TrainingError> {
    let (decoder, lora) = config.initial_model::<B>(false, device)?;
    let fresh = LanguageModel { lora, ..LanguageModel::new(decoder) };
    let config = &config.model;
    let unreadable =
        |problem| TrainingError::CheckpointUnreadable { path: path.to_path_buf(), problem };
    let load = || MpkRecorder.load(path.to_path_buf(), device);
    let record: LanguageModelRecord<B> = without_panics("Burn's record loader", load)
        .map_err(unreadable)?
        .map_err(|e| unreadable(recorder_problem(&e)))?;
    let expected = parameter_shapes(&fresh);
    let mismatch =
        |problem| TrainingError::CheckpointMismatch { path: path.to_path_buf(), problem };
    check_record_structure(&record.decoder, config, &parameter_shapes(&fresh.decoder))
        .map_err(mismatch)?;
    // Burn's `load_record` asserts that the record has the model's heads.
    let loaded = without_panics("Burn's record loader", || fresh.load_record(record));
    let found = parameter_shapes(&loaded.map_err(mismatch)?);
    compare_shapes(&expected, &found).map_err(mismatch)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_without_sidecars_are_no_checkpoint() {
        let out = std::env::temp_dir().join(format!("swa-last-checkpoint-{}", std::process::id()));
        let dir = out.join("checkpoint");
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(find_checkpoint(&out), CheckpointSearch::default());
        for name in ["model-1", "optim-1", "scheduler-1"] {
            std::fs::write(dir.join(format!("{name}.mpk")), b"").unwrap();
        }
        let search = find_checkpoint(&out);
        assert_eq!(search.found, None);
        let unfinished = "checkpoint 1: model-1.mpk has no sidecar: its write did not finish";
        assert_eq!((search.skipped, search.damaged), (vec![unfinished.to_string()], false));
        std::fs::remove_dir_all(out).unwrap();
    }
}
