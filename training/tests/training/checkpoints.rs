//! Crash-safe checkpoints (docs/reliability.md): a damaged newest checkpoint (a record
//! truncated, deleted, or its sidecar gone, as a crash mid-write would leave it) is skipped
//! with its reason and the run resumes from the previous complete one, ending where the
//! uninterrupted run ends; a run with no usable checkpoint is a one-line error naming each; a
//! run killed before its first checkpoint starts afresh; a checkpoint of another layer mixer is
//! a mismatch, not a panic; a checkpoint of an older format resumes.

use std::path::Path;

use burn::backend::{Autodiff, NdArray};
use swa_training::checkpoint::{find_checkpoint, last_checkpoint};
use swa_training::corpus::Corpus;
use swa_training::train::train;

use super::{logits, run_dir, tiny, tiny_model};
use crate::max_abs;

type B = Autodiff<NdArray>;

/// Something a crash, or a hand, does to a record file.
type Damage = fn(&Path);

/// A copy of the run in `from` (its `train.json` and `checkpoint/`) in a fresh folder.
fn copy_run(from: &Path, name: &str) -> std::path::PathBuf {
    let to = run_dir(name);
    std::fs::create_dir_all(to.join("checkpoint")).unwrap();
    std::fs::copy(from.join("train.json"), to.join("train.json")).unwrap();
    for entry in std::fs::read_dir(from.join("checkpoint")).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.join("checkpoint").join(entry.file_name())).unwrap();
    }
    to
}

#[test]
fn a_damaged_newest_checkpoint_is_skipped_and_the_run_resumes_from_the_one_before() {
    let corpus = Corpus::embedded();
    let device = Default::default();
    let straight = run_dir("crash-straight");
    let whole = train::<B>(&tiny(6), &corpus, &straight, false, &device).unwrap();
    assert_eq!(last_checkpoint(&straight), Some(6));
    let damages: [(&str, Damage); 3] = [
        ("truncated", |file| {
            let bytes = std::fs::read(file).unwrap();
            std::fs::write(file, &bytes[..bytes.len() / 3]).unwrap();
        }),
        ("deleted", |file| std::fs::remove_file(file).unwrap()),
        ("its sidecar deleted", |file| {
            let mut sidecar = file.as_os_str().to_owned();
            sidecar.push(".check");
            std::fs::remove_file(sidecar).unwrap();
        }),
    ];
    for part in ["model", "optim", "scheduler"] {
        for (damage, apply) in &damages {
            let run = copy_run(&straight, "crash-damaged");
            apply(&run.join("checkpoint").join(format!("{part}-6.mpk")));
            let search = find_checkpoint(&run);
            assert_eq!(search.found, Some(4), "{part}-6.mpk {damage}");
            assert_eq!(search.skipped.len(), 1, "{part}-6.mpk {damage}: {:?}", search.skipped);
            assert!(search.skipped[0].contains(&format!("{part}-6.mpk")), "{:?}", search.skipped);
            let resumed = train::<B>(&tiny(6), &corpus, &run, true, &device).unwrap();
            let error = max_abs(&logits(&whole.model), &logits(&resumed.model));
            assert!(error < 1e-5, "{part}-6.mpk {damage}: the resumed run differs by {error}");
            assert_eq!(last_checkpoint(&run), Some(6), "the redone checkpoint is complete");
            let _ = std::fs::remove_dir_all(run);
        }
    }
    let _ = std::fs::remove_dir_all(straight);
}

#[test]
fn no_usable_checkpoint_is_an_error_naming_each() {
    let straight = run_dir("crash-unusable");
    train::<B>(&tiny(4), &Corpus::embedded(), &straight, false, &Default::default()).unwrap();
    for step in [2, 4] {
        let file = straight.join("checkpoint").join(format!("optim-{step}.mpk"));
        let bytes = std::fs::read(&file).unwrap();
        std::fs::write(&file, &bytes[..bytes.len() - 1]).unwrap();
    }
    let error = train::<B>(&tiny(4), &Corpus::embedded(), &straight, true, &Default::default())
        .err()
        .unwrap()
        .to_string();
    assert!(error.contains("optim-2.mpk") && error.contains("optim-4.mpk"), "{error}");
    assert_eq!(error.lines().count(), 1, "{error}");
    let _ = std::fs::remove_dir_all(straight);
}

/// A run killed while it wrote its first checkpoint (a record without its sidecar) starts
/// afresh and ends with all its checkpoints. (That it ends with the uninterrupted run's weights
/// is the kill test's to show, in processes of their own: runs in this process share the
/// backend's random generator with the tests beside them.)
#[test]
fn a_run_killed_before_its_first_checkpoint_starts_afresh() {
    let corpus = Corpus::embedded();
    let device = Default::default();
    let straight = run_dir("crash-fresh-straight");
    train::<B>(&tiny(4), &corpus, &straight, false, &device).unwrap();
    let killed = copy_run(&straight, "crash-fresh");
    let checkpoints = killed.join("checkpoint");
    std::fs::remove_dir_all(&checkpoints).unwrap();
    std::fs::create_dir_all(&checkpoints).unwrap();
    let record = straight.join("checkpoint").join("model-2.mpk");
    std::fs::copy(record, checkpoints.join("model-2.mpk")).unwrap();
    train::<B>(&tiny(4), &corpus, &killed, true, &device).unwrap();
    assert_eq!(last_checkpoint(&killed), Some(4));
    for dir in [straight, killed] {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// A model checkpoint whose layer holds another mixer than the configuration's (a sliding
/// window's projections where the configuration has linear attention) is a mismatch naming
/// the part, found before Burn's `load_record`, which would panic on it.
#[test]
fn a_checkpoint_of_another_mixer_is_a_mismatch() {
    use burn::module::Module;
    use burn::record::Recorder;
    use swa_models::layers::AttentionKind;
    use swa_models::records::MpkRecorder;
    use swa_training::checkpoint::check_model_checkpoint;
    use swa_training::error::TrainingError;
    use swa_training::language_model::LanguageModel;

    let dir = run_dir("checkpoint-mixer");
    let path = dir.join("model-1.mpk");
    let device = Default::default();
    let model = LanguageModel::new(tiny_model().init::<NdArray>(&device).unwrap());
    Recorder::<NdArray>::record(&MpkRecorder, model.into_record(), path.clone()).unwrap();
    let run = |model| swa_training::train::TrainConfig::new(model, 16);
    check_model_checkpoint::<NdArray>(&run(tiny_model()), &path, &device).unwrap();
    let mut linear = tiny_model();
    linear.attention = vec![AttentionKind::Linear { feature_dim: 4 }];
    match check_model_checkpoint::<NdArray>(&run(linear), &path, &device) {
        Err(TrainingError::CheckpointMismatch { problem, .. }) => assert!(
            problem.contains("the file has `blocks.0.attention.mixer.Windowed` weights"),
            "{problem}"
        ),
        other => panic!("expected a checkpoint mismatch, got {other:?}"),
    }
    let _ = std::fs::remove_dir_all(dir);
}
