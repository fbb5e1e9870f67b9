//! `swa-zoo train --hf` (MSWA §5.2): the tiny pretrained GGUF fine-tuned into MSWA-h with LoRA
//! adapters on the embedded Genesis in its own tokens. The saved model is the last checkpoint's
//! with its adapters merged, it differs from the pretrained one, and a run resumed from its
//! first checkpoint ends with the straight run's weights.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use burn::backend::NdArray;
use burn::module::Module;
use burn::record::Recorder;
use swa_zoo::models::records::MpkRecorder;
use swa_zoo::models::weights::load_record;
use swa_zoo::training::language_model::{LanguageModel, LanguageModelRecord};
use swa_zoo::training::train::TrainConfig;

use crate::{logits, max_abs, run_dir};

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gguf/tiny/model.gguf")
}

/// MSWA-h around 8 keys, LoRA adapters of rank 2.
const MSWA_LORA: [&str; 4] = ["--attention", "mswa-h:8", "--lora-rank", "2"];

/// `swa-zoo train --hf` on the fixture with `flags`: 4 steps of 2 sequences of 32 tokens, a
/// checkpoint every 2.
fn finetune(dir: &Path, out: &str, flags: &[&str], resume: bool) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_swa-zoo"));
    command
        .args(["train", "--backend", "ndarray", "--hf", fixture().to_str().unwrap()])
        .args(flags)
        .args(["--lr", "1e-2", "--warmup", "1"])
        .args(["--seq-len", "32", "--batch-size", "2", "--steps", "4", "--checkpoint-every", "2"])
        .args(["--out", dir.join(out).to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if resume {
        command.arg("--resume");
    }
    command
}

/// Runs `command` to success, returning what it printed.
fn succeed(mut command: Command) -> String {
    let output = command.output().unwrap();
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{said}");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn a_pretrained_model_fine_tuned_with_lora_saves_it_merged_and_resumes_exactly() {
    let dir = run_dir("finetune");
    let printed = succeed(finetune(&dir, "straight", &MSWA_LORA, false));
    assert!(printed.contains("model.gguf under this run's attention): loss"), "{printed}");
    let out = dir.join("straight");
    let config: TrainConfig =
        swa_zoo::training::config_file::load(&out.join("train.json")).unwrap();
    assert!(config.lora.is_some() && config.pretrained.is_some(), "{config:?}");
    assert!(config.bos.is_some(), "the fixture's tokenizer adds a BOS");
    let device = Default::default();
    let saved =
        logits(&load_record::<NdArray>(&config.model, &out.join("model.mpk"), &device).unwrap());

    // The last checkpoint, its adapters merged, is the saved model.
    let (decoder, lora) = config.initial_model::<NdArray>(false, &device).unwrap();
    let record: LanguageModelRecord<NdArray> =
        MpkRecorder.load(out.join("checkpoint/model-4.mpk"), &device).unwrap();
    let trained = LanguageModel { lora, ..LanguageModel::new(decoder) }.load_record(record);
    assert!(max_abs(&saved, &logits(&trained.merged())) < 1e-6);
    let (pretrained, _) = config.initial_model::<NdArray>(true, &device).unwrap();
    assert!(max_abs(&saved, &logits(&pretrained)) > 1e-3, "fine-tuning moved the model");

    // A copy of the run that lost everything after its first checkpoint, resumed.
    let copy = dir.join("resumed");
    std::fs::create_dir_all(copy.join("checkpoint")).unwrap();
    std::fs::copy(out.join("train.json"), copy.join("train.json")).unwrap();
    for entry in std::fs::read_dir(out.join("checkpoint")).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.contains("-2.") {
            std::fs::copy(entry.path(), copy.join("checkpoint").join(&name)).unwrap();
        }
    }
    succeed(finetune(&dir, "resumed", &MSWA_LORA, true));
    let resumed =
        logits(&load_record::<NdArray>(&config.model, &copy.join("model.mpk"), &device).unwrap());
    // Within 1e-5 on the logits, as every resume test: f32 sums in another order.
    let error = max_abs(&saved, &resumed);
    assert!(error < 1e-5, "the resumed run ends {error} from the straight one");
    let _ = std::fs::remove_dir_all(dir);
}

/// Every weight fine-tuned into one window of 8 keys: `swa-zoo export` writes it as a Mistral
/// directory with the GGUF's tokenizer, which `--hf` reads back to the same logits, BOS and
/// tokens, and the same loss on held-out text as the run's own.
#[test]
fn a_model_fine_tuned_into_one_window_exports_with_its_tokenizer() {
    use swa_zoo::models::hf::{Pretrained, load_tokenizer};
    let dir = run_dir("finetune-export");
    succeed(finetune(&dir, "swa", &["--attention", "swa:8"], false));
    let (out, to) = (dir.join("swa"), dir.join("exported"));
    let mut export = Command::new(env!("CARGO_BIN_EXE_swa-zoo"));
    export.args(["export", "--out", out.to_str().unwrap(), "--to", to.to_str().unwrap()]);
    let printed = succeed(export);
    assert!(printed.contains("as mistral") && printed.contains("with the tokenizer"), "{printed}");
    let config: TrainConfig =
        swa_zoo::training::config_file::load(&out.join("train.json")).unwrap();
    assert!(config.lora.is_none(), "full fine-tuning");
    let device = Default::default();
    let saved = load_record::<NdArray>(&config.model, &out.join("model.mpk"), &device).unwrap();
    let exported = Pretrained::<NdArray>::load(&to, &device).unwrap();
    assert!(max_abs(&logits(&saved), &logits(&exported.model)) < 1e-5);
    let vocab = config.model.vocab_size;
    let original = load_tokenizer(&fixture(), vocab).unwrap();
    assert_eq!(exported.tokenizer.bos(), original.bos());
    let text = "In the beginning God created the heaven and the earth.";
    assert_eq!(
        exported.tokenizer.encode(text, true).unwrap(),
        original.encode(text, true).unwrap()
    );

    // Held-out text scores alike from the run (`eval --out --corpus`) and from the export.
    let held_out = dir.join("held-out.txt");
    std::fs::write(&held_out, "And the earth was without form, and void. ".repeat(8)).unwrap();
    let loss = |source: [&str; 2], to: &str| {
        let to = dir.join(to);
        let mut eval = Command::new(env!("CARGO_BIN_EXE_swa-zoo"));
        eval.args(["eval", "--backend", "ndarray", source[0], source[1]])
            .args(["--corpus", held_out.to_str().unwrap(), "--to", to.to_str().unwrap()])
            .args(["--lengths", "16", "--sequences", "2"]);
        succeed(eval);
        let csv = std::fs::read_to_string(to.join("eval.csv")).unwrap();
        let row = csv.lines().nth(1).unwrap().to_string();
        row.split(',').nth(2).unwrap().parse::<f64>().unwrap()
    };
    let (run, export) =
        (loss(["--out", out.to_str().unwrap()], "run"), loss(["--hf", to.to_str().unwrap()], "hf"));
    assert!((run - export).abs() < 1e-5, "the run scores {run}, its export {export}");
    let _ = std::fs::remove_dir_all(dir);
}
