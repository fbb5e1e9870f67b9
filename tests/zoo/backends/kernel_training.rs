//! The fused kernels inside training: tiny presets trained a few AdamW steps on a backend whose
//! windowed core runs its fused kernels, forward and backward, give the losses of the same model
//! trained on ndarray (where it runs the blocked path):
//! - on `Autodiff<Flex>`, the fused CPU kernel, every tiny preset;
//! - on `Autodiff<Wgpu>`, the CubeCL kernels, the tiny SWA and SWAT presets, when the `wgpu`
//!   feature is compiled in and an adapter answers (lavapipe counts); otherwise the test says
//!   why it skipped, and fails instead when `SWA_REQUIRE_WGPU` is set (CI).

use std::path::Path;

use burn::optim::{AdamWConfig, GradientsParams, Optimizer};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Int, Tensor, TensorData};
use swa_attention::ModelBackend;
use swa_models::weights::{load_record, save_record};
use swa_models::{DecoderConfig, Preset};
use swa_training::batch::TokenBatch;
use swa_training::language_model::LanguageModel;
use swa_training::stream_memory::Stream;

use crate::{Reference, values};

/// AdamW steps per run.
const STEPS: usize = 3;
/// Largest loss difference allowed between the backends at any step (f32; the losses are
/// about ln 256 ≈ 5.5, and the two paths sum the same scores in different orders).
const LOSS_TOLERANCE: f64 = 1e-4;

/// A batch of 2 rows of `len + 1` seeded byte tokens, trained on at every step so that the
/// loss must fall.
fn batch<B: Backend>(len: usize, device: &B::Device) -> TokenBatch<B> {
    let ids: Vec<i64> =
        values(0x7EA1, 2 * (len + 1)).into_iter().map(|x| ((x + 1.0) * 128.0) as i64).collect();
    let all = Tensor::<B, 2, Int>::from_data(TensorData::new(ids, [2, len + 1]), device);
    TokenBatch {
        inputs: all.clone().narrow(1, 0, len),
        targets: all.narrow(1, 1, len),
        scored: None,
        stream_start: None,
    }
}

/// The losses of `STEPS` AdamW steps on `B`, from the weights saved at `weights`.
fn losses<B>(config: &DecoderConfig, weights: &Path, len: usize, device: &B::Device) -> Vec<f64>
where
    B: AutodiffBackend + ModelBackend,
{
    let decoder = load_record::<B>(config, weights, device).expect("weights just saved");
    let mut model = LanguageModel::new(decoder);
    let mut optim = AdamWConfig::new().init();
    let mut losses = Vec::new();
    for _ in 0..STEPS {
        let loss = model.loss(batch(len, device), Stream::Train).loss;
        losses
            .push(loss.clone().into_data().convert::<f64>().to_vec::<f64>().expect("f64 loss")[0]);
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optim.step(1e-2, model, grads);
    }
    losses
}

/// `preset` trained on `B` (named `backend`) on `device` against ndarray, from the same weights.
fn check<B>(preset: &Preset, backend: &str, device: &B::Device)
where
    B: AutodiffBackend + ModelBackend,
{
    let len = preset.train_len / 2;
    let reference = preset.config.init::<Reference>(&Default::default()).expect("valid preset");
    let file = format!("swa-kernel-training-{}-{}-{backend}", std::process::id(), preset.name);
    let weights =
        save_record(&reference, &std::env::temp_dir().join(file)).expect("temp dir writable");
    let want = losses::<Reference>(&preset.config, &weights, len, &Default::default());
    let got = losses::<B>(&preset.config, &weights, len, device);
    std::fs::remove_file(&weights).ok();
    eprintln!("{}: ndarray {want:?}, {backend} {got:?}", preset.name);
    for (step, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!(
            (g - w).abs() <= LOSS_TOLERANCE,
            "{}: step {step}: {backend} {g} vs ndarray {w}",
            preset.name
        );
    }
    assert!(want[STEPS - 1] < want[0], "{}: the loss did not decrease: {want:?}", preset.name);
}

#[cfg(feature = "flex")]
#[test]
fn every_tiny_preset_trains_on_the_fused_cpu_kernel_as_on_ndarray() {
    use burn::backend::{Autodiff, Flex};
    use swa_models::PresetSize;

    for preset in Preset::all(PresetSize::Tiny, 256).expect("the tiny presets") {
        check::<Autodiff<Flex>>(&preset, "flex", &Default::default());
    }
}

#[cfg(feature = "wgpu")]
mod on_wgpu {
    use burn::backend::{Autodiff, Wgpu};
    use swa_models::Preset;

    use super::check;
    use crate::wgpu_devices::lease;

    /// Preset `name` on a wgpu device (`crate::wgpu_devices::lease`).
    fn on_wgpu(name: &str) {
        if let Some(device) = lease() {
            let preset = Preset::by_name(name, 256).expect("preset exists");
            check::<Autodiff<Wgpu>>(&preset, "wgpu", &device);
        }
    }

    #[test]
    fn swa_trains_on_the_kernels_as_on_ndarray() {
        on_wgpu("mswa-table2-swa-tiny");
    }

    #[test]
    fn swat_trains_on_the_kernels_as_on_ndarray() {
        on_wgpu("swat-analysis-tiny");
    }
}

#[cfg(not(feature = "wgpu"))]
#[test]
fn kernel_training_needs_wgpu() {
    eprintln!("skipped: built without the `wgpu` feature");
}
