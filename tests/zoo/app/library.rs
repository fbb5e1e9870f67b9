//! swa-zoo as a library: `examples/library.rs` runs, and the library alone
//! (`default-features = false, features = ["flex"]`) brings none of the application's
//! dependencies.

use std::process::Command;

#[path = "../../../examples/library.rs"]
#[allow(dead_code)] // the example's `main`; the test calls its `run`
mod example;

#[test]
fn the_library_example_runs_a_preset_and_a_checkpoint() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/hf/mistral");
    if let Err(problem) = example::run(dir) {
        panic!("examples/library.rs failed: {problem}");
    }
}

#[test]
fn the_library_alone_brings_no_clap_plotters_or_png() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
    let tree = |features: &[&str]| {
        let output = Command::new(&cargo)
            .args(["tree", "--offline", "--manifest-path", manifest, "-p", "swa-zoo"])
            .args(["-e", "normal,build", "--prefix", "none", "--format", "{lib}"])
            .args(features)
            .output()
            .expect("cargo runs");
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        String::from_utf8(output.stdout).expect("UTF-8")
    };
    let has = |tree: &str, krate: &str| tree.lines().any(|line| line.trim() == krate);
    let library = tree(&["--no-default-features", "--features", "flex"]);
    for krate in ["clap", "plotters", "png"] {
        assert!(!has(&library, krate), "{krate} in the library alone");
    }
    let application = tree(&[]);
    for krate in ["clap", "plotters", "png"] {
        assert!(has(&application, krate), "{krate} missing from the default build");
    }
}
