//! Smoke test of examples/longformer.rs: the whole study with `--smoke` (3 steps per model).

#[path = "../../examples/longformer.rs"]
#[allow(dead_code)] // the example's `main`; the test calls its `run`
mod example;

use clap::Parser;

#[test]
fn longformer_example_runs_end_to_end() {
    let out = std::env::temp_dir().join(format!("swa-zoo-example-longformer-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let flags = example::Flags::parse_from(["longformer", "--smoke", "--backend", "ndarray", "--out", out.to_str().expect("a UTF-8 temp dir")]);
    example::run(flags).expect("the smoke run succeeds");
    for file in ["accuracy.csv", "accuracy.svg"] {
        assert!(out.join(file).is_file(), "{file} was not written");
    }
    let csv = std::fs::read_to_string(out.join("accuracy.csv")).expect("the table");
    assert_eq!(csv.lines().count(), 1 + 5, "a header and five models:\n{csv}");
    std::fs::remove_dir_all(&out).expect("the temp dir is removed");
}
