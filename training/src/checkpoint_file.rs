//! Crash-safe checkpoint files (docs/reliability.md). The Learner saves a checkpoint's model,
//! optimizer and schedule records on three writer threads; [`CheckpointRecorder`], the file
//! recorder it is given, writes each record atomically (`swa_models::files`) with a sidecar
//! holding its size and checksum. A checkpoint is complete when its three records and sidecars
//! are present and agree ([`verify`]). The Learner is told to delete nothing ([`SaveOnly`]):
//! whichever writer completes a checkpoint deletes the ones older than the newest `keep`
//! complete ones (`prune`), so a complete checkpoint survives until a newer one is complete.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

use burn::record::{FileRecorder, FullPrecisionSettings, Recorder, RecorderError};
use burn::tensor::backend::Backend;
use burn::train::checkpoint::{CheckpointingAction, CheckpointingStrategy};
use burn::train::metric::store::EventStoreClient;
use serde::Serialize;
use serde::de::DeserializeOwned;
use swa_models::files::{WriteError, write_atomically};
use swa_models::records::{MpkRecorder, write_record_item};

use crate::stop::RunStop;

/// The records of a checkpoint, as the Learner names their files (`model-30.mpk`, …, numbered
/// by the steps trained).
pub const PARTS: [&str; 3] = ["model", "optim", "scheduler"];

/// The extension of a record's sidecar: `model-30.mpk.check`.
const SIDECAR: &str = "check";

/// The sidecar's last line: checkpoints written before it numbered their records by epoch,
/// which this version would read as steps.
const NUMBERED_BY_STEP: &str = "numbered by step";

/// A test hook: milliseconds each record's writer waits after writing its temporary file and
/// again after renaming it, so that the kill test (`tests/zoo/app/train/kill.rs`) can kill a run
/// in the middle of a checkpoint. Unset (the default), no wait.
pub const WRITE_DELAY_VARIABLE: &str = "SWA_TEST_CHECKPOINT_DELAY_MS";

/// Waits the [`WRITE_DELAY_VARIABLE`] delay, if set.
fn test_delay() {
    let delay = std::env::var(WRITE_DELAY_VARIABLE).ok().and_then(|ms| ms.parse().ok());
    if let Some(ms) = delay {
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
}

/// The Learner's file recorder: Burn's named MessagePack format, written atomically with a
/// sidecar, keeping the newest `keep` complete checkpoints. A record it cannot write stops the
/// run through its [`RunStop`], which keeps the operating system's error.
#[derive(Clone, Debug)]
pub struct CheckpointRecorder {
    keep: usize,
    stop: RunStop,
    /// Steps per number the Learner gives: 1 from the run's own loop, which numbers
    /// checkpoints by step; an epoch's steps from burn-train's loop, which numbers them by epoch.
    steps_per_number: usize,
}

impl CheckpointRecorder {
    /// A recorder that keeps the newest `keep` (at least 1) complete checkpoints.
    pub fn new(keep: usize) -> Self {
        Self { keep: keep.max(1), stop: RunStop::default(), steps_per_number: 1 }
    }

    /// The recorder of burn-train's own loop (several devices), which numbers checkpoints by
    /// epoch: epoch `n` is written and read as the checkpoint of step `n · steps_per_epoch`.
    pub fn numbered_by_epoch(self, steps_per_epoch: usize) -> Self {
        Self { steps_per_number: steps_per_epoch.max(1), ..self }
    }

    /// The file of the record the Learner names `path` (`dir/model-3`): its number in steps.
    fn file(&self, path: &Path) -> PathBuf {
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let numbered =
            name.rsplit_once('-').and_then(|(part, n)| Some((part, n.parse::<usize>().ok()?)));
        match numbered {
            Some((part, number)) => record_path(
                path.parent().unwrap_or(Path::new("")),
                part,
                number * self.steps_per_number,
            ),
            None => path.with_extension("mpk"),
        }
    }

    /// The recorder reporting a failed write to `stop`.
    pub fn with_stop(self, stop: RunStop) -> Self {
        Self { stop, ..self }
    }
}

impl Default for CheckpointRecorder {
    fn default() -> Self {
        Self::new(2)
    }
}

impl<B: Backend> Recorder<B> for CheckpointRecorder {
    type Settings = FullPrecisionSettings;
    type RecordArgs = PathBuf;
    type RecordOutput = ();
    type LoadArgs = PathBuf;

    /// Writes `dir/part-step.mpk` atomically, then its sidecar, then prunes `dir`.
    fn save_item<I: Serialize>(&self, item: I, path: PathBuf) -> Result<(), RecorderError> {
        let target = self.file(&path);
        let mut seal = None;
        let written = write_atomically(&target, |temp| {
            write_record_item(&item, temp)?;
            seal = Some(Seal::of(temp)?);
            test_delay();
            Ok(())
        })
        .and_then(|()| {
            test_delay();
            let unwritten = std::io::Error::other("the record was not written");
            let seal = seal.ok_or(WriteError { path: target.clone(), source: unwritten })?;
            seal.write(&target)
        });
        if let Err(error) = written {
            let message = error.to_string();
            self.stop.write_failed(error);
            return Err(RecorderError::Unknown(message));
        }
        if let Some(dir) = target.parent() {
            prune(dir, self.keep);
        }
        Ok(())
    }

    /// Reads the record as [`MpkRecorder`] does.
    fn load_item<I: DeserializeOwned>(&self, path: &mut PathBuf) -> Result<I, RecorderError> {
        Recorder::<B>::load_item(&MpkRecorder, &mut self.file(path))
    }
}

impl<B: Backend> FileRecorder<B> for CheckpointRecorder {
    fn file_extension() -> &'static str {
        "mpk"
    }
}

