//! The presets: every paper configuration is valid, and MSWA's cost matches docs/semantics.md §3.

use swa_models::layers::mswa::MswaVariant;
use swa_models::{Preset, PresetSize};

#[test]
fn every_paper_preset_is_valid() {
    let presets = Preset::all(PresetSize::Paper, 50_000).unwrap();
    assert_eq!(presets.len(), 15);
    for preset in presets {
        preset.config.validate().unwrap_or_else(|e| panic!("{}: {e}", preset.name));
        assert!(
            Preset::by_name(&preset.name, 50_000).is_some(),
            "{} is found by name",
            preset.name
        );
        assert!(Preset::by_name(&format!("{}-tiny", preset.name), 256).is_some());
    }
}

#[test]
fn mswa_spends_fifteen_sixteenths_squared_of_swa() {
    for scale in [PresetSize::Paper, PresetSize::Tiny] {
        let swa = Preset::mswa(MswaVariant::Swa, scale, 256).unwrap();
        let mswa = Preset::mswa(MswaVariant::Both, scale, 256).unwrap();
        // Measured at a context that no window reaches past.
        let n = 1 << 20;
        let ratio = mswa.config.window_sum(n) as f64 / swa.config.window_sum(n) as f64;
        assert!((ratio - (15.0f64 / 16.0).powi(2)).abs() < 1e-12, "{scale:?}: {ratio}");
    }
}

#[test]
fn swat_trains_at_four_windows() {
    let swat = Preset::swat_340m(PresetSize::Paper, 50_000);
    assert_eq!(
        (swat.config.d_model, swat.config.heads, swat.config.layers, swat.train_len),
        (1024, 16, 24, 1024)
    );
}

/// Builds every paper-size preset (hundreds of millions of parameters): `cargo test -- --ignored`.
#[test]
#[ignore]
fn every_paper_preset_builds() {
    for preset in Preset::all(PresetSize::Paper, 50_000).unwrap() {
        let model = preset.config.init::<burn::backend::NdArray>(&Default::default()).unwrap();
        println!("{}: {}", preset.name, model.info(&preset.config, preset.train_len));
    }
}
