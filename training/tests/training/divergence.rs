//! A run that diverges stops (docs/reliability.md, exit status 8): the first step whose loss is
//! not finite ends it before that step's update, with an error naming the step; nothing is
//! written after it (no checkpoint, no `model.mpk`), the checkpoints before it hold finite
//! weights, and `--resume` continues from the last of them.

use burn::backend::{Autodiff, NdArray};
use burn::module::Module;
use burn::record::Recorder;
use swa_models::records::MpkRecorder;
use swa_training::TrainingError;
use swa_training::checkpoint::last_checkpoint;
use swa_training::corpus::Corpus;
use swa_training::language_model::{LanguageModel, LanguageModelRecord};
use swa_training::train::train;

use super::{logits, run_dir, tiny};

type B = Autodiff<NdArray>;

#[test]
fn a_diverging_run_stops_at_its_first_non_finite_loss_and_resumes_from_the_last_checkpoint() {
    // A learning rate of 100 reached over 12 warm-up steps: finite at first, NaN by step 12.
    let config = tiny(16).with_learning_rate(1e2).with_warmup_steps(12);
    let out = run_dir("diverging");
    let corpus = Corpus::embedded();
    let run = |resume| train::<B>(&config, &corpus, &out, resume, &Default::default());
    let Err(TrainingError::Diverged { at, checkpoint: Some(checkpoint), .. }) = run(false) else {
        panic!("the run should diverge after its first checkpoint");
    };
    assert_eq!(at.what, "the loss");
    assert!(at.value.is_nan() && at.step > checkpoint, "{at:?} after checkpoint {checkpoint}");
    assert_eq!(last_checkpoint(&out), Some(checkpoint), "nothing written after the divergence");
    assert!(!out.join("model.mpk").exists());

    let device = Default::default();
    let path = out.join(format!("checkpoint/model-{checkpoint}.mpk"));
    let record: LanguageModelRecord<NdArray> = MpkRecorder.load(path, &device).unwrap();
    let model = LanguageModel::new(config.model.init::<NdArray>(&device).unwrap());
    let weights = model.load_record(record).decoder;
    assert!(logits(&weights).iter().all(|v| v.is_finite()), "the last checkpoint is finite");

    let Err(again) = run(true) else { panic!("the same run should diverge again") };
    let message = again.to_string();
    let expected =
        format!("training diverged at step {}: the loss is NaN; nothing was saved", at.step);
    assert!(message.starts_with(&expected), "resumed, it diverges where it did: {message}");
    assert!(message.contains(&format!("--resume continues from checkpoint {checkpoint}")));
}
