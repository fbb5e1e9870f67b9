//! A finished training run read back from its folder: `train.json` and the final weights
//! `model.mpk`, as [`train`](crate::train::train) wrote them.

use std::path::Path;

use burn::tensor::backend::Backend;
use swa_models::Decoder;

use crate::error::TrainingError;
use crate::train::TrainConfig;

/// A trained run: its configuration and its model.
#[derive(Debug)]
pub struct TrainedRun<B: Backend> {
    /// The run's configuration (`train.json`).
    pub config: TrainConfig,
    /// The trained model (`model.mpk`).
    pub model: Decoder<B>,
}

impl<B: Backend> TrainedRun<B> {
    /// Reads the run in the folder `out` onto `device`. Fails with
    /// [`TrainingError::NotARun`] when `train.json` cannot be read and with
    /// [`TrainingError::RunModel`] when the weights are missing, damaged or of another
    /// configuration.
    pub fn load(out: impl AsRef<Path>, device: &B::Device) -> Result<Self, TrainingError> {
        let out = out.as_ref();
        let run = out.to_path_buf();
        let config: TrainConfig =
            crate::config_file::load(&out.join("train.json")).map_err(|source| {
                TrainingError::NotARun { run: run.clone(), source: Box::new(source) }
            })?;
        let model = swa_models::weights::load_record(&config.model, &out.join("model.mpk"), device)
            .map_err(|source| TrainingError::RunModel { run, source: Box::new(source) })?;
        Ok(Self { config, model })
    }
}
