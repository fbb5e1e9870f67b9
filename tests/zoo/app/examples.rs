//! Smoke tests of the per-paper examples in `examples/`: each runs its whole study with
//! `--smoke` (three steps per model on the embedded corpus, batches of 2, small evaluations) and
//! must write its tables and figures.

use std::path::{Path, PathBuf};

use clap::Parser;

#[path = "../../../examples/longformer.rs"]
#[allow(dead_code)] // the example's `main`; the test calls its `run`
mod longformer;
#[path = "../../../examples/longnet.rs"]
#[allow(dead_code)] // the example's `main`; the test calls its `run`
mod longnet;
#[path = "../../../examples/mswa.rs"]
#[allow(dead_code)] // the example's `main`; the test calls its `run`
mod mswa;
#[path = "../../../examples/mswa_linear.rs"]
#[allow(dead_code)] // the example's `main`; the test calls its `run`
mod mswa_linear;
#[path = "../../../examples/streaming.rs"]
#[allow(dead_code)] // the example's `main`; the test calls its `run`
mod streaming;
#[path = "../../../examples/streaming_pretrained.rs"]
#[allow(dead_code)] // the example's `main`; the test calls its `run`
mod streaming_pretrained;
#[path = "../../../examples/swat.rs"]
#[allow(dead_code)] // the example's `main`; the test calls its `run`
mod swat;

/// A fresh output folder for one example's smoke run.
fn out_dir(example: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("swa-zoo-example-{example}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// The smoke flags of an example writing to `out`: batches of 2 sequences, since the smoke run
/// checks that the study runs end to end, not what it learns (at the default 8 a test spends
/// about a minute in ndarray's training steps).
fn smoke_flags(example: &str, out: &Path) -> Vec<String> {
    [example, "--smoke", "--batch-size", "2", "--backend", "ndarray", "--out"]
        .into_iter()
        .map(String::from)
        .chain([out.display().to_string()])
        .collect()
}

/// Asserts that `files` were written to `out`, then removes it.
fn assert_wrote(out: &Path, files: &[&str]) {
    for file in files {
        assert!(out.join(file).is_file(), "{} was not written", out.join(file).display());
    }
    std::fs::remove_dir_all(out).unwrap();
}

#[test]
fn mswa_example_runs_end_to_end() {
    let out = out_dir("mswa");
    mswa::run(mswa::Flags::parse_from(smoke_flags("mswa", &out))).unwrap();
    assert_wrote(&out, &["table2.csv", "table5.csv", "table5.svg", "table6.csv"]);
}

#[test]
fn mswa_example_runs_under_transformer_xl_setup() {
    let out = out_dir("mswa-transformer-xl");
    let mut flags = smoke_flags("mswa", &out);
    flags.push("--transformer-xl".into());
    mswa::run(mswa::Flags::parse_from(flags)).unwrap();
    assert_wrote(&out, &["table2.csv", "table2_transformer_xl.csv"]);
}

#[test]
fn mswa_linear_example_runs_end_to_end() {
    let out = out_dir("mswa_linear");
    mswa_linear::run(mswa_linear::Flags::parse_from(smoke_flags("mswa_linear", &out))).unwrap();
    assert_wrote(&out, &["table3.csv"]);
}

#[test]
fn streaming_example_runs_end_to_end() {
    let out = out_dir("streaming");
    streaming::run(streaming::Flags::parse_from(smoke_flags("streaming", &out))).unwrap();
    assert_wrote(
        &out,
        &[
            "grid.csv",
            "vanilla-window.svg",
            "vanilla-sinks.svg",
            "vanilla-streaming.svg",
            "swat-window.svg",
        ],
    );
}

/// The pretrained streaming example on the tiny GGUF fixture: 300 tokens, caches of 16 and 32,
/// 12 positions.
#[test]
fn streaming_pretrained_example_runs_end_to_end() {
    let out = out_dir("streaming-pretrained");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let model = root.join("tests/fixtures/gguf/tiny/model.gguf");
    let text = root.join("tests/fixtures/hf/corpus.txt");
    let flags = [
        "streaming_pretrained",
        "--hf",
        model.to_str().unwrap(),
        "--text",
        text.to_str().unwrap(),
        "--tokens",
        "300",
        "--windows",
        "16,32",
        "--positions",
        "12",
        "--backend",
        "ndarray",
        "--out",
        out.to_str().unwrap(),
    ];
    streaming_pretrained::run(streaming_pretrained::Flags::parse_from(flags)).unwrap();
    let table = std::fs::read_to_string(out.join("table.csv")).unwrap();
    assert_eq!(table.lines().count(), 1 + 4, "dense, window, sinks, recomputation: {table}");

    // A run again into the same folder with one more window keeps what the first wrote (its
    // dense losses, marked here, are not computed again) and runs the new window only.
    let positions = out.join("positions.csv");
    let first = std::fs::read_to_string(&positions).unwrap();
    let marked: String = first
        .lines()
        .map(|line| match line.strip_prefix("dense,,") {
            Some(rest) => {
                let cells: Vec<&str> = rest.split(',').collect();
                format!("dense,,{},9.87654,{}\n", cells[0], cells[2])
            }
            None => format!("{line}\n"),
        })
        .collect();
    std::fs::write(&positions, &marked).unwrap();
    let mut again = flags;
    again[8] = "16,32,8";
    streaming_pretrained::run(streaming_pretrained::Flags::parse_from(again)).unwrap();
    let second = std::fs::read_to_string(&positions).unwrap();
    assert!(second.starts_with(&marked), "the earlier rows are kept as they were");
    let added = second.lines().count() - marked.lines().count();
    assert_eq!(added, 3 * 12, "window, sinks and recomputation at cache 8 only");
    assert_wrote(&out, &["positions.csv", "table.csv", "perplexity.svg", "time.svg"]);
}

#[test]
fn swat_example_runs_end_to_end() {
    let out = out_dir("swat");
    swat::run(swat::Flags::parse_from(smoke_flags("swat", &out))).unwrap();
    assert_wrote(&out, &["table2.csv", "table2.svg", "table3.csv", "passkey.csv"]);
}

#[test]
fn longnet_example_runs_end_to_end() {
    let out = out_dir("longnet");
    longnet::run(longnet::Flags::parse_from(smoke_flags("longnet", &out))).unwrap();
    assert_wrote(&out, &["scaling.csv", "scaling_ratios.csv", "lm.csv", "scaling_time.svg"]);
}

#[test]
fn longformer_example_runs_end_to_end() {
    let out = out_dir("longformer");
    longformer::run(longformer::Flags::parse_from(smoke_flags("longformer", &out))).unwrap();
    let csv = std::fs::read_to_string(out.join("accuracy.csv")).unwrap();
    assert_eq!(csv.lines().count(), 1 + 5, "a header and five models:\n{csv}");
    assert_wrote(&out, &["accuracy.csv", "accuracy.svg"]);
}
