//! The file format of our own Burn records (`.mpk`): Burn's named MessagePack at full
//! precision, as `NamedMpkFileRecorder<FullPrecisionSettings>` writes it, read and written by
//! [`MpkRecorder`]. [`crate::weights`] and the training crate's checkpoints (the Learner's
//! checkpointer and `--resume`) go through it, so every `.mpk` of the zoo loads the same way.
//!
//! Records hold the modules' current layout only; a file of an earlier layout fails to decode
//! with the decoder's error. Weights move between layouts as safetensors, whose names are
//! stable ([`crate::weights`]).

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use burn::record::{FileRecorder, FullPrecisionSettings, Recorder, RecorderError};
use burn::tensor::backend::Backend;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// The extension Burn's named MessagePack recorder gives its files.
pub const RECORD_EXTENSION: &str = "mpk";

/// Burn's `NamedMpkFileRecorder<FullPrecisionSettings>`, with the I/O errors of the operating
/// system kept when writing ([`write_record_item`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct MpkRecorder;

impl<B: Backend> Recorder<B> for MpkRecorder {
    type Settings = FullPrecisionSettings;
    type RecordArgs = PathBuf;
    type RecordOutput = ();
    type LoadArgs = PathBuf;

    /// Writes the file as Burn's named MessagePack recorder does ([`write_record_item`]).
    fn save_item<I: Serialize>(&self, item: I, path: PathBuf) -> Result<(), RecorderError> {
        write_record_item(&item, &path.with_extension(RECORD_EXTENSION))
            .map_err(|e| RecorderError::Unknown(format!("cannot write {}: {e}", path.display())))
    }

    /// Decodes the file streaming, as Burn's recorder does.
    fn load_item<I: DeserializeOwned>(&self, path: &mut PathBuf) -> Result<I, RecorderError> {
        path.set_extension(RECORD_EXTENSION);
        let file = File::open(&path).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => RecorderError::FileNotFound(e.to_string()),
            _ => RecorderError::Unknown(e.to_string()),
        })?;
        rmp_serde::decode::from_read(BufReader::new(file))
            .map_err(|e| RecorderError::Unknown(e.to_string()))
    }
}

/// Writes `item` (a record item with its metadata) to a new file at `path` in Burn's named
/// MessagePack format, the bytes `NamedMpkFileRecorder` writes. Unlike Burn's writer, the
/// buffer is flushed before returning, and an I/O failure comes back as the operating system's
/// error (`StorageFull` on a full disk), not as an encoding error's text.
pub fn write_record_item<I: Serialize>(item: &I, path: &Path) -> io::Result<()> {
    let mut writer = Capture { inner: BufWriter::new(File::create(path)?), failure: None };
    let encoded = rmp_serde::encode::write_named(&mut writer, item);
    match (encoded, writer.failure.take()) {
        (_, Some(failure)) => Err(failure),
        (Err(e), None) => Err(io::Error::other(e.to_string())),
        (Ok(()), None) => writer.inner.into_inner().map(drop).map_err(|e| e.into_error()),
    }
}

/// A writer that keeps the first I/O error of the writer inside it, which the MessagePack
/// encoder turns into text.
struct Capture<W> {
    inner: W,
    failure: Option<io::Error>,
}

impl<W: Write> Write for Capture<W> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.inner.write(bytes).inspect_err(|e| {
            self.failure.get_or_insert_with(|| match e.raw_os_error() {
                Some(code) => io::Error::from_raw_os_error(code),
                None => io::Error::new(e.kind(), e.to_string()),
            });
        })
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

impl<B: Backend> FileRecorder<B> for MpkRecorder {
    fn file_extension() -> &'static str {
        RECORD_EXTENSION
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::NdArray;
    use burn::record::NamedMpkFileRecorder;

    #[test]
    fn records_are_written_with_the_bytes_of_burns_recorder() {
        let dir = std::env::temp_dir().join(format!("swa-records-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let item = (vec![1.5f32, -2.0, 3.25], "layers.0.weight".to_string(), [7u64, 9]);
        write_record_item(&item, &dir.join("ours.mpk")).unwrap();
        let burn = NamedMpkFileRecorder::<FullPrecisionSettings>::new();
        Recorder::<NdArray>::save_item(&burn, item, dir.join("burn.mpk")).unwrap();
        let read = |name: &str| std::fs::read(dir.join(name)).unwrap();
        assert_eq!(read("ours.mpk"), read("burn.mpk"));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
