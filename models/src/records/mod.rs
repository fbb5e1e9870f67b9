//! The file format of our own Burn records (`.mpk`): Burn's named MessagePack at full
//! precision, as `NamedMpkFileRecorder<FullPrecisionSettings>` writes it, read by
//! [`MigratingRecorder`], which also reads the records saved before the format changed
//! ([`migrate`]). [`crate::weights`] and the training crate's checkpoints (the Learner's
//! checkpointer and `--resume`) read through it, so every `.mpk` of the zoo loads the same way.

pub mod migrate;
mod value;

use std::fs::File;
use std::io::BufReader;
use std::path::PathBuf;

use burn::record::{
    FileRecorder, FullPrecisionSettings, NamedMpkFileRecorder, Recorder, RecorderError,
};
use burn::tensor::backend::Backend;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// The extension Burn's named MessagePack recorder gives its files.
pub const RECORD_EXTENSION: &str = "mpk";

/// Burn's `NamedMpkFileRecorder<FullPrecisionSettings>`, which, when a file does not decode as
/// the record asked for, tries it once more as a record from before a format change
/// ([`migrate::migrated`]): a model saved by an older swa-zoo loads as it did. Writing is
/// Burn's recorder's, unchanged.
#[derive(Clone, Copy, Debug, Default)]
pub struct MigratingRecorder;

impl<B: Backend> Recorder<B> for MigratingRecorder {
    type Settings = FullPrecisionSettings;
    type RecordArgs = PathBuf;
    type RecordOutput = ();
    type LoadArgs = PathBuf;

    /// Burn's named MessagePack recorder's write.
    fn save_item<I: Serialize>(&self, item: I, path: PathBuf) -> Result<(), RecorderError> {
        Recorder::<B>::save_item(&NamedMpkFileRecorder::<FullPrecisionSettings>::new(), item, path)
    }

    /// Decodes the file streaming, as Burn's recorder does; if that fails, reads it whole and
    /// migrates it. A file that neither way decodes fails with the first decoder's error.
    fn load_item<I: DeserializeOwned>(&self, path: &mut PathBuf) -> Result<I, RecorderError> {
        path.set_extension(RECORD_EXTENSION);
        let open = |path: &PathBuf| {
            File::open(path).map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => RecorderError::FileNotFound(e.to_string()),
                _ => RecorderError::Unknown(e.to_string()),
            })
        };
        let error = match rmp_serde::decode::from_read(BufReader::new(open(path)?)) {
            Ok(item) => return Ok(item),
            Err(error) => RecorderError::Unknown(error.to_string()),
        };
        let bytes = std::fs::read(&path).map_err(|e| RecorderError::Unknown(e.to_string()))?;
        migrate::migrated(&bytes).ok_or(error)
    }
}

impl<B: Backend> FileRecorder<B> for MigratingRecorder {
    fn file_extension() -> &'static str {
        RECORD_EXTENSION
    }
}
