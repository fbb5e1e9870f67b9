//! Training beyond one f32 device: Burn's multi-device data parallelism (two CPU "devices" of
//! ndarray, which is what this machine has), and half precision on wgpu where the adapter
//! supports f16. burn-train's DDP is not wired (see the README's "Several devices").

use burn::backend::{Autodiff, NdArray};
use burn::train::{ExecutionStrategy, MultiDeviceOptim};
use swa_models::Decoder;
use swa_training::TrainingBackend;
use swa_training::checkpoint::last_checkpoint;
use swa_training::corpus::Corpus;
use swa_training::eval::mean_loss;
use swa_training::train::{TrainConfig, train_with};

use crate::{run_dir, tiny_model};

/// A run of the tests' tiny model ([`tiny_model`]) of `steps` steps at a learning rate that
/// shows learning within them, checkpointed once at the end.
fn learning_run(steps: usize) -> TrainConfig {
    TrainConfig::new(tiny_model(), 16)
        .with_batch_size(4)
        .with_steps(steps)
        .with_checkpoint_every(steps)
        .with_warmup_steps(1)
        .with_learning_rate(1e-2)
        .with_valid_batches(2)
}

/// Validation loss of a fresh model and of the model `strategy` trained for `steps` steps, both
/// finite. The fresh model is drawn apart from the trained one's initial weights (Burn's RNG is
/// shared with the tests running beside it), so `before` is a typical starting loss, not that
/// run's own.
fn losses_before_and_after<B: TrainingBackend>(
    name: &str,
    steps: usize,
    strategy: ExecutionStrategy<B>,
) -> (f64, f64) {
    let (config, corpus, dir) = (learning_run(steps), Corpus::embedded(), run_dir(name));
    let device = strategy.main_device().clone();
    let loss = |model: Decoder<B::InnerBackend>| {
        mean_loss(&model, (corpus.valid(), None), 16, 4, 2, &device).unwrap()
    };
    let before = loss(config.model.init::<B::InnerBackend>(&device).unwrap());
    let outcome = train_with(&config, &corpus, &dir, false, strategy).unwrap();
    assert_eq!(last_checkpoint(&dir), Some(steps));
    let after = loss(outcome.model);
    eprintln!("{name}: validation loss {before:.4} → {after:.4}");
    assert!(before.is_finite() && after.is_finite(), "{before} → {after}");
    let _ = std::fs::remove_dir_all(dir);
    (before, after)
}

#[test]
fn burns_multi_device_strategy_trains_on_two_cpu_devices() {
    let devices = vec![Default::default(); 2];
    // 24 steps: after 8, two runs ended 0.3 and 0.06 below their fresh model's loss, which was
    // drawn apart from their own initial weights.
    let (before, after) = losses_before_and_after::<Autodiff<NdArray>>(
        "multi",
        24,
        ExecutionStrategy::MultiDevice(devices, MultiDeviceOptim::OptimMainDevice),
    );
    assert!(after < before - 0.3, "{before} → {after}");
}

/// f16 training on wgpu's CPU adapter (lavapipe, which has shader-f16) learns: with f32 master
/// weights and loss scaling, 8 steps bring the validation loss well below the uniform guess
/// (ln 256), by at least half as much as the same run in f32 (on ndarray).
#[test]
fn half_precision_training_learns_on_wgpu_where_the_adapter_has_f16() {
    #[cfg(feature = "wgpu")]
    {
        use burn::backend::Wgpu;
        use burn::backend::wgpu::WgpuDevice;
        use burn::tensor::{DType, Tensor};
        type H = Autodiff<Wgpu>;
        // Burn 0.21 keeps one default float type per device, set once before its first tensor
        // (as `swa-zoo train --precision f16` does); the other wgpu tests of this binary use
        // their devices (`crate::wgpu_devices`, asked first) in f32, so this one trains on the
        // CPU adapter (lavapipe) as `WgpuDevice::Cpu`, which they leave untouched.
        if crate::wgpu_devices().is_none() {
            return;
        }
        let device = WgpuDevice::Cpu;
        let answers = std::panic::catch_unwind(|| {
            <H as burn::tensor::backend::Backend>::supports_dtype(&device, DType::F16)
        });
        match answers {
            Err(_) => {
                assert!(
                    std::env::var_os("SWA_REQUIRE_WGPU").is_none(),
                    "SWA_REQUIRE_WGPU is set but no wgpu CPU adapter answers (install mesa-vulkan-drivers)"
                );
                eprintln!("skipped: no wgpu CPU adapter (lavapipe) answers on this machine");
            }
            Ok(false) => eprintln!("skipped: the wgpu adapter does not support f16 (shader-f16)"),
            Ok(true) => {
                burn::tensor::set_default_dtypes::<H>(&device, DType::F16, DType::I32)
                    .expect("nothing touched the CPU adapter before");
                assert_eq!(
                    Tensor::<H, 1>::zeros([1], &device).dtype(),
                    DType::F16,
                    "the run is in f16"
                );
                let (before, after) =
                    losses_before_and_after::<H>("f16", 8, ExecutionStrategy::SingleDevice(device));
                let (f32_before, f32_after) = losses_before_and_after::<Autodiff<NdArray>>(
                    "f32",
                    8,
                    ExecutionStrategy::SingleDevice(Default::default()),
                );
                let uniform = 256f64.ln();
                assert!(after < uniform - 0.3, "f16 did not learn: {before} → {after}");
                // The two runs start from different random weights (Burn's RNG is shared with
                // the tests running beside this one), so their drops are compared, not their ends.
                let (drop, f32_drop) = (before - after, f32_before - f32_after);
                assert!(drop > 0.5 * f32_drop, "f16 fell by {drop}, f32 by {f32_drop}");
            }
        }
    }
    #[cfg(not(feature = "wgpu"))]
    eprintln!("skipped: built without the `wgpu` feature");
}
