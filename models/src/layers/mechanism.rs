//! What each attention mechanism says about itself, behind one trait: its window spec, score
//! options and validation, its windows and their cost, and its name and label. Any mechanism
//! with a window spec runs as a window ([`crate::layers::window::WindowedAttention`]); those
//! that run otherwise also have a module of their own ([`crate::layers::mixer`]).
//! [`crate::layers::AttentionKind`] is the serialised data and dispatches to the mechanism of
//! its variant in one `match`; each mechanism lives in the file named after it (`sliding.rs`,
//! `mswa.rs`, `swat.rs`, `sinks.rs`, `longnet.rs`, `longformer.rs`, `taylor.rs`, `full.rs`).

use swa_attention::{AttentionError, ScoreOptions, WindowSpec};

/// One attention mechanism of docs/semantics.md §2–§6, as its layer and the tools ask it.
pub trait Mechanism {
    /// The window spec of one call of the core for `heads` query heads over `kv_heads`
    /// (LongNet: the full spec, its branches are [`Mechanism::specs`]).
    fn spec(&self, heads: usize, kv_heads: usize) -> Result<WindowSpec, AttentionError>;

    /// The score options: softmax unless the mechanism says otherwise.
    fn score_options(&self, _heads: usize) -> Result<ScoreOptions, AttentionError> {
        Ok(ScoreOptions::softmax())
    }

    /// Checks the mechanism for a layer of `heads` query heads and `kv_heads` kv heads.
    fn validate(&self, heads: usize, kv_heads: usize) -> Result<(), AttentionError> {
        self.spec(heads, kv_heads)?;
        self.score_options(heads).map(|_| ())
    }

    /// The causal sliding windows, in keys, self included (one shared by every head, or one
    /// per head); `None` when queries see further back than a window.
    fn windows(&self) -> Option<&[usize]> {
        None
    }

    /// Keys of every head summed, `Σ_h W_h`, at context `n` (docs/semantics.md §3). The default
    /// reads [`Self::windows`]: one shared window for every head, a window per head, or, without
    /// windows, every key.
    fn window_sum(&self, heads: usize, n: usize) -> usize {
        match self.windows() {
            Some([window]) => heads * (*window).min(n),
            Some(per_head) => per_head.iter().map(|w| (*w).min(n)).sum(),
            None => heads * n,
        }
    }

    /// The mechanism's name in messages: `sliding`, `LongNet`, …
    fn name(&self) -> &'static str;

    /// A short label for figures, of head `head` where the heads differ.
    fn label(&self, head: usize) -> String;

    /// Whether the layer rotates q and k with RoPE (docs/semantics.md §4).
    fn rotates(&self) -> bool {
        true
    }

    /// The window specs of the calls of the core over `n` positions: [`Mechanism::spec`]
    /// alone, one per branch (LongNet), or none (a mechanism that keeps no keys).
    fn specs(
        &self,
        heads: usize,
        kv_heads: usize,
        _n: usize,
    ) -> Result<Vec<WindowSpec>, AttentionError> {
        Ok(vec![self.spec(heads, kv_heads)?])
    }
}

/// Fails unless a per-head list has one entry per query head.
pub(crate) fn expect_per_head(
    what: &'static str,
    got: usize,
    heads: usize,
) -> Result<(), AttentionError> {
    match got == heads {
        true => Ok(()),
        false => Err(AttentionError::ShapeMismatch { what, expected: heads, got }),
    }
}
