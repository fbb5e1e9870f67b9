//! What a [`SelfAttention`](crate::layers::SelfAttention) layer mixes its tokens with: the module
//! of its mechanism ([`Mixer`]), behind the one trait the layer calls ([`Attend`]). Mechanisms
//! that differ only in which keys a query sees share one module ([`WindowedAttention`]: full,
//! sliding, MSWA, SWAT, sinks, LongNet's branches, Longformer without global tokens); those
//! that run otherwise have modules of their own ([`LongformerAttention`]: global rows with
//! projections of their own; [`LinearAttention`]: a feature map and running sums).
//! The layer holds one of them in [`Mixer`], chosen once when it is built.
//!
//! The variant is a segment of every tensor name below it (Burn's derive enters a module named
//! after the variant): `attention.mixer.Windowed.local.qkv.weight`,
//! `attention.mixer.Linear.query.weight`. Files keep the names they have always had
//! ([`crate::stored`]).

use burn::module::Module;
use burn::tensor::backend::Backend;

use crate::layers::attend::Attend;
use crate::layers::longformer::LongformerAttention;
use crate::layers::taylor::LinearAttention;
use crate::layers::window::WindowedAttention;
use swa_attention::ModelBackend;

/// How a layer mixes its tokens: the module of its mechanism, with that mechanism's weights
/// only, so that no code has to assume that an optional part is present.
#[derive(Module, Debug)]
#[non_exhaustive]
#[allow(
    clippy::large_enum_variant,
    reason = "one per layer, built once; Burn has no Module for Box"
)]
pub enum Mixer<B: Backend> {
    /// One call of the windowed core per spec: every mechanism that differs only in which keys
    /// a query sees (LongNet: one spec per branch).
    Windowed(WindowedAttention<B>),
    /// Longformer with global tokens (docs/semantics.md §2).
    Longformer(LongformerAttention<B>),
    /// Taylor linear attention (docs/semantics.md §6).
    Linear(LinearAttention<B>),
}

impl<B: ModelBackend> Mixer<B> {
    /// The mechanism's module, as the layer calls it.
    pub fn attend(&self) -> &dyn Attend<B> {
        match self {
            Self::Windowed(m) => m,
            Self::Longformer(m) => m,
            Self::Linear(m) => m,
        }
    }
}
