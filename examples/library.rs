//! swa-zoo as a library, without its application: in a crate of your own, depend on
//! `swa-zoo = { version = "0.1", default-features = false, features = ["flex"] }` and [`run`]
//! is all it takes to build a preset, run it, and run a Hugging Face checkpoint.
//!
//! `cargo run --example library -- [HF_DIR]` (default: the tiny Mistral of the tests).

use swa_zoo::prelude::*;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args().nth(1).unwrap_or("tests/fixtures/hf/mistral".into());
    run(&dir)
}

/// A preset's forward pass, then a few greedy tokens of the checkpoint in `dir`.
pub fn run(dir: &str) -> Result<(), Box<dyn std::error::Error>> {
    let device = Default::default();
    let preset = Preset::by_name("mswa-table2-mswa-tiny", 256).ok_or("no such preset")?;
    let model = preset.config.init::<Flex>(&device)?;
    let tokens = Tensor::<Flex, 2, Int>::from_ints([[72, 101, 108, 108, 111]], &device);
    println!("preset logits {:?}", model.forward(tokens)?.dims());

    let checkpoint = Pretrained::<Flex>::load(dir, &device)?;
    let prompt = checkpoint.encode("The sliding window", true)?;
    let greedy = GenerateConfig::new().with_temperature(0.0).with_max_new_tokens(8);
    let new_tokens = checkpoint.model.generate(&[prompt], &greedy, &device)?;
    println!("{:?} continues: {:?}", checkpoint.family, checkpoint.decode(&new_tokens[0])?);
    Ok(())
}
