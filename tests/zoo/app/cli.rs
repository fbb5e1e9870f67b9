//! The command line's own helpers: its help text, `info`'s SWA reference of a preset, the
//! multiple-choice accuracy of `eval`, and the examples' default corpus.

use std::path::Path;

use clap::{CommandFactory, Parser};
use swa_zoo::cli::Cli;
use swa_zoo::cli::eval_choice::{ChoiceAccuracy, accuracy};
use swa_zoo::cli::info::swa_reference;
use swa_zoo::models::layers::mswa::MswaVariant;
use swa_zoo::models::{Preset, PresetSize};
use swa_zoo::study::StudyArgs;

#[test]
fn the_help_says_what_the_command_does() {
    let help = Cli::command().render_help().to_string();
    assert!(help.starts_with("Train, evaluate, sample from and benchmark"), "{help}");
    assert!(!help.contains("Training, evaluation, data"), "{help}");
}

/// Σ windows of MSWA's Table 2 preset `variant` over that of its SWA reference, at 2048.
fn relative_cost(variant: MswaVariant, scale: PresetSize) -> f64 {
    let config = Preset::mswa(variant, scale, 256).unwrap().config;
    let swa = swa_reference(&config).unwrap().config;
    config.window_sum(2048) as f64 / swa.window_sum(2048) as f64
}

#[test]
fn table2_costs_relative_to_swa_are_the_papers() {
    for scale in [PresetSize::Paper, PresetSize::Tiny] {
        assert_eq!(relative_cost(MswaVariant::Swa, scale), 1.0);
        assert_eq!(relative_cost(MswaVariant::Heads, scale), 15.0 / 16.0);
        assert_eq!(relative_cost(MswaVariant::Layers, scale), 15.0 / 16.0);
        assert_eq!(relative_cost(MswaVariant::Both, scale), (15.0f64 / 16.0).powi(2));
    }
}

#[test]
fn the_base_window_is_the_presets() {
    for (scale, base) in [(PresetSize::Paper, 128), (PresetSize::Tiny, 16)] {
        for variant in [MswaVariant::Swa, MswaVariant::Both] {
            let config = Preset::mswa(variant, scale, 256).unwrap().config;
            assert_eq!(swa_reference(&config).unwrap().base, base);
        }
    }
    let full = Preset::mswa_full(1024, PresetSize::Tiny, 256).config;
    assert!(swa_reference(&full).is_none());
}

#[test]
fn acc_norm_divides_by_the_choice_length() {
    // Question 0: the long answer has the larger total but the smaller mean.
    let scores = vec![vec![(-4.0, 2), (-6.0, 6)], vec![(-1.0, 1), (-3.0, 1)]];
    assert_eq!(accuracy(&scores, &[1, 0]), ChoiceAccuracy { acc: 0.5, acc_norm: 1.0 });
}

/// An example's flags: those of every study.
#[derive(Parser)]
struct Flags {
    #[command(flatten)]
    study: StudyArgs,
}

#[test]
fn the_default_corpus_is_a_file_of_the_repository() {
    let corpus = Flags::parse_from(["example"]).study.corpus;
    let path = Path::new(&corpus);
    assert!(path.starts_with(env!("CARGO_MANIFEST_DIR")), "{corpus} is outside the repository");
    assert!(path.is_file(), "{corpus} is missing");
}
