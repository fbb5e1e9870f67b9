//! The backends a model trains on: one bound instead of the pair every trainer spells out.

use burn::tensor::backend::AutodiffBackend;
use swa_attention::ModelBackend;

/// A backend with autodiff whose windowed attention runs both under autodiff (training) and
/// on the inner backend without it (evaluation, decoding). Every `Autodiff<B>` of a windowed
/// backend `B` is one.
pub trait TrainingBackend: AutodiffBackend<InnerBackend: ModelBackend> + ModelBackend {}

impl<B> TrainingBackend for B where B: AutodiffBackend<InnerBackend: ModelBackend> + ModelBackend {}
