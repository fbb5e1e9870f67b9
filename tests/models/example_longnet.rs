//! Smoke test of examples/longnet.rs: the whole study with `--smoke` (3 steps per model).

#[path = "../../examples/longnet.rs"]
#[allow(dead_code)] // the example's `main`; the test calls its `run`
mod example;

use clap::Parser;

#[test]
fn longnet_example_runs_end_to_end() {
    let out = std::env::temp_dir().join(format!("swa-zoo-example-longnet-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let flags = example::Flags::parse_from(["longnet", "--smoke", "--backend", "ndarray", "--out", out.to_str().expect("a UTF-8 temp dir")]);
    example::run(flags).expect("the smoke run succeeds");
    for file in ["scaling.csv", "scaling_ratios.csv", "lm.csv", "scaling_time.svg"] {
        assert!(out.join(file).is_file(), "{file} was not written");
    }
    std::fs::remove_dir_all(&out).expect("the temp dir is removed");
}