/// A record file's size and checksum (FNV-1a, 64 bits: a check against truncation and torn
/// writes, not against tampering).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Seal {
    bytes: u64,
    checksum: u64,
}

impl Seal {
    /// The seal of the file at `path`, read in chunks.
    fn of(path: &Path) -> std::io::Result<Self> {
        let mut file = fs::File::open(path)?;
        let mut buffer = vec![0u8; 1 << 20];
        let (mut bytes, mut checksum) = (0u64, 0xCBF2_9CE4_8422_2325u64);
        loop {
            let read = file.read(&mut buffer)?;
            if read == 0 {
                return Ok(Self { bytes, checksum });
            }
            for &byte in &buffer[..read] {
                checksum = (checksum ^ byte as u64).wrapping_mul(0x0000_0100_0000_01B3);
            }
            bytes += read as u64;
        }
    }

    /// Writes the sidecar of the record at `record`, atomically.
    fn write(self, record: &Path) -> Result<(), WriteError> {
        let text =
            format!("bytes {}\nfnv1a64 {:016x}\n{NUMBERED_BY_STEP}\n", self.bytes, self.checksum);
        swa_models::files::write_bytes_atomically(&sidecar(record), text.as_bytes())
    }

    /// The seal a sidecar holds, or `None` when it is not one.
    fn parse(text: &str) -> Option<Self> {
        let mut lines = text.lines();
        let bytes = lines.next()?.strip_prefix("bytes ")?.parse().ok()?;
        let checksum = u64::from_str_radix(lines.next()?.strip_prefix("fnv1a64 ")?, 16).ok()?;
        Some(Self { bytes, checksum })
    }
}

/// The sidecar of the record at `record`.
fn sidecar(record: &Path) -> PathBuf {
    let mut name = record.as_os_str().to_owned();
    name.push(".");
    name.push(SIDECAR);
    PathBuf::from(name)
}

/// The record file of `part` of the checkpoint of step `step` in `dir`.
pub fn record_path(dir: &Path, part: &str, step: usize) -> PathBuf {
    dir.join(format!("{part}-{step}.mpk"))
}

/// Why a checkpoint cannot be resumed from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unusable {
    /// What is wrong, naming the record.
    pub problem: String,
    /// Whether a record that was written whole has changed since (a sidecar disagrees with its
    /// record, or cannot be read) or is of the older numbering, rather than a write that did
    /// not finish (a record missing, or without its sidecar), which is what a killed run
    /// leaves.
    pub damaged: bool,
}

/// Whether the checkpoint of step `step` in `dir` is complete: `Ok` when its three records are
/// present and agree with their sidecars, or what is wrong with the first that does not. With
/// `full`, each record's checksum is computed (reading it whole); without, only sizes are
/// compared.
pub fn verify(dir: &Path, step: usize, full: bool) -> Result<(), Unusable> {
    let unfinished = |problem| Err(Unusable { problem, damaged: false });
    let damaged = |problem| Err(Unusable { problem, damaged: true });
    for part in PARTS {
        let record = record_path(dir, part, step);
        let name = record.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let size = match fs::metadata(&record) {
            Ok(meta) => meta.len(),
            Err(_) => return unfinished(format!("{name} is missing")),
        };
        let Ok(text) = fs::read_to_string(sidecar(&record)) else {
            return unfinished(format!("{name} has no sidecar: its write did not finish"));
        };
        let Some(sealed) = Seal::parse(&text) else {
            return damaged(format!("{name}'s sidecar is unreadable"));
        };
        if !text.lines().any(|line| line == NUMBERED_BY_STEP) {
            return damaged(format!(
                "{name} is numbered by epoch, as before checkpoints were numbered by step: \
                 resume it with the swa-zoo that wrote it, or train afresh"
            ));
        }
        if size != sealed.bytes {
            return damaged(format!("{name} has {size} bytes where {} were written", sealed.bytes));
        }
        if full && Seal::of(&record).ok() != Some(sealed) {
            return damaged(format!("{name} does not match its checksum: it was altered"));
        }
    }
    Ok(())
}

/// The steps of the checkpoints of which `dir` holds any record file, newest first.
pub fn steps(dir: &Path) -> Vec<usize> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut steps: Vec<usize> = entries
        .filter_map(|entry| {
            let name = entry.ok()?.file_name().into_string().ok()?;
            let stem = name.strip_suffix(".mpk")?;
            let (part, step) = stem.rsplit_once('-')?;
            PARTS.contains(&part).then(|| step.parse().ok())?
        })
        .collect();
    steps.sort_unstable_by(|a, b| b.cmp(a));
    steps.dedup();
    steps
}

/// Deletes the checkpoints of `dir` older than the newest `keep` complete ones (sizes checked
/// against the sidecars), complete or not. Newer incomplete ones, which may still be being
/// written, stay.
fn prune(dir: &Path, keep: usize) {
    let all = steps(dir);
    let complete: Vec<usize> =
        all.iter().copied().filter(|&e| verify(dir, e, false).is_ok()).collect();
    let Some(&oldest_kept) = complete.get(keep - 1) else {
        return;
    };
    for step in all.into_iter().filter(|&e| e < oldest_kept) {
        for part in PARTS {
            let record = record_path(dir, part, step);
            fs::remove_file(sidecar(&record)).ok();
            fs::remove_file(record).ok();
        }
    }
}

/// The Learner's checkpointing strategy: save whenever the loop checkpoints, delete nothing (the recorder
/// prunes once a newer checkpoint is complete).
#[derive(Clone, Copy, Debug, Default)]
pub struct SaveOnly;

impl CheckpointingStrategy for SaveOnly {
    fn checkpointing(&mut self, _: usize, _: &EventStoreClient) -> Vec<CheckpointingAction> {
        vec![CheckpointingAction::Save]
    }
}
