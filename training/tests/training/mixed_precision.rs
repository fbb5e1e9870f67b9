//! Mixed-precision training's mechanics on ndarray (f32, so the comparison with Burn's AdamW is
//! exact): the loss scaler's rule, unscaled steps equal to Burn's AdamW with clipping, a
//! non-finite gradient skipped with the scale halved, and the optimizer record's round trip.

use burn::grad_clipping::GradientClippingConfig;
use burn::nn::{Linear, LinearConfig};
use burn::optim::{AdamWConfig, GradientsParams, Optimizer};
use burn::record::{BinBytesRecorder, FullPrecisionSettings, Recorder};
use burn::tensor::{Tensor, TensorData};
use swa_training::mixed_precision::{LossScale, LossScaler, MixedPrecision, MixedPrecisionRecord};

use crate::{Reference, max_abs, to_vec, values};

const LR: f64 = 1e-2;

/// A small layer whose weights are materialised, so that clones share them (Burn initialises
/// parameters lazily, and each clone of an uninitialised one draws its own).
fn linear() -> Linear<Reference> {
    let linear = LinearConfig::new(4, 3).init(&Default::default());
    weights(&linear);
    linear
}

/// Mean squared output of `model` on fixed inputs, times `factor` (the loss scale).
fn loss(model: &Linear<Reference>, factor: f32) -> Tensor<Reference, 1> {
    let input = Tensor::<Reference, 2>::from_data(
        TensorData::new(values(7, 20), [5, 4]),
        &Default::default(),
    );
    model.forward(input).square().mean().mul_scalar(factor)
}

fn weights(model: &Linear<Reference>) -> Vec<f32> {
    let mut all = to_vec(model.weight.val());
    all.extend(to_vec(model.bias.as_ref().expect("a bias").val()));
    all
}

fn adamw() -> AdamWConfig {
    AdamWConfig::new().with_weight_decay(0.1)
}

fn mixed(scale: &LossScale) -> MixedPrecision<Linear<Reference>, Reference> {
    MixedPrecision::new(
        adamw().build(),
        Some(GradientClippingConfig::Norm(0.5).init()),
        scale.clone(),
    )
}

/// One step of `optim` on the loss scaled by `factor`.
fn step(
    optim: &mut impl Optimizer<Linear<Reference>, Reference>,
    model: Linear<Reference>,
    factor: f32,
) -> Linear<Reference> {
    let grads = GradientsParams::from_grads(loss(&model, factor).backward(), &model);
    optim.step(LR, model, grads)
}

#[test]
fn the_loss_scaler_halves_on_overflow_and_doubles_after_good_steps() {
    let mut scaler = LossScaler::dynamic(1024.0, 3);
    assert!(!scaler.update(false), "a non-finite step is skipped");
    assert_eq!(scaler.scale(), 512.0);
    assert!(scaler.update(true) && scaler.update(true));
    assert_eq!((scaler.scale(), scaler.good_steps()), (512.0, 2));
    assert!(scaler.update(true));
    assert_eq!((scaler.scale(), scaler.good_steps()), (1024.0, 0), "doubled after 3 good steps");
    assert!(scaler.update(true) && !scaler.update(false));
    assert_eq!((scaler.scale(), scaler.good_steps()), (512.0, 0), "an overflow restarts the count");
    let mut fixed = LossScaler::fixed(1.0);
    assert!(!fixed.update(false), "bf16's fixed scale skips a non-finite step too");
    assert!((0..5).all(|_| fixed.update(true)));
    assert_eq!(fixed.scale(), 1.0);
}

#[test]
fn mixed_precision_steps_as_adamw_does_and_skips_non_finite_gradients() {
    let scale = LossScale::new(LossScaler::dynamic(1024.0, 2));
    let mut optim = mixed(&scale);
    let mut plain = adamw().with_grad_clipping(Some(GradientClippingConfig::Norm(0.5))).init();
    let mut model = linear();
    let mut reference = model.clone();
    for _ in 0..3 {
        model = step(&mut optim, model, scale.factor());
        reference = step(&mut plain, reference, 1.0);
        let error = max_abs(&weights(&model), &weights(&reference));
        assert!(error < 1e-6, "unscaled mixed-precision step differs from AdamW by {error}");
    }
    assert_eq!(scale.factor(), 2048.0, "doubled once after 2 good steps of 3");
    let before = weights(&model);
    model = step(&mut optim, model, f32::INFINITY);
    assert_eq!(weights(&model), before, "a non-finite gradient leaves the weights alone");
    assert_eq!(scale.factor(), 1024.0, "and halves the scale");
    model = step(&mut optim, model, scale.factor());
    reference = step(&mut plain, reference, 1.0);
    assert!(
        max_abs(&weights(&model), &weights(&reference)) < 1e-6,
        "the skipped step left no trace"
    );
}

#[test]
fn the_mixed_precision_record_restores_masters_moments_and_scale() {
    let scale = LossScale::new(LossScaler::dynamic(1024.0, 2));
    let mut optim = mixed(&scale);
    let mut model = linear();
    for _ in 0..3 {
        model = step(&mut optim, model, scale.factor());
    }
    let recorder = BinBytesRecorder::<FullPrecisionSettings>::default();
    let bytes = recorder.record(optim.to_record(), ()).expect("the record serialises");
    let record: MixedPrecisionRecord<Reference> =
        recorder.load(bytes, &Default::default()).expect("and loads");
    let restored_scale = LossScale::new(LossScaler::dynamic(1.0, 2));
    let mut restored = mixed(&restored_scale).load_record(record);
    assert_eq!(
        restored_scale.scaler(),
        scale.scaler(),
        "the loss scale and its count of good steps"
    );
    let continued = step(&mut optim, model.clone(), scale.factor());
    let resumed = step(&mut restored, model, restored_scale.factor());
    assert_eq!(
        weights(&continued),
        weights(&resumed),
        "the restored masters and moments step alike"
    );
}
