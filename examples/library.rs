//! swa-zoo as a library, without its application: in a crate of your own, depend on
//! `swa-zoo = { version = "0.1", default-features = false, features = ["flex"] }` and this is
//! all it takes to build a preset, run it, and run a Hugging Face checkpoint.
//!
//! `cargo run --example library -- [HF_DIR]` (default: the tiny Mistral of the tests).

use swa_zoo::prelude::*;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let device = Default::default();
    let preset = Preset::by_name("mswa-table2-mswa-tiny", 256).ok_or("no such preset")?;
    let model = preset.config.init::<Flex>(&device)?;
    let tokens = Tensor::<Flex, 2, Int>::from_ints([[72, 101, 108, 108, 111]], &device);
    println!("preset logits {:?}", model.forward(tokens)?.dims());

    let dir = std::env::args().nth(1).unwrap_or("tests/fixtures/hf/mistral".into());
    let checkpoint = Pretrained::<Flex>::load(&dir, &device)?;
    let prompt = checkpoint.encode("The sliding window", true)?;
    let text = checkpoint.model.generate(
        &[prompt],
        &GenerateConfig::new().with_max_new_tokens(8),
        &device,
    )?;
    println!("{} continues: {:?}", checkpoint.family.model_type(), checkpoint.decode(&text[0])?);
    Ok(())
}
